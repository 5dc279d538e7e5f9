// Time to OOM per bound, its warnings and the verdict at a kill. See model/oom_forecast.h.
#include "headroom/model/oom_forecast.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace headroom {
namespace {

constexpr double kNsPerS = 1e9;
constexpr std::size_t kMaxCalmTimes = 256;
constexpr std::size_t kMaxEnded = 64;
constexpr std::size_t kMaxGrowers = 5;
constexpr std::size_t kMaxPointsPerProcess = 16;

double seconds(std::int64_t ns) { return static_cast<double>(ns) / kNsPerS; }

std::optional<std::uint64_t> delta(const std::optional<std::uint64_t>& a, const std::optional<std::uint64_t>& b) {
  if (!a || !b || *b < *a) return std::nullopt;
  return *b - *a;
}

}  // namespace

const char* toString(Confidence c) {
  switch (c) {
    case Confidence::kNone: return "none";
    case Confidence::kLow: return "low";
    case Confidence::kMedium: return "medium";
    case Confidence::kHigh: return "high";
  }
  return "?";
}

double confidenceRatio(Confidence c) {
  switch (c) {
    case Confidence::kNone: return 0;
    case Confidence::kLow: return 1.0 / 3;
    case Confidence::kMedium: return 2.0 / 3;
    case Confidence::kHigh: return 1;
  }
  return 0;
}

const char* toString(WarningVerdictKind k) {
  switch (k) {
    case WarningVerdictKind::kWarned: return "warned";
    case WarningVerdictKind::kNoWarningPossible: return "no_warning_possible";
    case WarningVerdictKind::kMissed: return "missed";
    case WarningVerdictKind::kUnobserved: return "unobserved";
    case WarningVerdictKind::kUnwatched: return "unwatched";
  }
  return "?";
}

bool OomEta::warns(const ForecastPolicy& p) const {
  return eta_seconds && *eta_seconds < seconds(p.warn_eta_ns) && confidence >= Confidence::kMedium;
}

Trend robustTrend(const std::vector<std::pair<std::int64_t, double>>& points) {
  Trend t;
  std::vector<double> slopes;
  slopes.reserve(points.size() * points.size() / 2);
  std::int64_t concordant = 0, discordant = 0, pairs = 0;
  for (std::size_t i = 0; i < points.size(); ++i) {
    for (std::size_t j = i + 1; j < points.size(); ++j) {
      const std::int64_t dt = points[j].first - points[i].first;
      if (dt <= 0) continue;
      const double dv = points[j].second - points[i].second;
      slopes.push_back(dv / seconds(dt));
      ++pairs;
      if (dv > 0) ++concordant;
      if (dv < 0) ++discordant;
    }
  }
  if (slopes.empty()) return t;
  auto mid = slopes.begin() + static_cast<std::ptrdiff_t>(slopes.size() / 2);
  std::nth_element(slopes.begin(), mid, slopes.end());
  t.slope = *mid;
  if (slopes.size() % 2 == 0) {
    const double below = *std::max_element(slopes.begin(), mid);
    t.slope = (t.slope + below) / 2;
  }
  t.agreement = static_cast<double>(concordant - discordant) / static_cast<double>(pairs);
  return t;
}

