#include "headroom/sources/parse.h"

#include <fmt/format.h>
#include <algorithm>
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

std::size_t StatMap::probe(std::string_view key) const {
  const std::size_t mask = table_.size() - 1;
  for (std::size_t i = std::hash<std::string_view>{}(key)&mask;; i = (i + 1) & mask) {
    const std::uint32_t t = table_[i];
    if (t == 0 || keyOf(slots_[t - 1]) == key) return i;
  }
}

void StatMap::rehash(std::size_t table_size) {
  table_.assign(table_size, 0);
  for (std::size_t n = 0; n < slots_.size(); ++n) table_[probe(keyOf(slots_[n]))] = static_cast<std::uint32_t>(n + 1);
}

void StatMap::set(std::string_view key, std::uint64_t value) {
  if ((slots_.size() + 1) * 2 > table_.size()) rehash(std::max<std::size_t>(16, table_.size() * 2));
  const std::size_t i = probe(key);
  if (table_[i] != 0) {
    slots_[table_[i] - 1].value = value;
    return;
  }
  slots_.push_back(Slot{static_cast<std::uint32_t>(keys_.size()), static_cast<std::uint32_t>(key.size()), value});
  keys_ += key;
  table_[i] = static_cast<std::uint32_t>(slots_.size());
}

std::optional<std::uint64_t> StatMap::get(std::string_view key) const {
  if (table_.empty()) return std::nullopt;
  const std::uint32_t t = table_[probe(key)];
  if (t == 0) return std::nullopt;
  return slots_[t - 1].value;
}

void StatMap::reserve(std::size_t entries, std::size_t key_bytes) {
  slots_.reserve(entries);
  keys_.reserve(key_bytes);
  std::size_t size = std::max<std::size_t>(16, table_.size());
  while (size < entries * 2) size *= 2;
  if (size > table_.size()) rehash(size);
}

std::uint64_t StatMap::getOr(std::string_view key, std::uint64_t fallback) const {
  auto v = get(key);
  return v ? *v : fallback;
}

namespace {
// Each line of `text` (the last without its '\n'), in order, with no vector of them made.
template <typename F>
void forEachLine(std::string_view text, F&& f) {
  while (!text.empty()) {
    const auto nl = text.find('\n');
    f(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
}

// The first field of `line` and what follows it, whitespace around both dropped.
std::pair<std::string_view, std::string_view> firstField(std::string_view line) {
  line = trim(line);
  std::size_t end = 0;
  while (end < line.size() && !isAsciiSpace(line[end])) ++end;
  return {line.substr(0, end), trim(line.substr(end))};
}
}  // namespace

std::vector<std::string_view> splitLines(std::string_view text) {
  std::vector<std::string_view> lines;
  forEachLine(text, [&](std::string_view line) { lines.push_back(line); });
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
  out.values.reserve(static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')) + 1, text.size());
  // A line cut short (a truncated file: a key with no value, or a value with garbage) is kept
  // aside in `malformed`, never guessed at.
  forEachLine(text, [&](std::string_view line) {
    const auto [key, rest] = firstField(line);
    if (key.empty()) return;
    // Exactly two fields, the second a number.
    std::optional<std::uint64_t> v;
    if (!rest.empty() && std::none_of(rest.begin(), rest.end(), isAsciiSpace)) {
      if (auto n = parseU64(rest)) v = *n;
    }
    if (!v) {
      out.malformed.emplace_back(line);
      return;
    }
    out.values.set(key, *v);
  });
  return out;
}

StatMap parseColonKbLines(std::string_view text) {
  StatMap out;
  out.reserve(static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')) + 1, text.size());
  // No vector per line: /proc/meminfo each sample, a process's status when it changed.
  forEachLine(text, [&](std::string_view line) {
    auto colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) return;
    std::string_view key = trim(line.substr(0, colon));
    const auto [number, unit_and_more] = firstField(line.substr(colon + 1));
    const auto [unit, more] = firstField(unit_and_more);
    if (number.empty() || !more.empty()) return;  // one number, maybe a unit, nothing else
    auto v = parseU64(number);
    if (!v) return;
    std::uint64_t value = *v;
    if (!unit.empty()) {
      if (unit != "kB") return;
      if (value > UINT64_MAX / 1024) return;
      value *= 1024;
    }
    out.set(key, value);
  });
  return out;
}

namespace {
Result<PsiLine> parsePsiFields(const std::vector<std::string_view>& fields) {
  PsiLine line;
  bool seen_total = false;
  for (std::size_t i = 1; i < fields.size(); ++i) {
    auto eq = fields[i].find('=');
    if (eq == std::string_view::npos)
      return badData(fmt::format("PSI field without '=': {}", quotedExcerpt(fields[i])));
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
  if (!seen_total) return badData("PSI line without total=");
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
      return badData(fmt::format("unknown PSI line kind {}", quotedExcerpt(fields[0])));
    }
  }
  if (!seen_some) return badData("PSI without a \"some\" line");
  return psi;
}

}  // namespace headroom
