// The prover's self-reported memory use: the source spec and the number's extraction (pure).
#include "headroom/sources/self_report.h"

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "headroom/util/files.h"
#include "headroom/util/json.h"
#include "headroom/util/units.h"

namespace headroom {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

Result<std::uint64_t> fromDouble(double v, std::string_view what) {
  if (!std::isfinite(v) || v < 0 || v >= 1.8e19)
    return unexpected(badData(fmt::format("{}: {} is not a byte count", what, v)));
  return static_cast<std::uint64_t>(v);
}

Result<std::uint64_t> fromJson(const nlohmann::json& v, std::string_view what) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number()) return fromDouble(v.get<double>(), what);
  if (v.is_string()) {
    auto s = parseSize(v.get<std::string>());
    if (s) return *s;
  }
  return unexpected(badData(fmt::format("{}: {} is not a byte count", what, jsonExcerpt(v))));
}

// `name{a="x",b="y"}` -> name and labels. Label values may hold escaped quotes.
bool parseSeries(std::string_view s, std::string& name, std::map<std::string, std::string>& labels) {
  auto brace = s.find('{');
  name = std::string(trim(s.substr(0, brace)));
  if (name.empty()) return false;
  if (brace == std::string_view::npos) return true;
  std::size_t i = brace + 1;
  while (i < s.size() && s[i] != '}') {
    while (i < s.size() && (s[i] == ',' || s[i] == ' ')) ++i;
    if (i < s.size() && s[i] == '}') break;
    auto eq = s.find('=', i);
    if (eq == std::string_view::npos || eq + 1 >= s.size() || s[eq + 1] != '"') return false;
    std::string key(trim(s.substr(i, eq - i)));
    std::string value;
    std::size_t j = eq + 2;
    for (; j < s.size() && s[j] != '"'; ++j) {
      if (s[j] == '\\' && j + 1 < s.size()) {
        ++j;
        value += s[j] == 'n' ? '\n' : s[j];
      } else {
        value += s[j];
      }
    }
    if (j >= s.size()) return false;
    labels[key] = value;
    i = j + 1;
  }
  return i < s.size();
}

}  // namespace

Result<std::string> readSelfReportFile(const std::string& path) {
  auto text = readSmallFile(path, 1U << 20, "self-report file");
  if (!text) return unexpected(text.error());
  if (!*text) return unexpected(sysError(ENOENT, fmt::format("reading self-report file {}", path)));
  return std::move(**text);
}

std::string SelfReportSource::text() const {
  std::string s = kind == Kind::kFile ? "file:" + location : location;
  return field.empty() ? s : s + "#" + field;
}

Result<SelfReportSource> parseSelfReportSource(std::string_view spec) {
  auto bad = [&](std::string_view why) {
    return unexpected(badInput(fmt::format("self-report source \"{}\": {}", spec, why)));
  };
  SelfReportSource src;
  std::string_view rest = spec;
  // The fragment names the field; a file path may not hold '#' then (rare enough).
  auto hash = rest.rfind('#');
  if (hash != std::string_view::npos) {
    src.field = std::string(rest.substr(hash + 1));
    rest = rest.substr(0, hash);
    if (src.field.rfind("json:", 0) != 0 && src.field.rfind("metric:", 0) != 0)
      return bad("after '#': json:FIELD.PATH or metric:NAME{label=\"value\"}");
    if (src.field.size() <= (src.field[0] == 'j' ? 5u : 7u)) return bad("after '#': the field or metric name is empty");
    if (src.field[0] == 'm') {
      std::string name;
      std::map<std::string, std::string> labels;
      if (!parseSeries(std::string_view(src.field).substr(7), name, labels))
        return bad("a metric NAME{label=\"value\",...}");
    }
  }
  if (rest.rfind("http://", 0) == 0) {
    src.kind = SelfReportSource::Kind::kUrl;
    if (rest.size() <= 7) return bad("a URL needs a host");
  } else if (rest.rfind("https://", 0) == 0) {
    return bad("https is not supported: the prover's endpoint is local (http://127.0.0.1:PORT/...)");
  } else {
    if (rest.rfind("file:", 0) == 0) rest.remove_prefix(5);
    if (rest.empty() || rest.front() != '/') return bad("a file needs an absolute path (or http://HOST:PORT/PATH)");
    src.kind = SelfReportSource::Kind::kFile;
  }
  src.location = std::string(rest);
  return src;
}

