#include "headroom/journal/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <climits>
#include <cmath>
#include <ctime>
#include <map>
#include <optional>
#include <set>
#include <variant>

#include "headroom/sources/parse.h"
#include "headroom/model/snapshot.h"
#include "headroom/util/text.h"
#include "headroom/util/time_format.h"
#include "headroom/util/units.h"

namespace headroom {
namespace {

using nlohmann::json;

// ---- defensive access ----
// A record may come from an older agent, a partial write path or another machine: a missing
// key, a null and a wrong type all read as "not known", never as an exception.

const json* field(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
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

std::string bytesText(std::optional<std::uint64_t> v, const char* none = "-") {
  return v ? formatBytes(*v) : std::string(none);
}

std::string bytesText(double v) { return formatBytes(v <= 0 ? 0 : static_cast<std::uint64_t>(std::llround(v))); }

std::string changeText(double delta) {
  auto d = static_cast<std::int64_t>(std::llround(delta));
  if (d == 0) return "0 B";
  return (d > 0 ? "+" : "") + formatSignedBytes(d);
}

// "2026-12-02 14:03:11 UTC", or with `clock_only` "14:03:11 UTC".
std::string utcTime(double secs, bool clock_only = false) {
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

struct Task {
  std::int64_t pid = 0;
  std::string comm;
  std::string cgroup;
};

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

// The OOM domain: the cgroup that hit its limit (or the machine), with its usage and limit at
// the kill from the kernel's report; when the record lacks them, the last sampled values.
struct Domain {
  std::string cgroup;
  bool global = false;
  std::string constraint;
  std::optional<std::uint64_t> limit, usage;
  bool limit_sampled = false, usage_sampled = false;
};

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

// ---- the report as a document: sections of lines and tables, drawn as text or as HTML ----

struct Table {
  std::vector<std::string> header;
  std::string align;  // one 'l' or 'r' per column
  std::vector<std::vector<std::string>> rows;
  std::set<std::size_t> mono;  // columns that must stay monospace (sparklines)
};
using Block = std::variant<std::string, Table>;
struct Section {
  std::string title;
  std::string subtitle;
  std::vector<Block> blocks;
};
struct Doc {
  std::string heading;
  std::string summary;
  std::vector<Section> sections;
};

std::string renderTableText(const Table& t, const std::string& indent) {
  std::vector<std::size_t> w(t.header.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (std::size_t i = 0; i < row.size() && i < w.size(); ++i) w[i] = std::max(w[i], displayWidth(row[i]));
  };
  measure(t.header);
  for (const auto& r : t.rows) measure(r);
  auto line = [&](const std::vector<std::string>& row) {
    std::string o = indent;
    for (std::size_t i = 0; i < w.size(); ++i) {
      std::string cell = i < row.size() ? row[i] : "";
      std::size_t pad = w[i] - std::min(w[i], displayWidth(cell));
      bool right = i < t.align.size() && t.align[i] == 'r';
      bool last = i + 1 == w.size();
      if (i > 0) o += "  ";
      if (right) o += std::string(pad, ' ') + cell;
      else o += last ? cell : cell + std::string(pad, ' ');
    }
    while (!o.empty() && o.back() == ' ') o.pop_back();
    return o + "\n";
  };
  std::string o = line(t.header);
  for (const auto& r : t.rows) o += line(r);
  return o;
}

std::string renderDocText(const Doc& d) {
  std::string o = d.heading + "\n\n" + d.summary + "\n";
  for (const Section& s : d.sections) {
    o += "\n" + s.title;
    if (!s.subtitle.empty()) o += "  (" + s.subtitle + ")";
    o += "\n";
    for (const Block& b : s.blocks) {
      if (const auto* text = std::get_if<std::string>(&b)) o += "  " + *text + "\n";
      else o += renderTableText(std::get<Table>(b), "  ");
    }
  }
  return o;
}

std::string xmlEscape(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string renderDocHtml(const Doc& d, const std::string& svg) {
  std::string o;
  o += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  o += "<title>" + xmlEscape(d.heading) + "</title>\n";
  o += "<style>\n"
       "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:1200px;"
       "padding:0 1em;color:#222}\n"
       "h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.6em}h2 small{font-weight:normal;color:#666}\n"
       ".summary{font-size:1.1em;background:#fbeaea;border-left:4px solid #c00;padding:.6em 1em}\n"
       "table{border-collapse:collapse;margin:.4em 0 .8em}\n"
       "th,td{padding:2px 10px;border-bottom:1px solid #e4e4e4;text-align:left;white-space:nowrap}\n"
       "th{background:#f4f4f4}.r{text-align:right;font-variant-numeric:tabular-nums}\n"
       ".mono{font-family:ui-monospace,'DejaVu Sans Mono',monospace}\n"
       "figure{margin:1em 0}svg{max-width:100%;height:auto}\n"
       "</style>\n</head>\n<body>\n";
  o += "<h1>" + xmlEscape(d.heading) + "</h1>\n";
  o += "<p class=\"summary\">" + xmlEscape(d.summary) + "</p>\n";
  o += "<figure>\n" + svg + "</figure>\n";
  for (const Section& s : d.sections) {
    o += "<section>\n<h2>" + xmlEscape(s.title);
    if (!s.subtitle.empty()) o += " <small>" + xmlEscape(s.subtitle) + "</small>";
    o += "</h2>\n";
    for (const Block& b : s.blocks) {
      if (const auto* text = std::get_if<std::string>(&b)) {
        o += "<p>" + xmlEscape(*text) + "</p>\n";
        continue;
      }
      const Table& t = std::get<Table>(b);
      auto cls = [&](std::size_t i) {
        std::string c;
        if (i < t.align.size() && t.align[i] == 'r') c = "r";
        if (t.mono.count(i)) c += c.empty() ? "mono" : " mono";
        return c.empty() ? std::string() : " class=\"" + c + "\"";
      };
      o += "<table>\n<thead><tr>";
      for (std::size_t i = 0; i < t.header.size(); ++i) o += "<th" + cls(i) + ">" + xmlEscape(t.header[i]) + "</th>";
      o += "</tr></thead>\n<tbody>\n";
      for (const auto& r : t.rows) {
        o += "<tr>";
        for (std::size_t i = 0; i < t.header.size(); ++i)
          o += "<td" + cls(i) + ">" + xmlEscape(i < r.size() ? r[i] : "") + "</td>";
        o += "</tr>\n";
      }
      o += "</tbody>\n</table>\n";
    }
    o += "</section>\n";
  }
  o += "</body>\n</html>\n";
  return o;
}

// ---- the flight recorder's minute ----

struct Flight {
  std::string cgroup;
  std::optional<double> window;  // seconds, as the agent said
  bool kill_time_known = false;
  std::vector<double> t;  // seconds relative to the kill (negative: before it)
  std::vector<std::optional<double>> usage, limit, self;
  std::vector<std::string> kinds;  // drawing order; only kinds that held anything
  std::map<std::string, std::vector<double>> parts;  // per kind, one value per point
  std::size_t without_time = 0;
};

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
    o.push_back(*std::max_element(v.begin() + static_cast<std::ptrdiff_t>(a), v.begin() + static_cast<std::ptrdiff_t>(b)));
  }
  return o;
}

// ---- sections ----

Section killedSection(const json& rec) {
  Section s{"KILLED", "the victim's own memory when the kernel chose it; the limit above is the OOM domain's", {}};
  const json& ev = objectAt(rec, "event");
  Table t{{"PID", "COMM", "CGROUP", "ANON", "FILE", "SHMEM", "PAGE TABLES", "SWAP", "VM", "OOM_SCORE_ADJ"},
          "rllrrrrrrr",
          {},
          {}};
  std::vector<std::string> notes;
  for (const json& v : arrayAt(ev, "victims")) {
    if (!v.is_object()) continue;
    Task k = taskOf(v);
    auto adj = intAt(v, "oom_score_adj");
    t.rows.push_back({k.pid > 0 ? std::to_string(k.pid) : "?", k.comm.empty() ? "?" : k.comm,
                      k.cgroup.empty() ? "-" : k.cgroup, bytesText(bytesAt(v, "anon_rss_bytes")),
                      bytesText(bytesAt(v, "file_rss_bytes")), bytesText(bytesAt(v, "shmem_rss_bytes")),
                      bytesText(bytesAt(v, "pgtables_bytes")), bytesText(bytesAt(v, "swap_bytes")),
                      bytesText(bytesAt(v, "total_vm_bytes")), adj ? std::to_string(*adj) : "-"});
    if (flagAt(v, "kill_skipped"))
      notes.push_back(fmt::format("{} was already exiting: the kernel marked it but sent no SIGKILL", who(k)));
    if (flagAt(v, "inferred"))
      notes.push_back(fmt::format("{} is inferred, not named by the kernel: it left the cgroup whose OOM-kill counter rose", who(k)));
  }
  if (t.rows.empty()) s.blocks.emplace_back(std::string("not known: the record names no victim"));
  else s.blocks.emplace_back(std::move(t));
  for (auto& n : notes) s.blocks.emplace_back(std::move(n));

  const json& src = objectAt(ev, "sources");
  std::vector<std::string> told;
  if (flagAt(src, "bpf")) told.emplace_back("the BPF tracepoint oom:mark_victim");
  if (flagAt(src, "kmsg")) told.emplace_back("the kernel's OOM report in /dev/kmsg");
  if (flagAt(src, "counter")) {
    const json& c = objectAt(ev, "counter");
    auto kills = intAt(c, "kills");
    const json* cgroup = field(c, "cgroup");
    told.push_back(fmt::format("the OOM-kill counter of {} (+{}; no BPF or /dev/kmsg to name the victim)",
                               cgroup != nullptr && cgroup->is_string() ? cgroup->get<std::string>() : "?", kills.value_or(0)));
  }
  if (!told.empty()) s.blocks.emplace_back("told by " + joinList(told));
  auto rs = intAt(ev, "reap_start_ns");
  auto rf = intAt(ev, "reap_finish_ns");
  if (rs && rf && *rf >= *rs) s.blocks.emplace_back(fmt::format("the OOM reaper freed its memory in {:.1f} ms", static_cast<double>(*rf - *rs) / 1e6));
  return s;
}

Section breakdownSection(const json& rec) {
  Section s{"BREAKDOWN", "", {}};
  const json* cgp = field(rec, "cgroup");
  if (!cgp || !cgp->is_object()) {
    s.blocks.emplace_back(std::string("not known: the cgroup was never sampled before the kill"));
    return s;
  }
  const json& cg = *cgp;
  const json& mem = objectAt(cg, "memory");
  const json& att = objectAt(cg, "attribution");
  std::string path = recordCgroup(rec);
  std::string when;
  auto sampled = secondsOf(numberAt(cg, "sampled_at"));
  auto kill = recordTime(rec);
  if (sampled && kill) when = fmt::format(", {} before the kill", secondsText(*kill - *sampled));
  else if (sampled) when = ", at " + utcTime(*sampled);
  s.subtitle = fmt::format("of {} at the last sample{}; ~ estimated", path.empty() ? "the cgroup" : path, when);

  auto usage = bytesAt(att, "usage_bytes");
  if (!usage) usage = bytesAt(mem, "usage_bytes");
  auto unattributed = intAt(att, "unattributed_bytes");
  s.blocks.emplace_back(fmt::format("usage {}: visible {} + invisible {}, unattributed {}", bytesText(usage, "not known"),
                                    bytesText(bytesAt(att, "visible_bytes"), "not known"),
                                    bytesText(bytesAt(att, "invisible_bytes"), "not known"),
                                    unattributed ? formatSignedBytes(*unattributed) : std::string("not known")));
  const json& tb = objectAt(cg, "tightest_bound");
  if (!tb.empty()) {
    std::string name = textAt(tb, "name");
    s.blocks.emplace_back(fmt::format("tightest bound: {} (limit {}, usage {}, room {})", name.empty() ? "?" : name,
                                      bytesText(bytesAt(tb, "limit_bytes")), bytesText(bytesAt(tb, "usage_bytes")),
                                      bytesText(bytesAt(tb, "room_bytes"))));
  } else if (auto lim = bytesAt(mem, "limit_bytes")) {
    s.blocks.emplace_back(fmt::format("limit {}", formatBytes(*lim)));
  }

  Table t{{"PART", "SIDE", "BYTES", "SHARE", "ACCURACY", "SOURCE"}, "llrrll", {}, {}};
  for (const json& p : arrayAt(att, "parts")) {
    if (!p.is_object()) continue;
    std::string kind = textAt(p, "kind");
    std::optional<bool> visible;
    if (const json* v = field(p, "visible"); v && v->is_boolean()) visible = v->get<bool>();
    if (!visible) visible = kindVisible(kind);
    auto b = bytesAt(p, "bytes");
    std::string acc = textAt(p, "accuracy");
    std::string share = "-";
    if (b && usage && *usage > 0)
      share = fmt::format("{:.1f}%", 100.0 * static_cast<double>(*b) / static_cast<double>(*usage));
    t.rows.push_back({kind.empty() ? "?" : kind, visible ? (*visible ? "visible" : "invisible") : "?",
                      bytesText(b) + (acc == "estimated" ? "~" : ""), share, acc.empty() ? "-" : acc,
                      textAt(p, "source")});
  }
  if (t.rows.empty()) s.blocks.emplace_back(std::string("the parts are not known: the sample has no attribution"));
  else s.blocks.emplace_back(std::move(t));
  for (const json& n : arrayAt(att, "notes")) {
    if (n.is_string()) s.blocks.emplace_back("note: " + printableText(n.get_ref<const std::string&>()));
  }
  auto charged = bytesAt(rec, "charged_bytes");
  if (charged && usage) {
    auto delta = static_cast<double>(*charged) - static_cast<double>(*usage);
    s.blocks.emplace_back(fmt::format("at the kill the kernel charged {}: {} since this sample", formatBytes(*charged), changeText(delta)));
  }
  return s;
}

Section taskDumpSection(const json& rec) {
  Section s{"WHO HELD WHAT AT THE KILL", "the kernel's task dump of the OOM domain: exact", {}};
  const json& ev = objectAt(rec, "event");
  std::vector<const json*> tasks;
  for (const json& t : arrayAt(ev, "tasks")) {
    if (t.is_object()) tasks.push_back(&t);
  }
  if (tasks.empty()) {
    s.blocks.emplace_back(std::string("not known: the record has no task dump (the kernel's OOM report in /dev/kmsg was not read)"));
    return s;
  }
  std::stable_sort(tasks.begin(), tasks.end(), [](const json* a, const json* b) {
    return bytesAt(*a, "rss_bytes").value_or(0) > bytesAt(*b, "rss_bytes").value_or(0);
  });
  std::set<std::int64_t> killed;
  for (const Task& v : victimsOf(rec)) killed.insert(v.pid);
  auto trig = triggerOf(rec);
  Table t{{"PID", "NAME", "RSS", "ANON", "FILE", "SHMEM", "PAGE TABLES", "SWAP", "OOM_SCORE_ADJ", ""}, "rlrrrrrrrl", {}, {}};
  std::uint64_t rss = 0, pte = 0;
  for (const json* p : tasks) {
    auto tgid = intAt(*p, "tgid").value_or(0);
    auto pid = intAt(*p, "pid").value_or(0);
    std::int64_t proc = tgid > 0 ? tgid : pid;
    std::vector<std::string> marks;
    if (killed.count(proc) || killed.count(pid)) marks.emplace_back("killed");
    if (trig && (trig->pid == proc || trig->pid == pid)) marks.emplace_back("trigger");
    std::string mark;
    for (const auto& m : marks) mark += (mark.empty() ? "" : ", ") + m;
    auto adj = intAt(*p, "oom_score_adj");
    std::string name = textAt(*p, "name");
    rss += bytesAt(*p, "rss_bytes").value_or(0);
    pte += bytesAt(*p, "pgtables_bytes").value_or(0);
    t.rows.push_back({pid > 0 ? std::to_string(pid) : "?", name.empty() ? "?" : name, bytesText(bytesAt(*p, "rss_bytes")),
                      bytesText(bytesAt(*p, "rss_anon_bytes")), bytesText(bytesAt(*p, "rss_file_bytes")),
                      bytesText(bytesAt(*p, "rss_shmem_bytes")), bytesText(bytesAt(*p, "pgtables_bytes")),
                      bytesText(bytesAt(*p, "swap_bytes")), adj ? std::to_string(*adj) : "-", mark});
  }
  s.blocks.emplace_back(std::move(t));
  s.blocks.emplace_back(fmt::format("{} task{}: RSS {}, page tables {} in all", tasks.size(), tasks.size() == 1 ? "" : "s",
                                    formatBytes(rss), formatBytes(pte)));
  return s;
}

int roleRank(const std::string& role) {
  static const std::array<const char*, 4> kOrder = {"prover", "colocated", "system", "self"};
  for (std::size_t i = 0; i < kOrder.size(); ++i) {
    if (role == kOrder[i]) return static_cast<int>(i);
  }
  return static_cast<int>(kOrder.size());
}

Section processesSection(const json& rec) {
  Section s{"PROCESSES AT THE LAST SAMPLE", "top per role by PSS; pinned is an overlay on RSS, never added to it", {}};
  std::vector<const json*> procs;
  for (const json& p : arrayAt(rec, "processes")) {
    if (p.is_object()) procs.push_back(&p);
  }
  if (procs.empty()) {
    s.blocks.emplace_back(std::string("not known: no process of this cgroup was sampled before the kill"));
    return s;
  }
  auto size = [](const json* p) {
    auto pss = bytesAt(*p, "pss_bytes");
    return pss ? *pss : bytesAt(*p, "rss_bytes").value_or(0);
  };
  std::stable_sort(procs.begin(), procs.end(), [&](const json* a, const json* b) {
    int ra = roleRank(textAt(*a, "role")), rb = roleRank(textAt(*b, "role"));
    if (ra != rb) return ra < rb;
    return size(a) > size(b);
  });
  Table t{{"ROLE", "PID", "COMM", "RSS", "PSS", "PAGE TABLES", "LOCKED", "PINNED", "PINNED IN RSS", "DEVICE", "OVERHEAD"},
          "lrlrrrrrlrr",
          {},
          {}};
  for (const json* p : procs) {
    Task k = taskOf(*p);
    std::string role = textAt(*p, "role");
    const json& pin = objectAt(*p, "pinned");
    std::string in_rss = "-";
    std::string pinned = "-";
    if (!pin.empty()) {
      pinned = bytesText(bytesAt(pin, "live_bytes"));
      std::string res = textAt(pin, "residency");
      in_rss = res == "inside_rss" ? "yes" : res == "outside_rss" ? "no" : "not known";
    }
    t.rows.push_back({role.empty() ? "?" : role, k.pid > 0 ? std::to_string(k.pid) : "?", k.comm.empty() ? "?" : k.comm,
                      bytesText(bytesAt(*p, "rss_bytes")), bytesText(bytesAt(*p, "pss_bytes")),
                      bytesText(bytesAt(*p, "page_tables_bytes")), bytesText(bytesAt(*p, "locked_bytes")), pinned, in_rss,
                      bytesText(bytesAt(*p, "device_bytes")), bytesText(bytesAt(*p, "overhead_share_bytes"))});
  }
  s.blocks.emplace_back(std::move(t));
  s.blocks.emplace_back(std::string(
      "overhead: the process's share of the cgroup's invisible memory; device: GPU memory, not charged to the cgroup"));
  return s;
}

Section grewSection(const json& rec) {
  Section s{"WHAT GREW", "", {}};
  Flight f = readFlight(rec);
  std::string cg = f.cgroup.empty() ? recordCgroup(rec) : f.cgroup;
  if (f.t.empty()) {
    s.blocks.emplace_back(std::string("not known: the flight recorder kept no samples of this cgroup before the kill"));
    return s;
  }
  double window = f.window.value_or(std::max(1.0, -f.t.front()));
  s.subtitle = fmt::format("the last {} before the kill: {} sample{} of {}", secondsText(window), f.t.size(),
                           f.t.size() == 1 ? "" : "s", cg.empty() ? "the cgroup" : cg);
  s.blocks.emplace_back(f.kill_time_known
                            ? fmt::format("from {} to {} before the kill", secondsText(-f.t.front()), secondsText(-f.t.back()))
                            : std::string("the kill's time is not known: times are relative to the last sample"));

  constexpr std::size_t kWidth = 48;
  Table t{{"COMPONENT", "TREND", "FIRST", "LAST", "CHANGE"}, "llrrr", {}, {1}};
  auto row = [&](const std::string& name, const std::vector<std::optional<double>>& series) {
    std::vector<double> v;
    for (const auto& x : series) {
      if (x) v.push_back(*x);
    }
    if (v.empty()) return;
    t.rows.push_back({name, sparkline(resample(v, kWidth)), bytesText(v.front()), bytesText(v.back()),
                      changeText(v.back() - v.front())});
  };
  row("usage", f.usage);
  row("limit", f.limit);
  row("self-reported", f.self);
  std::vector<std::string> kinds = f.kinds;
  auto growth = [&](const std::string& k) { return f.parts[k].back() - f.parts[k].front(); };
  std::stable_sort(kinds.begin(), kinds.end(), [&](const std::string& a, const std::string& b) { return growth(a) > growth(b); });
  for (const std::string& k : kinds) {
    std::vector<std::optional<double>> series(f.parts[k].begin(), f.parts[k].end());
    row(k, series);
  }
  s.blocks.emplace_back(std::move(t));
  if (f.without_time > 0) s.blocks.emplace_back(fmt::format("{} sample{} without a time left out", f.without_time, f.without_time == 1 ? "" : "s"));
  return s;
}

Section budgetSection(const json& rec) {
  Section s{"BUDGET", "", {}};
  const json* bp = field(rec, "budget");
  auto charged = bytesAt(rec, "charged_bytes");
  Domain d = domainOf(rec);
  if (!charged && !d.usage_sampled) charged = d.usage;
  auto self = bytesAt(rec, "self_reported_bytes");
  std::optional<std::uint64_t> budget, margin;
  if (!bp || !bp->is_object()) {
    s.blocks.emplace_back(std::string("budget: not known (no budget from headroom was in force for this prover)"));
  } else {
    budget = bytesAt(*bp, "budget_bytes");
    margin = bytesAt(*bp, "margin_bytes");
    std::string src = textAt(*bp, "margin_source");
    auto gen = intAt(*bp, "generation");
    std::string extra;
    if (!src.empty()) extra += "margin from " + src;
    if (gen) extra += (extra.empty() ? "" : "; ") + fmt::format("generation {}", *gen);
    s.blocks.emplace_back(fmt::format("budget {}, margin {}{}", bytesText(budget, "not known"), bytesText(margin, "not known"),
                                      extra.empty() ? "" : " (" + extra + ")"));
    if (budget && margin && d.limit) {
      s.blocks.emplace_back(fmt::format("budget + margin = {} of the {} limit{}", formatBytes(*budget + *margin),
                                        formatBytes(*d.limit), d.cgroup.empty() ? "" : " of " + d.cgroup));
    }
    std::string reason = textAt(*bp, "reason");
    if (!reason.empty()) s.blocks.emplace_back("why: " + reason);
  }
  if (self && charged) {
    auto diff = static_cast<double>(*charged) - static_cast<double>(*self);
    std::string gap = diff >= 0 ? fmt::format("{} beyond what it saw", bytesText(diff))
                                : fmt::format("{} less than it believed", bytesText(-diff));
    s.blocks.emplace_back(fmt::format("the prover believed it used {}; the kernel charged {}: {}", formatBytes(*self),
                                      formatBytes(*charged), gap));
  } else if (charged) {
    s.blocks.emplace_back(fmt::format("what the prover believed it used: not known (it reported nothing); the kernel charged {}",
                                      formatBytes(*charged)));
  } else if (self) {
    s.blocks.emplace_back(fmt::format("the prover believed it used {}; what the kernel charged is not known", formatBytes(*self)));
  } else {
    s.blocks.emplace_back(std::string("what the prover believed it used and what the kernel charged: not known"));
  }
  if (budget && charged && *charged > *budget) {
    s.blocks.emplace_back(fmt::format("the cgroup was charged {} beyond the budget", formatBytes(*charged - *budget)));
  }
  if (margin) {
    auto invisible = bytesAt(objectAt(objectAt(rec, "cgroup"), "attribution"), "invisible_bytes");
    if (invisible) {
      s.blocks.emplace_back(*invisible > *margin
                                ? fmt::format("the invisible overhead at the last sample ({}) was {} more than the margin",
                                              formatBytes(*invisible), formatBytes(*invisible - *margin))
                                : fmt::format("the margin covered the invisible overhead at the last sample ({})",
                                              formatBytes(*invisible)));
    }
  }
  return s;
}

Section sensorsSection(const json& rec) {
  Section s{"SENSORS", "active at the kill", {}};
  std::vector<std::string> active, others;
  for (const json& ss : arrayAt(rec, "sensors")) {
    if (!ss.is_object()) continue;
    std::string name = textAt(ss, "name"), state = textAt(ss, "state"), reason = textAt(ss, "reason");
    if (state == "active") {
      active.push_back(name);
    } else {
      others.push_back(fmt::format("{}: {}{}", name.empty() ? "?" : name, state.empty() ? "state not known" : state,
                                   reason.empty() ? "" : " (" + reason + ")"));
    }
  }
  // The active ones first, then each of the others on its line.
  if (!active.empty()) s.blocks.emplace_back(fmt::format("active: {}", joinList(active)));
  for (std::string& o : others) s.blocks.emplace_back(std::move(o));
  if (s.blocks.empty()) s.blocks.emplace_back(std::string("not known: the record lists no sensors"));
  return s;
}

Doc buildDoc(const json& rec) {
  Doc d;
  std::string heading = "headroom report";
  if (auto id = intAt(rec, "id")) heading += fmt::format("  record {}", *id);
  if (auto t = recordTime(rec)) heading += "  " + utcTime(*t);
  const json& host = objectAt(rec, "host");
  std::string hostname = textAt(host, "hostname");
  if (!hostname.empty()) {
    heading += "  host " + hostname;
    std::string kernel = textAt(host, "kernel"), agent = textAt(host, "agent_version");
    std::vector<std::string> more;
    if (!kernel.empty()) more.push_back("kernel " + kernel);
    if (!agent.empty()) more.push_back("agent " + agent);
    if (more.size() == 2) heading += " (" + more[0] + ", " + more[1] + ")";
    else if (more.size() == 1) heading += " (" + more[0] + ")";
  }
  d.heading = heading;
  d.summary = reportSummary(rec);
  d.sections.push_back(killedSection(rec));
  d.sections.push_back(breakdownSection(rec));
  d.sections.push_back(taskDumpSection(rec));
  d.sections.push_back(processesSection(rec));
  d.sections.push_back(grewSection(rec));
  d.sections.push_back(budgetSection(rec));
  d.sections.push_back(sensorsSection(rec));
  return d;
}

// ---- the picture ----

const char* kindColour(const std::string& kind, std::size_t fallback_index) {
  static const std::map<std::string, const char*> kColours = {
      {"anon", "#4e79a7"},           {"file", "#76b7b2"},          {"shmem_mapped", "#59a14f"},
      {"shmem_unmapped", "#edc948"}, {"pagetables", "#f28e2b"},    {"sec_pagetables", "#ff9d9a"},
      {"slab_reclaimable", "#b07aa1"}, {"slab_unreclaimable", "#9c755f"}, {"kernel_stack", "#e15759"},
      {"sock", "#bab0ac"},           {"percpu", "#d37295"},        {"zswap", "#a0cbe8"},
      {"kernel_other", "#8cd17d"},   {"unattributed", "#d9d9d9"},
  };
  static const std::array<const char*, 4> kSpare = {"#499894", "#86bcb6", "#fabfd2", "#d4a6c8"};
  auto it = kColours.find(kind);
  return it != kColours.end() ? it->second : kSpare[fallback_index % kSpare.size()];
}

std::string num(double v) { return fmt::format("{:.1f}", v); }

// A step with at most about five ticks, "round" in the binary unit the axis is labelled in.
double byteStep(double ymax) {
  double unit = 1;
  for (double u : {1099511627776.0, 1073741824.0, 1048576.0, 1024.0}) {
    if (ymax >= u) {
      unit = u;
      break;
    }
  }
  double raw = ymax / unit / 5;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double norm = raw / mag;
  double nice = norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10;
  return nice * mag * unit;
}

double secondsStep(double span) {
  for (double s : {1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0}) {
    if (span / s <= 8) return s;
  }
  return std::ceil(span / 8 / 3600) * 3600;
}

std::string svgElement(const json& rec) {
  constexpr double kW = 1000, kH = 540;
  std::string summary = reportSummary(rec);
  std::vector<std::string> title_lines = wrapWords(summary, 130);
  const double top = 28 + 16.0 * static_cast<double>(title_lines.size()) + 14;
  const double left = 88, right = kW - 250, bottom = kH - 56;

  Flight f = readFlight(rec);
  Domain d = domainOf(rec);
  std::optional<double> limit;
  if (d.limit) limit = static_cast<double>(*d.limit);
  if (!limit) {
    for (auto it = f.limit.rbegin(); it != f.limit.rend(); ++it) {
      if (*it) {
        limit = **it;
        break;
      }
    }
  }
  const std::size_t n = f.t.size();
  std::vector<double> total(n, 0.0);
  for (const auto& k : f.kinds) {
    for (std::size_t i = 0; i < n; ++i) total[i] += f.parts[k][i];
  }
  double ymax = 0;
  for (double v : total) ymax = std::max(ymax, v);
  for (const auto* series : {&f.usage, &f.self, &f.limit}) {
    for (const auto& v : *series) {
      if (v) ymax = std::max(ymax, *v);
    }
  }
  if (limit) ymax = std::max(ymax, *limit);
  if (d.usage) ymax = std::max(ymax, static_cast<double>(*d.usage));
  if (ymax <= 0) ymax = 1048576;
  ymax *= 1.05;
  const double ystep = byteStep(ymax);
  ymax = std::ceil(ymax / ystep) * ystep;

  double window = f.window.value_or(0);
  if (n > 0) window = std::max(window, -f.t.front());
  if (window <= 0) window = 60;
  double xmin = -window;
  double xmax = n > 0 ? std::max(0.0, f.t.back()) : 0.0;
  xmax += (xmax - xmin) * 0.02;
  auto px = [&](double t) { return left + (t - xmin) / (xmax - xmin) * (right - left); };
  auto py = [&](double b) { return bottom - b / ymax * (bottom - top); };

  std::string o;
  o += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n",
      kW, kH);
  o += "<title>" + xmlEscape(summary) + "</title>\n";
  std::string cg = f.cgroup.empty() ? recordCgroup(rec) : f.cgroup;
  o += "<desc>" +
       xmlEscape(fmt::format("Memory of {} in the last {} before the OOM kill, stacked by part, with the limit and the kill; "
                             "drawn by headroom report{}.",
                             cg.empty() ? "the cgroup" : cg, secondsText(window),
                             intAt(rec, "id") ? fmt::format(" from journal record {}", *intAt(rec, "id")) : "")) +
       "</desc>\n";
  o += fmt::format("<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n", kW, kH);
  o += "<g id=\"summary\" font-size=\"13\" fill=\"#222222\">\n";
  for (std::size_t i = 0; i < title_lines.size(); ++i)
    o += fmt::format("<text x=\"16\" y=\"{}\">{}</text>\n", num(24 + 16.0 * static_cast<double>(i)), xmlEscape(title_lines[i]));
  o += "</g>\n";

  // Grid and axes.
  o += "<g id=\"y-axis\" fill=\"#444444\">\n";
  const auto yticks = static_cast<int>(std::llround(ymax / ystep));
  for (int i = 0; i <= yticks; ++i) {
    double b = i * ystep;
    double y = py(b);
    o += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#e3e3e3\" stroke-width=\"1\"/>\n", num(left), num(y),
                     num(right), num(y));
    o += fmt::format("<text class=\"ytick\" x=\"{}\" y=\"{}\" dy=\"4\" text-anchor=\"end\">{}</text>\n", num(left - 6), num(y),
                     xmlEscape(bytesText(b)));
  }
  o += fmt::format("<text x=\"16\" y=\"{}\" transform=\"rotate(-90 16 {})\" text-anchor=\"middle\">bytes</text>\n",
                   num((top + bottom) / 2), num((top + bottom) / 2));
  o += "</g>\n<g id=\"x-axis\" fill=\"#444444\">\n";
  double xstep = secondsStep(xmax - xmin);
  const auto xticks = static_cast<int>(std::floor(-xmin / xstep + 1e-9));
  for (int i = 0; i <= xticks; ++i) {
    double t = -i * xstep;
    double x = px(t);
    o += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#999999\" stroke-width=\"1\"/>\n", num(x),
                     num(bottom), num(bottom + 5));
    o += fmt::format("<text class=\"xtick\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", num(x), num(bottom + 18),
                     t == 0 ? std::string("0") : fmt::format("{:g} s", t));
  }
  o += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">seconds before the kill</text>\n", num((left + right) / 2),
                   num(bottom + 38));
  o += "</g>\n";

  // The stacked parts: each kind between the running total below it and that total plus itself.
  o += "<g id=\"parts\" stroke=\"none\">\n";
  std::vector<double> below(n, 0.0);
  for (std::size_t ki = 0; ki < f.kinds.size(); ++ki) {
    const std::string& k = f.kinds[ki];
    const auto& v = f.parts[k];
    std::vector<double> xs, lo, hi;
    for (std::size_t i = 0; i < n; ++i) {
      xs.push_back(px(f.t[i]));
      lo.push_back(below[i]);
      hi.push_back(below[i] + v[i]);
    }
    if (n == 1) {  // one sample: a narrow bar, an area needs two
      xs = {xs[0] - 3, xs[0] + 3};
      lo = {lo[0], lo[0]};
      hi = {hi[0], hi[0]};
    }
    std::string path;
    for (std::size_t i = 0; i < xs.size(); ++i) path += fmt::format("{}{} {} ", i == 0 ? "M" : "L", num(xs[i]), num(py(hi[i])));
    for (std::size_t i = xs.size(); i-- > 0;) path += fmt::format("L{} {} ", num(xs[i]), num(py(lo[i])));
    path += "Z";
    o += fmt::format("<path class=\"part\" fill=\"{}\" fill-opacity=\"0.85\" d=\"{}\"><title>{}</title></path>\n",
                     kindColour(k, ki), path, xmlEscape(k));
    for (std::size_t i = 0; i < n; ++i) below[i] += v[i];
  }
  o += "</g>\n";

  auto polyline = [&](const char* id, const std::vector<std::optional<double>>& series, const char* stroke, const char* dash) {
    std::vector<std::pair<double, double>> pts;
    for (std::size_t i = 0; i < n; ++i) {
      if (series[i]) pts.emplace_back(px(f.t[i]), py(*series[i]));
    }
    if (pts.empty()) return false;
    if (pts.size() == 1) pts.emplace_back(pts[0].first + 3, pts[0].second);  // one sample: a short stroke
    std::string text;
    for (const auto& [x, y] : pts) text += (text.empty() ? "" : " ") + num(x) + "," + num(y);
    o += fmt::format("<polyline id=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\"{} points=\"{}\"/>\n", id, stroke,
                     dash[0] ? fmt::format(" stroke-dasharray=\"{}\"", dash) : std::string(), text);
    return true;
  };
  bool have_usage = polyline("usage", f.usage, "#222222", "");
  bool have_self = polyline("self-reported", f.self, "#7b3294", "5 3");

  if (n == 0) {
    o += fmt::format("<text id=\"no-samples\" x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#666666\">no samples of this cgroup "
                     "before the kill: the flight recorder kept none</text>\n",
                     num((left + right) / 2), num((top + bottom) / 2));
  }

  o += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#444444\" stroke-width=\"1\"/>\n", num(left),
                   num(top), num(bottom));
  o += fmt::format("<line x1=\"{0}\" y1=\"{2}\" x2=\"{1}\" y2=\"{2}\" stroke=\"#444444\" stroke-width=\"1\"/>\n", num(left),
                   num(right), num(bottom));

  std::string domain_name = d.global ? "the machine" : d.cgroup.empty() ? cg : d.cgroup;
  if (limit) {
    double y = py(*limit);
    o += fmt::format("<line id=\"limit\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#cc0000\" stroke-width=\"2\"/>\n",
                     num(left), num(y), num(right), num(y));
    o += fmt::format("<text id=\"limit-label\" x=\"{}\" y=\"{}\" text-anchor=\"start\" fill=\"#cc0000\">limit {}{}</text>\n",
                     num(left + 6), num(y - 6), xmlEscape(bytesText(*limit)),
                     xmlEscape(domain_name.empty() ? "" : " (" + domain_name + ")"));
  } else {
    o += fmt::format("<text id=\"limit-unknown\" x=\"{}\" y=\"{}\" fill=\"#cc0000\">limit not known</text>\n", num(left + 6),
                     num(top + 14));
  }

  // The kill: at 0 on the time axis, with what the kernel charged then.
  double kx = px(0);
  std::string victims;
  {
    std::vector<std::string> names;
    for (const Task& t : victimsOf(rec)) names.push_back(who(t));
    victims = names.empty() ? "victim not known" : joinList(names);
  }
  auto kt = recordTime(rec);
  o += fmt::format(
      "<line id=\"kill\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#cc0000\" stroke-width=\"2\" "
      "stroke-dasharray=\"6 4\"/>\n",
      num(kx), num(top), num(bottom));
  o += fmt::format("<text id=\"kill-label\" x=\"{}\" y=\"{}\" text-anchor=\"end\" fill=\"#cc0000\">OOM kill of {}{}</text>\n",
                   num(kx - 6), num(top + 14), xmlEscape(victims), xmlEscape(kt ? " at " + utcTime(*kt, true) : ""));
  if (d.usage) {
    o += fmt::format("<circle id=\"kill-usage\" cx=\"{}\" cy=\"{}\" r=\"4\" fill=\"#cc0000\"><title>{}</title></circle>\n",
                     num(kx), num(py(static_cast<double>(*d.usage))),
                     xmlEscape(fmt::format("{} at the kill: {} charged", domain_name.empty() ? "the cgroup" : domain_name,
                                           formatBytes(*d.usage))));
  }
  // The stack is the record's cgroup; when the limit was hit higher up, say whose the line is.
  if (!d.global && !d.cgroup.empty() && !cg.empty() && d.cgroup != cg) {
    o += fmt::format("<text id=\"domain-note\" x=\"{}\" y=\"{}\" fill=\"#cc0000\">the parts are {}'s; the limit and the kill's "
                     "usage are its OOM domain {}'s</text>\n",
                     num(left), num(kH - 8), xmlEscape(cg), xmlEscape(d.cgroup));
  }

  // Legend.
  double lx = right + 18, ly = top;
  o += "<g id=\"legend\" fill=\"#222222\">\n";
  auto entry = [&](const std::string& swatch, const std::string& label) {
    o += swatch;
    o += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", num(lx + 20), num(ly + 10), xmlEscape(label));
    ly += 18;
  };
  for (std::size_t ki = f.kinds.size(); ki-- > 0;) {  // top of the stack first, as drawn
    const std::string& k = f.kinds[ki];
    auto vis = kindVisible(k);
    entry(fmt::format("<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"12\" fill=\"{}\" fill-opacity=\"0.85\"/>\n", num(lx), num(ly),
                      kindColour(k, ki)),
          k + (vis ? (*vis ? " (visible)" : " (invisible)") : ""));
  }
  auto lineSwatch = [&](const char* stroke, const char* dash) {
    return fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2\"{}/>\n", num(lx), num(ly + 6),
                       num(lx + 14), num(ly + 6), stroke, dash[0] ? fmt::format(" stroke-dasharray=\"{}\"", dash) : "");
  };
  if (have_usage) entry(lineSwatch("#222222", ""), "usage (charged)");
  if (have_self) entry(lineSwatch("#7b3294", "5 3"), "the prover's own count");
  if (limit) entry(lineSwatch("#cc0000", ""), "limit");
  entry(lineSwatch("#cc0000", "6 4"), "the OOM kill");
  o += "</g>\n";
  o += "</svg>\n";
  return o;
}

