// `headroom report --since`: a UTC date and time in the forms people type, a unix time, or an age.
#include <fmt/format.h>

#include <array>
#include <charconv>
#include <cmath>
#include <optional>

#include "headroom/report/report.h"
#include "headroom/sources/parse.h"
#include "headroom/util/text.h"

namespace headroom {
namespace {

std::optional<double> wholeNumber(std::string_view s) {
  if (s.empty()) return std::nullopt;
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::int64_t daysFromCivil(std::int64_t y, int m, int d) {
  y -= m <= 2 ? 1 : 0;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const std::int64_t yoe = y - era * 400;
  const std::int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const std::int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

int daysInMonth(std::int64_t y, int m) {
  static constexpr std::array<int, 12> kDays = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : kDays[static_cast<std::size_t>(m - 1)];
}

// Reads exactly `digits` decimal digits at `pos` (from_chars alone would take a '-' for one).
std::optional<int> digitsAt(std::string_view s, std::size_t& pos, std::size_t digits) {
  if (pos + digits > s.size()) return std::nullopt;
  for (std::size_t k = pos; k < pos + digits; ++k) {
    if (s[k] < '0' || s[k] > '9') return std::nullopt;
  }
  int v = 0;
  auto [p, ec] = std::from_chars(s.data() + pos, s.data() + pos + digits, v);
  if (ec != std::errc() || p != s.data() + pos + digits) return std::nullopt;
  pos += digits;
  return v;
}

std::optional<double> parseUtcDate(std::string_view s) {
  std::size_t i = 0;
  auto y = digitsAt(s, i, 4);
  if (!y || i >= s.size() || s[i++] != '-') return std::nullopt;
  auto mo = digitsAt(s, i, 2);
  if (!mo || i >= s.size() || s[i++] != '-') return std::nullopt;
  auto d = digitsAt(s, i, 2);
  if (!d || *mo < 1 || *mo > 12 || *d < 1 || *d > daysInMonth(*y, *mo)) return std::nullopt;
  double secs = static_cast<double>(daysFromCivil(*y, *mo, *d)) * 86400.0;
  if (i == s.size()) return secs;
  if (s[i] != 'T' && s[i] != 't' && s[i] != ' ') return std::nullopt;
  ++i;
  auto h = digitsAt(s, i, 2);
  if (!h || i >= s.size() || s[i++] != ':') return std::nullopt;
  auto mi = digitsAt(s, i, 2);
  if (!mi || *h > 23 || *mi > 59) return std::nullopt;
  secs += *h * 3600.0 + *mi * 60.0;
  if (i < s.size() && s[i] == ':') {
    ++i;
    auto sec = digitsAt(s, i, 2);
    if (!sec || *sec > 60) return std::nullopt;
    secs += *sec;
    if (i < s.size() && (s[i] == '.' || s[i] == ',')) {
      std::size_t start = i + 1;
      std::size_t j = start;
      while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
      if (j == start) return std::nullopt;
      auto frac = wholeNumber(std::string("0.") + std::string(s.substr(start, j - start)));
      if (!frac) return std::nullopt;
      secs += *frac;
      i = j;
    }
  }
  std::string_view zone = s.substr(i);
  if (!zone.empty() && zone.front() == ' ') zone.remove_prefix(1);
  if (zone.empty() || zone == "Z" || zone == "z" || zone == "UTC") return secs;
  if (zone.front() == '+' || zone.front() == '-') {
    int sign = zone.front() == '+' ? 1 : -1;
    std::size_t k = 1;
    auto oh = digitsAt(zone, k, 2);
    if (!oh) return std::nullopt;
    if (k < zone.size() && zone[k] == ':') ++k;
    auto om = digitsAt(zone, k, 2);
    if (!om || k != zone.size() || *oh > 23 || *om > 59) return std::nullopt;
    return secs - sign * (*oh * 3600.0 + *om * 60.0);  // 14:00+02:00 is 12:00 UTC
  }
  return std::nullopt;
}

}  // namespace

Result<double> parseSinceTime(std::string_view text, double now_seconds) {
  std::string_view t = trim(text);
  auto bad = [&](const char* why) { return badInput(fmt::format("\"{}\": {}", printableText(text), why)); };
  if (t.empty()) return bad("empty: give a time or an age");
  // An age or a unix time says a time a date could say: between 0000-01-01 and 9999-12-31 (a
  // "1e308w" age is not -inf, nor a unix time of 1e20 a time to compare records with).
  constexpr double kFirst = -62167219200.0;  // 0000-01-01T00:00:00Z
  constexpr double kLast = 253402300799.0;   // 9999-12-31T23:59:59Z
  auto inRange = [&](double v) -> Result<double> {
    if (!std::isfinite(v) || v < kFirst || v > kLast) return bad("out of range: a time between the years 0 and 9999");
    return v;
  };
  static const std::map<char, double> kAgeUnits = {
      {'s', 1.0}, {'m', 60.0}, {'h', 3600.0}, {'d', 86400.0}, {'w', 604800.0}};
  if (auto u = kAgeUnits.find(t.back()); u != kAgeUnits.end() && t.find_first_of(":- T") == std::string_view::npos) {
    auto n = wholeNumber(t.substr(0, t.size() - 1));
    if (!n || *n < 0) return bad("not an age: use a number and s, m, h, d or w (90s, 30m, 2h)");
    return inRange(now_seconds - *n * u->second);
  }
  if (t.find_first_not_of("0123456789.") == std::string_view::npos) {
    auto n = wholeNumber(t);
    if (!n) return bad("not a unix time");
    return inRange(*n);
  }
  if (auto d = parseUtcDate(t)) return *d;
  return bad(
      "not a time: use 2026-12-02T14:00:00Z, \"2026-12-02 14:00\" (UTC), a unix time, or an age like 2h, 30m, 90s");
}

}  // namespace headroom
