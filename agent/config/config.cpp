#include "headroom/config/config.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>
#include <toml++/toml.h>
#include <tuple>
#include <utility>

#include "headroom/sources/cgroup.h"
#include "headroom/sources/fs_root.h"
#include "headroom/sources/parse.h"
#include "headroom/sources/self_report.h"
#include "headroom/util/text.h"
#include "headroom/util/units.h"

namespace headroom {

namespace {

constexpr std::string_view kDurationHint = R"((use e.g. "5s", "500ms", "1m"))";
constexpr std::uint64_t kMaxCount = 1ULL << 24;
constexpr std::uint64_t kMinRingBytes = 4096;
constexpr std::uint64_t kMaxRingBytes = 1ULL << 30;
constexpr auto kMinInterval = std::chrono::milliseconds(100);
constexpr auto kMaxInterval = std::chrono::milliseconds(3600 * 1000);
// Beyond this a duration is surely a mistake, and still fits an int64 of milliseconds.
constexpr double kMaxDurationMs = 1e15;

bool isDigit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }
bool isAlpha(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }


// A flag's value as the user typed it, quoted only where it would otherwise be invisible.
std::string flagText(std::string_view s) {
  bool plain = !s.empty() && std::none_of(s.begin(), s.end(), [](char c) {
    return std::isspace(static_cast<unsigned char>(c)) != 0 || c == '"' || static_cast<unsigned char>(c) < 0x20;
  });
  return plain ? std::string(s) : quotedText(s);
}

std::string joined(const std::vector<std::string>& items, std::string_view sep = ", ") {
  std::string out;
  for (const std::string& s : items) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}

// A TOML value as it would be written in the file, for error messages.
std::string render(const toml::node& node) {
  if (const auto* s = node.as_string()) return quotedText(s->get());
  if (const auto* i = node.as_integer()) return fmt::format("{}", i->get());
  if (const auto* f = node.as_floating_point()) {
    std::string t = fmt::format("{}", f->get());
    if (std::isfinite(f->get()) && t.find_first_of(".e") == std::string::npos) t += ".0";
    return t;
  }
  if (const auto* b = node.as_boolean()) return b->get() ? "true" : "false";
  if (const auto* a = node.as_array()) {
    std::string out = "[";
    for (std::size_t i = 0; i < a->size(); ++i) {
      if (i > 0) out += ", ";
      out += render((*a)[i]);
    }
    return out + "]";
  }
  if (const auto* t = node.as_table()) return t->empty() ? "{}" : "{...}";
  std::ostringstream os;
  if (const auto* d = node.as_date()) os << *d;
  else if (const auto* tm = node.as_time()) os << *tm;
  else if (const auto* dt = node.as_date_time()) os << *dt;
  return os.str();
}

// One value as given: a TOML node from a file or a flag's text, and how errors name it
// ("/x.toml: interval = \"fast\"", "--interval fast").
struct Given {
  const toml::node* node = nullptr;
  std::string text;
  std::string subject;

