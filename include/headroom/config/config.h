// The agent's configuration: one TOML file (toml++), every key also a flag. Loading validates
// everything; an error names the key (or flag), the value and what is allowed.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/controller/controller.h"
#include "headroom/controller/prover_budget.h"
#include "headroom/controller/warning.h"
#include "headroom/model/roles.h"
#include "headroom/net/listen_address.h"
#include "headroom/net/web_config.h"
#include "headroom/sensors/config.h"
#include "headroom/sources/workload_names.h"
#include "headroom/util/logging.h"
#include "headroom/util/result.h"

namespace headroom {

// [journal]: the durable record of every OOM kill (docs/journal.md).
// At start, the kills the journal lacks (docs/journal.md, "Kills found after the fact"): every
// one of this boot in the kernel's log (boot), only those since the last agent's state beside
// the journal (restarts), or none (off).
enum class JournalCatchUp { kBoot, kRestarts, kOff };
struct JournalConfig {
  bool enabled = true;
  std::string path = "/var/lib/headroom/oom-journal.hrj";  // a directory: <path>/oom-journal.hrj
  bool path_given = false;                // journal.path or --journal given: not opening it at start is an error
  std::uint64_t max_bytes = 64ULL << 20;  // beyond: rotated to <path>.1
  std::chrono::milliseconds flight_window{60000};  // the flight recorder's last seconds per cgroup
  JournalCatchUp catch_up = JournalCatchUp::kBoot;

  bool operator==(const JournalConfig&) const = default;
};

// [events]: every journal record also sent off the machine (docs/events.md).
enum class JournaldMode { kAuto, kOn, kOff };
struct EventsConfig {
  std::string output;                     // "": none; "stdout"; or an absolute file path
  std::uint64_t max_bytes = 16ULL << 20;  // the file: beyond, rotated to <output>.1
  std::size_t max_files = 5;              // rotated files kept
  JournaldMode journald = JournaldMode::kAuto;

  bool operator==(const EventsConfig&) const = default;
};

// The agent's sensors by default: every one but the two on the page-fault path. `faults` and
// `rss` run a BPF program on every fault of every process, for per-process numbers the kernel
// already keeps (minflt/majflt, the mm's RSS counters), which the agent reads from /proc at each
// sample for nothing; `make bench` measures what switching them on costs.
inline SensorsConfig agentSensors() {
  SensorsConfig s;
  s.faults = false;
  s.rss = false;
  return s;
}

struct AgentConfig {
  ListenAddress listen;
  // [web] config_file (--web.config.file): TLS and basic auth for the endpoint, in the
  // Prometheus exporters' web configuration format; read (and checked) with the config.
  std::string web_config_file;
  std::optional<WebConfig> web;
  std::chrono::milliseconds interval{5000};  // between samples
  // Memory cgroups to watch (paths inside the hierarchy) with their subtrees; empty: every
  // memory cgroup that holds a process.
  std::vector<std::string> cgroups;
  std::vector<RoleRule> role_rules;              // parsed from "ROLE=KIND:VALUE", first match wins
  bool smaps = true;                             // read smaps_rollup (PSS)
  std::chrono::milliseconds pss_max_age{60000};  // PSS read again at least this often
  std::uint64_t pss_step = 4ULL << 20;           // or when RSS moved by this much
  std::uint64_t pss_reads_per_second = 32;       // small processes' first and age reads, a second
  std::size_t max_processes = 20000;             // processes read per sample; beyond, counted only
  // The walk of every process: at most this much CPU a second of wall time (0: every sample
  // walks), never more than process_walk_max_interval apart (walk_pacer.h).
  std::chrono::milliseconds process_walk_budget{3};
  std::chrono::milliseconds process_walk_max_interval{30000};
  LogFormat log_format = LogFormat::kText;
  std::string log_level = "info";          // trace, debug, info, warn, error
  SensorsConfig sensors = agentSensors();  // [sensors]: which sensors, CUDA paths, ring and map sizes
  JournalConfig journal;                   // [journal]
  WorkloadLookup workloads;                // [workloads]: where container, pod and namespace names come from
  EventsConfig events;                     // [events]
  // [prover] self_report: where the prover says how much memory it believes it uses (a file,
  // a JSON field at a URL, a Prometheus metric; see self_report.h); "": it says nothing.
  std::string self_report;
  // [metrics]: label cardinality bounds.
  std::size_t top_processes = 10;  // per-process series per role (the rest sum into "other")
  std::size_t max_cgroups = 256;   // per-cgroup series: the largest cgroups by usage
  std::size_t max_series = 20000;  // hard cap on all series; beyond, dropped and counted
  std::size_t recent_ooms = 256;   // OOM events kept for /v1/ooms
  // [probe]: POST /v1/probe runs `headroom probe` on demand (off by default: it allocates).
  bool probe_enabled = false;
  std::chrono::milliseconds probe_min_interval{600000};  // at most one probe this often
  std::string probe_cgroup;                              // default target; a request may name another (?cgroup=)
  BudgetConfig budget;
  WarningSettings warning;  // [warning]: time to OOM, warnings and the prover's hook
};

// One key of the configuration: its TOML name ("sensors.oom_ring_bytes"), the flag that
// overrides it ("--sensors.oom-ring-bytes"), what it takes, and its help line.
struct ConfigKey {
  std::string name;
  std::string flag;
  std::string kind;  // "bool", "size", "duration", "count", "string", "list", "enum(a|b)"
  std::string help;
  bool repeatable = false;  // list keys: the flag may be given several times
};
const std::vector<ConfigKey>& configKeys();
// The value of key `name` in `cfg`, written as in the TOML file: "\"5s\"", "true", "20000",
// "[\"prover=comm:cuzk\"]"; with AgentConfig{} that is the key's default. An unknown name is an
// error. (docs/configuration.md is checked against it.)
Result<std::string> configValue(const AgentConfig& cfg, std::string_view name);

// Parses a TOML document; `source` names it in errors ("/etc/headroom/agent.toml").
// Unknown keys and bad values are errors naming the key, the value and what is allowed.
Result<AgentConfig> parseAgentConfig(std::string_view toml_text, std::string_view source);
// Reads and parses a file (an unreadable file is an error naming it).
Result<AgentConfig> loadAgentConfig(const std::string& path);
// Applies a flag's values over a config ("--interval", {"2s"}); list keys replace the list.
// Errors name the flag, the value and what is allowed.
Status applyConfigFlag(AgentConfig& cfg, const ConfigKey& key, const std::vector<std::string>& values);

// "5s", "500ms", "2m", "1h", "1.5s"; a plain number is seconds.
Result<std::chrono::milliseconds> parseDuration(std::string_view text);

}  // namespace headroom
