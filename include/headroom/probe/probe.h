// The empirical probe: how much more can really be allocated in a cgroup right now. A child
// process allocates and touches memory chunk by chunk, in a sub-cgroup of its own with a hard
// limit where the hierarchy allows, while the parent reads every bound live and stops before
// the nearest one; then it releases and waits for usage to come back.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "headroom/model/snapshot.h"
#include "headroom/sources/cgroup.h"
#include "headroom/sources/collector.h"
#include "headroom/sources/fs_root.h"
#include "headroom/util/result.h"

namespace headroom {

enum class TouchMode { kPopulate, kMemset, kThreads };
const char* toString(TouchMode m);
Result<TouchMode> touchModeFromString(std::string_view s);

struct ProbeOptions {
  std::string cgroup;                        // target, a path inside the memory hierarchy; "" = the caller's own
  std::optional<std::uint64_t> stop_margin;  // default: 2 GiB, scaled down for small bounds
  std::uint64_t chunk = 1ULL << 30;          // largest step
  TouchMode touch = TouchMode::kPopulate;
  unsigned threads = 0;                    // touching threads; 0 = the cores available
  std::optional<std::uint64_t> max_bytes;  // never allocate more than this
  std::chrono::milliseconds reclaim_timeout{30000};
};

// Which bound the probe ran against, and the margin it kept.
struct ProbeBound {
  std::string name;  // cgroup path, or "host" (MemAvailable) for an unlimited hierarchy
  std::string kind;  // "limit", "memory.high", "hierarchical_memory_limit", "MemAvailable"
  std::uint64_t limit = 0;
  std::uint64_t usage_before = 0;
};

// The decision after one chunk, from live readings (pure: unit-tested on its own).
struct ProbeReading {
  std::vector<ProbeBound> bounds;  // every bound with its usage now (usage_before = now here)
  std::uint64_t usage = 0;         // the target's own usage (it may have no limit of its own)
  std::uint64_t oom_kills = 0;     // the target's own OOM-kill counter
  // Signs that the kernel struggles: counters that must not rise while probing.
  std::uint64_t events_high = 0, events_max = 0, events_oom = 0;  // v2 memory.events
  bool under_oom = false;                                         // v1
  std::optional<std::uint64_t> pressure_some_us;                  // PSI total (cgroup, or host)
  std::int64_t time_ns = 0;                                       // CLOCK_MONOTONIC of the reading
};

enum class ProbeStep { kContinue, kStopNearBound, kStopMaxBytes, kAbortPressure };
struct ProbeDecision {
  ProbeStep step = ProbeStep::kContinue;
  std::uint64_t next_chunk = 0;  // bytes, when kContinue
  std::uint64_t room = 0;        // distance to the nearest bound now
  std::string bound;             // its name
  std::string reason;            // in words
};

// Stop margin for a bound of this size when none was given: 2 GiB, or 1/16 of the bound for
// bounds under 32 GiB, at least 16 MiB.
std::uint64_t defaultStopMargin(std::uint64_t tightest_limit);

// After a chunk: continue with how much, or stop / abort and why. `first` is the reading
// before the first chunk (the counters' baseline); `allocated` what the probe holds.
ProbeDecision decideProbeStep(const ProbeReading& first, const ProbeReading& now, std::uint64_t allocated,
                              const ProbeOptions& opts, std::uint64_t margin);

struct ProbeResult {
  // The old tool's contract (kept so its scripts keep working).
  std::uint64_t cgroup_limit_bytes = 0;  // the tightest bound's limit
  std::uint64_t usage_before_bytes = 0;
  std::uint64_t allocated_bytes = 0;
  std::uint64_t usage_peak_bytes = 0;
  std::uint64_t usage_after_bytes = 0;
  std::int64_t overhead_bytes = 0;  // peak - before - allocated
  std::uint64_t probe_chunks = 0;
  // New.
  std::string cgroup;  // the target
  ProbeBound bound;    // the bound that applied
  std::uint64_t stop_margin_bytes = 0;
  std::uint64_t allocatable_bytes = 0;  // allocated + the room left at the peak
  std::string placement;                // "sub-cgroup /x/headroom-probe-123 (limit N)" or "target, oom_score_adj=1000"
  std::string touch;                    // populate, memset, threads (and a fallback note)
  unsigned threads = 0;
  double touch_seconds = 0;
  double bytes_per_second = 0;
  std::int64_t others_growth_bytes = 0;    // RSS growth of the other processes during the probe
  std::int64_t kernel_overhead_bytes = 0;  // overhead - others' growth
  std::vector<std::pair<std::string, std::int64_t>> kernel_overhead_parts;  // by memory.stat/kmem delta
  double reclaim_seconds = 0;
  bool reclaimed = false;  // usage came back near the start within the timeout
  std::string stop_reason;
  bool aborted = false;                                     // pressure rose: partial results, exit code 3
  std::uint64_t oom_kills_before = 0, oom_kills_after = 0;  // the target's own counter
  double started_at = 0;                                    // unix time
  double duration_seconds = 0;
};

// The probe's reading parts, exposed for tests on fixture trees.
namespace detail {
// Every bound on `path` now: itself and each ancestor with a limit (and memory.high on v2),
// and the host's MemAvailable; with the target's usage, OOM kills and struggle counters.
Result<ProbeReading> readProbeBounds(const FsRoot& fs, const CgroupHierarchy& h, const std::string& path);
// Whether a sub-cgroup of `path` can carry the memory controller (v1: always; v2: when `path`
// delegates it in cgroup.subtree_control).
bool probeSubCgroupPossible(const CgroupHierarchy& h, const std::string& path);
}  // namespace detail

// Runs the probe (forks the child; the caller must be single-threaded or accept fork's rules:
// the agent runs `headroom probe` as a subprocess instead). Errors are bad input or an
// environment that cannot be probed; an abort for pressure is a result with `aborted`.
Result<ProbeResult> runProbe(const FsRoot& fs, const Collector& collector, const ProbeOptions& opts);

}  // namespace headroom
