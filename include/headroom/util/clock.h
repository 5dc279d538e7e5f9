// The clocks headroom stamps things with, read in one place: CLOCK_MONOTONIC for ages, waits
// and the kernel's own event stamps (bpf_ktime_get_ns, /dev/kmsg), CLOCK_REALTIME for people.
#pragma once

#include <time.h>

#include <cstdint>

namespace headroom {

inline std::int64_t clockNs(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// CLOCK_MONOTONIC in nanoseconds: the clock of BPF events, kernel log stamps and samples.
inline std::int64_t monotonicNs() { return clockNs(CLOCK_MONOTONIC); }
// CLOCK_REALTIME in nanoseconds.
inline std::int64_t realtimeNs() { return clockNs(CLOCK_REALTIME); }
// CLOCK_REALTIME in seconds since the epoch, as JSON documents and metrics carry time.
inline double unixSeconds() { return static_cast<double>(realtimeNs()) / 1e9; }

}  // namespace headroom