OomEta OomForecaster::compute(const Track& tr) const {
  const BoundReading& r = tr.last;
  OomEta e;
  e.bound = r.bound;
  e.time_ns = r.time_ns;
  e.wall_ns = r.wall_ns;
  e.limit = r.limit;
  e.usage = r.usage;
  e.reclaimable = std::min(r.usage, r.reclaimable.value_or(0));
  e.held = r.usage - e.reclaimable;
  e.room = r.limit > e.held ? r.limit - e.held : 0;
  e.near = static_cast<double>(e.held) >= policy_.near_fraction * static_cast<double>(r.limit);

  // The kernel's signals over the window.
  if (tr.signals.size() >= 2) {
    const Signals& a = tr.signals.front();
    const Signals& b = tr.signals.back();
    auto say = [&](const char* what, const std::optional<std::uint64_t>& d) {
      if (d && *d > 0) e.signals.push_back(fmt::format("{} +{}", what, *d));
    };
    say("memory.events max", delta(a.events_max, b.events_max));
    say("memory.events high", delta(a.events_high, b.events_high));
    say("memory.events oom", delta(a.events_oom, b.events_oom));
    say("failcnt", delta(a.failcnt, b.failcnt));
  }
  if (r.psi_some && *r.psi_some > 0) e.signals.push_back(fmt::format("PSI some {:.1f}%", *r.psi_some));
  if (r.psi_full && *r.psi_full > 0) e.signals.push_back(fmt::format("PSI full {:.1f}%", *r.psi_full));

  // The trend of held: over the whole window, and over its last third (a growth that began
  // lately); the steeper of those that can be trusted.
  struct Candidate {
    Trend trend;
    std::size_t n = 0;
    std::int64_t span = 0;
    bool trusted = false;
    std::string why;
  };
  const std::uint64_t min_growth = std::max<std::uint64_t>(
      policy_.min_growth_bytes, static_cast<std::uint64_t>(policy_.min_growth_share * static_cast<double>(r.limit)));
  auto candidate = [&](std::int64_t window) {
    Candidate c;
    std::vector<std::pair<std::int64_t, double>> pts;
    for (const Point& p : tr.points)
      if (p.t > tr.reset_ns && p.t >= r.time_ns - window && p.t <= r.time_ns)
        pts.emplace_back(p.t, static_cast<double>(p.held));
    c.n = pts.size();
    if (c.n >= 2) c.span = pts.back().first - pts.front().first;
    c.trend = robustTrend(pts);
    const double grown = c.trend.slope * seconds(c.span);
    if (c.n < policy_.min_points || c.span < policy_.min_span_ns)
      c.why = fmt::format("{} reading(s) over {:.1f} s: too few to trust a trend", c.n, seconds(c.span));
    else if (c.trend.agreement < policy_.min_agreement)
      c.why = fmt::format("no steady growth (agreement {:.2f} < {:.2f})", c.trend.agreement, policy_.min_agreement);
    else if (grown < static_cast<double>(min_growth))
      c.why = fmt::format("grew {:.1f} MiB over {:.1f} s: too little to matter", grown / (1 << 20), seconds(c.span));
    else
      c.trusted = true;
    return c;
  };
  Candidate whole = candidate(policy_.window_ns);
  Candidate recent = candidate(policy_.window_ns / 3);
  const Candidate* best = &whole;
  if (recent.trusted && (!whole.trusted || recent.trend.slope > whole.trend.slope)) best = &recent;
  e.growth_bytes_per_second = best->trend.slope;
  e.agreement = best->trend.agreement;
  e.points = best->n;
  e.span_seconds = seconds(best->span);
  if (best->trend.slope <= 0 || best->n < 2) {
    e.confidence = Confidence::kNone;
    e.why = best->n < 2 ? "not read enough yet" : "not growing";
  } else {
    e.eta_seconds = static_cast<double>(e.room) / best->trend.slope;
    if (!best->trusted) {
      e.confidence = Confidence::kLow;
      e.why = best->why;
    } else {
      const bool steady = best->trend.agreement >= 0.9 && best->n >= 2 * policy_.min_points;
      e.confidence = steady || !e.signals.empty() ? Confidence::kHigh : Confidence::kMedium;
    }
  }

  // Who grew: the processes whose RSS rose most over what the window shows of them.
  for (const auto& [pid, hist] : tr.procs) {
    if (hist.size() < 2) continue;
    const auto& [t0, a] = hist.front();
    const auto& [t1, b] = hist.back();
    if (t1 <= t0 || b.rss <= a.rss) continue;
    e.growers.push_back(Grower{pid, b.comm, b.cgroup, b.rss, static_cast<double>(b.rss - a.rss) / seconds(t1 - t0)});
  }
  std::sort(e.growers.begin(), e.growers.end(),
            [](const Grower& a, const Grower& b) { return a.growth_bytes_per_second > b.growth_bytes_per_second; });
  if (e.growers.size() > kMaxGrowers) e.growers.resize(kMaxGrowers);
  return e;
}

void OomForecaster::endEpisode(Track& t, std::int64_t when, const char* reason) {
  if (!t.episode) return;
  t.episode->ended_ns = when;
  t.episode->end_reason = reason;
  changes_.push_back(*t.episode);
  ended_.push_back(std::move(*t.episode));
  if (ended_.size() > kMaxEnded) ended_.pop_front();
  t.episode.reset();
}

