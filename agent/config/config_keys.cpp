// The table of the agent's configuration keys: each key's name, flag, kind, help and setter, in
// one place that the TOML file, the flags and docs/configuration.md all follow.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <unistd.h>

#include <toml++/toml.h>
#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>
#include <tuple>
#include <utility>

#include "headroom/sources/cgroup.h"
#include "headroom/sources/fs_root.h"
#include "headroom/sources/parse.h"
#include "headroom/sources/self_report.h"
#include "headroom/util/text.h"
#include "headroom/util/units.h"

#include "config_parts.h"

namespace headroom::config_detail {
namespace {

// "sensors.oom_ring_bytes" -> "--sensors.oom-ring-bytes".
std::string flagFor(std::string_view name) {
  std::string flag = "--";
  for (char c : name) flag.push_back(c == '_' ? '-' : c);
  return flag;
}

KeySpec scalar(std::string name, std::string kind, std::string help, Setter set) {
  std::string flag = flagFor(name);
  return KeySpec{ConfigKey{std::move(name), std::move(flag), std::move(kind), std::move(help), false}, "",
                 std::move(set)};
}

KeySpec boolKey(std::string name, std::string help, std::function<void(AgentConfig&, bool)> assign) {
  return scalar(std::move(name), "bool", std::move(help),
                [assign = std::move(assign)](AgentConfig& c, const std::vector<Given>& v) -> Status {
                  auto b = boolOf(v.front());
                  if (!b) return b.error();
                  assign(c, *b);
                  return ok();
                });
}

KeySpec countKey(std::string name, std::string help, std::uint64_t min,
                 std::function<void(AgentConfig&, std::uint64_t)> assign) {
  help += fmt::format(" ({}..{})", min, kMaxCount);
  return scalar(std::move(name), "count", std::move(help),
                [min, assign = std::move(assign)](AgentConfig& c, const std::vector<Given>& v) -> Status {
                  auto n = countOf(v.front(), min, kMaxCount);
                  if (!n) return n.error();
                  assign(c, *n);
                  return ok();
                });
}

// A BPF ring buffer's size: the kernel wants a power of two and a whole number of pages.
KeySpec ringKey(std::string name, std::string help, std::function<void(AgentConfig&, std::uint32_t)> assign) {
  return scalar(std::move(name), "size", std::move(help) + " (a power of two, 4KiB..1GiB)",
                [assign = std::move(assign)](AgentConfig& c, const std::vector<Given>& v) -> Status {
                  auto n = sizeOf(v.front());
                  if (!n) return n.error();
                  bool pow2 = *n != 0 && (*n & (*n - 1)) == 0;
                  if (*n < kMinRingBytes || !pow2)
                    return v.front().fail(R"(must be a power of two, at least 4096 (e.g. "256KiB"))");
                  if (*n > kMaxRingBytes)
                    return v.front().fail(R"(must be a power of two, at most 1GiB (e.g. "256KiB"))");
                  assign(c, static_cast<std::uint32_t>(*n));
                  return ok();
                });
}

KeySpec enumKey(std::string name, std::string help, std::vector<std::string> allowed,
                std::function<void(AgentConfig&, std::size_t)> assign) {
  std::string kind = "enum(" + joined(allowed, "|") + ")";
  return scalar(std::move(name), std::move(kind), std::move(help),
                [allowed = std::move(allowed), assign = std::move(assign)](AgentConfig& c,
                                                                           const std::vector<Given>& v) -> Status {
                  std::string reason = "must be one of " + joined(allowed);
                  auto s = stringOf(v.front(), reason);
                  if (!s) return s.error();
                  auto it = std::find(allowed.begin(), allowed.end(), *s);
                  if (it == allowed.end()) return v.front().fail(reason);
                  assign(c, static_cast<std::size_t>(it - allowed.begin()));
                  return ok();
                });
}

KeySpec listKey(std::string name, std::string flag, std::string help, std::string example, Setter set) {
  return KeySpec{ConfigKey{std::move(name), std::move(flag), "list", std::move(help), true}, std::move(example),
                 std::move(set)};
}

// validate() names the policy's own field ("margin_growth = 0.9: must be at least 1"); the
// config names the key and the value itself, so only the reason is kept.
std::string policyReason(std::string_view message) {
  auto colon = message.find(": ");
  auto eq = message.find(" = ");
  if (colon != std::string_view::npos && eq != std::string_view::npos && eq < colon)
    return std::string(message.substr(colon + 2));
  return std::string(message);
}

// A [budget] policy key: parsed, set on a copy of the policy and checked with validate(), so
// the config accepts exactly what the controller does; nothing changes on error.
KeySpec policyKey(std::string name, std::string kind, std::string help,
                  std::function<Status(BudgetPolicy&, const Given&)> assign) {
  return scalar(std::move(name), std::move(kind), std::move(help),
                [assign = std::move(assign)](AgentConfig& c, const std::vector<Given>& v) -> Status {
                  BudgetPolicy p = c.budget.policy;
                  if (auto st = assign(p, v.front()); !st) return st;
                  if (auto st = validate(p); !st) return v.front().fail(policyReason(st.error().message));
                  c.budget.policy = p;
                  return ok();
                });
}

// An optional absolute path: "" means the default.
Result<std::string> optionalPathOf(const Given& g) {
  constexpr std::string_view kAllowed = R"(must be an absolute path, or "" for the default)";
  auto s = stringOf(g, kAllowed);
  if (!s) return s;
  if (!s->empty() && s->front() != '/') return g.fail(kAllowed);
  return s;
}

// An absolute path, or "" for none (the thing it names is not used).
Result<std::string> pathOrNoneOf(const Given& g) {
  constexpr std::string_view kAllowed = R"(must be an absolute path, or "" for none)";
  auto s = stringOf(g, kAllowed);
  if (!s) return s;
  if (!s->empty() && s->front() != '/') return g.fail(kAllowed);
  return s;
}

Status setPathList(const std::vector<Given>& values, std::vector<std::string>& field) {
  auto paths = collect<std::string>(values, absolutePathOf);
  if (!paths) return paths.error();
  field = std::move(*paths);
  return ok();
}

std::vector<KeySpec> makeSpecs() {
  std::vector<KeySpec> k;
  k.push_back(scalar("listen", "string", "address of the HTTP endpoint (/metrics), ADDR:PORT",
                     [](AgentConfig& c, const std::vector<Given>& v) -> Status {
                       auto s = stringOf(v.front(), fmt::format("must be a string {}", kListenAddressHint));
                       if (!s) return s.error();
                       auto a = listenAddressFromText(*s);
                       if (!a) return v.front().fail(a.error().message);
                       c.listen = std::move(*a);
                       return ok();
                     }));
  // The flag as the Prometheus exporters spell it.
  KeySpec web = scalar(
      "web.config_file", "string",
      "TLS and basic auth for the endpoint: a web configuration file as the Prometheus exporters take; default: none",
      [](AgentConfig& c, const std::vector<Given>& v) -> Status {
        auto s = stringOf(v.front(), "must be the path of a web configuration file");
        if (!s) return s.error();
        if (s->empty()) {
          c.web_config_file.clear();
          c.web.reset();
          return ok();
        }
        std::string path = *s;
        if (path.front() != '/') {
          std::array<char, 4096> cwd{};
          if (::getcwd(cwd.data(), cwd.size()) != nullptr) path = fmt::format("{}/{}", cwd.data(), path);
        }
        auto w = loadWebConfig(path);
        if (!w) {
          // The flag or key already names the file.
          std::string why = w.error().describe();
          if (std::string prefix = "web config " + path; why.starts_with(prefix)) {
            why.erase(0, prefix.size());
            if (why.starts_with(": ")) why.erase(0, 2);
            if (why.starts_with(" ")) why.erase(0, 1);
          }
          return v.front().fail(why);
        }
        c.web_config_file = std::move(path);
        c.web = std::move(*w);
        return ok();
      });
  web.key.flag = "--web.config.file";
  k.push_back(std::move(web));
  k.push_back(scalar("interval", "duration", "time between samples (100ms..1h)",
                     [](AgentConfig& c, const std::vector<Given>& v) -> Status {
                       auto d = durationOf(v.front());
                       if (!d) return d.error();
                       if (*d < kMinInterval || *d > kMaxInterval)
                         return v.front().fail("must be between 100ms and 1h");
                       c.interval = *d;
                       return ok();
                     }));
  k.push_back(listKey("cgroups", "--cgroup",
                      "memory cgroup to watch with its subtree (a path inside the hierarchy); default: all",
                      R"(["/system.slice/curio.service"])", [](AgentConfig& c, const std::vector<Given>& v) -> Status {
                        auto paths = collect<std::string>(v, [](const Given& g) -> Result<std::string> {
                          auto s = stringOf(g, R"(must be a cgroup path (e.g. "/system.slice"))");
                          if (!s) return s;
                          if (s->empty()) return g.fail(R"(must be a cgroup path (e.g. "/system.slice"))");
                          return normaliseCgroupPath(*s);
                        });
                        if (!paths) return paths.error();
                        c.cgroups = std::move(*paths);
                        return ok();
                      }));
  k.push_back(boolKey("smaps", "read smaps_rollup for PSS", [](AgentConfig& c, bool b) { c.smaps = b; }));
  // A duration of the top table within [low, high]; `range` says them as the error does.
  using std::chrono::milliseconds;
  auto boundedDuration = [](std::string name, std::string help, milliseconds low, milliseconds high,
                            const std::string& range, milliseconds AgentConfig::*field) {
    return scalar(std::move(name), "duration", std::move(help),
                  [=](AgentConfig& c, const std::vector<Given>& v) -> Status {
                    auto d = durationOf(v.front());
                    if (!d) return d.error();
                    if (*d < low || *d > high) return v.front().fail("must be between " + range);
                    c.*field = *d;
                    return ok();
                  });
  };
  k.push_back(boundedDuration("pss_max_age", "a process's PSS is read again at least this often (1s..1h)",
                              std::chrono::seconds(1), std::chrono::hours(1), "1s and 1h", &AgentConfig::pss_max_age));
  k.push_back(scalar("pss_step", "size", "a process's PSS is read again when its RSS moves by this much",
                     [](AgentConfig& c, const std::vector<Given>& v) -> Status {
                       auto n = sizeOf(v.front());
                       if (!n) return n.error();
                       if (*n == 0) return v.front().fail("must be more than 0");
                       c.pss_step = *n;
                       return ok();
                     }));
  k.push_back(countKey("pss_reads_per_second",
                       "smaps_rollup reads a second for small processes' PSS on first sight or for age", 1,
                       [](AgentConfig& c, std::uint64_t n) { c.pss_reads_per_second = n; }));
  k.push_back(countKey("max_processes", "processes read per sample; beyond, counted only", 1,
                       [](AgentConfig& c, std::uint64_t n) { c.max_processes = n; }));
  k.push_back(boundedDuration("process_walk_budget",
                              "CPU a second for walking every process; beyond, the walks are spread out, the "
                              "prover's processes and cgroups near a bound still read every sample (0s: every "
                              "sample walks; 0s..1s)",
                              milliseconds(0), std::chrono::seconds(1), "0s and 1s",
                              &AgentConfig::process_walk_budget));
  k.push_back(boundedDuration("process_walk_max_interval",
                              "the longest time between two walks of every process (1s..1h)", std::chrono::seconds(1),
                              std::chrono::hours(1), "1s and 1h", &AgentConfig::process_walk_max_interval));
  k.push_back(enumKey("log_format", "log line format", {"text", "json"}, [](AgentConfig& c, std::size_t i) {
    c.log_format = i == 0 ? LogFormat::kText : LogFormat::kJson;
  }));
  static const std::vector<std::string> kLevels = {"trace", "debug", "info", "warn", "error"};
  k.push_back(enumKey("log_level", "least severe level logged", kLevels,
                      [](AgentConfig& c, std::size_t i) { c.log_level = kLevels[i]; }));

  k.push_back(listKey("roles.rules", "--role-rule",
                      "ROLE=KIND:VALUE (ROLE prover|colocated|system, KIND comm|cmdline|cgroup); first match wins",
                      R"(["prover=comm:cuzk"])", [](AgentConfig& c, const std::vector<Given>& v) -> Status {
                        auto rules = collect<RoleRule>(v, [](const Given& g) -> Result<RoleRule> {
                          auto s = stringOf(g, R"(must be a string ROLE=KIND:VALUE (e.g. "prover=comm:cuzk"))");
                          if (!s) return s.error();
                          auto r = parseRoleRule(*s);
                          if (!r) return g.fail(r.error().message);
                          return r;
                        });
                        if (!rules) return rules.error();
                        c.role_rules = std::move(*rules);
                        return ok();
                      }));

  k.push_back(boolKey("sensors.bpf", "load the BPF sensors (off: /dev/kmsg and cgroup files only)",
                      [](AgentConfig& c, bool b) { c.sensors.bpf = b; }));
  k.push_back(
      boolKey("sensors.kmsg", "read OOM reports from /dev/kmsg", [](AgentConfig& c, bool b) { c.sensors.kmsg = b; }));
  k.push_back(boolKey("sensors.tasks",
                      "read every process in one pass of a BPF task iterator (off: /proc/<pid>/* per process)",
                      [](AgentConfig& c, bool b) { c.sensors.tasks = b; }));
  k.push_back(boolKey("sensors.faults",
                      "count page faults per process in BPF (on the fault path; off: /proc/<pid>/stat)",
                      [](AgentConfig& c, bool b) { c.sensors.faults = b; }));
  k.push_back(
      boolKey("sensors.mmap", "count mmap/munmap per process", [](AgentConfig& c, bool b) { c.sensors.mmap = b; }));
  k.push_back(boolKey("sensors.rss",
                      "follow RSS changes per process in BPF (on the fault path; off: /proc/<pid>/status)",
                      [](AgentConfig& c, bool b) { c.sensors.rss = b; }));
  k.push_back(
      boolKey("sensors.cuda", "attach the CUDA allocation probes", [](AgentConfig& c, bool b) { c.sensors.cuda = b; }));
  k.push_back(listKey("sensors.cuda_libraries", "--cuda-library",
                      "CUDA driver library to probe (absolute path); default: found automatically",
                      R"(["/usr/lib/x86_64-linux-gnu/libcuda.so.1"])", [](AgentConfig& c, const std::vector<Given>& v) {
                        return setPathList(v, c.sensors.cuda_libraries);
                      }));
  k.push_back(listKey("sensors.cuda_runtime_targets", "--cuda-runtime-target",
                      "libcudart or a binary with the CUDA runtime linked in, to probe too (absolute path)",
                      R"(["/opt/app/bin/prover"])", [](AgentConfig& c, const std::vector<Given>& v) {
                        return setPathList(v, c.sensors.cuda_runtime_targets);
                      }));
  k.push_back(boolKey("sensors.nvml", "read device memory per GPU and per process through NVML (libnvidia-ml.so.1)",
                      [](AgentConfig& c, bool b) { c.sensors.nvml = b; }));
  k.push_back(scalar("sensors.nvml_library", "string",
                     "the NVML library: a name the loader finds, or an absolute path (default libnvidia-ml.so.1)",
                     [](AgentConfig& c, const std::vector<Given>& v) -> Status {
                       auto lib = stringOf(v.front());
                       if (!lib) return lib.error();
                       if (lib->empty() || (lib->find('/') != std::string::npos && lib->front() != '/'))
                         return v.front().fail("must be a library name or an absolute path");
                       c.sensors.nvml_library = std::move(*lib);
                       return ok();
                     }));
  k.push_back(ringKey("sensors.oom_ring_bytes", "size of the OOM event ring buffer",
                      [](AgentConfig& c, std::uint32_t n) { c.sensors.oom_ring_bytes = n; }));
  k.push_back(ringKey("sensors.exit_ring_bytes", "size of the exit event ring buffer",
                      [](AgentConfig& c, std::uint32_t n) { c.sensors.exit_ring_bytes = n; }));
  k.push_back(
      countKey("sensors.max_processes", "entries of the per-process counter maps", 1,
               [](AgentConfig& c, std::uint64_t n) { c.sensors.max_processes = static_cast<std::uint32_t>(n); }));
  k.push_back(countKey(
      "sensors.max_cuda_allocations", "live CUDA allocations tracked", 1,
      [](AgentConfig& c, std::uint64_t n) { c.sensors.max_cuda_allocations = static_cast<std::uint32_t>(n); }));
  k.push_back(
      countKey("sensors.max_tracked_cgroups", "cgroups the BPF filter can hold", 1,
               [](AgentConfig& c, std::uint64_t n) { c.sensors.max_tracked_cgroups = static_cast<std::uint32_t>(n); }));

  k.push_back(countKey("metrics.top_processes", "per-process series per role (the rest sum into \"other\")", 1,
                       [](AgentConfig& c, std::uint64_t n) { c.top_processes = n; }));
  k.push_back(countKey("metrics.max_cgroups", "per-cgroup series, the largest cgroups by usage", 1,
                       [](AgentConfig& c, std::uint64_t n) { c.max_cgroups = n; }));
  k.push_back(countKey("metrics.max_series", "hard cap on all series; beyond, dropped and counted", 100,
                       [](AgentConfig& c, std::uint64_t n) { c.max_series = n; }));
  k.push_back(countKey("metrics.recent_ooms", "OOM events kept for /v1/ooms", 1,
                       [](AgentConfig& c, std::uint64_t n) { c.recent_ooms = n; }));

  k.push_back(boolKey("probe.enabled", "serve POST /v1/probe (it allocates memory up to near a limit)",
                      [](AgentConfig& c, bool b) { c.probe_enabled = b; }));
  k.push_back(scalar("probe.min_interval", "duration", "least time between two probes (1s..24h)",
                     [](AgentConfig& c, const std::vector<Given>& v) -> Status {
                       auto d = durationOf(v.front());
                       if (!d) return d.error();
                       if (*d < std::chrono::seconds(1) || *d > std::chrono::hours(24))
                         return v.front().fail("must be between 1s and 24h");
                       c.probe_min_interval = *d;
                       return ok();
                     }));
  k.push_back(scalar("probe.cgroup", "string", "cgroup POST /v1/probe probes when the request names none",
                     [](AgentConfig& c, const std::vector<Given>& v) -> Status {
                       auto s = stringOf(v.front(), R"(must be a cgroup path (e.g. "/system.slice/prover.service"))");
                       if (!s) return s.error();
                       if (s->empty())
                         return v.front().fail(R"(must be a cgroup path (e.g. "/system.slice/prover.service"))");
                       c.probe_cgroup = normaliseCgroupPath(*s);
                       return ok();
                     }));

  // [warning]: the time to OOM and the warning before a kill (docs/warnings.md).
  auto warningDuration = [](std::string name, std::string help, std::chrono::milliseconds WarningSettings::*field) {
    return scalar(std::move(name), "duration", std::move(help),
                  [field](AgentConfig& c, const std::vector<Given>& v) -> Status {
                    auto d = durationOf(v.front());
                    if (!d) return d.error();
                    WarningSettings w = c.warning;
                    w.*field = *d;
                    if (auto st = validate(w); !st) return v.front().fail(policyReason(st.error().message));
                    c.warning = w;
                    return ok();
                  });
  };
  k.push_back(boolKey("warning.enabled", "forecast each cgroup's time to OOM and warn before the kill",
                      [](AgentConfig& c, bool b) { c.warning.enabled = b; }));
  k.push_back(warningDuration("warning.eta", "warn when a cgroup's time to OOM drops under this (1s..)",
                              &WarningSettings::eta));
  k.push_back(warningDuration("warning.window", "the growth's trend is taken over this window (5s..10m)",
                              &WarningSettings::window));
  k.push_back(warningDuration("warning.fast_interval", "a cgroup near its bound is read this often (100ms..10s)",
                              &WarningSettings::fast_interval));
  k.push_back(scalar("warning.on_warning", "string",
                     "when the prover's cgroup is warned: a shell command, signal:NAME, or an http(s):// URL to POST "
                     "to; \"\": none",
                     [](AgentConfig& c, const std::vector<Given>& v) -> Status {
                       auto s = stringOf(v.front(), R"(must be a command, "signal:USR1" or an http(s):// URL)");
                       if (!s) return s.error();
                       auto h = parseWarningHook(*s);
                       if (!h) return v.front().fail(policyReason(h.error().message));
                       c.warning.on_warning = std::move(*s);
                       return ok();
                     }));

  const BudgetPolicy d;
  k.push_back(boolKey("budget.enabled", "compute the prover's budget and serve it on /v1/budget",
                      [](AgentConfig& c, bool b) { c.budget.enabled = b; }));
  k.push_back(scalar("budget.cgroup", "string",
                     "the prover's memory cgroup; default: where the largest prover-role process runs",
                     [](AgentConfig& c, const std::vector<Given>& v) -> Status {
                       auto s = stringOf(v.front(), R"(must be a cgroup path (e.g. "/system.slice/prover.service"))");
                       if (!s) return s.error();
                       c.budget.cgroup = s->empty() ? std::string() : normaliseCgroupPath(*s);
                       return ok();
                     }));
  k.push_back(policyKey("budget.margin_floor", "size",
                        fmt::format("the margin never goes below this (default {})", sizeText(d.margin_floor)),
                        [](BudgetPolicy& p, const Given& g) -> Status {
                          auto n = sizeOf(g);
                          if (!n) return n.error();
                          p.margin_floor = *n;
                          return ok();
                        }));
  k.push_back(
      policyKey("budget.margin_growth", "number",
                fmt::format("on an OOM kill of the prover the margin grows at least this many times (default {})",
                            d.margin_growth),
                [](BudgetPolicy& p, const Given& g) -> Status {
                  auto x = numberOf(g);
                  if (!x) return x.error();
                  p.margin_growth = *x;
                  return ok();
                }));
  k.push_back(policyKey(
      "budget.margin_step", "size",
      fmt::format("... and at least by this much; also what a give-back returns (default {})", sizeText(d.margin_step)),
      [](BudgetPolicy& p, const Given& g) -> Status {
        auto n = sizeOf(g);
        if (!n) return n.error();
        p.margin_step = *n;
        return ok();
      }));
  k.push_back(
      policyKey("budget.overhead_factor", "number",
                fmt::format("... and to this times the overhead beyond the budget seen at the kill (default {})",
                            d.overhead_factor),
                [](BudgetPolicy& p, const Given& g) -> Status {
                  auto x = numberOf(g);
                  if (!x) return x.error();
                  p.overhead_factor = *x;
                  return ok();
                }));
  k.push_back(policyKey("budget.give_back_after", "count",
                        fmt::format("clean periods after which one margin step is given back (default {}; 1..{})",
                                    d.give_back_after, kMaxCount),
                        [](BudgetPolicy& p, const Given& g) -> Status {
                          auto n = countOf(g, 1, kMaxCount);
                          if (!n) return n.error();
                          p.give_back_after = static_cast<unsigned>(*n);
                          return ok();
                        }));
  auto durationKey = [&d](std::string name, std::string help, std::chrono::milliseconds BudgetPolicy::*field) {
    help += fmt::format(" (default {})", durationText(d.*field));
    return policyKey(std::move(name), "duration", std::move(help), [field](BudgetPolicy& p, const Given& g) -> Status {
      auto t = durationOf(g);
      if (!t) return t.error();
      p.*field = *t;
      return ok();
    });
  };
  k.push_back(durationKey("budget.clean_period",
                          "a prover running this long without an OOM kill counts as one clean run",
                          &BudgetPolicy::clean_period));
  k.push_back(durationKey("budget.growth_window",
                          "neighbours' growth and the overhead's peak are taken over this window",
                          &BudgetPolicy::growth_window));
  k.push_back(durationKey("budget.forecast_horizon",
                          "keep back what the neighbours' steady growth takes over this horizon (0..1h; 0: off)",
                          &BudgetPolicy::forecast_horizon));
  k.push_back(durationKey("budget.probe_max_age", "a probe (POST /v1/probe) older than this no longer caps the budget",
                          &BudgetPolicy::probe_max_age));
  k.push_back(
      policyKey("budget.hysteresis", "size",
                fmt::format("a new generation when the budget moves by more than this (or 1% of it; default {})",
                            sizeText(d.hysteresis_bytes)),
                [](BudgetPolicy& p, const Given& g) -> Status {
                  auto n = sizeOf(g);
                  if (!n) return n.error();
                  p.hysteresis_bytes = *n;
                  return ok();
                }));
  k.push_back(scalar("budget.state_file", "string",
                     "where the learned margin is kept; default: /var/lib/headroom/budget<cgroup>.json",
                     [](AgentConfig& c, const std::vector<Given>& v) -> Status {
                       auto s = optionalPathOf(v.front());
                       if (!s) return s.error();
                       c.budget.state_file = std::move(*s);
                       return ok();
                     }));
  k.push_back(scalar("budget.file", "string",
                     "write the budget (bytes) to this file at each new generation, atomically; default: none",
                     [](AgentConfig& c, const std::vector<Given>& v) -> Status {
                       auto s = optionalPathOf(v.front());
                       if (!s) return s.error();
                       c.budget.file = std::move(*s);
                       return ok();
                     }));

  const JournalConfig jd;
  k.push_back(boolKey("journal.enabled", "write one durable record per OOM kill (headroom report reads them)",
                      [](AgentConfig& c, bool b) { c.journal.enabled = b; }));
  k.push_back(scalar("journal.path", "string", fmt::format("the journal file (default {})", jd.path),
                     [](AgentConfig& c, const std::vector<Given>& v) -> Status {
                       auto s = absolutePathOf(v.front());
                       if (!s) return s.error();
                       c.journal.path = std::move(*s);
                       c.journal.path_given = true;
                       return ok();
                     }));
  k.push_back(scalar(
      "journal.max_bytes", "size",
      fmt::format("beyond this the journal is rotated to <path>.1, keeping the newest (default {}; at least 1MiB)",
                  sizeText(jd.max_bytes)),
      [](AgentConfig& c, const std::vector<Given>& v) -> Status {
        auto n = sizeOf(v.front());
        if (!n) return n.error();
        if (*n < (1ULL << 20)) return v.front().fail("must be at least 1MiB");
        c.journal.max_bytes = *n;
        return ok();
      }));
  k.push_back(scalar(
      "journal.flight_window", "duration",
      fmt::format("the flight recorder keeps this much of each cgroup's samples for the record (default {}; 5s..1h)",
                  durationText(jd.flight_window)),
      [](AgentConfig& c, const std::vector<Given>& v) -> Status {
        auto t = durationOf(v.front());
        if (!t) return t.error();
        if (*t < std::chrono::seconds(5) || *t > std::chrono::hours(1))
          return v.front().fail("must be between 5s and 1h");
        c.journal.flight_window = *t;
        return ok();
      }));
  k.push_back(enumKey("journal.catch_up",
                      "at start, journal the OOM kills the journal lacks: boot (every one of this boot in the "
                      "kernel's log), restarts (those since the last agent's state beside the journal), off",
                      {"boot", "restarts", "off"},
                      [](AgentConfig& c, std::size_t i) { c.journal.catch_up = static_cast<JournalCatchUp>(i); }));
  const WorkloadLookup wd;
  k.push_back(scalar(
      "workloads.docker_socket", "string",
      fmt::format("Docker's API socket, asked for container names (\"\": never asked; default {})", wd.docker_socket),
      [](AgentConfig& c, const std::vector<Given>& v) -> Status {
        auto s = pathOrNoneOf(v.front());
        if (!s) return s.error();
        c.workloads.docker_socket = std::move(*s);
        return ok();
      }));
  k.push_back(scalar("workloads.podman_socket", "string",
                     fmt::format("Podman's rootful API socket, asked for its containers' names; a rootless "
                                 "container's is its user's /run/user/UID/podman/podman.sock (\"\": Podman is never "
                                 "asked; default {})",
                                 wd.podman_socket),
                     [](AgentConfig& c, const std::vector<Given>& v) -> Status {
                       auto s = pathOrNoneOf(v.front());
                       if (!s) return s.error();
                       c.workloads.podman_socket = std::move(*s);
                       return ok();
                     }));
  k.push_back(boolKey("workloads.kubernetes_logs",
                      "name pods, namespaces and their containers from the node's /var/log/containers entries",
                      [](AgentConfig& c, bool b) { c.workloads.kubernetes_logs = b; }));
  const EventsConfig ed;
  k.push_back(scalar("events.output", "string",
                     "also write each journal record as one JSON line (docs/events.md): \"stdout\", an absolute file "
                     "path, or \"\" for none (default none)",
                     [](AgentConfig& c, const std::vector<Given>& v) -> Status {
                       constexpr std::string_view kAllowed =
                           R"(must be "stdout", an absolute file path, or "" for none)";
                       auto s = stringOf(v.front(), kAllowed);
                       if (!s) return s.error();
                       if (!s->empty() && *s != "stdout" && (s->front() != '/' || s->back() == '/'))
                         return v.front().fail(kAllowed);
                       c.events.output = std::move(*s);
                       return ok();
                     }));
  k.push_back(scalar(
      "events.max_bytes", "size",
      fmt::format("the events file is rotated to <output>.1 before a line would take it past this (default {}; at "
                  "least 4KiB)",
                  sizeText(ed.max_bytes)),
      [](AgentConfig& c, const std::vector<Given>& v) -> Status {
        auto n = sizeOf(v.front());
        if (!n) return n.error();
        if (*n < 4096) return v.front().fail("must be at least 4KiB");
        c.events.max_bytes = *n;
        return ok();
      }));
  k.push_back(scalar("events.max_files", "count",
                     fmt::format("rotated events files kept, <output>.1 the newest (default {}; 0..100)", ed.max_files),
                     [](AgentConfig& c, const std::vector<Given>& v) -> Status {
                       auto n = countOf(v.front(), 0, 100);
                       if (!n) return n.error();
                       c.events.max_files = static_cast<std::size_t>(*n);
                       return ok();
                     }));
  k.push_back(enumKey("events.journald",
                      "also send each record to the systemd journal with structured fields; auto: when started by "
                      "systemd and its journal socket is there",
                      {"auto", "on", "off"},
                      [](AgentConfig& c, std::size_t i) { c.events.journald = static_cast<JournaldMode>(i); }));
  k.push_back(scalar("prover.self_report", "string",
                     "where the prover says how much memory it believes it uses: /path/file, "
                     "http://127.0.0.1:PORT/PATH#json:FIELD.PATH or #metric:NAME{label=\"v\"}; default: none",
                     [](AgentConfig& c, const std::vector<Given>& v) -> Status {
                       auto s = stringOf(v.front(), "must be a self-report source");
                       if (!s) return s.error();
                       if (!s->empty()) {
                         if (auto src = parseSelfReportSource(*s); !src) return v.front().fail(src.error().describe());
                       }
                       c.self_report = std::move(*s);
                       return ok();
                     }));
  return k;
}

}  // namespace

const std::vector<KeySpec>& specs() {
  static const std::vector<KeySpec> kSpecs = makeSpecs();
  return kSpecs;
}

const KeySpec* findSpec(std::string_view name) {
  for (const KeySpec& s : specs())
    if (s.key.name == name) return &s;
  return nullptr;
}

}  // namespace headroom::config_detail
