#include "headroom/util/text.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <ctime>

namespace headroom {

bool isPrintableAscii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return c >= 0x20 && c < 0x7F;
  });
}

std::string printableText(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  auto cont = [&](std::size_t at, unsigned lo = 0x80, unsigned hi = 0xBF) {
    if (at >= s.size()) return false;
    const auto b = static_cast<unsigned char>(s[at]);
    return b >= lo && b <= hi;
  };
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;  // length of a valid, printable sequence starting here; 0 when not
    if (c >= 0x20 && c < 0x7F) {
      n = 1;
    } else if (c == 0xC2) {
      n = cont(i + 1, 0xA0) ? 2 : 0;  // U+0080..U+009F are the C1 controls
      if (n == 0 && cont(i + 1, 0x80, 0x9F)) {
        out += '?';  // one C1 control, two bytes
        i += 2;
        continue;
      }
    } else if (c >= 0xC3 && c <= 0xDF) {
      n = cont(i + 1) ? 2 : 0;
    } else if (c >= 0xE0 && c <= 0xEF) {
      const unsigned lo = c == 0xE0 ? 0xA0 : 0x80;  // no overlong forms
      const unsigned hi = c == 0xED ? 0x9F : 0xBF;  // no surrogates
      n = cont(i + 1, lo, hi) && cont(i + 2) ? 3 : 0;
    } else if (c >= 0xF0 && c <= 0xF4) {
      const unsigned lo = c == 0xF0 ? 0x90 : 0x80;
      const unsigned hi = c == 0xF4 ? 0x8F : 0xBF;
      n = cont(i + 1, lo, hi) && cont(i + 2) && cont(i + 3) ? 4 : 0;
    }
    if (n == 0) {
      out += '?';
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string quotedText(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
          out += fmt::format("\\u{:04X}", static_cast<unsigned>(static_cast<unsigned char>(c)));
        else
          out.push_back(c);
    }
  }
  out.push_back('"');
  return out;
}

std::string quotedExcerpt(std::string_view s, std::size_t max) {
  if (s.size() <= max) return fmt::format("\"{}\"", s);
  return fmt::format("\"{}...\"", s.substr(0, max));
}

std::string formatUtcMs(std::int64_t unix_ms, UtcFormat format) {
  // Floor division: a time before the epoch still has its milliseconds in [0, 1000).
  std::int64_t secs = unix_ms / 1000 - (unix_ms % 1000 < 0 ? 1 : 0);
  auto ms = static_cast<int>(unix_ms - secs * 1000);
  auto t = static_cast<std::time_t>(secs);
  std::tm tm{};
  if (gmtime_r(&t, &tm) == nullptr) return "?";
  std::array<char, 48> buf{};
  // Literal patterns, one call each, so that the compilers check them (-Wformat-nonliteral).
  std::size_t n = 0;
  switch (format) {
    case UtcFormat::kClock: n = std::strftime(buf.data(), buf.size(), "%H:%M:%S UTC", &tm); break;
    case UtcFormat::kIsoMillis: n = std::strftime(buf.data(), buf.size(), "%Y-%m-%dT%H:%M:%S", &tm); break;
    case UtcFormat::kDateTime: n = std::strftime(buf.data(), buf.size(), "%Y-%m-%d %H:%M:%S UTC", &tm); break;
  }
  std::string out(buf.data(), n);
  if (format == UtcFormat::kIsoMillis) out += fmt::format(".{:03d}Z", ms);
  return out;
}

std::string formatUtc(double unix_seconds, UtcFormat format) {
  if (!std::isfinite(unix_seconds) || std::fabs(unix_seconds) > 9e15) return "?";
  return formatUtcMs(static_cast<std::int64_t>(std::floor(unix_seconds * 1000)), format);
}

}  // namespace headroom
