// headroom: memory telemetry for GPU proving machines. The only place that turns flags into
// objects; each subcommand's work lives in agent/cli.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <iostream>

#include "headroom/cli/commands.h"
#include "headroom/config/config.h"
#include "headroom/net/http_client.h"
#include "headroom/util/exit_codes.h"
#include "headroom/util/logging.h"
#include "headroom/version.h"

namespace {

using headroom::kExitBadInput;

// CLI11's own exit codes are many and large; headroom says "bad input" with 2, as documented.
int parseFailure(const CLI::App& app, const CLI::ParseError& e) {
  if (e.get_name() == "CallForHelp" || e.get_name() == "CallForAllHelp" || e.get_name() == "CallForVersion") {
    return app.exit(e);
  }
  std::cerr << "headroom: " << e.what() << " (see headroom --help)\n";
  return kExitBadInput;
}

}  // namespace

namespace {
int run(int argc, char** argv) {
  // `headroom run [options] -- CMD ARGS...`: what follows "--" is the prover's, untouched (its
  // own flags may look like ours), so it is split off before CLI11 sees the line.
  std::vector<std::string> prover_command;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) != "run") continue;
    for (int j = i + 1; j < argc; ++j) {
      if (std::string_view(argv[j]) != "--") continue;
      prover_command.assign(argv + j + 1, argv + argc);
      argc = j;
      break;
    }
    break;
  }

  CLI::App app{"headroom: memory telemetry for GPU proving machines", "headroom"};
  app.set_version_flag("--version", std::string(headroom::kVersion));
  app.require_subcommand(1);

  std::string root = "/";
  std::string log_level = "warn";
  app.add_option("--root", root,
                 "Read /proc and /sys under this directory (a container's view of the host's /, or a fixture tree)")
      ->capture_default_str();
  auto* log_level_opt = app.add_option("--log-level", log_level, "trace, debug, info, warn, error")
                            ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
                            ->capture_default_str();

  headroom::cli::SnapshotOptions snap;
  auto* snapshot =
      app.add_subcommand("snapshot", "One memory snapshot: machine, cgroups with their breakdown, processes");
  snapshot->add_flag("--json", snap.json, "The full model as JSON (bytes as integers)");
  snapshot->add_option("--cgroup", snap.cgroup, "Only this memory cgroup (path inside the hierarchy) and its subtree");
  snapshot->add_option("--pid", snap.pid, "Only this process and its memory cgroup")->check(CLI::PositiveNumber);
  snapshot->add_option("--role-rule", snap.role_rules,
                       "ROLE=KIND:VALUE, ROLE prover|colocated|system, KIND comm (exact), cmdline (regex), "
                       "cgroup (path prefix); repeatable, first match wins");
  snapshot->add_option("--top", snap.top, "Processes shown per role in the table")->capture_default_str();
  bool no_smaps = false;
  snapshot->add_flag("--no-smaps", no_smaps, "Skip smaps_rollup (no PSS: faster on machines with many processes)");
  bool no_bpf = false;
  snapshot->add_flag("--no-bpf", no_bpf, "No BPF sensors: OOM kills from /dev/kmsg and cgroup counters alone");
  snapshot->add_option("--cuda-library", snap.cuda_libraries, "A libcuda.so to probe (absolute path; repeatable)");
  snapshot->add_option("--tracepoint", snap.tracepoints, "SENSOR=NAME: point a sensor at another tracepoint")
      ->group("");  // for tests and odd kernels, not for everyday use
  snapshot->add_flag("--watch-ooms", snap.watch_ooms,
                     "Print OOM kills as they happen (with --json: one object per line)");
  snapshot->add_option("--count", snap.max_ooms, "With --watch-ooms: stop after this many OOM kills");
  snapshot->add_option("--seconds", snap.watch_seconds, "With --watch-ooms: stop after this many seconds")
      ->check(CLI::NonNegativeNumber);

  headroom::cli::AgentOptions agent_opts;
  auto* agent =
      app.add_subcommand("agent", "The sidecar: samples, attaches the sensors, serves /metrics and the JSON API");
  std::string config_path;
  agent->add_option("--config", config_path, "The TOML config file (every key below is also a flag, which wins)");
  agent->add_flag("--check-config", agent_opts.check_config, "Validate the config and flags, print a summary, exit");
  // One flag per config key, from the same table the TOML parser uses.
  const auto& keys = headroom::configKeys();
  std::vector<std::vector<std::string>> flag_values(keys.size());
  std::vector<CLI::Option*> flag_options;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const headroom::ConfigKey& k = keys[i];
    std::string help = fmt::format("{} [{}; config key {}]", k.help, k.kind, k.name);
    CLI::Option* o = agent->add_option(k.flag, flag_values[i], help)->group("Config keys");
    if (k.repeatable)
      o->take_all();
    else if (k.kind == "bool")
      o->expected(0, 1)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // alone: true
    else
      o->expected(1)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    flag_options.push_back(o);
  }

  std::string agent_journal;
  auto* agent_journal_opt =
      agent->add_option("--journal", agent_journal, "The OOM journal (the same as --journal.path)");

  headroom::cli::ProbeCliOptions probe_opts;
  auto* probe = app.add_subcommand(
      "probe", "How much more can really be allocated in a cgroup now (allocates, measures, releases)");
  probe->add_option("--cgroup", probe_opts.cgroup,
                    "The memory cgroup to probe (path inside the hierarchy); default: the caller's own");
  probe->add_option("--stop-margin", probe_opts.stop_margin,
                    "Stop this far from the nearest limit (default 2GiB, scaled down for small limits)");
  probe->add_option("--chunk", probe_opts.chunk, "Largest step (default 1GiB; shrinks near the limit)");
  probe->add_option("--max", probe_opts.max, "Never allocate more than this");
  probe->add_option("--touch", probe_opts.touch, "populate (MADV_POPULATE_WRITE), memset (one thread), threads")
      ->capture_default_str();
  probe->add_option("--threads", probe_opts.threads, "Touching threads (default: the cores available)");
  probe->add_option("--reclaim-timeout", probe_opts.reclaim_timeout, "Wait at most this long for usage to come back")
      ->capture_default_str();
  probe->add_flag("--json", probe_opts.json, "JSON (the old probe's fields plus the new ones)");

  // The policy flags `run` and `budget` share.
  auto addPolicyFlags = [](CLI::App* sub, headroom::cli::PolicyFlags& f) {
    // A launch script may append an override: the last one given wins.
    auto last = [](CLI::Option* o) {
      o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)->group("Budget policy");
    };
    last(sub->add_option("--margin-floor", f.margin_floor, "The margin never goes below this (default 1GiB)"));
    last(sub->add_option("--margin-growth", f.margin_growth,
                         "On an OOM kill the margin grows at least by this factor (default 1.5)"));
    last(sub->add_option("--margin-step", f.margin_step, "... and at least by this much (default 256MiB)"));
    last(sub->add_option("--overhead-factor", f.overhead_factor,
                         "... and to this times the overhead beyond the budget seen at the kill (default 1.5)"));
    last(sub->add_option("--max-retries", f.max_retries, "OOM-killed attempts retried at most (default 3)"));
    last(sub->add_option("--give-back-after", f.give_back_after,
                         "Clean runs after which one margin step is given back (default 3)"));
  };

  // The flags `budget` and `top` share to reach the agent: its URL (`url_help` says what for; a
  // default URL is shown) and the credentials of a web config.
  auto addAgentClientFlags = [](CLI::App* sub, headroom::cli::AgentClientOptions& a, const std::string& url_help) {
    auto* url = sub->add_option("--agent", a.url, url_help);
    if (!a.url.empty()) url->capture_default_str();
    sub->add_option("--agent-ca", a.ca, "https: the CA the agent's certificate must chain to");
    sub->add_option("--agent-cert", a.cert, "https: a client certificate for the agent");
    sub->add_option("--agent-key", a.key, "https: the client certificate's key");
    sub->add_option("--agent-user", a.user, "Basic auth: the user");
    sub->add_option("--agent-password-file", a.password_file,
                    "Basic auth: a file holding the password (its first line)");
  };

  headroom::cli::RunOptions run_opts;
  auto* run_cmd = app.add_subcommand(
      "run", "Supervise a prover: give it a budget, retry with a larger margin after a confirmed OOM kill");
  run_cmd->add_option("--cgroup", run_opts.cgroup,
                      "Run the prover in this memory cgroup (made when missing); default: the caller's own");
  addPolicyFlags(run_cmd, run_opts.policy);
  run_cmd
      ->add_option("--reclaim-timeout", run_opts.reclaim_timeout,
                   "Before a retry, wait at most this long for the cgroup's usage to fall back")
      ->capture_default_str();
  run_cmd->add_option("--state-file", run_opts.state_file,
                      "Where the learned margin is kept (default /var/lib/headroom/budget<cgroup path, / as _>.json)");
  run_cmd->add_flag("--no-state", run_opts.no_state, "Keep no state: start from the floor, learn nothing across runs");
  run_cmd->add_flag("--probe", run_opts.probe,
                    "Probe the cgroup before the first attempt; the budget never exceeds what it found");
  run_cmd->add_option("--probe-stop-margin", run_opts.probe_stop_margin, "With --probe: the probe's stop margin");
  run_cmd->add_option("--budget-env", run_opts.budget_env,
                      "Hand the budget in this environment variable: NAME (value as --budget-format) or NAME=TEMPLATE");
  run_cmd->add_option(
      "--budget-arg", run_opts.budget_arg,
      "Append this argument to the command, e.g. --budget-arg='--memory-budget={gib}GiB' "
      "(placeholders {bytes} {kib} {mib} {gib} {gib_float}; use the = form for a value that starts with -)");
  run_cmd->add_option("--budget-file", run_opts.budget_file,
                      "Write the budget to this file before each attempt (atomically)");
  run_cmd->add_option("--budget-format", run_opts.budget_format, "TEMPLATE for --budget-env NAME and --budget-file")
      ->capture_default_str();
  run_cmd->add_option(
      "--self-report", run_opts.self_report,
      "A file where the prover writes how much memory it believes it uses (bytes, a size, or JSON used_bytes)");
  run_cmd->add_option("--on-warning", run_opts.on_warning,
                      "When the prover's cgroup is warned of a coming OOM kill: a shell command (the situation as JSON "
                      "on its stdin and in $HEADROOM_WARNING), signal:USR1 (signals the prover), or an http(s):// URL "
                      "to POST the JSON to");
  run_cmd->add_option("--warning-eta", run_opts.warning_eta, "Warn when the time to OOM drops under this")
      ->capture_default_str();
  bool run_no_bpf = false;
  run_cmd->add_flag("--no-bpf", run_no_bpf, "No BPF sensors: OOM kills from the cgroup's counter and /dev/kmsg");
  run_cmd->add_option("--sample-interval", run_opts.sample_interval, "How often the prover is sampled while it runs")
      ->capture_default_str();
  run_cmd->add_option("command", run_opts.command, "-- CMD ARGS... (everything after -- is the prover's command line)");

  headroom::cli::BudgetCliOptions budget_opts;
  auto* budget = app.add_subcommand("budget", "The prover's budget now, in one line: from the agent, or computed here");
  budget
      ->add_option("--format", budget_opts.format,
                   "bytes, mib, gib (whole units, rounded down), env (shell assignments), json")
      ->check(CLI::IsMember({"bytes", "mib", "gib", "env", "json"}))
      ->capture_default_str();
  addAgentClientFlags(budget, budget_opts.agent, "Ask the agent at this URL first (http:// or https://)");
  budget->add_flag("--local", budget_opts.local, "Never ask the agent: compute the budget here");
  budget->add_option("--cgroup", budget_opts.cgroup, "Local: the prover's memory cgroup; default: the caller's own");
  budget->add_option("--role-rule", budget_opts.role_rules, "Local: ROLE=KIND:VALUE rules that say who the prover is");
  budget->add_option("--state-file", budget_opts.state_file,
                     "Local: the learned margin (default: the prover cgroup's)");
  addPolicyFlags(budget, budget_opts.policy);

  headroom::cli::ReportOptions report_opts;
  auto* report = app.add_subcommand("report", "OOM post-mortems from the journal: the latest kill by default");
  auto* report_journal =
      report->add_option("--journal", report_opts.journal, "The journal to read (a copy from another machine works)")
          ->capture_default_str();
  report
      ->add_option("--from-json", report_opts.from_json,
                   "Read the records from JSON lines a log store gave back (docs/events.md): a file, or - for stdin; "
                   "may be given more than once")
      ->excludes(report_journal);
  report->add_option("--host", report_opts.host, "Only the records of this host (--from-json: records of many hosts)");
  report->add_flag("--list", report_opts.list, "One line per recorded OOM kill");
  report->add_option("--id", report_opts.id, "This record");
  report->add_option(
      "--since", report_opts.since,
      "Only kills since then: 2026-12-02T14:00:00Z, '2026-12-02 14:00' (UTC), a unix time, or an age (2h, 30m)");
  report->add_flag("--json", report_opts.json, "The record(s) as JSON");
  report->add_option("--svg", report_opts.svg, "Also draw the last minute before the kill into this SVG file");
  report->add_option("--html", report_opts.html, "Also write a self-contained HTML page of the report here");

  headroom::cli::ExplainOptions explain_opts;
  auto* explain = app.add_subcommand(
      "explain",
      "Explain every OOM kill in a saved kernel log (dmesg, journalctl -k, syslog, kern.log, .gz; any kernel)");
  explain->add_option("files", explain_opts.files, "Log files, plain or .gz; none or - for standard input");
  explain->add_flag("--json", explain_opts.json, "The incidents as JSON (docs/explain.md)");
  explain->add_option("--svg", explain_opts.svg,
                      "Also draw each incident's moment into this SVG file (FILE-N.svg for several)");
  explain->add_option("--html", explain_opts.html, "Also write a self-contained HTML page of every incident here");

  headroom::cli::TopOptions top_opts;
  auto* top = app.add_subcommand(
      "top", "A live view: machine, cgroups (visible/invisible), processes by PSS, the last OOM kills, the budget");
  top->add_option("--interval", top_opts.interval, "Time between refreshes (100ms..1h)")->capture_default_str();
  addAgentClientFlags(top, top_opts.agent,
                      "Show what the agent at this URL serves (http:// or https://); default: sample here");
  top->add_option("--journal", top_opts.journal, "Sampling here: the OOM journal the last kills come from")
      ->capture_default_str();
  top->add_option("--role-rule", top_opts.role_rules, "Sampling here: ROLE=KIND:VALUE, as for snapshot");
  bool top_no_smaps = false;
  top->add_flag("--no-smaps", top_no_smaps, "Sampling here: skip smaps_rollup (no PSS)");
  bool top_no_bpf = false;
  top->add_flag("--no-bpf", top_no_bpf, "Sampling here: no BPF sensors (kills from /dev/kmsg and the journal)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return parseFailure(app, e);
  }
  // Logs go to stderr: stdout carries tables and JSON.
  headroom::setupLogging(headroom::LogFormat::kText, log_level);

  if (probe->parsed()) {
    probe_opts.root = root;
    return headroom::cli::runProbeCommand(probe_opts, std::cout, std::cerr);
  }
  if (top->parsed()) {
    top_opts.root = root;
    top_opts.smaps = !top_no_smaps;
    top_opts.bpf = !top_no_bpf;
    return headroom::cli::runTop(top_opts, std::cerr);
  }
  if (report->parsed()) return headroom::cli::runReportCommand(report_opts, std::cout, std::cerr);
  if (explain->parsed()) return headroom::cli::runExplainCommand(explain_opts, std::cin, std::cout, std::cerr);
  if (run_cmd->parsed()) {
    run_opts.root = root;
    run_opts.bpf = !run_no_bpf;
    run_opts.command.insert(run_opts.command.end(), prover_command.begin(), prover_command.end());
    return headroom::cli::runSupervisor(run_opts, std::cout, std::cerr);
  }
  if (budget->parsed()) {
    budget_opts.root = root;
    return headroom::cli::runBudgetCommand(budget_opts, std::cout, std::cerr);
  }
  if (agent->parsed()) {
    agent_opts.root = root;
    if (!config_path.empty()) agent_opts.config_path = config_path;
    agent_opts.log_level_given = log_level_opt->count() > 0;
    agent_opts.log_level = log_level;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (flag_options[i]->count() == 0) continue;
      std::vector<std::string> values = flag_values[i];
      if (keys[i].kind == "bool" && (values.empty() || (values.size() == 1 && values[0].empty()))) values = {"true"};
      agent_opts.flags.emplace_back(keys[i], std::move(values));
    }
    if (agent_journal_opt->count() > 0) {
      for (const headroom::ConfigKey& k : keys) {
        if (k.name == "journal.path") agent_opts.flags.emplace_back(k, std::vector<std::string>{agent_journal});
      }
    }
    return headroom::cli::runAgent(agent_opts, std::cout, std::cerr);
  }

  if (snapshot->parsed()) {
    snap.root = root;
    snap.smaps = !no_smaps;
    snap.bpf = !no_bpf;
    return headroom::cli::runSnapshot(snap, std::cout, std::cerr);
  }
  return kExitBadInput;
}
}  // namespace

int main(int argc, char** argv) {
  headroom::initHttpClient();  // process-wide and not thread-safe: before any thread starts
  // Exceptions belong to start-up and the CLI; one that escapes is a bug, reported in one line.
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "headroom: internal error: " << e.what() << "\n";
    return headroom::kExitFailure;
  }
}
