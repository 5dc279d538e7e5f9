#include "headroom/util/numbers.h"

#include <fmt/format.h>

#include "headroom/util/text.h"

#include <charconv>

namespace headroom {
namespace {

template <typename T>
Result<T> parseInteger(std::string_view text, const char* what) {
  std::string_view t = trim(text);
  if (t.empty()) return badData("empty value where a number was expected");
  T v{};
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec == std::errc::result_out_of_range) return badData(fmt::format("{} out of range: {}", what, quotedExcerpt(t)));
  if (ec != std::errc() || ptr != t.data() + t.size())
    return badData(fmt::format("not {}: {}", what, quotedExcerpt(t)));
  return v;
}

}  // namespace

std::string_view trim(std::string_view s) {
  while (!s.empty() && isAsciiSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && isAsciiSpace(s.back())) s.remove_suffix(1);
  return s;
}

Result<std::uint64_t> parseU64(std::string_view text) {
  return parseInteger<std::uint64_t>(text, "an unsigned integer");
}

Result<std::int64_t> parseI64(std::string_view text) { return parseInteger<std::int64_t>(text, "an integer"); }

Result<double> parseDouble(std::string_view text) {
  std::string_view t = trim(text);
  if (t.empty()) return badData("empty value where a number was expected");
  double v = 0;
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || ptr != t.data() + t.size())
    return badData(fmt::format("not a number: {}", quotedExcerpt(t)));
  return v;
}

}  // namespace headroom
