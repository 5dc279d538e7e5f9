#include "headroom/report/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <climits>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "headroom/model/snapshot.h"
#include "headroom/model/snapshot_json.h"
#include "headroom/sources/parse.h"
#include "headroom/util/text.h"
#include "headroom/util/units.h"
#include "report_parts.h"

namespace headroom {
namespace report_detail {

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
      if (right)
        o += std::string(pad, ' ') + cell;
      else
        o += last ? cell : cell + std::string(pad, ' ');
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
      if (const auto* text = std::get_if<std::string>(&b))
        o += "  " + *text + "\n";
      else
        o += renderTableText(std::get<Table>(b), "  ");
    }
  }
  return o;
}

}  // namespace report_detail

using namespace report_detail;  // the report's own parts

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
  if (auto kill = secondsOf(numberAt(record, "kill_time"))) return kill;  // the moment itself
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
  // What operators call it: the (first) victim's workload, else the record's.
  std::string workload;
  const json& event = objectAt(rec, "event");
  if (auto vs = event.find("victims"); vs != event.end() && vs->is_array() && !vs->empty())
    workload = describeWorkload(workloadFromJson(objectAt(vs->front(), "workload")));
  if (workload.empty()) workload = describeWorkload(workloadFromJson(objectAt(rec, "workload")));
  if (!workload.empty()) s += " (" + workload + ")";

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
    if (same_place)
      s += fmt::format("; the allocation that failed was {}'s", who(*t));
    else
      s += fmt::format("; the allocation that failed was made by {} in {}", who(*t), t->cgroup);
  } else {
    s += "; the task whose allocation failed is not known";
  }
  auto when = recordTime(rec);
  s += when ? fmt::format(", at {}.", utcTime(*when)) : std::string(", at a time not known.");
  return s;
}

std::string renderReport(const json& record) { return renderDocText(buildDoc(record)); }

namespace {

// The columns of a --list line after the grouping ones.
std::vector<std::string> listRow(const json& rec) {
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
  return {id ? std::to_string(*id) : "?",
          tm ? utcTime(*tm) : "?",
          names.empty() ? "?" : joinList(names),
          cg.empty() ? "-" : cg,
          bytesText(d.usage) + (d.usage_sampled ? "*" : ""),
          bytesText(d.limit) + (d.limit_sampled ? "*" : ""),
          domain,
          trig ? who(*trig) : "-"};
}

std::string hostName(const json& rec) {
  std::string h = textAt(objectAt(rec, "host"), "hostname");
  return h.empty() ? "?" : h;
}

}  // namespace

json recordWorkloadObject(const json& rec) {
  json w = objectAt(rec, "workload").is_object() ? objectAt(rec, "workload") : json::object();
  const json& event = objectAt(rec, "event");
  auto vs = event.find("victims");
  if (vs == event.end() || !vs->is_array() || vs->empty()) return w;
  const json& victim = objectAt(vs->front(), "workload");
  for (const char* key : {"unit", "container", "pod", "namespace", "runtime", "container_id", "pod_uid", "qos"}) {
    if (textAt(w, key).empty() && !textAt(victim, key).empty()) w[key] = textAt(victim, key);
  }
  return w;
}

std::string recordWorkload(const json& rec) {
  const json w = recordWorkloadObject(rec);
  const std::string pod = textAt(w, "pod"), ns = textAt(w, "namespace"), container = textAt(w, "container"),
                    unit = textAt(w, "unit");
  if (!pod.empty()) {
    std::string s = "pod " + (ns.empty() ? pod : ns + "/" + pod);
    return container.empty() ? s : s + " " + container;
  }
  if (!container.empty()) return "container " + container;
  if (!unit.empty()) return "unit " + unit;
  std::string cg = victimCgroup(rec);
  if (cg.empty()) cg = recordCgroup(rec);
  return cg.empty() ? "-" : "cgroup " + cg;
}

std::string renderRecordList(const std::vector<json>& records) {
  std::set<std::string> hosts;
  for (const json& rec : records) hosts.insert(hostName(rec));
  if (hosts.size() > 1) {
    // Records of several hosts (read back from a log store): grouped by host, then workload,
    // the newest first in each group.
    std::vector<std::size_t> order(records.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::vector<std::string> host(records.size()), work(records.size());
    std::vector<double> when(records.size());
    for (std::size_t i = 0; i < records.size(); ++i) {
      host[i] = hostName(records[i]);
      work[i] = recordWorkload(records[i]);
      when[i] = recordTime(records[i]).value_or(-1);
    }
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      if (host[a] != host[b]) return host[a] < host[b];
      if (work[a] != work[b]) return work[a] < work[b];
      return when[a] > when[b];
    });
    Table t{{"HOST", "WORKLOAD", "ID", "TIME", "KILLED", "CGROUP", "USAGE", "LIMIT", "OOM DOMAIN", "TRIGGER"},
            "llrlllrrll",
            {},
            {}};
    for (std::size_t i : order) {
      std::vector<std::string> row = {host[i], work[i]};
      for (std::string& c : listRow(records[i])) row.push_back(std::move(c));
      t.rows.push_back(std::move(row));
    }
    return renderTableText(t, "");
  }
  Table t{{"ID", "TIME", "KILLED", "CGROUP", "USAGE", "LIMIT", "OOM DOMAIN", "TRIGGER"}, "rlllrrll", {}, {}};
  for (const json& rec : records) t.rows.push_back(listRow(rec));
  return renderTableText(t, "");
}

std::string renderReportHtml(const json& record) { return renderDocHtml(buildDoc(record), svgElement(record, false)); }

}  // namespace headroom
