// The report's warning section: whether the kill was warned of and how long before, and the
// run-up the flight recorder's fast readings show (who grew, how fast). See report_parts.h.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "report_parts.h"

namespace headroom::report_detail {

std::optional<Section> warningSection(const json& rec) {
  const json& w = objectAt(rec, "warning");
  const std::string verdict = textAt(w, "verdict");
  if (verdict.empty()) return std::nullopt;
  Section s{"WARNING BEFORE THE KILL", "", {}};
  const std::string text = textAt(w, "text");
  s.blocks.emplace_back(text.empty() ? verdict : text);
  if (auto at = secondsOf(numberAt(w, "warned_at"))) s.blocks.emplace_back("warned at " + utcTime(*at));

  // Who grew in the run-up: each process's RSS over the flight's points (fast readings included).
  struct Seen {
    std::string comm;
    double t0 = 0, t1 = 0;
    std::uint64_t first = 0, last = 0;
    bool any = false;
  };
  std::map<std::int64_t, Seen> procs;
  std::size_t fast = 0;
  for (const json& p : arrayAt(objectAt(rec, "flight"), "points")) {
    auto t = numberAt(p, "time");
    if (!t) continue;
    if (flagAt(p, "fast")) ++fast;
    for (const json& q : arrayAt(p, "processes")) {
      auto pid = intAt(q, "pid");
      auto rss = bytesAt(q, "rss_bytes");
      if (!pid || !rss) continue;
      Seen& x = procs[*pid];
      if (!x.any) {
        x = Seen{textAt(q, "comm"), *t, *t, *rss, *rss, true};
      } else {
        x.t1 = *t;
        x.last = *rss;
      }
    }
  }
  std::vector<std::pair<std::int64_t, Seen>> grew;
  for (const auto& [pid, x] : procs)
    if (x.t1 > x.t0 && x.last > x.first) grew.emplace_back(pid, x);
  std::sort(grew.begin(), grew.end(), [](const auto& a, const auto& b) {
    return (a.second.last - a.second.first) / (a.second.t1 - a.second.t0) >
           (b.second.last - b.second.first) / (b.second.t1 - b.second.t0);
  });
  if (grew.empty()) {
    s.blocks.emplace_back(fast > 0 ? fmt::format("{} fast reading(s) in the run-up; no process grew in them", fast)
                                   : std::string("no fast readings in the run-up: the cgroup was not near its limit"));
    return s;
  }
  s.subtitle = fmt::format("the run-up: {} fast reading(s) between samples", fast);
  Table t{{"PID", "COMM", "FIRST", "LAST", "GROWTH", "OVER"}, "rlrrrr", {}, {}};
  for (std::size_t i = 0; i < grew.size() && i < 5; ++i) {
    const auto& [pid, x] = grew[i];
    const double rate = static_cast<double>(x.last - x.first) / (x.t1 - x.t0);
    t.rows.push_back({std::to_string(pid), x.comm, bytesText(x.first), bytesText(x.last), bytesText(rate) + "/s",
                      secondsText(x.t1 - x.t0)});
  }
  s.blocks.emplace_back(std::move(t));
  return s;
}

}  // namespace headroom::report_detail
