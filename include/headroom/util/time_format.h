// Times for people and logs, always in UTC.
#pragma once

#include <cstdint>
#include <string>

namespace headroom {

enum class UtcFormat {
  kDateTime,   // "2026-12-02 14:03:11 UTC"
  kClock,      // "14:03:11 UTC"
  kIsoMillis,  // "2026-12-02T14:03:11.123Z"
};

// `unix_ms`: milliseconds since the epoch. A time the C library cannot break down is "?".
std::string formatUtcMs(std::int64_t unix_ms, UtcFormat format = UtcFormat::kDateTime);
// The same from seconds (a fraction is truncated to the millisecond).
std::string formatUtc(double unix_seconds, UtcFormat format = UtcFormat::kDateTime);

}  // namespace headroom
