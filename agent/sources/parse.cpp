#include "headroom/parse.h"

#include <charconv>
#include <fmt/format.h>

namespace headroom {
namespace {

bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Quotes a value for an error message, shortened so a garbage file cannot flood a log.
std::string quote(std::string_view s) {
  constexpr std::size_t kMax = 40;
  if (s.size() <= kMax) return fmt::format("\"{}\"", s);
  return fmt::format("\"{}...\"", s.substr(0, kMax));
}

template <typename T>
Result<T> parseInteger(std::string_view text, const char* what) {
  std::string_view t = trim(text);
  if (t.empty()) return makeError(0, "empty value where a number was expected");
  T v{};
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec == std::errc::result_out_of_range) return makeError(ERANGE, fmt::format("{} out of range: {}", what, quote(t)));
  if (ec != std::errc() || ptr != t.data() + t.size())
    return makeError(0, fmt::format("not {}: {}", what, quote(t)));
  return v;
}

}  // namespace

std::string_view trim(std::string_view s) {
  while (!s.empty() && isSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && isSpace(s.back())) s.remove_suffix(1);
  return s;
}

Result<std::uint64_t> parseU64(std::string_view text) {
  return parseInteger<std::uint64_t>(text, "an unsigned integer");
}

Result<std::int64_t> parseI64(std::string_view text) { return parseInteger<std::int64_t>(text, "an integer"); }

Result<double> parseDouble(std::string_view text) {
  std::string_view t = trim(text);
  if (t.empty()) return makeError(0, "empty value where a number was expected");
  double v = 0;
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || ptr != t.data() + t.size()) return makeError(0, fmt::format("not a number: {}", quote(t)));
  return v;
}

Result<std::optional<std::uint64_t>> parseLimit(std::string_view text) {
  std::string_view t = trim(text);
  if (t == "max") return std::optional<std::uint64_t>{};
  auto v = parseU64(t);
  if (!v) return v.error();
  if (*v >= kV1UnlimitedThreshold) return std::optional<std::uint64_t>{};
  return std::optional<std::uint64_t>{*v};
}

void StatMap::set(std::string key, std::uint64_t value) {
  for (auto& [k, v] : entries_) {
    if (k == key) {
      v = value;
      return;
    }
  }
  entries_.emplace_back(std::move(key), value);
}

std::optional<std::uint64_t> StatMap::get(std::string_view key) const {
  for (const auto& [k, v] : entries_) {
    if (k == key) return v;
  }
  return std::nullopt;
}

std::uint64_t StatMap::getOr(std::string_view key, std::uint64_t fallback) const {
  auto v = get(key);
  return v ? *v : fallback;
}

std::vector<std::string_view> splitLines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    auto nl = text.find('\n');
    if (nl == std::string_view::npos) {
      lines.push_back(text);
      break;
    }
    lines.push_back(text.substr(0, nl));
    text.remove_prefix(nl + 1);
  }
  return lines;
}

std::vector<std::string_view> splitFields(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && isSpace(line[i])) ++i;
    std::size_t start = i;
    while (i < line.size() && !isSpace(line[i])) ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

ParsedStat parseKeyValueLines(std::string_view text) {
  ParsedStat out;
  // A line cut short (a truncated file: a key with no value, or a value with garbage) is kept
  // aside in `malformed`, never guessed at.
  for (std::string_view line : splitLines(text)) {
    if (trim(line).empty()) continue;
    auto fields = splitFields(line);
    if (fields.size() != 2) {
      out.malformed.emplace_back(line);
      continue;
    }
    auto v = parseU64(fields[1]);
    if (!v) {
      out.malformed.emplace_back(line);
      continue;
    }
    out.values.set(std::string(fields[0]), *v);
  }
  return out;
}

StatMap parseColonKbLines(std::string_view text) {
  StatMap out;
  for (std::string_view line : splitLines(text)) {
    auto colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) continue;
    std::string_view key = trim(line.substr(0, colon));
    auto fields = splitFields(line.substr(colon + 1));
    if (fields.empty() || fields.size() > 2) continue;
    auto v = parseU64(fields[0]);
    if (!v) continue;
    std::uint64_t value = *v;
    if (fields.size() == 2) {
      if (fields[1] != "kB") continue;
      if (value > UINT64_MAX / 1024) continue;
      value *= 1024;
    }
    out.set(std::string(key), value);
  }
  return out;
}

namespace {
Result<PsiLine> parsePsiFields(const std::vector<std::string_view>& fields) {
  PsiLine line;
  bool seen_total = false;
  for (std::size_t i = 1; i < fields.size(); ++i) {
    auto eq = fields[i].find('=');
    if (eq == std::string_view::npos) return makeError(0, fmt::format("PSI field without '=': {}", quote(fields[i])));
    std::string_view k = fields[i].substr(0, eq);
    std::string_view v = fields[i].substr(eq + 1);
    if (k == "total") {
      auto t = parseU64(v);
      if (!t) return t.error().wrap("PSI total");
      line.total_us = *t;
      seen_total = true;
      continue;
    }
    auto d = parseDouble(v);
    if (!d) return d.error().wrap(fmt::format("PSI {}", k));
    if (k == "avg10") line.avg10 = *d;
    else if (k == "avg60") line.avg60 = *d;
    else if (k == "avg300") line.avg300 = *d;
  }
  if (!seen_total) return makeError(0, "PSI line without total=");
  return line;
}
}  // namespace

Result<Psi> parsePsi(std::string_view text) {
  Psi psi;
  bool seen_some = false;
  for (std::string_view raw : splitLines(text)) {
    auto fields = splitFields(raw);
    if (fields.empty()) continue;
    auto line = parsePsiFields(fields);
    if (!line) return line.error();
    if (fields[0] == "some") {
      psi.some = *line;
      seen_some = true;
    } else if (fields[0] == "full") {
      psi.full = *line;
    } else {
      return makeError(0, fmt::format("unknown PSI line kind {}", quote(fields[0])));
    }
  }
  if (!seen_some) return makeError(0, "PSI without a \"some\" line");
  return psi;
}

}  // namespace headroom
