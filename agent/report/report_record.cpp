// Reading a journal record for `headroom report`: defensive access, the formatting every part
// of the report shares, what a record says (victims, trigger, OOM domain), the flight recorder's
// minute.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <climits>
#include <cmath>
#include <map>
#include <optional>

#include "headroom/model/snapshot.h"
#include "headroom/report/report.h"
#include "headroom/sources/parse.h"
#include "headroom/util/text.h"
#include "headroom/util/units.h"
#include "report_parts.h"

namespace headroom::report_detail {

// ---- defensive access ----
// A record may come from an older agent, a partial write path or another machine: a missing
// key, a null and a wrong type all read as "not known", never as an exception.

const json* field(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  const auto& object = j.get_ref<const json::object_t&>();
  auto it = object.find(key);
  if (it == object.end() || it->second.is_null()) return nullptr;
  return &it->second;
}

const json& objectAt(const json& j, const char* key) {
  static const json kEmpty = json::object();
  const json* v = field(j, key);
  return v && v->is_object() ? *v : kEmpty;
}

const json& arrayAt(const json& j, const char* key) {
  static const json kEmpty = json::array();
  const json* v = field(j, key);
  return v && v->is_array() ? *v : kEmpty;
}

std::optional<double> numberOf(const json* v) {
  if (!v || !v->is_number()) return std::nullopt;
  double d = v->get<double>();
  if (!std::isfinite(d)) return std::nullopt;
  return d;
}
std::optional<double> numberAt(const json& j, const char* key) { return numberOf(field(j, key)); }

std::optional<std::uint64_t> bytesOf(const json* v) {
  if (!v) return std::nullopt;
  if (v->is_number_unsigned()) return v->get<std::uint64_t>();
  if (v->is_number_integer()) {
    auto i = v->get<std::int64_t>();
    if (i < 0) return std::nullopt;
    return static_cast<std::uint64_t>(i);
  }
  if (v->is_number_float()) {
    double d = v->get<double>();
    if (!std::isfinite(d) || d < 0 || d >= 1.8e19) return std::nullopt;
    return static_cast<std::uint64_t>(d);
  }
  return std::nullopt;
}
std::optional<std::uint64_t> bytesAt(const json& j, const char* key) { return bytesOf(field(j, key)); }

std::optional<std::int64_t> intAt(const json& j, const char* key) {
  const json* v = field(j, key);
  if (!v) return std::nullopt;
  if (v->is_number_unsigned()) {
    auto u = v->get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<std::int64_t>(u);
  }
  if (v->is_number_integer()) return v->get<std::int64_t>();
  if (v->is_number_float()) {
    double d = v->get<double>();
    if (!std::isfinite(d) || std::fabs(d) > 9e18) return std::nullopt;
    return static_cast<std::int64_t>(std::llround(d));
  }
  return std::nullopt;
}

std::string textAt(const json& j, const char* key) {
  const json* v = field(j, key);
  if (!v || !v->is_string()) return {};
  return printableText(v->get_ref<const std::string&>());
}

bool flagAt(const json& j, const char* key) {
  const json* v = field(j, key);
  return v && v->is_boolean() && v->get<bool>();
}

// A time field written in seconds; nanoseconds (an agent that wrote wall_time_ns there) are
// recognised by their size.
std::optional<double> secondsOf(std::optional<double> v) {
  if (!v || *v <= 0) return std::nullopt;
  if (*v > 1e12) return *v / 1e9;
  return v;
}

// ---- formatting ----

std::string bytesText(std::optional<std::uint64_t> v, const char* none) {
  return v ? formatBytes(*v) : std::string(none);
}

std::string bytesText(double v) { return formatBytes(v <= 0 ? 0 : static_cast<std::uint64_t>(std::llround(v))); }

std::string changeText(double delta) {
  auto d = static_cast<std::int64_t>(std::llround(delta));
  if (d == 0) return "0 B";
  std::string s = d > 0 ? "+" : "";
  s += formatSignedBytes(d);
  return s;
}

// "2026-12-02 14:03:11 UTC", or with `clock_only` "14:03:11 UTC".
std::string utcTime(double secs, bool clock_only) {
  return formatUtc(secs, clock_only ? UtcFormat::kClock : UtcFormat::kDateTime);
}

std::string secondsText(double s) {
  if (std::fabs(s) >= 10) return fmt::format("{:.0f} s", s);
  return fmt::format("{:.1f} s", s);
}

// Counts code points, so that sparklines and non-ASCII comms line up.
std::size_t displayWidth(std::string_view s) {
  std::size_t n = 0;
  for (char c : s) {
    if ((static_cast<unsigned char>(c) & 0xc0) != 0x80) ++n;
  }
  return n;
}

std::string joinList(const std::vector<std::string>& items) {
  std::string o;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) o += i + 1 == items.size() ? " and " : ", ";
    o += items[i];
  }
  return o;
}

