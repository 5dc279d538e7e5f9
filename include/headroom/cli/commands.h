// The subcommands, each a plain options struct (the flags as given) and a run function that
// parses them, builds the objects of the layers below and prints; main.cpp turns the command
// line into these structs. Run functions return the process exit code (util/exit_codes.h).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/config/config.h"
#include "headroom/controller/controller.h"
#include "headroom/model/roles.h"
#include "headroom/model/snapshot.h"
#include "headroom/net/http_client.h"

namespace headroom::cli {

struct SnapshotOptions {
  std::string root = "/";
  bool json = false;
  std::optional<std::string> cgroup;
  std::optional<pid_t> pid;
  std::vector<std::string> role_rules;
  std::size_t top = 5;  // processes shown per role in the table
  bool smaps = true;
  bool bpf = true;  // false: /dev/kmsg and cgroup files only
  std::vector<std::string> cuda_libraries;
  std::vector<std::string> tracepoints;  // SENSOR=NAME overrides
  bool watch_ooms = false;               // print OOM kills as they happen
  std::size_t max_ooms = 0;              // stop after this many (0: never)
  double watch_seconds = 0;              // stop after this long (0: never)
};

int runSnapshot(const SnapshotOptions& opts, std::ostream& out, std::ostream& err);

struct AgentOptions {
  std::string root = "/";                  // --root: where /proc and /sys are read
  std::optional<std::string> config_path;  // --config
  // Flags given on the command line, by config key; applied over the file at start and again
  // at every reload, so that a flag always wins.
  std::vector<std::pair<ConfigKey, std::vector<std::string>>> flags;
  bool check_config = false;
  bool log_level_given = false;  // the global --log-level, when given, wins over the config
  std::string log_level;
};

// The config the options describe: the file (or the defaults) with the flags over it.
Result<AgentConfig> agentConfig(const AgentOptions& opts);
// `headroom agent`: runs until SIGTERM/SIGINT; SIGHUP reloads the config.
int runAgent(const AgentOptions& opts, std::ostream& out, std::ostream& err);

struct ProbeCliOptions {
  std::string root = "/";
  std::string cgroup;       // "" = the caller's own
  std::string stop_margin;  // sizes as given ("" = default)
  std::string chunk;
  std::string max;
  std::string touch = "populate";
  unsigned threads = 0;
  std::string reclaim_timeout = "30s";
  bool json = false;
};
// `headroom probe`: exit 0 done, 2 bad input, 3 aborted because pressure rose (partial results).
int runProbeCommand(const ProbeCliOptions& opts, std::ostream& out, std::ostream& err);

// The budget policy's flags, shared by `headroom run` and `headroom budget`: as given ("" =
// the default), parsed with errors that name the flag and the value.
struct PolicyFlags {
  std::string margin_floor, margin_growth, margin_step, overhead_factor;
  std::optional<unsigned> max_retries, give_back_after;
};
// Errors are bad input.
Result<BudgetPolicy> policyFromFlags(const PolicyFlags& f, BudgetPolicy base = {});
// Says `e` on one line ("headroom COMMAND: ...") and returns its exit code.
int fail(std::ostream& err, std::string_view command, const Error& e);
// Writes `content` to `path` (created 0644, or truncated); errors say "writing the WHAT to PATH".
Status writeOutputFile(const std::string& path, std::string_view content, const char* what);
// --role-rule's values, each "ROLE=KIND:VALUE"; errors are bad input naming the flag.
Result<std::vector<RoleRule>> roleRulesFromFlags(const std::vector<std::string>& specs);

struct RunOptions {
  std::string root = "/";
  std::string cgroup;  // where the prover runs; "" = the caller's own (created when missing)
  PolicyFlags policy;
  std::string reclaim_timeout = "60s";
  std::string state_file;                 // "" = defaultStatePath(cgroup)
  bool no_state = false;                  // learn nothing across runs
  bool probe = false;                     // probe the cgroup before the first attempt
  std::string probe_stop_margin;          // "" = the probe's default
  std::vector<std::string> budget_env;    // NAME or NAME=TEMPLATE
  std::vector<std::string> budget_arg;    // TEMPLATE, appended to the command
  std::string budget_file;                // written before each attempt
  std::string budget_format = "{bytes}";  // for --budget-env NAME and --budget-file
  std::string self_report;                // a file where the prover says how much it uses
  bool bpf = true;
  std::string sample_interval = "250ms";
  std::string on_warning;           // the hook: CMD, signal:NAME or a URL ("" none)
  std::string warning_eta = "30s";  // warn under this time to OOM
  std::vector<std::string> command;
};
// `headroom run -- CMD ARGS...`: exit status is the prover's final status (128 + signal when
// it was killed); 2 for bad input, 1 when no budget can be given.
int runSupervisor(const RunOptions& opts, std::ostream& out, std::ostream& err);

// How `budget` and `top` reach the agent (--agent and --agent-*, one set of flags for both). An
// agent behind a web config (https://, basic auth): the CA that signed its certificate, a client
// certificate and key, a user and the file holding the password (never a flag: a command line is
// visible to every user of the machine).
struct AgentClientOptions {
  std::string url;
  // Initialised, so that `budget`'s {.url = ...} may leave them out (g++'s -Wextra).
  std::string ca{}, cert{}, key{}, user{}, password_file{};
};

struct BudgetCliOptions {
  std::string root = "/";
  std::string format = "bytes";  // bytes, gib, mib, env, json
  AgentClientOptions agent{.url = "http://127.0.0.1:9464"};
  bool local = false;                   // never ask the agent
  std::string cgroup;                   // local: the prover's cgroup; "" = the caller's own
  std::vector<std::string> role_rules;  // local: who the prover is
  PolicyFlags policy;
  std::string state_file;  // local: "" = defaultStatePath(cgroup)
};
// `headroom budget`: one line, from the agent when one answers, computed locally otherwise.
int runBudgetCommand(const BudgetCliOptions& opts, std::ostream& out, std::ostream& err);

struct TopOptions {
  std::string root = "/";
  std::string interval = "1s";  // between refreshes, as given
  AgentClientOptions agent;     // url "" = sample here
  // Sampling here: the journal for the last OOM kills, who is who, what to read.
  std::string journal = "/var/lib/headroom/oom-journal.hrj";
  std::vector<std::string> role_rules;
  bool smaps = true;
  bool bpf = true;
};
// `headroom top`: draws on the terminal until q, SIGINT or SIGTERM (exit 0); 2 for bad input (a
// flag, no terminal), 1 when no first sample can be had.
int runTop(const TopOptions& opts, std::ostream& err);

// What `budget` and `top` are told with --agent-*: the client's credentials, the password read
// from its file (its first line). A password file that cannot be read is bad input.
Result<HttpClientAuth> agentClientAuth(const AgentClientOptions& agent);

struct ReportOptions {
  std::string journal = "/var/lib/headroom/oom-journal.hrj";
  bool list = false;
  std::optional<std::uint64_t> id;
  std::string since;  // "2026-12-02T14:00:00Z", "2026-12-02 14:00", a unix time, or an age ("2h", "30m")
  bool json = false;
  std::string svg;   // write the picture here
  std::string html;  // write the page here
  // Records read back from a log store (docs/events.md) instead of the journal: files, "-" stdin.
  std::vector<std::string> from_json;
  std::string host;  // only this host's records ("": every host's)
};
// `headroom report`: 0 shown, 1 no such record / empty journal, 2 bad input. `in` is what
// --from-json - reads.
int runReportCommand(const ReportOptions& opts, std::ostream& out, std::ostream& err);
int runReportCommand(const ReportOptions& opts, std::istream& in, std::ostream& out, std::ostream& err);

struct ExplainOptions {
  std::vector<std::string> files;  // saved kernel logs, plain or .gz; none or "-": standard input
  bool json = false;
  std::string svg;   // the incidents' pictures: this file (one), or FILE-N.svg for each of several
  std::string html;  // one page of every incident
};
// `headroom explain`: every OOM incident in saved kernel log text. 0 explained, 1 no OOM report
// in the text, 2 bad input (a file that cannot be read, a damaged .gz).
int runExplainCommand(const ExplainOptions& opts, std::istream& in, std::ostream& out, std::ostream& err);

// The human table of `headroom snapshot`.
std::string renderSnapshotTable(const Snapshot& snap, std::size_t top_per_role);

}  // namespace headroom::cli
