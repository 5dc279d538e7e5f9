// The agent's early warning: every bound of the watched cgroups (each limit above them, and the
// host) read at each sample; between samples, those near their limit read fast, those that are
// not polled for their usage alone (v2) or left to the kernel's usage threshold (v1), and any the
// kernel notifies of (memory.events, PSI, eventfd) read at once. Feeds the forecaster, whose time
// to OOM and warnings the agent publishes and hands to the prover's hook. Where v1 cannot arm a
// threshold (no write access to cgroup.event_control), its usage is polled as v2's is.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "headroom/controller/warning.h"
#include "headroom/journal/flight_recorder.h"
#include "headroom/model/oom_forecast.h"
#include "headroom/model/snapshot.h"
#include "headroom/sources/cgroup.h"
#include "headroom/sources/cgroup_events.h"
#include "headroom/sources/cgroup_files.h"
#include "headroom/sources/fs_root.h"

namespace headroom {

class EarlyWarning {
 public:
  using Clock = std::chrono::steady_clock;
  EarlyWarning(const FsRoot& fs, const CgroupHierarchy& h, const WarningSettings& s);

  void configure(const WarningSettings& s);
  bool enabled() const { return settings_.enabled; }
  // Whether a bound's usage is where its cgroup is read fast (at or above half its limit).
  bool near(const Bound& b) const { return b.limit > 0 && nearLimit(b.usage, b.limit); }

  // A regular sample: a full reading of every bound, and which to watch until the next.
  void sample(const Snapshot& snap);
  // Reads the bounds due by now and those the kernel notified of; true when it read any.
  bool tick(CgroupFileCache& files);
  // When tick() has something to do next (far away when nothing is watched).
  Clock::time_point nextDue() const;
  // Readable when the kernel notified of a watched cgroup (-1: no notifications here).
  int fd() const { return events_ ? events_->fd() : -1; }

  // The fast readings since the last call, by bound, for the flight recorder.
  std::vector<std::pair<std::string, FlightPoint>> takeFastPoints() { return std::exchange(fast_points_, {}); }
  // Warnings started or ended since the last call.
  std::vector<WarningEpisode> takeChanges() { return forecaster_.takeChanges(); }
  // /v1/warnings: the model's warningsDocument with {"enabled", "eta_threshold_seconds",
  // "watched": {"bounds", "fast", "notifications", "notified_readings"}}.
  nlohmann::json document(const Snapshot* snap) const;

  // At a kill of the OOM domain `cgroup` ("host" for a global OOM) at `kill_ns`: whether it was
  // warned of; then its episode ends and its trend starts afresh.
  WarningVerdict killed(const std::string& cgroup, std::int64_t kill_ns);
  const OomForecaster& forecaster() const { return forecaster_; }

 private:
  struct Watched {
    std::uint64_t limit = 0;
    bool near = false;
    Clock::time_point next{};              // its next reading
    Clock::time_point last_full{};         // its last whole reading
    bool pending = false;                  // a whole reading is asked for (a notification, a crossing)
    bool armed = false;                    // the kernel notifies of it (v1: its usage threshold)
    std::optional<Dir> dir;                // its usage polled through it (v2, or v1 without a threshold)
    std::vector<GrowerReading> processes;  // the largest under it at the last sample
  };
  void readFull(const std::string& bound, Watched& w, CgroupFileCache& files, std::int64_t now_ns,
                std::int64_t wall_ns);
  void readLight(const std::string& bound, Watched& w, std::int64_t now_ns, std::int64_t wall_ns);
  // Whether `usage` is at or above the share of `limit` that is read fast.
  bool nearLimit(std::uint64_t usage, std::uint64_t limit) const;

  const FsRoot* fs_;
  const CgroupHierarchy* h_;
  WarningSettings settings_;
  OomForecaster forecaster_;
  std::optional<CgroupEvents> events_;
  std::map<std::string, Watched> watched_;  // cgroup bounds; the host is read at samples only
  std::uint64_t notified_ = 0;              // readings the kernel's notifications brought
  std::vector<std::pair<std::string, FlightPoint>> fast_points_;
};

}  // namespace headroom