void OomForecaster::observe(const BoundReading& r) {
  Track& t = tracks_[r.bound];
  t.last_seen_ns = std::max(t.last_seen_ns, r.time_ns);
  const std::optional<std::uint64_t> reclaimable = r.reclaimable ? r.reclaimable : t.last.reclaimable;
  t.last = r;
  t.last.reclaimable = reclaimable;
  const std::int64_t horizon = r.time_ns - 2 * policy_.window_ns;
  auto calmAt = [&](std::int64_t when) {
    t.calm_times.push_back(when);
    while (t.calm_times.size() > kMaxCalmTimes || (!t.calm_times.empty() && t.calm_times.front() < horizon))
      t.calm_times.pop_front();
  };

  if (!r.reclaimable) {
    // A light reading: usage alone says whether the bound is calm, never a trend (page cache
    // it cannot tell from what is held).
    if (static_cast<double>(r.usage) < policy_.near_fraction * static_cast<double>(r.limit)) calmAt(r.time_ns);
    if (t.eta) t.eta->time_ns = r.time_ns;
    return;
  }

  const std::uint64_t held = r.usage - std::min(r.usage, *r.reclaimable);
  t.points.push_back(Point{r.time_ns, held, false});
  while (t.points.size() > policy_.max_points || t.points.front().t < horizon) t.points.pop_front();
  t.signals.push_back(Signals{r.time_ns, r.events_max, r.events_high, r.events_oom, r.failcnt});
  while (!t.signals.empty() && t.signals.front().t < r.time_ns - policy_.window_ns) t.signals.pop_front();
  for (const GrowerReading& g : r.processes) {
    auto& hist = t.procs[g.pid];
    if (!hist.empty() && hist.back().second.comm != g.comm) hist.clear();  // a reused pid
    hist.emplace_back(r.time_ns, g);
    while (hist.size() > kMaxPointsPerProcess || hist.front().first < r.time_ns - policy_.window_ns) hist.pop_front();
  }
  for (auto it = t.procs.begin(); it != t.procs.end();) {
    if (it->second.empty() || it->second.back().first < r.time_ns - policy_.window_ns)
      it = t.procs.erase(it);
    else
      ++it;
  }

  OomEta e = compute(t);
  const double warn_s = seconds(policy_.warn_eta_ns);
  const bool calm = !e.near || !e.eta_seconds || *e.eta_seconds > 2 * warn_s || e.confidence < Confidence::kMedium;
  t.points.back().calm = calm;
  if (calm) calmAt(r.time_ns);
  t.eta = e;

  if (!t.episode) {
    if (e.warns(policy_)) {
      WarningEpisode w;
      w.id = next_id_++;
      w.bound = r.bound;
      w.started_ns = r.time_ns;
      w.started_wall_ns = r.wall_ns;
      w.at_start = e;
      w.latest = e;
      changes_.push_back(w);
      t.episode = std::move(w);
    }
    return;
  }
  t.episode->latest = e;
  if (!e.eta_seconds || *e.eta_seconds > 2 * warn_s) {
    if (t.episode->above_since_ns == 0) t.episode->above_since_ns = r.time_ns;
    if (r.time_ns - t.episode->above_since_ns >= policy_.clear_after_ns) endEpisode(t, r.time_ns, "cleared");
  } else {
    t.episode->above_since_ns = 0;
  }
}

void OomForecaster::calmUntil(const std::string& bound, std::int64_t time_ns) {
  auto it = tracks_.find(bound);
  if (it == tracks_.end()) return;
  auto& times = it->second.calm_times;
  times.insert(std::upper_bound(times.begin(), times.end(), time_ns), time_ns);
  if (times.size() > kMaxCalmTimes) times.pop_front();
}

void OomForecaster::killed(const std::string& bound, std::int64_t time_ns) {
  auto it = tracks_.find(bound);
  if (it == tracks_.end()) return;
  endEpisode(it->second, time_ns, "killed");
  it->second.reset_ns = std::max(it->second.reset_ns, time_ns);
  it->second.procs.clear();
  if (it->second.eta) {
    it->second.eta->eta_seconds.reset();
    it->second.eta->confidence = Confidence::kNone;
    it->second.eta->growth_bytes_per_second = 0;
    it->second.eta->why = "killed: the trend starts afresh";
  }
}

