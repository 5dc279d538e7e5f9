// The flight recorder: the last seconds of every cgroup's samples, compact, so that an OOM
// record can show what led up to the kill. Pure: snapshots in, points out.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headroom/model/snapshot.h"

namespace headroom {

// A process at one point: who grew, for the report's run-up.
struct FlightProcess {
  pid_t pid = 0;
  std::string comm;
  std::uint64_t rss = 0;
};

// A point's parts by name (the PartKind names, and "unattributed"): a slot per name, nothing
// allocated. A map of strings per point was most of the recorder's memory (a minute of points at
// 1 s samples for each of a few hundred cgroups).
class FlightParts {
 public:
  static constexpr std::size_t kSlots = 14;  // the 13 PartKinds, then "unattributed"
  FlightParts() = default;
  FlightParts(std::initializer_list<std::pair<std::string_view, std::uint64_t>> parts);
  // The slot of `name`, made present (0 until set); nullptr for a name that is no part.
  std::uint64_t* slot(std::string_view name);
  std::uint64_t& operator[](PartKind k) { return *slot(static_cast<std::size_t>(k)); }
  std::uint64_t& unattributed() { return *slot(kSlots - 1); }
  std::size_t count(std::string_view name) const;
  std::uint64_t at(std::string_view name) const;  // 0 when absent
  bool empty() const { return present_ == 0; }

  class Iterator {
   public:
    std::pair<std::string_view, std::uint64_t> operator*() const;
    Iterator& operator++();
    bool operator!=(const Iterator& o) const { return i_ != o.i_; }

   private:
    friend class FlightParts;
    Iterator(const FlightParts* p, std::size_t i) : p_(p), i_(i) { skip(); }
    void skip();
    const FlightParts* p_;
    std::size_t i_;
  };
  Iterator begin() const { return {this, 0}; }
  Iterator end() const { return {this, kSlots}; }

 private:
  static std::string_view nameOf(std::size_t i);
  static std::optional<std::size_t> indexOf(std::string_view name);
  std::uint64_t* slot(std::size_t i) {
    present_ = static_cast<std::uint16_t>(present_ | (1U << i));
    return &values_[i];
  }
  std::array<std::uint64_t, kSlots> values_{};
  std::uint16_t present_ = 0;
};

// One cgroup at one sample (or one fast reading of a cgroup near its limit), compact: what the
// report draws.
struct FlightPoint {
  std::int64_t wall_time_ns = 0;
  std::int64_t completed_monotonic_ns = 0;  // the sample's last read (0: unknown); not serialised
  std::uint64_t usage = 0;
  std::optional<std::uint64_t> limit;          // the tightest bound's limit
  FlightParts parts;                           // PartKind name -> bytes (see snapshot.h)
  std::optional<std::uint64_t> self_reported;  // what the prover said it used, when known
  bool fast = false;                           // a fast reading between samples (no parts)
  std::optional<std::uint64_t> reclaimable;    // page cache the kernel can drop at once
  std::vector<FlightProcess> processes;        // the largest in it, by RSS (at most kFlightProcesses)
};
inline constexpr std::size_t kFlightProcesses = 5;
// {time (unix seconds, float), usage_bytes, limit_bytes, parts, self_reported_bytes, fast,
// reclaimable_bytes, processes [{pid, comm, rss_bytes}]}: null when absent.
nlohmann::json toJson(const FlightPoint& p);

class FlightRecorder {
 public:
  FlightRecorder(std::int64_t window_ns = 60'000'000'000, std::size_t max_cgroups = 256)
      : window_ns_(window_ns), max_cgroups_(max_cgroups) {}
  // Records every cgroup of the snapshot (the largest max_cgroups of them, in the snapshot's
  // order); drops points older than the window and cgroups not seen for a whole window. Beyond
  // max_cgroups, the cgroups seen longest ago are dropped first. Age is measured on the
  // snapshot's monotonic clock (wall clock when it has none), so a wall-clock step cannot keep
  // or drop points. `self_reported`: by cgroup, what the prover said it used.
  void record(const Snapshot& snap, const std::map<std::string, std::uint64_t>& self_reported = {});
  // A fast reading of `cgroup` (its monotonic time in point.completed_monotonic_ns), kept in time
  // order among the samples' points, aged out with them.
  void add(const std::string& cgroup, FlightPoint point);
  // The points kept for a cgroup (oldest first); empty when unknown.
  std::vector<FlightPoint> points(const std::string& cgroup) const;
  // Takes effect at the next record().
  void setWindow(std::int64_t window_ns) { window_ns_ = window_ns; }
  std::int64_t window() const { return window_ns_; }
  std::size_t cgroups() const { return rings_.size(); }

 private:
  struct Entry {
    std::int64_t age_ns;  // the snapshot's monotonic time (wall when it has none)
    FlightPoint point;
  };
  std::int64_t window_ns_;
  std::size_t max_cgroups_;
  std::map<std::string, std::deque<Entry>> rings_;
};

}  // namespace headroom
