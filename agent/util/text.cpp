#include "headroom/util/text.h"

#include <fmt/format.h>

namespace headroom {

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

}  // namespace headroom