  Error fail(std::string_view reason) const { return makeError(0, fmt::format("{}: {}", subject, reason)); }
};

// --- Values, each from either source. Errors say what is allowed. ---

Result<bool> boolOf(const Given& g) {
  constexpr std::string_view kAllowed = "must be a boolean (true or false)";
  if (g.node != nullptr) {
    if (const auto* b = g.node->as_boolean()) return b->get();
    return g.fail(kAllowed);
  }
  const std::string& t = g.text;
  if (t == "true" || t == "1" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "0" || t == "no" || t == "off") return false;
  return g.fail(kAllowed);
}

Result<std::string> stringOf(const Given& g, std::string_view allowed = "must be a string") {
  if (g.node == nullptr) return g.text;
  if (const auto* s = g.node->as_string()) return s->get();
  return g.fail(allowed);
}

Result<std::uint64_t> countOf(const Given& g, std::uint64_t min, std::uint64_t max) {
  std::string allowed = fmt::format("must be an integer from {} to {}", min, max);
  std::uint64_t v = 0;
  if (g.node != nullptr) {
    const auto* i = g.node->as_integer();
    if (i == nullptr || i->get() < 0) return g.fail(allowed);
    v = static_cast<std::uint64_t>(i->get());
  } else {
    auto p = parseU64(g.text);
    if (!p) return g.fail(allowed);
    v = *p;
  }
  if (v < min || v > max) return g.fail(allowed);
  return v;
}

Result<std::uint64_t> sizeOf(const Given& g) {
  constexpr std::string_view kAllowed = R"(not a size (use a byte count or e.g. "256KiB", "1MiB"))";
  if (g.node != nullptr) {
    if (const auto* i = g.node->as_integer()) {
      if (i->get() < 0) return g.fail(kAllowed);
      return static_cast<std::uint64_t>(i->get());
    }
    const auto* s = g.node->as_string();
    if (s == nullptr) return g.fail(kAllowed);
    auto p = parseSize(s->get());
    if (!p) return g.fail(kAllowed);
    return *p;
  }
  auto p = parseSize(g.text);
  if (!p) return g.fail(kAllowed);
  return *p;
}

// A plain number (an integer or a float in TOML; the flag's text), finite.
Result<double> numberOf(const Given& g) {
  constexpr std::string_view kAllowed = "must be a number (e.g. 1.5)";
  double v = 0;
  if (g.node != nullptr) {
    if (const auto* i = g.node->as_integer()) {
      v = static_cast<double>(i->get());
    } else if (const auto* f = g.node->as_floating_point()) {
      v = f->get();
    } else {
      return g.fail(kAllowed);
    }
  } else {
    auto p = parseDouble(trim(g.text));
    if (!p) return g.fail(kAllowed);
    v = *p;
  }
  if (!std::isfinite(v)) return g.fail(kAllowed);
  return v;
}

// The reason alone; parseDuration and the config add what is being parsed.
Result<std::chrono::milliseconds> durationFromText(std::string_view text) {
  std::string_view t = trim(text);
  if (t.empty()) return makeError(0, fmt::format("empty {}", kDurationHint));
  if (t.front() == '-') return makeError(0, fmt::format("must not be negative {}", kDurationHint));
  double total_ms = 0;
  std::size_t parts = 0;
  std::size_t i = 0;
  auto skipSpace = [&] {
    while (i < t.size() && std::isspace(static_cast<unsigned char>(t[i])) != 0) ++i;
  };
  while (i < t.size()) {
    std::size_t start = i;
    while (i < t.size() && (isDigit(t[i]) || t[i] == '.')) ++i;
    std::string_view num = t.substr(start, i - start);
    if (std::none_of(num.begin(), num.end(), isDigit))
      return makeError(0, fmt::format("not a duration {}", kDurationHint));
    auto value = parseDouble(num);
    if (!value) return makeError(0, fmt::format("not a duration {}", kDurationHint));
    skipSpace();
    std::size_t unit_start = i;
    while (i < t.size() && isAlpha(t[i])) ++i;
    std::string_view unit = t.substr(unit_start, i - unit_start);
    skipSpace();
    double mult = 0;
    if (unit.empty()) {
      // A plain number is seconds, but only on its own ("5", not "1m 5").
      if (parts > 0 || i < t.size()) return makeError(0, fmt::format("not a duration {}", kDurationHint));
      mult = 1000;
    } else if (unit == "ms") {
      mult = 1;
    } else if (unit == "s") {
      mult = 1000;
    } else if (unit == "m") {
      mult = 60.0 * 1000;
    } else if (unit == "h") {
      mult = 3600.0 * 1000;
    } else {
      return makeError(0, fmt::format("unknown unit \"{}\" (use ms, s, m or h, e.g. \"5s\", \"500ms\", \"1m\")", unit));
    }
    total_ms += *value * mult;
    ++parts;
  }
  if (!(total_ms <= kMaxDurationMs)) return makeError(0, "too large");
  return std::chrono::milliseconds(std::llround(total_ms));
}

Result<std::chrono::milliseconds> durationOf(const Given& g) {
  if (g.node != nullptr) {
    double seconds = 0;
    if (const auto* i = g.node->as_integer()) {
      seconds = static_cast<double>(i->get());
    } else if (const auto* f = g.node->as_floating_point()) {
      seconds = f->get();
    } else if (const auto* s = g.node->as_string()) {
      auto d = durationFromText(s->get());
      if (!d) return g.fail(d.error().message);
      return *d;
    } else {
      return g.fail(fmt::format("must be a duration {}", kDurationHint));
    }
    if (seconds < 0) return g.fail(fmt::format("must not be negative {}", kDurationHint));
    if (!(seconds * 1000 <= kMaxDurationMs)) return g.fail("too large");
    return std::chrono::milliseconds(std::llround(seconds * 1000));
  }
  auto d = durationFromText(g.text);
  if (!d) return g.fail(d.error().message);
  return *d;
}

Result<std::string> absolutePathOf(const Given& g) {
  constexpr std::string_view kAllowed = R"(must be an absolute path (e.g. "/usr/lib/x86_64-linux-gnu/libcuda.so.1"))";
  auto s = stringOf(g, kAllowed);
  if (!s) return s;
  if (s->empty() || s->front() != '/') return g.fail(kAllowed);
  return s;
}

// --- The keys. ---

using Setter = std::function<Status(AgentConfig&, const std::vector<Given>&)>;

struct KeySpec {
  ConfigKey key;
  std::string example;  // list keys: a TOML array, for errors
  Setter set;           // scalar keys get exactly one value; nothing is changed on error
};

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
                  if (*n > kMaxRingBytes) return v.front().fail(R"(must be a power of two, at most 1GiB (e.g. "256KiB"))");
                  assign(c, static_cast<std::uint32_t>(*n));
                  return ok();
                });
}