// ---- --since ----

std::optional<double> wholeNumber(std::string_view s) {
  if (s.empty()) return std::nullopt;
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::int64_t daysFromCivil(std::int64_t y, int m, int d) {
  y -= m <= 2 ? 1 : 0;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const std::int64_t yoe = y - era * 400;
  const std::int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const std::int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

int daysInMonth(std::int64_t y, int m) {
  static constexpr std::array<int, 12> kDays = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : kDays[static_cast<std::size_t>(m - 1)];
}

// Reads exactly `digits` decimal digits at `pos`.
std::optional<int> digitsAt(std::string_view s, std::size_t& pos, std::size_t digits) {
  if (pos + digits > s.size()) return std::nullopt;
  int v = 0;
  auto [p, ec] = std::from_chars(s.data() + pos, s.data() + pos + digits, v);
  if (ec != std::errc() || p != s.data() + pos + digits) return std::nullopt;
  pos += digits;
  return v;
}

std::optional<double> parseUtcDate(std::string_view s) {
  std::size_t i = 0;
  auto y = digitsAt(s, i, 4);
  if (!y || i >= s.size() || s[i++] != '-') return std::nullopt;
  auto mo = digitsAt(s, i, 2);
  if (!mo || i >= s.size() || s[i++] != '-') return std::nullopt;
  auto d = digitsAt(s, i, 2);
  if (!d || *mo < 1 || *mo > 12 || *d < 1 || *d > daysInMonth(*y, *mo)) return std::nullopt;
  double secs = static_cast<double>(daysFromCivil(*y, *mo, *d)) * 86400.0;
  if (i == s.size()) return secs;
  if (s[i] != 'T' && s[i] != 't' && s[i] != ' ') return std::nullopt;
  ++i;
  auto h = digitsAt(s, i, 2);
  if (!h || i >= s.size() || s[i++] != ':') return std::nullopt;
  auto mi = digitsAt(s, i, 2);
  if (!mi || *h > 23 || *mi > 59) return std::nullopt;
  secs += *h * 3600.0 + *mi * 60.0;
  if (i < s.size() && s[i] == ':') {
    ++i;
    auto sec = digitsAt(s, i, 2);
    if (!sec || *sec > 60) return std::nullopt;
    secs += *sec;
    if (i < s.size() && (s[i] == '.' || s[i] == ',')) {
      std::size_t start = i + 1;
      std::size_t j = start;
      while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
      if (j == start) return std::nullopt;
      auto frac = wholeNumber(std::string("0.") + std::string(s.substr(start, j - start)));
      if (!frac) return std::nullopt;
      secs += *frac;
      i = j;
    }
  }
  std::string_view zone = s.substr(i);
  if (!zone.empty() && zone.front() == ' ') zone.remove_prefix(1);
  if (zone.empty() || zone == "Z" || zone == "z" || zone == "UTC") return secs;
  if (zone.front() == '+' || zone.front() == '-') {
    int sign = zone.front() == '+' ? 1 : -1;
    std::size_t k = 1;
    auto oh = digitsAt(zone, k, 2);
    if (!oh) return std::nullopt;
    if (k < zone.size() && zone[k] == ':') ++k;
    auto om = digitsAt(zone, k, 2);
    if (!om || k != zone.size() || *oh > 23 || *om > 59) return std::nullopt;
    return secs - sign * (*oh * 3600.0 + *om * 60.0);  // 14:00+02:00 is 12:00 UTC
  }
  return std::nullopt;
}

}  // namespace

std::string sparkline(const std::vector<double>& values) {
  static constexpr std::array<const char*, 8> kBars = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  double lo = 0, hi = 0;
  bool any = false;
  for (double v : values) {
    if (!std::isfinite(v)) continue;
    lo = any ? std::min(lo, v) : v;
    hi = any ? std::max(hi, v) : v;
    any = true;
  }
  std::string o;
  for (double v : values) {
    if (!std::isfinite(v)) {
      o += ' ';
      continue;
    }
    if (hi <= lo) {
      o += kBars[3];
      continue;
    }
    auto level = static_cast<std::size_t>(std::llround((v - lo) / (hi - lo) * 7.0));
    o += kBars[std::min<std::size_t>(level, 7)];
  }
  return o;
}

std::optional<double> recordTime(const json& record) {
  if (auto ns = numberAt(objectAt(record, "event"), "wall_time_ns"); ns && *ns > 0) return *ns / 1e9;
  return secondsOf(numberAt(record, "time"));
}

std::string reportSummary(const json& rec) {
  std::vector<Task> victims = victimsOf(rec);
  std::vector<std::string> names;
  names.reserve(victims.size());
  for (const Task& t : victims) names.push_back(who(t));
  std::string s = names.empty() ? "A process (the record does not say which)" : joinList(names);
  s += names.size() > 1 ? " were OOM-killed" : " was OOM-killed";
  std::string where = victimCgroup(rec);
  if (!where.empty()) s += " in " + where;

  Domain d = domainOf(rec);
  std::string constraint = d.constraint.empty() ? "constraint not known" : d.constraint;
  if (d.global) {
    s += " when the whole machine ran out of memory";
    if (d.usage && d.limit) s += fmt::format(" ({} of {})", formatBytes(*d.usage), formatBytes(*d.limit));
    s += fmt::format(" (a machine-wide OOM, {})", constraint);
  } else if (!d.cgroup.empty() && (where.empty() || d.cgroup == where)) {
    if (where.empty()) s += " in " + d.cgroup;
    s += fmt::format(", which was {} (OOM domain {}, {})", usageOfLimit(d), d.cgroup, constraint);
  } else if (!d.cgroup.empty()) {
    s += fmt::format("; its OOM domain {} was {} ({})", d.cgroup, usageOfLimit(d), constraint);
  } else {
    s += fmt::format("; the OOM domain is not known, the cgroup was {} ({})", usageOfLimit(d), constraint);
  }

  if (auto t = triggerOf(rec)) {
    bool same_place = t->cgroup.empty() || t->cgroup == where || (where.empty() && t->cgroup == d.cgroup);
    if (same_place) s += fmt::format("; the allocation that failed was {}'s", who(*t));
    else s += fmt::format("; the allocation that failed was made by {} in {}", who(*t), t->cgroup);
  } else {
    s += "; the task whose allocation failed is not known";
  }
  auto when = recordTime(rec);
  s += when ? fmt::format(", at {}.", utcTime(*when)) : std::string(", at a time not known.");
  return s;
}

std::string renderReport(const json& record) { return renderDocText(buildDoc(record)); }

std::string renderRecordList(const std::vector<json>& records) {
  Table t{{"ID", "TIME", "KILLED", "CGROUP", "USAGE", "LIMIT", "OOM DOMAIN", "TRIGGER"}, "rlllrrll", {}, {}};
  for (const json& rec : records) {
    auto id = intAt(rec, "id");
    auto tm = recordTime(rec);
    std::vector<std::string> names;
    for (const Task& v : victimsOf(rec)) names.push_back(who(v));
    Domain d = domainOf(rec);
    std::string cg = victimCgroup(rec);
    if (cg.empty()) cg = recordCgroup(rec);
    auto trig = triggerOf(rec);
    std::string domain = d.global ? "machine" : d.cgroup.empty() ? "-" : d.cgroup;
    if (!d.constraint.empty()) domain += " " + d.constraint;
    t.rows.push_back({id ? std::to_string(*id) : "?", tm ? utcTime(*tm) : "?", names.empty() ? "?" : joinList(names),
                      cg.empty() ? "-" : cg, bytesText(d.usage) + (d.usage_sampled ? "*" : ""),
                      bytesText(d.limit) + (d.limit_sampled ? "*" : ""), domain, trig ? who(*trig) : "-"});
  }
  return renderTableText(t, "");
}

std::string renderReportSvg(const json& record) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n" + svgElement(record);
}

