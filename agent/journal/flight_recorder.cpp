#include "headroom/journal/flight_recorder.h"

#include <algorithm>

#include "headroom/model/snapshot_json.h"

namespace headroom {

using nlohmann::json;

nlohmann::json toJson(const FlightPoint& p) {
  json parts = json::object();
  for (const auto& [k, v] : p.parts) parts[k] = v;
  json processes = json::array();
  for (const FlightProcess& q : p.processes)
    processes.push_back({{"pid", q.pid}, {"comm", q.comm}, {"rss_bytes", q.rss}});
  return {{"time", static_cast<double>(p.wall_time_ns) / 1e9},
          {"usage_bytes", p.usage},
          {"limit_bytes", p.limit ? json(*p.limit) : json(nullptr)},
          {"parts", parts},
          {"self_reported_bytes", p.self_reported ? json(*p.self_reported) : json(nullptr)},
          {"fast", p.fast},
          {"reclaimable_bytes", p.reclaimable ? json(*p.reclaimable) : json(nullptr)},
          {"processes", std::move(processes)}};
}

void FlightRecorder::record(const Snapshot& snap, const std::map<std::string, std::uint64_t>& self_reported) {
  const std::int64_t now = snap.monotonic_time_ns != 0 ? snap.monotonic_time_ns : snap.wall_time_ns;
  std::size_t taken = 0;
  for (const CgroupSnapshot& c : snap.cgroups) {
    if (taken == max_cgroups_) break;
    ++taken;
    FlightPoint p;
    p.wall_time_ns = snap.wall_time_ns;
    p.completed_monotonic_ns = snap.completed_monotonic_ns;
    p.usage = c.memory.usage;
    if (c.tightest) {
      p.limit = c.tightest->limit;
    } else {
      p.limit = c.memory.limit;
    }
    for (const Part& part : c.attribution.parts) p.parts[toString(part.kind)] += part.bytes;
    if (c.attribution.unattributed > 0)
      p.parts["unattributed"] = static_cast<std::uint64_t>(c.attribution.unattributed);
    if (auto it = self_reported.find(c.memory.path); it != self_reported.end()) p.self_reported = it->second;
    p.reclaimable = reclaimableBytes(c.memory);
    for (std::size_t i : c.processes) {
      if (i >= snap.processes.size()) continue;
      const ProcessSnapshot& q = snap.processes[i];
      p.processes.push_back(FlightProcess{q.sample.pid, q.sample.comm, q.attribution.rss});
    }
    std::sort(p.processes.begin(), p.processes.end(),
              [](const FlightProcess& a, const FlightProcess& b) { return a.rss > b.rss; });
    if (p.processes.size() > kFlightProcesses) p.processes.resize(kFlightProcesses);
    auto& ring = rings_[c.memory.path];
    // The clock never runs back within one agent; a ring that says otherwise is stale.
    if (!ring.empty() && ring.back().age_ns > now) ring.clear();
    ring.push_back({now, std::move(p)});
  }
  // Age out points (and so cgroups not seen for a whole window).
  for (auto it = rings_.begin(); it != rings_.end();) {
    auto& ring = it->second;
    while (!ring.empty() && now - ring.front().age_ns > window_ns_) ring.pop_front();
    it = ring.empty() ? rings_.erase(it) : std::next(it);
  }
  // Too many cgroups: drop those seen longest ago (never one seen now, since at most
  // max_cgroups were taken from this snapshot).
  while (rings_.size() > max_cgroups_) {
    auto oldest = std::min_element(rings_.begin(), rings_.end(), [](const auto& a, const auto& b) {
      return a.second.back().age_ns < b.second.back().age_ns;
    });
    rings_.erase(oldest);
  }
}

void FlightRecorder::add(const std::string& cgroup, FlightPoint point) {
  const std::int64_t at = point.completed_monotonic_ns;
  if (point.processes.size() > kFlightProcesses) point.processes.resize(kFlightProcesses);
  if (!rings_.contains(cgroup) && rings_.size() >= max_cgroups_) return;
  auto& ring = rings_[cgroup];
  auto pos =
      std::upper_bound(ring.begin(), ring.end(), at, [](std::int64_t t, const Entry& e) { return t < e.age_ns; });
  ring.insert(pos, Entry{at, std::move(point)});
  while (!ring.empty() && at - ring.front().age_ns > window_ns_) ring.pop_front();
}

std::vector<FlightPoint> FlightRecorder::points(const std::string& cgroup) const {
  std::vector<FlightPoint> out;
  auto it = rings_.find(cgroup);
  if (it == rings_.end()) return out;
  out.reserve(it->second.size());
  for (const Entry& e : it->second) out.push_back(e.point);
  return out;
}

}  // namespace headroom
