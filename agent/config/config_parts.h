// The parts of the agent's configuration (config/config.h) that its files share: one value as
// given (a TOML node or a flag's text, and how errors name it), the parser of each kind of
// value, and the table of keys. Private to agent/config.
#pragma once

#include <toml++/toml.h>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/config/config.h"
#include "headroom/util/result.h"

namespace headroom::config_detail {

inline constexpr std::string_view kDurationHint = R"((use e.g. "5s", "500ms", "1m"))";
inline constexpr std::uint64_t kMaxCount = 1ULL << 24;
inline constexpr std::uint64_t kMinRingBytes = 4096;
inline constexpr std::uint64_t kMaxRingBytes = 1ULL << 30;
inline constexpr auto kMinInterval = std::chrono::milliseconds(100);
inline constexpr auto kMaxInterval = std::chrono::milliseconds(3600 * 1000);
// Beyond this a duration is surely a mistake, and still fits an int64 of milliseconds.
inline constexpr double kMaxDurationMs = 1e15;

// One value as given: a TOML node from a file or a flag's text, and how errors name it
// ("/x.toml: interval = \"fast\"", "--interval fast").
struct Given {
  const toml::node* node = nullptr;
  std::string text;
  std::string subject;

  Error fail(std::string_view reason) const { return badInput(fmt::format("{}: {}", subject, reason)); }
};

// --- Values, each from either source. Errors say what is allowed. ---

// A flag's value as the user typed it, quoted only where it would otherwise be invisible.
std::string flagText(std::string_view s);
std::string joined(const std::vector<std::string>& items, std::string_view sep = ", ");
// A TOML value as it would be written in the file, for error messages.
std::string render(const toml::node& node);
Result<bool> boolOf(const Given& g);
Result<std::string> stringOf(const Given& g, std::string_view allowed = "must be a string");
Result<std::uint64_t> countOf(const Given& g, std::uint64_t min, std::uint64_t max);
Result<std::uint64_t> sizeOf(const Given& g);
// A plain number (an integer or a float in TOML; the flag's text), finite.
Result<double> numberOf(const Given& g);
// The reason alone; parseDuration and the config add what is being parsed.
Result<std::chrono::milliseconds> durationFromText(std::string_view text);
Result<std::chrono::milliseconds> durationOf(const Given& g);
Result<std::string> absolutePathOf(const Given& g);
// A default as a user would type it: "1GiB", "256MiB", "1h", "5m".
std::string sizeText(std::uint64_t n);
std::string durationText(std::chrono::milliseconds d);

// Parses every element with `parse` (Given -> Result<T>); the first error is the result.
template <typename T, typename F>
Result<std::vector<T>> collect(const std::vector<Given>& values, F parse) {
  std::vector<T> out;
  out.reserve(values.size());
  for (const Given& g : values) {
    auto r = parse(g);
    if (!r) return r.error();
    out.push_back(std::move(*r));
  }
  return out;
}

// --- The keys. ---

using Setter = std::function<Status(AgentConfig&, const std::vector<Given>&)>;

struct KeySpec {
  ConfigKey key;
  std::string example;  // list keys: a TOML array, for errors
  Setter set;           // scalar keys get exactly one value; nothing is changed on error
};

// Every key, in the order of docs/configuration.md.
const std::vector<KeySpec>& specs();
const KeySpec* findSpec(std::string_view name);

}  // namespace headroom::config_detail