std::string renderReportHtml(const json& record) { return renderDocHtml(buildDoc(record), svgElement(record)); }

Result<double> parseSinceTime(std::string_view text, double now_seconds) {
  std::string_view t = trim(text);
  auto bad = [&](const char* why) { return makeError(0, fmt::format("\"{}\": {}", printableText(text), why)); };
  if (t.empty()) return bad("empty: give a time or an age");
  static const std::map<char, double> kAgeUnits = {{'s', 1.0}, {'m', 60.0}, {'h', 3600.0}, {'d', 86400.0}, {'w', 604800.0}};
  if (auto u = kAgeUnits.find(t.back()); u != kAgeUnits.end() && t.find_first_of(":- T") == std::string_view::npos) {
    auto n = wholeNumber(t.substr(0, t.size() - 1));
    if (!n || *n < 0) return bad("not an age: use a number and s, m, h, d or w (90s, 30m, 2h)");
    return now_seconds - *n * u->second;
  }
  if (t.find_first_not_of("0123456789.") == std::string_view::npos) {
    auto n = wholeNumber(t);
    if (!n) return bad("not a unix time");
    return *n;
  }
  if (auto d = parseUtcDate(t)) return *d;
  return bad("not a time: use 2026-12-02T14:00:00Z, \"2026-12-02 14:00\" (UTC), a unix time, or an age like 2h, 30m, 90s");
}

}  // namespace headroom
