// The agent's early warning. See daemon/early_warning.h.
#include "headroom/daemon/early_warning.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "headroom/sources/procfs.h"
#include "headroom/util/clock.h"
#include "headroom/util/numbers.h"

namespace headroom {
namespace {

constexpr std::size_t kProcessesPerBound = 8;
constexpr const char* kHost = "host";
// A cgroup the kernel keeps notifying of is read at most this often.
constexpr auto kMinFullGap = std::chrono::milliseconds(250);

}  // namespace

EarlyWarning::EarlyWarning(const FsRoot& fs, const CgroupHierarchy& h, const WarningSettings& s)
    : fs_(&fs), h_(&h), settings_(s), forecaster_(forecastPolicyOf(s)) {
  if (!fs.isLive()) return;  // a fixture root has no kernel to notify
  if (auto ev = CgroupEvents::create())
    events_ = std::move(*ev);
  else
    spdlog::warn("early warning: no kernel notifications ({}); cgroups near their limit are polled",
                 ev.error().describe());
}

void EarlyWarning::configure(const WarningSettings& s) {
  settings_ = s;
  forecaster_.setPolicy(forecastPolicyOf(s));
  if (!s.enabled) {
    watched_.clear();
    if (events_) events_->keepOnly({});
  }
}

void EarlyWarning::sample(const Snapshot& snap) {
  if (!settings_.enabled) return;
  const auto now = Clock::now();
  std::set<std::string> keep;
  const ForecastPolicy& policy = forecaster_.policy();
  for (BoundReading& r : boundReadings(snap, kProcessesPerBound)) {
    forecaster_.observe(r);
    if (r.bound == kHost) continue;  // read at samples only
    const std::string& name = r.bound;
    keep.insert(name);
    Watched& w = watched_[name];
    const bool fresh = w.limit == 0;
    w.limit = r.limit;
    w.near = nearLimit(r.usage, r.limit);
    w.processes = std::move(r.processes);
    if (fresh) w.next = now;
    w.armed = false;
    if (events_) {
      const auto threshold = static_cast<std::uint64_t>(policy.near_fraction * static_cast<double>(r.limit));
      if (auto st = events_->watch(*h_, name, threshold); st)
        w.armed = true;
      else
        spdlog::debug("early warning: {} is polled: {}", name, st.error().describe());
    }
    // Polled for its usage where no usage threshold says when it crosses (v2; v1 without one).
    if ((h_->version() == 2 || !w.armed) && !w.dir) {
      if (auto d = h_->open(name)) w.dir = std::move(*d);
    }
  }
  for (auto it = watched_.begin(); it != watched_.end();) {
    if (keep.count(it->first) == 0)
      it = watched_.erase(it);
    else
      ++it;
  }
  if (events_) events_->keepOnly(keep);
  forecaster_.forgetUnseen(monotonicNs() - 4 * policy.window_ns);
}

bool EarlyWarning::nearLimit(std::uint64_t usage, std::uint64_t limit) const {
  return static_cast<double>(usage) >= forecaster_.policy().near_fraction * static_cast<double>(limit);
}

void EarlyWarning::readFull(const std::string& bound, Watched& w, CgroupFileCache& files, std::int64_t now_ns,
                            std::int64_t wall_ns) {
  auto cg = files.read(*h_, bound);
  if (!cg) return;  // gone: the next sample drops it
  BoundReading r;
  r.bound = bound;
  r.time_ns = now_ns;
  r.wall_ns = wall_ns;
  r.limit = cg->limit.value_or(w.limit);
  r.usage = cg->usage;
  r.reclaimable = reclaimableBytes(*cg);
  addSignals(r, *cg);
  for (auto it = w.processes.begin(); it != w.processes.end();) {
    if (auto rss = readResidentBytes(*fs_, it->pid)) {
      it->rss = *rss;
      ++it;
    } else {
      it = w.processes.erase(it);  // ended
    }
  }
  r.processes = w.processes;
  w.limit = r.limit;
  w.near = nearLimit(r.usage, r.limit);
  forecaster_.observe(r);
  FlightPoint p;
  p.wall_time_ns = wall_ns;
  p.completed_monotonic_ns = now_ns;
  p.usage = r.usage;
  p.limit = r.limit;
  p.reclaimable = r.reclaimable;
  p.fast = true;
  for (const GrowerReading& g : w.processes) p.processes.push_back(FlightProcess{g.pid, g.comm, g.rss});
  std::sort(p.processes.begin(), p.processes.end(),
            [](const FlightProcess& a, const FlightProcess& b) { return a.rss > b.rss; });
  if (p.processes.size() > kFlightProcesses) p.processes.resize(kFlightProcesses);
  // Bounded: a sample takes them every interval; a stalled loop keeps the newest.
  constexpr std::size_t kMaxFastPoints = 4096;
  if (fast_points_.size() >= kMaxFastPoints) fast_points_.erase(fast_points_.begin());
  fast_points_.emplace_back(bound, std::move(p));
}

void EarlyWarning::readLight(const std::string& bound, Watched& w, std::int64_t now_ns, std::int64_t wall_ns) {
  if (!w.dir) return;
  auto text = w.dir->readFile(h_->version() == 2 ? "memory.current" : "memory.usage_in_bytes");
  if (!text) return;
  auto usage = parseU64(trim(*text));
  if (!usage) return;
  BoundReading r;
  r.bound = bound;
  r.time_ns = now_ns;
  r.wall_ns = wall_ns;
  r.limit = w.limit;
  r.usage = *usage;
  w.near = nearLimit(*usage, w.limit);
  forecaster_.observe(r);
}

bool EarlyWarning::tick(CgroupFileCache& files) {
  if (!settings_.enabled) return false;
  std::set<std::string> notified;
  if (events_)
    for (std::string& p : events_->take()) notified.insert(std::move(p));
  const auto now = Clock::now();
  const std::int64_t now_ns = monotonicNs(), wall_ns = realtimeNs();
  bool read = false;
  // A whole reading, at most one per kMinFullGap; one asked for sooner waits (`pending`), so that
  // no notification is lost to the rate limit.
  auto full = [&](const std::string& name, Watched& w) {
    if (now < w.last_full + kMinFullGap) {
      w.pending = true;
      return;
    }
    readFull(name, w, files, now_ns, wall_ns);
    w.last_full = now;
    w.pending = false;
    w.next = now + settings_.fast_interval;
    read = true;
  };
  for (auto& [name, w] : watched_) {
    if (notified.count(name) != 0) {
      ++notified_;
      w.pending = true;
    }
    if (w.pending) {
      full(name, w);
      continue;
    }
    if (now < w.next) continue;
    w.next = now + settings_.fast_interval;
    if (w.near) {
      full(name, w);
    } else if (h_->version() == 2 || !w.armed) {
      readLight(name, w, now_ns, wall_ns);
      read = true;
      if (w.near) full(name, w);  // crossed: read it whole now
    } else {
      // v1 below its armed usage threshold: the kernel would have said had it crossed.
      forecaster_.calmUntil(name, now_ns);
    }
  }
  return read;
}

EarlyWarning::Clock::time_point EarlyWarning::nextDue() const {
  auto next = Clock::time_point::max();
  if (!settings_.enabled) return next;
  for (const auto& [name, w] : watched_) next = std::min(next, w.pending ? w.last_full + kMinFullGap : w.next);
  return next;
}

nlohmann::json EarlyWarning::document(const Snapshot* snap) const {
  nlohmann::json doc = warningsDocument(forecaster_, snap);
  std::size_t fast = 0;
  for (const auto& [name, w] : watched_) fast += w.near ? 1 : 0;
  doc["enabled"] = settings_.enabled;
  doc["eta_threshold_seconds"] = std::chrono::duration<double>(settings_.eta).count();
  doc["watched"] = {{"bounds", watched_.size()},
                    {"fast", fast},
                    {"notifications", events_ ? events_->watched() : 0},
                    {"notified_readings", notified_}};
  return doc;
}

WarningVerdict EarlyWarning::killed(const std::string& cgroup, std::int64_t kill_ns) {
  WarningVerdict v = forecaster_.verdict(cgroup, kill_ns);
  forecaster_.killed(cgroup, kill_ns);
  return v;
}

}  // namespace headroom