Result<std::uint64_t> extractSelfReport(const SelfReportSource& src, std::string_view body) {
  std::string where = src.text();
  if (src.field.empty()) {
    std::string_view t = trim(body);
    if (t.empty()) return unexpected(badData(fmt::format("{}: empty", where)));
    if (t.front() == '{') {
      auto j = nlohmann::json::parse(t, nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("used_bytes"))
        return unexpected(badData(fmt::format("{}: a JSON object without used_bytes", where)));
      return fromJson(j["used_bytes"], where + " used_bytes");
    }
    auto s = parseSize(t);
    if (!s) return unexpected(badData(fmt::format("{}: \"{}\" is not a size", where, t.substr(0, 64))));
    return *s;
  }
  if (src.field.rfind("json:", 0) == 0) {
    auto j = nlohmann::json::parse(body, nullptr, false);
    if (j.is_discarded()) return unexpected(badData(fmt::format("{}: not JSON", where)));
    const nlohmann::json* cur = &j;
    std::string_view path = std::string_view(src.field).substr(5);
    while (!path.empty()) {
      auto dot = path.find('.');
      std::string key(path.substr(0, dot));
      if (!cur->is_object() || !cur->contains(key))
        return unexpected(badData(fmt::format("{}: no field \"{}\"", where, key)));
      cur = &(*cur)[key];
      path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
    }
    return fromJson(*cur, where);
  }
  // A Prometheus text exposition: the first sample whose name matches and whose labels include
  // every label asked for.
  std::string want_name;
  std::map<std::string, std::string> want_labels;
  parseSeries(std::string_view(src.field).substr(7), want_name, want_labels);
  std::size_t pos = 0;
  while (pos < body.size()) {
    auto nl = body.find('\n', pos);
    std::string_view line = trim(body.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos));
    pos = nl == std::string_view::npos ? body.size() : nl + 1;
    if (line.empty() || line.front() == '#') continue;
    // The value follows the series: after the closing brace, or after the name.
    std::size_t end = line.find('}');
    end = end == std::string_view::npos ? line.find_first_of(" \t") : end + 1;
    if (end == std::string_view::npos) continue;
    std::string name;
    std::map<std::string, std::string> labels;
    if (!parseSeries(line.substr(0, end), name, labels) || name != want_name) continue;
    bool match = true;
    for (const auto& [k, v] : want_labels) match = match && labels.count(k) && labels[k] == v;
    if (!match) continue;
    std::string_view value = trim(line.substr(end));
    value = value.substr(0, value.find_first_of(" \t"));  // a timestamp may follow
    double v = 0;
    auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (ec != std::errc() || p != value.data() + value.size())
      return unexpected(badData(fmt::format("{}: sample value \"{}\" is not a number", where, value)));
    return fromDouble(v, where);
  }
  return unexpected(badData(fmt::format("{}: no sample {} in the exposition", where, src.field.substr(7))));
}

Result<std::uint64_t> readSelfReport(const SelfReportSource& src, const SelfReportFetch& get) {
  Result<std::string> body = std::string();
  if (src.kind == SelfReportSource::Kind::kFile) {
    body = readSelfReportFile(src.location);
  } else if (get) {
    body = get(src.location);
  } else {
    return makeError(ErrorKind::kUnsupported, fmt::format("{}: no HTTP client here", src.text()));
  }
  if (!body) return body.error();
  return extractSelfReport(src, *body);
}

}  // namespace headroom
