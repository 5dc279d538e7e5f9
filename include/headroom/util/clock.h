// The clocks headroom stamps things with, read in one place: CLOCK_MONOTONIC for ages, waits
// and the kernel's own event stamps (bpf_ktime_get_ns, /dev/kmsg), CLOCK_REALTIME for people.
#pragma once

#include <sys/resource.h>
#include <time.h>

#include <algorithm>
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

// The calling thread's CPU time so far: `total_ns` exact (CLOCK_THREAD_CPUTIME_ID), user and
// system apart as getrusage(RUSAGE_THREAD) has them (which the kernel updates at its ticks, so
// that only their sum over many phases, not one phase's, tells how the total divides). What one
// phase of a sample cost is the difference of two readings.
struct ThreadCpu {
  std::int64_t total_ns = 0, user_ns = 0, system_ns = 0;
  ThreadCpu& operator+=(const ThreadCpu& o) {
    total_ns += o.total_ns;
    user_ns += o.user_ns;
    system_ns += o.system_ns;
    return *this;
  }
  friend ThreadCpu operator+(ThreadCpu a, const ThreadCpu& b) { return a += b; }
  friend ThreadCpu operator-(ThreadCpu a, const ThreadCpu& b) {
    a.total_ns -= b.total_ns;
    a.user_ns -= b.user_ns;
    a.system_ns -= b.system_ns;
    return a;
  }
  // The user part of the ticked time, within [0, 1] (the kernel's adjusted times can step back).
  double userShare() const {
    double u = std::max<double>(0, static_cast<double>(user_ns)),
           s = std::max<double>(0, static_cast<double>(system_ns));
    return u + s <= 0 ? 0.0 : u / (u + s);
  }
};
// CPU time summed piece by piece, each piece's exact total divided as its own ticked user and
// system times divide (a piece too short to tell: as the sum so far divides). Both parts only
// grow, and they add up to the exact total: a pair of counters.
struct SplitCpu {
  double user_s = 0, system_s = 0;
  SplitCpu& operator+=(const ThreadCpu& piece) {
    const double total = std::max<double>(0, static_cast<double>(piece.total_ns)) / 1e9;
    double share = 0;
    if (piece.user_ns > 0 || piece.system_ns > 0) {
      share = piece.userShare();
    } else if (user_s + system_s > 0) {
      share = user_s / (user_s + system_s);
    }
    user_s += total * share;
    system_s += total * (1.0 - share);
    return *this;
  }
};

inline ThreadCpu threadCpu() {
  rusage ru{};
  ::getrusage(RUSAGE_THREAD, &ru);
  auto ns = [](const timeval& t) { return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_usec * 1000; };
  return ThreadCpu{clockNs(CLOCK_THREAD_CPUTIME_ID), ns(ru.ru_utime), ns(ru.ru_stime)};
}

}  // namespace headroom
