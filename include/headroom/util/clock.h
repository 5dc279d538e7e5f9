// The clocks headroom stamps things with, read in one place: CLOCK_MONOTONIC for ages, waits
// and the kernel's own event stamps (bpf_ktime_get_ns, /dev/kmsg), CLOCK_REALTIME for people.
#pragma once

#include <sys/resource.h>
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

// The calling thread's CPU time so far, user and system apart (getrusage(RUSAGE_THREAD)): what
// one phase of a sample cost is the difference of two readings.
struct ThreadCpu {
  std::int64_t user_ns = 0, system_ns = 0;
  ThreadCpu& operator+=(const ThreadCpu& o) {
    user_ns += o.user_ns;
    system_ns += o.system_ns;
    return *this;
  }
  friend ThreadCpu operator+(ThreadCpu a, const ThreadCpu& b) { return a += b; }
  friend ThreadCpu operator-(ThreadCpu a, const ThreadCpu& b) {
    a.user_ns -= b.user_ns;
    a.system_ns -= b.system_ns;
    return a;
  }
};
inline ThreadCpu threadCpu() {
  rusage ru{};
  ::getrusage(RUSAGE_THREAD, &ru);
  auto ns = [](const timeval& t) { return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_usec * 1000; };
  return ThreadCpu{ns(ru.ru_utime), ns(ru.ru_stime)};
}

}  // namespace headroom
