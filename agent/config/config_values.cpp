// The values of the configuration, each from a TOML node or a flag's text: booleans, counts,
// sizes, durations, strings and paths; each error says what is allowed.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>

#include <toml++/toml.h>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>
#include <tuple>
#include <utility>

#include "headroom/sources/cgroup.h"
#include "headroom/sources/fs_root.h"
#include "headroom/sources/parse.h"
#include "headroom/sources/self_report.h"
#include "headroom/util/text.h"
#include "headroom/util/units.h"

#include "config_parts.h"

namespace headroom::config_detail {
namespace {

bool isDigit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }
bool isAlpha(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }

}  // namespace

// A flag's value as the user typed it, quoted only where it would otherwise be invisible.
std::string flagText(std::string_view s) {
  bool plain = !s.empty() && std::none_of(s.begin(), s.end(), [](char c) {
    return std::isspace(static_cast<unsigned char>(c)) != 0 || c == '"' || static_cast<unsigned char>(c) < 0x20;
  });
  return plain ? std::string(s) : quotedText(s);
}

std::string joined(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (const std::string& s : items) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}

// A TOML value as it would be written in the file, for error messages.
std::string render(const toml::node& node) {
  if (const auto* s = node.as_string()) return quotedText(s->get());
  if (const auto* i = node.as_integer()) return fmt::format("{}", i->get());
  if (const auto* f = node.as_floating_point()) {
    std::string t = fmt::format("{}", f->get());
    if (std::isfinite(f->get()) && t.find_first_of(".e") == std::string::npos) t += ".0";
    return t;
  }
  if (const auto* b = node.as_boolean()) return b->get() ? "true" : "false";
  if (const auto* a = node.as_array()) {
    std::string out = "[";
    for (std::size_t i = 0; i < a->size(); ++i) {
      if (i > 0) out += ", ";
      out += render((*a)[i]);
    }
    return out + "]";
  }
  if (const auto* t = node.as_table()) return t->empty() ? "{}" : "{...}";
  std::ostringstream os;
  if (const auto* d = node.as_date())
    os << *d;
  else if (const auto* tm = node.as_time())
    os << *tm;
  else if (const auto* dt = node.as_date_time())
    os << *dt;
  return os.str();
}

Result<bool> boolOf(const Given& g) {
  constexpr std::string_view kAllowed = "must be a boolean (true or false)";
  if (g.node != nullptr) {
    if (const auto* b = g.node->as_boolean()) return b->get();
    return g.fail(kAllowed);
  }
  const std::string& t = g.text;
  if (t == "true" || t == "1" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "0" || t == "no" || t == "off") return false;
  return g.fail(kAllowed);
}

Result<std::string> stringOf(const Given& g, std::string_view allowed) {
  if (g.node == nullptr) return g.text;
  if (const auto* s = g.node->as_string()) return s->get();
  return g.fail(allowed);
}

Result<std::uint64_t> countOf(const Given& g, std::uint64_t min, std::uint64_t max) {
  std::string allowed = fmt::format("must be an integer from {} to {}", min, max);
  std::uint64_t v = 0;
  if (g.node != nullptr) {
    const auto* i = g.node->as_integer();
    if (i == nullptr || i->get() < 0) return g.fail(allowed);
    v = static_cast<std::uint64_t>(i->get());
  } else {
    auto p = parseU64(g.text);
    if (!p) return g.fail(allowed);
    v = *p;
  }
  if (v < min || v > max) return g.fail(allowed);
  return v;
}

Result<std::uint64_t> sizeOf(const Given& g) {
  constexpr std::string_view kAllowed = R"(not a size (use a byte count or e.g. "256KiB", "1MiB"))";
  if (g.node != nullptr) {
    if (const auto* i = g.node->as_integer()) {
      if (i->get() < 0) return g.fail(kAllowed);
      return static_cast<std::uint64_t>(i->get());
    }
    const auto* s = g.node->as_string();
    if (s == nullptr) return g.fail(kAllowed);
    auto p = parseSize(s->get());
    if (!p) return g.fail(kAllowed);
    return *p;
  }
  auto p = parseSize(g.text);
  if (!p) return g.fail(kAllowed);
  return *p;
}

// A plain number (an integer or a float in TOML; the flag's text), finite.
Result<double> numberOf(const Given& g) {
  constexpr std::string_view kAllowed = "must be a number (e.g. 1.5)";
  double v = 0;
  if (g.node != nullptr) {
    if (const auto* i = g.node->as_integer()) {
      v = static_cast<double>(i->get());
    } else if (const auto* f = g.node->as_floating_point()) {
      v = f->get();
    } else {
      return g.fail(kAllowed);
    }
  } else {
    auto p = parseDouble(trim(g.text));
    if (!p) return g.fail(kAllowed);
    v = *p;
  }
  if (!std::isfinite(v)) return g.fail(kAllowed);
  return v;
}

