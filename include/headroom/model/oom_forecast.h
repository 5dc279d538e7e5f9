// Time to OOM: per bound (a cgroup with a limit, or the host), a robust trend of what the kernel
// cannot reclaim, the room left under the limit and the kernel's own pressure signals; warning
// episodes when the time to OOM drops under a threshold, and at a kill, whether one was given. Pure.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/model/snapshot.h"

namespace headroom {

struct ForecastPolicy {
  std::int64_t window_ns = 30'000'000'000;    // the trend is taken over this
  std::int64_t warn_eta_ns = 30'000'000'000;  // a warning starts under this time to OOM
  // A rise from calm to the kill shorter than this cannot be warned of ("no warning possible").
  std::int64_t min_lead_ns = 1'000'000'000;
  // A bound holding at least this share of its limit is read fast (and a warning's episode ends
  // only once the time to OOM has stayed above twice the threshold for clear_after_ns).
  double near_fraction = 0.5;
  std::int64_t clear_after_ns = 10'000'000'000;
  // A trend is trusted when its points agree (Kendall's tau, -1..1) at least this much, span
  // at least min_span_ns with min_points, and grew by at least min_growth_bytes (or min_growth_share
  // of the limit, the larger) over the window it was taken on.
  double min_agreement = 0.6;
  std::size_t min_points = 4;
  std::int64_t min_span_ns = 2'000'000'000;
  std::uint64_t min_growth_bytes = 2ULL << 20;
  double min_growth_share = 0.005;
  std::size_t max_points = 96;  // per bound, newest kept
};

// A process under a bound at one reading: what the report and the hook name as growers.
struct GrowerReading {
  pid_t pid = 0;
  std::string comm;
  std::string cgroup;
  std::uint64_t rss = 0;
};

// One reading of a bound. A light reading (usage alone: the one file a calm bound is polled for)
// keeps the reclaimable figure of the last full one.
struct BoundReading {
  std::string bound;         // the cgroup path with the limit, or "host"
  std::int64_t time_ns = 0;  // CLOCK_MONOTONIC
  std::int64_t wall_ns = 0;  // CLOCK_REALTIME
  std::uint64_t limit = 0;
  std::uint64_t usage = 0;
  std::optional<std::uint64_t> reclaimable;  // absent: a light reading
  // The kernel's own signals, as read (counters cumulative): v2 memory.events max/high/oom, v1
  // failcnt, PSI some/full avg10 (v2 memory.pressure, the host's for "host").
  std::optional<std::uint64_t> events_max, events_high, events_oom, failcnt;
  std::optional<double> psi_some, psi_full;
  std::vector<GrowerReading> processes;  // the largest under the bound (may be empty)
};

enum class Confidence { kNone, kLow, kMedium, kHigh };
const char* toString(Confidence c);
// 0, 1/3, 2/3, 1: the metric's value.
double confidenceRatio(Confidence c);

struct Grower {
  pid_t pid = 0;
  std::string comm, cgroup;
  std::uint64_t rss = 0;
  double growth_bytes_per_second = 0;  // over what the window shows of it
};

// The forecast for one bound, now.
struct OomEta {
  std::string bound;
  std::int64_t time_ns = 0, wall_ns = 0;  // of the newest reading
  std::uint64_t limit = 0, usage = 0, reclaimable = 0;
  std::uint64_t held = 0;              // usage - reclaimable: what the kernel cannot drop at once
  std::uint64_t room = 0;              // limit - held
  double growth_bytes_per_second = 0;  // the trend of held (Theil-Sen: the median of pairwise slopes)
  double agreement = 0;                // Kendall's tau of held over time
  std::size_t points = 0;
  double span_seconds = 0;
  std::optional<double> eta_seconds;  // room / growth; nullopt: not growing toward the limit
  Confidence confidence = Confidence::kNone;
  bool near = false;                 // held at or above near_fraction of the limit
  std::vector<std::string> signals;  // the kernel's, in words: "memory.events max +12", "PSI some 4.2%"
  std::string why;                   // why no warning can rest on it, when none can
  std::vector<Grower> growers;       // fastest growing first, at most 5
  bool warns(const ForecastPolicy& p) const;
};

// One warning: from the moment the time to OOM dropped under the threshold until it rose well
// above it again, the bound's OOM kill, or the bound's end.
struct WarningEpisode {
  std::uint64_t id = 0;  // rises for every episode
  std::string bound;
  std::int64_t started_ns = 0, started_wall_ns = 0;
  OomEta at_start;  // the forecast that started it
  OomEta latest;
  std::optional<std::int64_t> ended_ns;
  std::string end_reason;           // "cleared", "killed", "gone"
  std::int64_t above_since_ns = 0;  // 0: the time to OOM is under twice the threshold
};

enum class WarningVerdictKind {
  kWarned,             // an episode had started before the kill
  kNoWarningPossible,  // calm less than min_lead before the kill
  kMissed,             // seen rising, but no warning
  kUnobserved,         // calm at the last reading, which was longer than min_lead before the kill
  kUnwatched,          // no reading of the bound at all
};
const char* toString(WarningVerdictKind k);

// Whether a kill was warned of, and how long before.
struct WarningVerdict {
  WarningVerdictKind kind = WarningVerdictKind::kUnwatched;
  std::string bound;
  std::optional<std::uint64_t> episode;
  std::optional<double> lead_seconds;          // warned: from the warning to the kill
  std::optional<double> eta_seconds;           // warned: the time to OOM said when it began
  std::optional<std::int64_t> warned_wall_ns;  // warned: when
  std::optional<double> calm_seconds;          // how long before the kill it was last seen calm
  std::string text;                            // the verdict in one sentence
};

class OomForecaster {
 public:
  explicit OomForecaster(ForecastPolicy p = {}) : policy_(p) {}
  void setPolicy(const ForecastPolicy& p) { policy_ = p; }
  const ForecastPolicy& policy() const { return policy_; }