std::vector<std::string> wrapWords(const std::string& text, std::size_t width) {
  std::vector<std::string> lines;
  std::string line;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t sp = text.find(' ', pos);
    std::string word = text.substr(pos, sp == std::string::npos ? std::string::npos : sp - pos);
    pos = sp == std::string::npos ? text.size() : sp + 1;
    if (!line.empty() && displayWidth(line) + 1 + displayWidth(word) > width) {
      lines.push_back(line);
      line.clear();
    }
    if (!line.empty()) line += ' ';
    line += word;
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

// ---- what a record says ----

// The process (tgid) when the record has it: the kernel picks a thread, people know processes.
Task taskOf(const json& j) {
  Task t;
  t.pid = intAt(j, "tgid").value_or(0);
  if (t.pid <= 0) t.pid = intAt(j, "pid").value_or(0);
  t.comm = textAt(j, "comm");
  t.cgroup = textAt(j, "cgroup");
  return t;
}

std::string who(const Task& t) {
  if (t.pid > 0 && !t.comm.empty()) return fmt::format("pid {} ({})", t.pid, t.comm);
  if (t.pid > 0) return fmt::format("pid {}", t.pid);
  if (!t.comm.empty()) return fmt::format("a task named {} (pid not known)", t.comm);
  return "a task not known";
}

std::vector<Task> victimsOf(const json& rec) {
  std::vector<Task> v;
  for (const json& j : arrayAt(objectAt(rec, "event"), "victims")) {
    if (j.is_object()) v.push_back(taskOf(j));
  }
  return v;
}

std::optional<Task> triggerOf(const json& rec) {
  const json& tr = objectAt(objectAt(rec, "event"), "trigger");
  Task t = taskOf(tr);
  if (t.pid <= 0 && t.comm.empty()) return std::nullopt;
  return t;
}

std::string victimCgroup(const json& rec) {
  for (const Task& t : victimsOf(rec)) {
    if (!t.cgroup.empty()) return t.cgroup;
  }
  return {};
}

std::optional<std::uint64_t> lastFlightValue(const json& rec, const char* key) {
  const json& pts = arrayAt(objectAt(rec, "flight"), "points");
  for (auto it = pts.rbegin(); it != pts.rend(); ++it) {
    if (auto v = bytesAt(*it, key)) return v;
  }
  return std::nullopt;
}

Domain domainOf(const json& rec) {
  const json& ev = objectAt(rec, "event");
  const json& od = objectAt(ev, "oom_domain");
  Domain d;
  d.cgroup = textAt(od, "cgroup");
  d.global = flagAt(od, "global");
  d.constraint = textAt(ev, "constraint");
  d.limit = bytesAt(od, "limit_bytes");
  d.usage = bytesAt(od, "usage_bytes");
  // No kernel report named it: the domain the files read at the kill found (the nearest limit).
  const json& at = objectAt(rec, "at_kill");
  if (d.cgroup.empty() && !d.global && !textAt(at, "cgroup").empty()) {
    d.cgroup = textAt(at, "cgroup");
    if (!d.limit) d.limit = bytesAt(at, "limit_bytes");
    if (!d.usage) d.usage = bytesAt(at, "usage_bytes");
  }
  const json& cg = objectAt(rec, "cgroup");
  if (!d.limit && !d.global) {
    d.limit = bytesAt(objectAt(cg, "tightest_bound"), "limit_bytes");
    if (!d.limit) d.limit = bytesAt(objectAt(cg, "memory"), "limit_bytes");
    if (!d.limit) d.limit = lastFlightValue(rec, "limit_bytes");
    d.limit_sampled = d.limit.has_value();
  }
  if (!d.usage) {
    // charged_bytes is the kernel's figure when it had one: then it is not a sample.
    d.usage = bytesAt(rec, "charged_bytes");
    if (!d.usage) d.usage = bytesAt(objectAt(cg, "memory"), "usage_bytes");
    if (!d.usage) d.usage = lastFlightValue(rec, "usage_bytes");
    d.usage_sampled = d.usage.has_value();
  }
  return d;
}

// The cgroup the record is about (what died): the sampled one, else the flight's, else the
// OOM domain, else the victim's.
std::string recordCgroup(const json& rec) {
  const json& cg = objectAt(rec, "cgroup");
  std::string p = textAt(cg, "path");
  if (p.empty()) p = textAt(objectAt(cg, "memory"), "path");
  if (p.empty()) p = textAt(objectAt(rec, "flight"), "cgroup");
  if (p.empty()) p = domainOf(rec).cgroup;
  if (p.empty()) p = victimCgroup(rec);
  return p;
}

std::string usageOfLimit(const Domain& d) {
  std::string s;
  if (d.usage && d.limit) {
    s = fmt::format("at {} of its {} limit", formatBytes(*d.usage), formatBytes(*d.limit));
  } else if (d.usage) {
    s = fmt::format("at {} (its limit not known)", formatBytes(*d.usage));
  } else if (d.limit) {
    s = fmt::format("under its {} limit (the usage at the kill not known)", formatBytes(*d.limit));
  } else {
    return "at a usage and limit not known";
  }
  if (d.limit_sampled || d.usage_sampled) s += " as last sampled";
  return s;
}

// ---- the flight recorder's minute ----

int kindRank(const std::string& kind) {
  const auto& all = allPartKinds();
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (kind == toString(all[i])) return static_cast<int>(i);
  }
  return static_cast<int>(all.size());
}