// The reason alone; parseDuration and the config add what is being parsed.
Result<std::chrono::milliseconds> durationFromText(std::string_view text) {
  std::string_view t = trim(text);
  if (t.empty()) return badInput(fmt::format("empty {}", kDurationHint));
  if (t.front() == '-') return badInput(fmt::format("must not be negative {}", kDurationHint));
  double total_ms = 0;
  std::size_t parts = 0;
  std::size_t i = 0;
  auto skipSpace = [&] {
    while (i < t.size() && std::isspace(static_cast<unsigned char>(t[i])) != 0) ++i;
  };
  while (i < t.size()) {
    std::size_t start = i;
    while (i < t.size() && (isDigit(t[i]) || t[i] == '.')) ++i;
    std::string_view num = t.substr(start, i - start);
    if (std::none_of(num.begin(), num.end(), isDigit)) return badInput(fmt::format("not a duration {}", kDurationHint));
    auto value = parseDouble(num);
    if (!value) return badInput(fmt::format("not a duration {}", kDurationHint));
    skipSpace();
    std::size_t unit_start = i;
    while (i < t.size() && isAlpha(t[i])) ++i;
    std::string_view unit = t.substr(unit_start, i - unit_start);
    skipSpace();
    double mult = 0;
    if (unit.empty()) {
      // A plain number is seconds, but only on its own ("5", not "1m 5").
      if (parts > 0 || i < t.size()) return badInput(fmt::format("not a duration {}", kDurationHint));
      mult = 1000;
    } else if (unit == "ms") {
      mult = 1;
    } else if (unit == "s") {
      mult = 1000;
    } else if (unit == "m") {
      mult = 60.0 * 1000;
    } else if (unit == "h") {
      mult = 3600.0 * 1000;
    } else {
      return badInput(fmt::format("unknown unit \"{}\" (use ms, s, m or h, e.g. \"5s\", \"500ms\", \"1m\")", unit));
    }
    total_ms += *value * mult;
    ++parts;
  }
  if (!(total_ms <= kMaxDurationMs)) return badInput("too large");
  return std::chrono::milliseconds(std::llround(total_ms));
}

Result<std::chrono::milliseconds> durationOf(const Given& g) {
  if (g.node != nullptr) {
    double seconds = 0;
    if (const auto* i = g.node->as_integer()) {
      seconds = static_cast<double>(i->get());
    } else if (const auto* f = g.node->as_floating_point()) {
      seconds = f->get();
    } else if (const auto* s = g.node->as_string()) {
      auto d = durationFromText(s->get());
      if (!d) return g.fail(d.error().message);
      return *d;
    } else {
      return g.fail(fmt::format("must be a duration {}", kDurationHint));
    }
    if (seconds < 0) return g.fail(fmt::format("must not be negative {}", kDurationHint));
    if (!(seconds * 1000 <= kMaxDurationMs)) return g.fail("too large");
    return std::chrono::milliseconds(std::llround(seconds * 1000));
  }
  auto d = durationFromText(g.text);
  if (!d) return g.fail(d.error().message);
  return *d;
}

Result<std::string> absolutePathOf(const Given& g) {
  constexpr std::string_view kAllowed = R"(must be an absolute path (e.g. "/usr/lib/x86_64-linux-gnu/libcuda.so.1"))";
  auto s = stringOf(g, kAllowed);
  if (!s) return s;
  if (s->empty() || s->front() != '/') return g.fail(kAllowed);
  return s;
}

// A default as a user would type it: "1GiB", "256MiB", "1h", "5m".
std::string sizeText(std::uint64_t n) {
  for (auto [shift, unit] : {std::pair{40, "TiB"}, std::pair{30, "GiB"}, std::pair{20, "MiB"}, std::pair{10, "KiB"}}) {
    if (n != 0 && n % (1ULL << shift) == 0) return fmt::format("{}{}", n >> shift, unit);
  }
  return fmt::format("{}", n);
}

std::string durationText(std::chrono::milliseconds d) {
  const auto ms = d.count();
  for (auto [per, unit] : {std::pair{3600000LL, "h"}, std::pair{60000LL, "m"}, std::pair{1000LL, "s"}}) {
    if (ms != 0 && ms % per == 0) return fmt::format("{}{}", ms / per, unit);
  }
  return fmt::format("{}ms", ms);
}

}  // namespace headroom::config_detail