KeySpec enumKey(std::string name, std::string help, std::vector<std::string> allowed,
                std::function<void(AgentConfig&, std::size_t)> assign) {
  std::string kind = "enum(" + joined(allowed, "|") + ")";
  return scalar(std::move(name), std::move(kind), std::move(help),
                [allowed = std::move(allowed), assign = std::move(assign)](AgentConfig& c, const std::vector<Given>& v) -> Status {
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

// Parses every element with `parse` (Given -> Result<T>); the first error is the result.
template <typename T, typename F>
Result<std::vector<T>> collect(const std::vector<Given>& values, F parse) {
  std::vector<T> out;
  out.reserve(values.size());
  for (const Given& g : values) {
    auto r = parse(g);
    if (!r) return r.error();
    out.push_back(std::move(*r));
  }
  return out;
}

// A default as a user would type it: "1GiB", "256MiB", "1h", "5m".
std::string sizeText(std::uint64_t n) {
  for (auto [shift, unit] : {std::pair{40, "TiB"}, std::pair{30, "GiB"}, std::pair{20, "MiB"}, std::pair{10, "KiB"}}) {
    if (n != 0 && n % (1ULL << shift) == 0) return fmt::format("{}{}", n >> shift, unit);
  }
  return fmt::format("{}", n);
}

std::string durationText(std::chrono::milliseconds d) {
  const auto ms = d.count();
  for (auto [per, unit] : {std::pair{3600000LL, "h"}, std::pair{60000LL, "m"}, std::pair{1000LL, "s"}}) {
    if (ms != 0 && ms % per == 0) return fmt::format("{}{}", ms / per, unit);
  }
  return fmt::format("{}ms", ms);
}

// validate() names the policy's own field ("margin_growth = 0.9: must be at least 1"); the
// config names the key and the value itself, so only the reason is kept.
std::string policyReason(std::string_view message) {
  auto colon = message.find(": ");
  auto eq = message.find(" = ");
  if (colon != std::string_view::npos && eq != std::string_view::npos && eq < colon) return std::string(message.substr(colon + 2));
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
  k.push_back(scalar("interval", "duration", "time between samples (100ms..1h)",
                     [](AgentConfig& c, const std::vector<Given>& v) -> Status {
                       auto d = durationOf(v.front());
                       if (!d) return d.error();
                       if (*d < kMinInterval || *d > kMaxInterval) return v.front().fail("must be between 100ms and 1h");
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
  k.push_back(countKey("max_processes", "processes read per sample; beyond, counted only", 1,
                       [](AgentConfig& c, std::uint64_t n) { c.max_processes = n; }));
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
  k.push_back(boolKey("sensors.kmsg", "read OOM reports from /dev/kmsg", [](AgentConfig& c, bool b) { c.sensors.kmsg = b; }));
  k.push_back(boolKey("sensors.faults", "count page faults per process in BPF (on the fault path; off: /proc/<pid>/stat)", [](AgentConfig& c, bool b) { c.sensors.faults = b; }));
  k.push_back(boolKey("sensors.mmap", "count mmap/munmap per process", [](AgentConfig& c, bool b) { c.sensors.mmap = b; }));
  k.push_back(boolKey("sensors.rss", "follow RSS changes per process in BPF (on the fault path; off: /proc/<pid>/status)", [](AgentConfig& c, bool b) { c.sensors.rss = b; }));
  k.push_back(boolKey("sensors.cuda", "attach the CUDA allocation probes", [](AgentConfig& c, bool b) { c.sensors.cuda = b; }));
  k.push_back(listKey("sensors.cuda_libraries", "--cuda-library",
                      "CUDA driver library to probe (absolute path); default: found automatically",
                      R"(["/usr/lib/x86_64-linux-gnu/libcuda.so.1"])",
                      [](AgentConfig& c, const std::vector<Given>& v) { return setPathList(v, c.sensors.cuda_libraries); }));
  k.push_back(listKey("sensors.cuda_runtime_targets", "--cuda-runtime-target",
                      "libcudart or a binary with the CUDA runtime linked in, to probe too (absolute path)",
                      R"(["/opt/app/bin/prover"])", [](AgentConfig& c, const std::vector<Given>& v) {
                        return setPathList(v, c.sensors.cuda_runtime_targets);
                      }));
  k.push_back(ringKey("sensors.oom_ring_bytes", "size of the OOM event ring buffer",
                      [](AgentConfig& c, std::uint32_t n) { c.sensors.oom_ring_bytes = n; }));
  k.push_back(ringKey("sensors.exit_ring_bytes", "size of the exit event ring buffer",
                      [](AgentConfig& c, std::uint32_t n) { c.sensors.exit_ring_bytes = n; }));
  k.push_back(countKey("sensors.max_processes", "entries of the per-process counter maps", 1,
                       [](AgentConfig& c, std::uint64_t n) { c.sensors.max_processes = static_cast<std::uint32_t>(n); }));
  k.push_back(countKey("sensors.max_cuda_allocations", "live CUDA allocations tracked", 1, [](AgentConfig& c, std::uint64_t n) {
    c.sensors.max_cuda_allocations = static_cast<std::uint32_t>(n);
  }));
  k.push_back(countKey("sensors.max_tracked_cgroups", "cgroups the BPF filter can hold", 1, [](AgentConfig& c, std::uint64_t n) {
    c.sensors.max_tracked_cgroups = static_cast<std::uint32_t>(n);
  }));

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
                       if (s->empty()) return v.front().fail(R"(must be a cgroup path (e.g. "/system.slice/prover.service"))");
                       c.probe_cgroup = normaliseCgroupPath(*s);
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
  k.push_back(policyKey("budget.margin_floor", "size", fmt::format("the margin never goes below this (default {})", sizeText(d.margin_floor)),
                        [](BudgetPolicy& p, const Given& g) -> Status {
                          auto n = sizeOf(g);
                          if (!n) return n.error();
                          p.margin_floor = *n;
                          return ok();
                        }));
  k.push_back(policyKey("budget.margin_growth", "number",
                        fmt::format("on an OOM kill of the prover the margin grows at least this many times (default {})", d.margin_growth),
                        [](BudgetPolicy& p, const Given& g) -> Status {
                          auto x = numberOf(g);
                          if (!x) return x.error();
                          p.margin_growth = *x;
                          return ok();
                        }));
  k.push_back(policyKey("budget.margin_step", "size",
                        fmt::format("... and at least by this much; also what a give-back returns (default {})", sizeText(d.margin_step)),
                        [](BudgetPolicy& p, const Given& g) -> Status {
                          auto n = sizeOf(g);
                          if (!n) return n.error();
                          p.margin_step = *n;
                          return ok();
                        }));
  k.push_back(policyKey("budget.overhead_factor", "number",
                        fmt::format("... and to this times the overhead beyond the budget seen at the kill (default {})", d.overhead_factor),
                        [](BudgetPolicy& p, const Given& g) -> Status {
                          auto x = numberOf(g);
                          if (!x) return x.error();
                          p.overhead_factor = *x;
                          return ok();
                        }));
  k.push_back(policyKey("budget.give_back_after", "count",
                        fmt::format("clean periods after which one margin step is given back (default {}; 1..{})", d.give_back_after, kMaxCount),
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
  k.push_back(durationKey("budget.clean_period", "a prover running this long without an OOM kill counts as one clean run",
                          &BudgetPolicy::clean_period));
  k.push_back(durationKey("budget.growth_window", "neighbours' growth and the overhead's peak are taken over this window",
                          &BudgetPolicy::growth_window));
  k.push_back(durationKey("budget.probe_max_age", "a probe (POST /v1/probe) older than this no longer caps the budget",
                          &BudgetPolicy::probe_max_age));
  k.push_back(policyKey("budget.hysteresis", "size",
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
  k.push_back(scalar("budget.file", "string", "write the budget (bytes) to this file at each new generation, atomically; default: none",
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
                       return ok();
                     }));
  k.push_back(scalar("journal.max_bytes", "size",
                     fmt::format("beyond this the journal is rotated to <path>.1, keeping the newest (default {}; at least 1MiB)",
                                 sizeText(jd.max_bytes)),
                     [](AgentConfig& c, const std::vector<Given>& v) -> Status {
                       auto n = sizeOf(v.front());
                       if (!n) return n.error();
                       if (*n < (1ULL << 20)) return v.front().fail("must be at least 1MiB");
                       c.journal.max_bytes = *n;
                       return ok();
                     }));
  k.push_back(scalar("journal.flight_window", "duration",
                     fmt::format("the flight recorder keeps this much of each cgroup's samples for the record (default {}; 5s..1h)",
                                 durationText(jd.flight_window)),
                     [](AgentConfig& c, const std::vector<Given>& v) -> Status {
                       auto t = durationOf(v.front());
                       if (!t) return t.error();
                       if (*t < std::chrono::seconds(5) || *t > std::chrono::hours(1)) return v.front().fail("must be between 5s and 1h");
                       c.journal.flight_window = *t;
                       return ok();
                     }));
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

const std::vector<KeySpec>& specs() {
  static const std::vector<KeySpec> kSpecs = makeSpecs();
  return kSpecs;
}

const KeySpec* findSpec(std::string_view name) {
  for (const KeySpec& s : specs())
    if (s.key.name == name) return &s;
  return nullptr;
}

// "sensors.oom_ring_bytes" -> "sensors"; "interval" -> "".
std::string_view tableOf(std::string_view name) {
  auto dot = name.find('.');
  return dot == std::string_view::npos ? std::string_view() : name.substr(0, dot);
}

std::string_view leafOf(std::string_view name) {
  auto dot = name.rfind('.');
  return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

std::vector<std::string> knownTables() {
  std::vector<std::string> out;
  for (const KeySpec& s : specs()) {
    std::string t(tableOf(s.key.name));
    if (!t.empty() && std::find(out.begin(), out.end(), t) == out.end()) out.push_back(std::move(t));
  }
  return out;
}

// "[roles], [sensors]"
std::string bracketed(const std::vector<std::string>& tables) {
  std::string out;
  for (const std::string& t : tables) out += fmt::format("{}[{}]", out.empty() ? "" : ", ", t);
  return out;
}

std::size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The known key an unknown one was probably meant to be: a typo, or the right key in the
// wrong table ("bpf" at the top level for "sensors.bpf").
std::string suggestion(std::string_view unknown) {
  std::string best;
  std::size_t best_d = 3;
  for (const KeySpec& s : specs()) {
    std::size_t d = leafOf(s.key.name) == leafOf(unknown) ? 1 : editDistance(unknown, s.key.name);
    if (d < best_d) {
      best_d = d;
      best = s.key.name;
    }
  }
  return best;
}

std::string unknownKeyMessage(std::string_view name) {
  std::string_view table = tableOf(name);
  std::vector<std::string> known;
  for (const KeySpec& s : specs())
    if (tableOf(s.key.name) == table) known.emplace_back(table.empty() ? s.key.name : leafOf(s.key.name));
  std::string where;
  if (table.empty()) {
    where = fmt::format("known at the top level: {}; tables {}", joined(known), bracketed(knownTables()));
  } else {
    where = fmt::format("known in [{}]: {}", table, joined(known));
  }
  std::string hint = suggestion(name);
  if (!hint.empty() && hint != name) where += fmt::format("; did you mean \"{}\"?", hint);
  return fmt::format("unknown key \"{}\" ({})", name, where);
}

// One entry of the document, flattened: a key of ours with its value, or what is wrong.
struct Entry {
  std::string name;
  const toml::node* node = nullptr;
  std::string problem;  // set: an error about this entry
};

std::vector<Entry> flatten(const toml::table& root) {
  std::vector<std::string> tables = knownTables();
  std::vector<Entry> out;
  for (const auto& [k, v] : root) {
    std::string name(k.str());
    bool is_table_name = std::find(tables.begin(), tables.end(), name) != tables.end();
    if (is_table_name) {
      const toml::table* t = v.as_table();
      if (t == nullptr) {
        out.push_back(Entry{name, &v, fmt::format("{} = {}: must be a table ([{}])", name, render(v), name)});
        continue;
      }
      for (const auto& [kk, vv] : *t) {
        std::string full = fmt::format("{}.{}", name, kk.str());
        std::string problem = findSpec(full) == nullptr ? unknownKeyMessage(full) : std::string();
        out.push_back(Entry{std::move(full), &vv, std::move(problem)});
      }
    } else if (findSpec(name) != nullptr) {
      out.push_back(Entry{std::move(name), &v, {}});
    } else if (v.is_table()) {
      std::string problem = fmt::format("unknown table [{}] (known tables: {})", name, bracketed(tables));
      out.push_back(Entry{std::move(name), &v, std::move(problem)});
    } else {
      std::string problem = unknownKeyMessage(name);
      out.push_back(Entry{std::move(name), &v, std::move(problem)});
    }
  }
  // toml++ keeps keys sorted by name; errors should come in the order of the file.
  std::stable_sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) {
    const auto& sa = a.node->source().begin;
    const auto& sb = b.node->source().begin;
    return std::tie(sa.line, sa.column) < std::tie(sb.line, sb.column);
  });
  return out;
}

Status applyNode(AgentConfig& cfg, const KeySpec& spec, const toml::node& node, std::string_view source) {
  const std::string& name = spec.key.name;
  std::vector<Given> values;
  if (spec.key.repeatable) {
    const toml::array* arr = node.as_array();
    if (arr == nullptr)
      return makeError(0,
                       fmt::format("{}: {} = {}: must be an array (e.g. {})", source, name, render(node), spec.example));
    for (std::size_t i = 0; i < arr->size(); ++i) {
      const toml::node& el = (*arr)[i];
      values.push_back(Given{&el, {}, fmt::format("{}: {}[{}] = {}", source, name, i, render(el))});
    }
  } else {
    values.push_back(Given{&node, {}, fmt::format("{}: {} = {}", source, name, render(node))});
  }
  return spec.set(cfg, values);
}

}  // namespace

Result<std::chrono::milliseconds> parseDuration(std::string_view text) {
  return durationFromText(text).wrap(fmt::format("duration {}", quotedText(text)));
}

const std::vector<ConfigKey>& configKeys() {
  static const std::vector<ConfigKey> kKeys = [] {
    std::vector<ConfigKey> keys;
    for (const KeySpec& s : specs()) keys.push_back(s.key);
    return keys;
  }();
  return kKeys;
}

Result<std::string> configValue(const AgentConfig& cfg, std::string_view name) {
  using Get = std::function<std::string(const AgentConfig&)>;
  auto str = [](auto field) -> Get { return [field](const AgentConfig& c) { return quotedText(field(c)); }; };
  auto boolean = [](auto field) -> Get { return [field](const AgentConfig& c) { return std::string(field(c) ? "true" : "false"); }; };
  auto plain = [](auto field) -> Get { return [field](const AgentConfig& c) { return fmt::format("{}", field(c)); }; };
  auto size = [](auto field) -> Get { return [field](const AgentConfig& c) { return quotedText(sizeText(field(c))); }; };
  auto duration = [](auto field) -> Get { return [field](const AgentConfig& c) { return quotedText(durationText(field(c))); }; };
  auto list = [](auto field) -> Get {
    return [field](const AgentConfig& c) {
      std::vector<std::string> items;
      for (const std::string& s : field(c)) items.push_back(quotedText(s));
      return fmt::format("[{}]", joined(items));
    };
  };
  // One entry per key of makeSpecs(); the docs test fails on a key that has none.
  static const std::map<std::string, Get, std::less<>> kGet = {
      {"listen", str([](const AgentConfig& c) { return c.listen.text(); })},
      {"interval", duration([](const AgentConfig& c) { return c.interval; })},
      {"cgroups", list([](const AgentConfig& c) { return c.cgroups; })},
      {"smaps", boolean([](const AgentConfig& c) { return c.smaps; })},
      {"max_processes", plain([](const AgentConfig& c) { return c.max_processes; })},
      {"log_format", str([](const AgentConfig& c) { return std::string(toString(c.log_format)); })},
      {"log_level", str([](const AgentConfig& c) { return c.log_level; })},
      {"roles.rules", list([](const AgentConfig& c) {
         std::vector<std::string> rules;
         for (const RoleRule& r : c.role_rules) rules.push_back(r.text());
         return rules;
       })},
      {"sensors.bpf", boolean([](const AgentConfig& c) { return c.sensors.bpf; })},
      {"sensors.kmsg", boolean([](const AgentConfig& c) { return c.sensors.kmsg; })},
      {"sensors.faults", boolean([](const AgentConfig& c) { return c.sensors.faults; })},
      {"sensors.mmap", boolean([](const AgentConfig& c) { return c.sensors.mmap; })},
      {"sensors.rss", boolean([](const AgentConfig& c) { return c.sensors.rss; })},
      {"sensors.cuda", boolean([](const AgentConfig& c) { return c.sensors.cuda; })},
      {"sensors.cuda_libraries", list([](const AgentConfig& c) { return c.sensors.cuda_libraries; })},
      {"sensors.cuda_runtime_targets", list([](const AgentConfig& c) { return c.sensors.cuda_runtime_targets; })},
      {"sensors.oom_ring_bytes", size([](const AgentConfig& c) { return std::uint64_t{c.sensors.oom_ring_bytes}; })},
      {"sensors.exit_ring_bytes", size([](const AgentConfig& c) { return std::uint64_t{c.sensors.exit_ring_bytes}; })},
      {"sensors.max_processes", plain([](const AgentConfig& c) { return c.sensors.max_processes; })},
      {"sensors.max_cuda_allocations", plain([](const AgentConfig& c) { return c.sensors.max_cuda_allocations; })},
      {"sensors.max_tracked_cgroups", plain([](const AgentConfig& c) { return c.sensors.max_tracked_cgroups; })},
      {"metrics.top_processes", plain([](const AgentConfig& c) { return c.top_processes; })},
      {"metrics.max_cgroups", plain([](const AgentConfig& c) { return c.max_cgroups; })},
      {"metrics.max_series", plain([](const AgentConfig& c) { return c.max_series; })},
      {"metrics.recent_ooms", plain([](const AgentConfig& c) { return c.recent_ooms; })},
      {"probe.enabled", boolean([](const AgentConfig& c) { return c.probe_enabled; })},
      {"probe.min_interval", duration([](const AgentConfig& c) { return c.probe_min_interval; })},
      {"probe.cgroup", str([](const AgentConfig& c) { return c.probe_cgroup; })},
      {"budget.enabled", boolean([](const AgentConfig& c) { return c.budget.enabled; })},
      {"budget.cgroup", str([](const AgentConfig& c) { return c.budget.cgroup; })},
      {"budget.margin_floor", size([](const AgentConfig& c) { return c.budget.policy.margin_floor; })},
      {"budget.margin_growth", plain([](const AgentConfig& c) { return c.budget.policy.margin_growth; })},
      {"budget.margin_step", size([](const AgentConfig& c) { return c.budget.policy.margin_step; })},
      {"budget.overhead_factor", plain([](const AgentConfig& c) { return c.budget.policy.overhead_factor; })},
      {"budget.give_back_after", plain([](const AgentConfig& c) { return c.budget.policy.give_back_after; })},
      {"budget.clean_period", duration([](const AgentConfig& c) { return c.budget.policy.clean_period; })},
      {"budget.growth_window", duration([](const AgentConfig& c) { return c.budget.policy.growth_window; })},
      {"budget.probe_max_age", duration([](const AgentConfig& c) { return c.budget.policy.probe_max_age; })},
      {"budget.hysteresis", size([](const AgentConfig& c) { return c.budget.policy.hysteresis_bytes; })},
      {"budget.state_file", str([](const AgentConfig& c) { return c.budget.state_file; })},
      {"budget.file", str([](const AgentConfig& c) { return c.budget.file; })},
      {"journal.enabled", boolean([](const AgentConfig& c) { return c.journal.enabled; })},
      {"journal.path", str([](const AgentConfig& c) { return c.journal.path; })},
      {"journal.max_bytes", size([](const AgentConfig& c) { return c.journal.max_bytes; })},
      {"journal.flight_window", duration([](const AgentConfig& c) { return c.journal.flight_window; })},
      {"prover.self_report", str([](const AgentConfig& c) { return c.self_report; })},
  };
  auto it = kGet.find(name);
  if (it == kGet.end()) return makeError(0, fmt::format("configValue: no value for key \"{}\"", name));
  return it->second(cfg);
}

Result<AgentConfig> parseAgentConfig(std::string_view toml_text, std::string_view source) {
  std::string src = source.empty() ? std::string("config") : std::string(source);
  toml::table root;
  try {
    root = toml::parse(toml_text, src);
  } catch (const toml::parse_error& e) {
    const auto& at = e.source().begin;
    return makeError(0, fmt::format("{}: invalid TOML at line {}, column {}: {}", src, at.line, at.column,
                                         e.description()));
  }
  AgentConfig cfg;
  for (const Entry& entry : flatten(root)) {
    if (!entry.problem.empty()) return makeError(0, fmt::format("{}: {}", src, entry.problem));
    Status st = applyNode(cfg, *findSpec(entry.name), *entry.node, src);
    if (!st) return st.error();
  }
  return cfg;
}

Result<AgentConfig> loadAgentConfig(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return errnoError(fmt::format("opening configuration {}", path));
  auto text = readAll(fd.get(), path);
  if (!text) return text.error();
  return parseAgentConfig(*text, path);
}

Status applyConfigFlag(AgentConfig& cfg, const ConfigKey& key, const std::vector<std::string>& values) {
  const KeySpec* spec = findSpec(key.name);
  if (spec == nullptr) return makeError(0, fmt::format("{}: not a configuration flag", key.flag));
  const std::string& flag = spec->key.flag;
  std::vector<Given> given;
  if (!spec->key.repeatable) {
    if (values.empty() && spec->key.kind == "bool") {
      given.push_back(Given{nullptr, "true", flag});
      return spec->set(cfg, given);
    }
    if (values.size() != 1) {
      std::string shown;
      // fmt, not operator+: g++ 12 -O2 warns falsely (-Wrestrict) on `" " + std::string&&`.
      for (const std::string& v : values) shown += fmt::format(" {}", flagText(v));
      return makeError(0, fmt::format("{}{}: takes one value, got {}", flag, shown, values.size()));
    }
  }
  for (const std::string& v : values) given.push_back(Given{nullptr, v, fmt::format("{} {}", flag, flagText(v))});
  return spec->set(cfg, given);
}

}  // namespace headroom