std::optional<bool> kindVisible(const std::string& kind) {
  for (PartKind k : allPartKinds()) {
    if (kind == toString(k)) return isVisible(k);
  }
  return std::nullopt;
}

Flight readFlight(const json& rec) {
  Flight f;
  const json& fl = objectAt(rec, "flight");
  f.cgroup = textAt(fl, "cgroup");
  if (auto w = numberAt(fl, "window_seconds"); w && *w > 0) f.window = w;
  struct Raw {
    double time;
    const json* point;
  };
  std::vector<Raw> raw;
  for (const json& p : arrayAt(fl, "points")) {
    if (!p.is_object()) continue;
    std::optional<double> t = secondsOf(numberAt(p, "time"));
    if (!t) {
      if (auto ns = numberAt(p, "wall_time_ns"); ns && *ns > 0) t = *ns / 1e9;
    }
    if (!t) {
      ++f.without_time;
      continue;
    }
    raw.push_back({*t, &p});
  }
  std::stable_sort(raw.begin(), raw.end(), [](const Raw& a, const Raw& b) { return a.time < b.time; });
  std::optional<double> kill = recordTime(rec);
  f.kill_time_known = kill.has_value();
  double ref = kill ? *kill : (raw.empty() ? 0.0 : raw.back().time);

  std::set<std::string> seen;
  for (const Raw& r : raw) {
    for (const auto& [k, v] : objectAt(*r.point, "parts").items()) {
      if (auto b = numberOf(&v); b && *b > 0) seen.insert(printableText(k));
    }
  }
  f.kinds.assign(seen.begin(), seen.end());
  std::stable_sort(f.kinds.begin(), f.kinds.end(),
                   [](const std::string& a, const std::string& b) { return kindRank(a) < kindRank(b); });
  for (const Raw& r : raw) {
    f.t.push_back(r.time - ref);
    auto opt = [&](const char* key) -> std::optional<double> {
      auto b = bytesAt(*r.point, key);
      return b ? std::optional<double>(static_cast<double>(*b)) : std::nullopt;
    };
    f.usage.push_back(opt("usage_bytes"));
    f.limit.push_back(opt("limit_bytes"));
    f.self.push_back(opt("self_reported_bytes"));
    const json& parts = objectAt(*r.point, "parts");
    std::map<std::string, double> here;
    for (const auto& [k, v] : parts.items()) {
      if (auto b = numberOf(&v); b && *b > 0) here[printableText(k)] = *b;
    }
    for (const std::string& k : f.kinds) f.parts[k].push_back(here.count(k) ? here[k] : 0.0);
  }
  return f;
}

// At most `width` values: each column the largest of its bucket, so that a peak is never lost.
std::vector<double> resample(const std::vector<double>& v, std::size_t width) {
  if (v.size() <= width) return v;
  std::vector<double> o;
  for (std::size_t c = 0; c < width; ++c) {
    std::size_t a = c * v.size() / width;
    std::size_t b = std::max(a + 1, (c + 1) * v.size() / width);
    o.push_back(
        *std::max_element(v.begin() + static_cast<std::ptrdiff_t>(a), v.begin() + static_cast<std::ptrdiff_t>(b)));
  }
  return o;
}

}  // namespace headroom::report_detail
