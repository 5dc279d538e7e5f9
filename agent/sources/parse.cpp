#include "headroom/sources/parse.h"

#include <fmt/format.h>
#include <charconv>

#include "headroom/util/text.h"

namespace headroom {

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
    while (i < line.size() && isAsciiSpace(line[i])) ++i;
    std::size_t start = i;
    while (i < line.size() && !isAsciiSpace(line[i])) ++i;
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
    if (eq == std::string_view::npos)
      return makeError(0, fmt::format("PSI field without '=': {}", quotedExcerpt(fields[i])));
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
    if (k == "avg10")
      line.avg10 = *d;
    else if (k == "avg60")
      line.avg60 = *d;
    else if (k == "avg300")
      line.avg300 = *d;
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
      return makeError(0, fmt::format("unknown PSI line kind {}", quotedExcerpt(fields[0])));
    }
  }
  if (!seen_some) return makeError(0, "PSI without a \"some\" line");
  return psi;
}

}  // namespace headroom