void OomForecaster::forgetUnseen(std::int64_t before_ns) {
  for (auto it = tracks_.begin(); it != tracks_.end();) {
    if (it->second.last_seen_ns < before_ns) {
      endEpisode(it->second, it->second.last_seen_ns, "gone");
      it = tracks_.erase(it);
    } else {
      ++it;
    }
  }
}

std::optional<OomEta> OomForecaster::eta(std::string_view bound) const {
  auto it = tracks_.find(bound);
  if (it == tracks_.end()) return std::nullopt;
  return it->second.eta;
}

std::vector<const WarningEpisode*> OomForecaster::active() const {
  std::vector<const WarningEpisode*> out;
  for (const auto& [name, t] : tracks_)
    if (t.episode) out.push_back(&*t.episode);
  return out;
}

std::vector<WarningEpisode> OomForecaster::takeChanges() { return std::exchange(changes_, {}); }

WarningVerdict OomForecaster::verdict(std::string_view bound, std::int64_t kill_ns) const {
  WarningVerdict v;
  v.bound = std::string(bound);
  auto it = tracks_.find(bound);
  const WarningEpisode* warned = nullptr;
  auto consider = [&](const WarningEpisode& w) {
    if (w.bound != bound || w.started_ns > kill_ns) return;
    if (w.ended_ns && *w.ended_ns < kill_ns - policy_.min_lead_ns) return;  // cleared well before
    if (warned == nullptr || w.started_ns > warned->started_ns) warned = &w;
  };
  for (const WarningEpisode& w : ended_) consider(w);
  if (it != tracks_.end() && it->second.episode) consider(*it->second.episode);
  std::optional<std::int64_t> calm;
  if (it != tracks_.end())
    for (std::int64_t c : it->second.calm_times)
      if (c <= kill_ns) calm = c;
  const double lead_s = seconds(policy_.min_lead_ns);
  if (calm) v.calm_seconds = seconds(kill_ns - *calm);
  // Calm a moment before the kill: whatever came between (a warning as it died) came too late.
  // A warning in force since before that calm reading was given in time: a climb that reads
  // flat for a sample at the end (the kernel reclaiming at the limit, a slow sample) was told.
  const bool warned_before_calm =
      warned != nullptr && calm && warned->started_ns < *calm && kill_ns - warned->started_ns >= policy_.min_lead_ns;
  if (calm && kill_ns - *calm < policy_.min_lead_ns && !warned_before_calm) {
    v.kind = WarningVerdictKind::kNoWarningPossible;
    v.text = fmt::format(
        "no warning possible: calm {:.2f} s before the kill, a rise faster than the {:.1f} s a warning needs{}",
        *v.calm_seconds, lead_s,
        warned != nullptr
            ? fmt::format(" (one came {:.2f} s before it, too late to act on)", seconds(kill_ns - warned->started_ns))
            : std::string());
    return v;
  }
  if (warned != nullptr) {
    v.kind = WarningVerdictKind::kWarned;
    v.episode = warned->id;
    v.lead_seconds = seconds(kill_ns - warned->started_ns);
    v.eta_seconds = warned->at_start.eta_seconds;
    v.warned_wall_ns = warned->started_wall_ns;
    v.text = fmt::format("warned {:.1f} s before the kill (time to OOM then {:.1f} s, confidence {})", *v.lead_seconds,
                         v.eta_seconds.value_or(0), toString(warned->at_start.confidence));
    return v;
  }
  if (it == tracks_.end()) {
    v.kind = WarningVerdictKind::kUnwatched;
    v.text = "no warning: the agent had not read this bound";
    return v;
  }
  const Track& t = it->second;
  std::size_t rising = 0;
  std::int64_t first_rising = kill_ns;
  for (const Point& p : t.points) {
    if (p.t > kill_ns || (calm && p.t <= *calm)) continue;
    ++rising;
    first_rising = std::min(first_rising, p.t);
  }
  if (rising >= 2) {
    v.kind = WarningVerdictKind::kMissed;
    v.text = fmt::format("missed: read {} time(s) in the {:.1f} s before the kill without a warning{}", rising,
                         seconds(kill_ns - first_rising), t.eta && !t.eta->why.empty() ? " (" + t.eta->why + ")" : "");
    return v;
  }
  v.kind = WarningVerdictKind::kUnobserved;
  v.text = calm ? fmt::format("no warning: calm at a reading {:.1f} s before the kill, and not read again before it",
                              *v.calm_seconds)
                : "no warning: not read calm or rising in the window before the kill";
  return v;
}

