// headroom: memory telemetry for GPU proving machines. The only place that turns flags into
// objects; each subcommand's work lives in agent/cli.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <iostream>

#include "agent/cli/commands.h"
#include "headroom/config.h"
#include "headroom/version.h"

namespace {

using headroom::cli::kExitBadInput;

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
  auto* snapshot = app.add_subcommand("snapshot", "One memory snapshot: machine, cgroups with their breakdown, processes");
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
  snapshot->add_flag("--watch-ooms", snap.watch_ooms, "Print OOM kills as they happen (with --json: one object per line)");
  snapshot->add_option("--count", snap.max_ooms, "With --watch-ooms: stop after this many OOM kills");
  snapshot->add_option("--seconds", snap.watch_seconds, "With --watch-ooms: stop after this many seconds")
      ->check(CLI::NonNegativeNumber);

  headroom::cli::AgentOptions agent_opts;
  auto* agent = app.add_subcommand("agent", "The sidecar: samples, attaches the sensors, serves /metrics and the JSON API");
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
    if (k.repeatable) o->take_all();
    else if (k.kind == "bool") o->expected(0, 1)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // alone: true
    else o->expected(1)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    flag_options.push_back(o);
  }

  headroom::cli::ProbeCliOptions probe_opts;
  auto* probe = app.add_subcommand("probe", "How much more can really be allocated in a cgroup now (allocates, measures, releases)");
  probe->add_option("--cgroup", probe_opts.cgroup, "The memory cgroup to probe (path inside the hierarchy); default: the caller's own");
  probe->add_option("--stop-margin", probe_opts.stop_margin, "Stop this far from the nearest limit (default 2GiB, scaled down for small limits)");
  probe->add_option("--chunk", probe_opts.chunk, "Largest step (default 1GiB; shrinks near the limit)");
  probe->add_option("--max", probe_opts.max, "Never allocate more than this");
  probe->add_option("--touch", probe_opts.touch, "populate (MADV_POPULATE_WRITE), memset (one thread), threads")->capture_default_str();
  probe->add_option("--threads", probe_opts.threads, "Touching threads (default: the cores available)");
  probe->add_option("--reclaim-timeout", probe_opts.reclaim_timeout, "Wait at most this long for usage to come back")->capture_default_str();
  probe->add_flag("--json", probe_opts.json, "JSON (the old probe's fields plus the new ones)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return parseFailure(app, e);
  }
  // Logs go to stderr: stdout carries tables and JSON.
  headroom::cli::setupLogging(headroom::LogFormat::kText, log_level);

  if (probe->parsed()) {
    probe_opts.root = root;
    return headroom::cli::runProbeCommand(probe_opts, std::cout, std::cerr);
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
  // Exceptions belong to start-up and the CLI; one that escapes is a bug, reported in one line.
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "headroom: internal error: " << e.what() << "\n";
    return headroom::cli::kExitFailure;
  }
}