  // Adds a reading and updates the bound's episode.
  void observe(const BoundReading& r);
  // The bound was below its near share at `time_ns` (a threshold crossed upwards says so for the
  // time just before it): a calm moment, for the verdict at a kill.
  void calmUntil(const std::string& bound, std::int64_t time_ns);
  // The bound's OOM kill at `time_ns`: its episode ends ("killed"), and its trend starts afresh.
  void killed(const std::string& bound, std::int64_t time_ns);
  // Forgets bounds not read since `before_ns` (their episodes end as "gone").
  void forgetUnseen(std::int64_t before_ns);

  std::optional<OomEta> eta(std::string_view bound) const;
  // The episodes in force now.
  std::vector<const WarningEpisode*> active() const;
  // Episodes started or ended since the last call, in order.
  std::vector<WarningEpisode> takeChanges();
  // Whether the kill of `bound` at `kill_ns` (CLOCK_MONOTONIC) was warned of.
  WarningVerdict verdict(std::string_view bound, std::int64_t kill_ns) const;

 private:
  struct Point {
    std::int64_t t = 0;
    std::uint64_t held = 0;
    bool calm = false;
  };
  struct Signals {
    std::int64_t t = 0;
    std::optional<std::uint64_t> events_max, events_high, events_oom, failcnt;
  };
  struct Track {
    std::deque<Point> points;     // full readings, the newest last
    std::int64_t reset_ns = 0;    // the trend uses points after this (the bound's last kill)
    BoundReading last;            // the newest reading, its reclaimable filled in
    std::deque<Signals> signals;  // full readings' counters in the window, for their deltas
    std::map<pid_t, std::deque<std::pair<std::int64_t, GrowerReading>>> procs;
    std::int64_t last_seen_ns = 0;
    std::optional<OomEta> eta;
    std::optional<WarningEpisode> episode;
    std::deque<std::int64_t> calm_times;  // the newest last
  };
  OomEta compute(const Track& t) const;
  void endEpisode(Track& t, std::int64_t when, const char* reason);

  ForecastPolicy policy_;
  std::map<std::string, Track, std::less<>> tracks_;
  std::deque<WarningEpisode> ended_;  // the newest last, a few kept for verdicts
  std::vector<WarningEpisode> changes_;
  std::uint64_t next_id_ = 1;
};

// Every bound of the snapshot's cgroups as the sample read it: each cgroup bound with the kernel's
// signals where the snapshot holds that cgroup, the host with its PSI; each with its largest
// processes (by RSS, at most `processes_per_bound`).
std::vector<BoundReading> boundReadings(const Snapshot& snap, std::size_t processes_per_bound = 8);
// The kernel's signals of one cgroup's files onto a reading (v2 memory.events, v1 failcnt, PSI).
void addSignals(BoundReading& r, const CgroupMemory& cg);

// A cgroup's forecast: of its bound nearest to OOM (the smallest time to OOM; without any, the one
// with the least room); nullopt when none of its bounds was read.
std::optional<OomEta> nearestEta(const OomForecaster& f, const std::vector<Bound>& bounds);
// The warning in force for one of `bounds` (the nearest to OOM), or nullptr.
const WarningEpisode* warningFor(const OomForecaster& f, const std::vector<Bound>& bounds);

// The documents (/v1/warnings, the hook's JSON, the journal record's `warning`; docs/warnings.md).
// {bound, limit_bytes, usage_bytes, reclaimable_bytes, held_bytes, room_bytes,
//  growth_bytes_per_second, eta_seconds (null: not growing), confidence, agreement, points,
//  span_seconds, near, signals, why, growers [{pid, comm, cgroup, rss_bytes, growth_bytes_per_second}]}
nlohmann::json toJson(const OomEta& e);
// {id, bound, since (unix seconds), eta_at_start_seconds, confidence_at_start, ended, end_reason, latest}
nlohmann::json toJson(const WarningEpisode& w);
// What /v1/warnings and `headroom top` show: {"warnings": [toJson(episode) with "cgroups" (the
// snapshot's cgroups under its bound)], "cgroups": [{cgroup, eta_seconds (trusted only, else
// null), growth_bytes_per_second, confidence, warning}] for each of the snapshot's cgroups}.
nlohmann::json warningsDocument(const OomForecaster& f, const Snapshot* snap);
// {verdict, text, lead_seconds, eta_seconds, warned_at, calm_seconds, episode}: null where absent.
nlohmann::json toJson(const WarningVerdict& v);

// The trend of (t, v) points: Theil-Sen slope (per second) and Kendall's tau. Exposed for tests.
struct Trend {
  double slope = 0;
  double agreement = 0;
};
Trend robustTrend(const std::vector<std::pair<std::int64_t, double>>& points);

}  // namespace headroom