void addSignals(BoundReading& r, const CgroupMemory& cg) {
  if (cg.version == 2) {
    r.events_max = cg.events.get("max");
    r.events_high = cg.events.get("high");
    r.events_oom = cg.events.get("oom");
  }
  r.failcnt = cg.failcnt;
  if (cg.pressure) {
    r.psi_some = cg.pressure->some.avg10;
    if (cg.pressure->full) r.psi_full = cg.pressure->full->avg10;
  }
}

std::vector<BoundReading> boundReadings(const Snapshot& snap, std::size_t processes_per_bound) {
  std::map<std::string, BoundReading> out;
  const std::int64_t t = snap.completed_monotonic_ns != 0 ? snap.completed_monotonic_ns : snap.monotonic_time_ns;
  for (const CgroupSnapshot& c : snap.cgroups) {
    for (const Bound& b : c.bounds) {
      if (out.contains(b.name)) continue;
      BoundReading r;
      r.bound = b.name;
      r.time_ns = t;
      r.wall_ns = snap.wall_time_ns;
      r.limit = b.limit;
      r.usage = b.usage;
      if (!b.light) r.reclaimable = b.reclaimable;  // a light one: usage alone (a light reading)
      if (b.name == "host") {
        if (snap.host.pressure) {
          r.psi_some = snap.host.pressure->some.avg10;
          if (snap.host.pressure->full) r.psi_full = snap.host.pressure->full->avg10;
        }
      } else if (const CgroupSnapshot* own = snap.findCgroup(b.name)) {
        addSignals(r, own->memory);
      }
      out.emplace(b.name, std::move(r));
    }
  }
  // Each bound's processes as indices, the largest few picked among them by the snapshot's
  // columns (no process read but those); only those are copied out.
  const auto columns = columnsOf(snap);
  const std::vector<std::uint64_t>& rss = columns->rss;
  std::map<std::string_view, std::vector<std::size_t>> under;
  std::vector<std::vector<std::vector<std::size_t>*>> lists(snap.cgroups.size());  // by cgroup: its bounds'
  for (std::size_t ci = 0; ci < snap.cgroups.size(); ++ci) {
    for (const Bound& b : snap.cgroups[ci].bounds) lists[ci].push_back(&under[b.name]);
  }
  for (std::size_t i = 0; i < columns->cgroup.size(); ++i) {
    const std::uint32_t ci = columns->cgroup[i];
    if (ci >= lists.size()) continue;  // in no watched cgroup
    for (std::vector<std::size_t>* l : lists[ci]) l->push_back(i);
  }
  const auto rssOf = [&](std::size_t i) { return rss[i]; };
  std::vector<BoundReading> v;
  v.reserve(out.size());
  for (auto& [name, r] : out) {
    if (auto it = under.find(name); it != under.end()) {
      std::vector<std::size_t>& idx = it->second;
      const auto keep = static_cast<std::ptrdiff_t>(std::min(idx.size(), processes_per_bound));
      std::partial_sort(idx.begin(), idx.begin() + keep, idx.end(), [&](std::size_t a, std::size_t z) {
        return rssOf(a) != rssOf(z) ? rssOf(a) > rssOf(z) : a < z;
      });
      r.processes.reserve(static_cast<std::size_t>(keep));
      for (std::ptrdiff_t k = 0; k < keep; ++k) {
        const ProcessSnapshot& p = snap.processes[idx[static_cast<std::size_t>(k)]];
        r.processes.push_back(GrowerReading{p.sample.pid, p.sample.comm, p.cgroup.str(), p.attribution.rss});
      }
    }
    v.push_back(std::move(r));
  }
  return v;
}

}  // namespace headroom
