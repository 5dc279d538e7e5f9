#include "headroom/util/time_format.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <ctime>

namespace headroom {

std::string formatUtcMs(std::int64_t unix_ms, UtcFormat format) {
  // Floor division: a time before the epoch still has its milliseconds in [0, 1000).
  std::int64_t secs = unix_ms / 1000 - (unix_ms % 1000 < 0 ? 1 : 0);
  auto ms = static_cast<int>(unix_ms - secs * 1000);
  auto t = static_cast<std::time_t>(secs);
  std::tm tm{};
  if (gmtime_r(&t, &tm) == nullptr) return "?";
  std::array<char, 48> buf{};
  const char* pattern = format == UtcFormat::kClock       ? "%H:%M:%S UTC"
                        : format == UtcFormat::kIsoMillis ? "%Y-%m-%dT%H:%M:%S"
                                                          : "%Y-%m-%d %H:%M:%S UTC";
  std::size_t n = std::strftime(buf.data(), buf.size(), pattern, &tm);
  std::string out(buf.data(), n);
  if (format == UtcFormat::kIsoMillis) out += fmt::format(".{:03d}Z", ms);
  return out;
}

std::string formatUtc(double unix_seconds, UtcFormat format) {
  if (!std::isfinite(unix_seconds) || std::fabs(unix_seconds) > 9e15) return "?";
  return formatUtcMs(static_cast<std::int64_t>(std::floor(unix_seconds * 1000)), format);
}

}  // namespace headroom
