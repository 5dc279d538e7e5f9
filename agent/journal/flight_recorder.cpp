#include "headroom/journal/flight_recorder.h"

#include <algorithm>
#include <span>

#include "headroom/model/snapshot_json.h"

namespace headroom {

using nlohmann::json;

static_assert(FlightParts::kSlots == static_cast<std::size_t>(PartKind::kKernelOther) + 2,
              "a slot for each PartKind and one for unattributed");

std::string_view FlightParts::nameOf(std::size_t i) {
  return i + 1 == kSlots ? std::string_view("unattributed") : std::string_view(toString(static_cast<PartKind>(i)));
}

std::optional<std::size_t> FlightParts::indexOf(std::string_view name) {
  for (std::size_t i = 0; i < kSlots; ++i) {
    if (nameOf(i) == name) return i;
  }
  return std::nullopt;
}

FlightParts::FlightParts(std::initializer_list<std::pair<std::string_view, std::uint64_t>> parts) {
  for (const auto& [name, bytes] : parts) {
    if (std::uint64_t* s = slot(name)) *s = bytes;
  }
}

std::uint64_t* FlightParts::slot(std::string_view name) {
  auto i = indexOf(name);
  return i ? slot(*i) : nullptr;
}

std::size_t FlightParts::count(std::string_view name) const {
  auto i = indexOf(name);
  return i && (present_ & (1U << *i)) != 0 ? 1 : 0;
}

std::uint64_t FlightParts::at(std::string_view name) const {
  auto i = indexOf(name);
  return i && (present_ & (1U << *i)) != 0 ? values_[*i] : 0;
}

std::pair<std::string_view, std::uint64_t> FlightParts::Iterator::operator*() const {
  return {nameOf(i_), p_->values_[i_]};
}

FlightParts::Iterator& FlightParts::Iterator::operator++() {
  ++i_;
  skip();
  return *this;
}

void FlightParts::Iterator::skip() {
  while (i_ < kSlots && (p_->present_ & (1U << i_)) == 0) ++i_;
}

nlohmann::json toJson(const FlightPoint& p) {
  json parts = json::object();
  for (const auto& [k, v] : p.parts) parts[std::string(k)] = v;
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
  std::vector<std::size_t> largest;
  // Every process's RSS by index, from the snapshot's columns: the sorts below compare these,
  // not the processes.
  const auto columns = columnsOf(snap);
  const std::vector<std::uint64_t>& rss = columns->rss;
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
    for (const Part& part : c.attribution.parts) p.parts[part.kind] += part.bytes;
    if (c.attribution.unattributed > 0) p.parts.unattributed() = static_cast<std::uint64_t>(c.attribution.unattributed);
    if (auto it = self_reported.find(c.memory.path); it != self_reported.end()) p.self_reported = it->second;
    p.reclaimable = reclaimableBytes(c.memory);
    // The largest few: picked among the indices (a cgroup high in the tree holds every process
    // below it), copied alone.
    largest.clear();
    for (std::size_t i : c.processes) {
      if (i < snap.processes.size()) largest.push_back(i);
    }
    const auto rssOf = [&](std::size_t i) { return rss[i]; };
    const auto keep = static_cast<std::ptrdiff_t>(std::min(largest.size(), kFlightProcesses));
    std::partial_sort(largest.begin(), largest.begin() + keep, largest.end(),
                      [&](std::size_t a, std::size_t b) { return rssOf(a) != rssOf(b) ? rssOf(a) > rssOf(b) : a < b; });
    p.processes.reserve(static_cast<std::size_t>(keep));
    for (std::size_t i : std::span(largest).first(static_cast<std::size_t>(keep))) {
      const ProcessSnapshot& q = snap.processes[i];
      p.processes.push_back(FlightProcess{q.sample.pid, q.sample.comm, q.attribution.rss});
    }
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
