// The probe's decisions, from readings alone (no I/O): how big the next chunk may be, and
// when to stop or abort.
#include <fmt/format.h>

#include <algorithm>

#include "headroom/probe/probe.h"
#include "headroom/util/units.h"

namespace headroom {
namespace {

constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::uint64_t kGiB = 1ULL << 30;
// Steps are whole huge pages; a step under this is not worth taking.
constexpr std::uint64_t kStepAlign = 2 * kMiB;
constexpr std::uint64_t kMinStep = 4 * kMiB;
// Stall time (PSI "some") above this share of the probe's wall time: the kernel struggles.
constexpr double kPressureShare = 0.25;
// ...and at least this much of it, so that one short stall is not taken for struggle.
constexpr std::uint64_t kPressureFloorUs = 200'000;

}  // namespace

const char* toString(TouchMode m) {
  switch (m) {
    case TouchMode::kPopulate: return "populate";
    case TouchMode::kMemset: return "memset";
    case TouchMode::kThreads: return "threads";
  }
  return "?";
}

Result<TouchMode> touchModeFromString(std::string_view s) {
  if (s == "populate") return TouchMode::kPopulate;
  if (s == "memset") return TouchMode::kMemset;
  if (s == "threads") return TouchMode::kThreads;
  return badInput(fmt::format("\"{}\" is not a touch mode (populate, memset, threads)", s));
}

std::uint64_t defaultStopMargin(std::uint64_t tightest_limit) {
  if (tightest_limit >= 32 * kGiB) return 2 * kGiB;
  return std::max<std::uint64_t>(tightest_limit / 16, 16 * kMiB);
}

ProbeDecision decideProbeStep(const ProbeReading& first, const ProbeReading& now, std::uint64_t allocated,
                              const ProbeOptions& opts, std::uint64_t margin) {
  ProbeDecision d;
  bool have_bound = false;
  for (const ProbeBound& b : now.bounds) {
    std::uint64_t room = b.limit > b.usage_before ? b.limit - b.usage_before : 0;
    if (!have_bound || room < d.room) {
      d.room = room;
      d.bound = b.name + " " + b.kind;
      have_bound = true;
    }
  }
  // The kernel struggling is a reason to stop at once, whatever the room.
  if (now.events_high > first.events_high) {
    d.step = ProbeStep::kAbortPressure;
    d.reason = fmt::format("memory.events high rose by {}: the cgroup is over memory.high and throttled",
                           now.events_high - first.events_high);
    return d;
  }
  if (now.events_max > first.events_max || now.events_oom > first.events_oom) {
    d.step = ProbeStep::kAbortPressure;
    d.reason = fmt::format("memory.events max/oom rose ({} -> {}, {} -> {}): the cgroup hit its limit",
                           first.events_max, now.events_max, first.events_oom, now.events_oom);
    return d;
  }
  if (now.under_oom) {
    d.step = ProbeStep::kAbortPressure;
    d.reason = "memory.oom_control says under_oom: the cgroup is in OOM";
    return d;
  }
  if (first.pressure_some_us && now.pressure_some_us && *now.pressure_some_us > *first.pressure_some_us &&
      now.time_ns > first.time_ns) {
    std::uint64_t stalled = *now.pressure_some_us - *first.pressure_some_us;
    double wall_us = static_cast<double>(now.time_ns - first.time_ns) / 1e3;
    if (stalled > kPressureFloorUs && static_cast<double>(stalled) > kPressureShare * wall_us) {
      d.step = ProbeStep::kAbortPressure;
      d.reason = fmt::format("memory pressure rose: tasks stalled {:.2f} s of the probe's {:.2f} s",
                             static_cast<double>(stalled) / 1e6, wall_us / 1e6);
      return d;
    }
  }
  if (!have_bound || d.room <= margin) {
    d.step = ProbeStep::kStopNearBound;
    d.reason = fmt::format("{} of room left under {}, within the stop margin of {}", formatBytes(d.room), d.bound,
                           formatBytes(margin));
    return d;
  }
  // Never step past the margin, and close in on it geometrically (15/16 of what is left):
  // the kernel's own overhead for the step (page tables) must fit in what remains.
  std::uint64_t next = std::min(opts.chunk, (d.room - margin) / 16 * 15);
  if (opts.max_bytes) {
    if (allocated >= *opts.max_bytes) {
      d.step = ProbeStep::kStopMaxBytes;
      d.reason = fmt::format("allocated the most asked for ({})", formatBytes(*opts.max_bytes));
      return d;
    }
    next = std::min(next, *opts.max_bytes - allocated);
  }
  next = next / kStepAlign * kStepAlign;
  if (next < kMinStep) {
    d.step =
        opts.max_bytes && allocated + kMinStep > *opts.max_bytes ? ProbeStep::kStopMaxBytes : ProbeStep::kStopNearBound;
    d.reason = fmt::format("{} of room left under {}: the next step would be under {} before the stop margin of {}",
                           formatBytes(d.room), d.bound, formatBytes(kMinStep), formatBytes(margin));
    return d;
  }
  d.step = ProbeStep::kContinue;
  d.next_chunk = next;
  d.reason = fmt::format("{} of room under {}: next chunk {}", formatBytes(d.room), d.bound, formatBytes(next));
  return d;
}

}  // namespace headroom
