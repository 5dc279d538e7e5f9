#include "headroom/util/units.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>

#include "headroom/util/numbers.h"

namespace headroom {

std::string formatBytes(std::uint64_t bytes) {
  static constexpr std::array<const char*, 6> kUnits = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes);
  std::size_t u = 0;
  while (v >= 1024.0 && u + 1 < kUnits.size()) {
    v /= 1024.0;
    ++u;
  }
  if (v >= 100) return fmt::format("{:.0f} {}", v, kUnits[u]);
  if (v >= 10) return fmt::format("{:.1f} {}", v, kUnits[u]);
  return fmt::format("{:.2f} {}", v, kUnits[u]);
}

std::string formatSignedBytes(std::int64_t bytes) {
  if (bytes >= 0) return formatBytes(static_cast<std::uint64_t>(bytes));
  return fmt::format("-{}", formatBytes(static_cast<std::uint64_t>(-(bytes + 1)) + 1));
}

Result<std::uint64_t> parseSize(std::string_view text) {
  std::string_view t = trim(text);
  if (t.empty()) return badInput("empty size");
  std::size_t i = 0;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.')) ++i;
  std::string_view num = t.substr(0, i);
  std::string unit(trim(t.substr(i)));
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::uint64_t mult = 0;
  if (unit.empty() || unit == "b")
    mult = 1;
  else if (unit == "k" || unit == "kib" || unit == "kb")
    mult = 1ULL << 10;
  else if (unit == "m" || unit == "mib" || unit == "mb")
    mult = 1ULL << 20;
  else if (unit == "g" || unit == "gib" || unit == "gb")
    mult = 1ULL << 30;
  else if (unit == "t" || unit == "tib" || unit == "tb")
    mult = 1ULL << 40;
  else
    return badInput(fmt::format("size \"{}\": unknown unit \"{}\" (use B, KiB, MiB, GiB, TiB)", text, unit));
  if (num.empty()) return badInput(fmt::format("size \"{}\" has no number", text));
  if (num.find('.') == std::string_view::npos) {
    auto v = parseU64(num);
    if (!v) return badInput(fmt::format("size \"{}\": {}", text, v.error().describe()));
    if (*v > UINT64_MAX / mult) return badInput(fmt::format("size \"{}\" is too large", text));
    return *v * mult;
  }
  auto d = parseDouble(num);
  if (!d) return badInput(fmt::format("size \"{}\": {}", text, d.error().describe()));
  long double bytes = static_cast<long double>(*d) * mult;
  if (bytes >= 18446744073709551615.0L) return badInput(fmt::format("size \"{}\" is too large", text));
  return static_cast<std::uint64_t>(std::llround(static_cast<double>(bytes)));
}

}  // namespace headroom
