// Parsers for the kernel's text formats (cgroup and /proc files), apart from any I/O.
// Every number goes through std::from_chars; "max", empty and truncated values are handled.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headroom/util/numbers.h"
#include "headroom/util/result.h"

namespace headroom {

// v1's "unlimited": PAGE_COUNTER_MAX rounded down to the page size, printed in bytes.
// Anything at or above this is no limit at all.
inline constexpr std::uint64_t kV1UnlimitedThreshold = 0x7FFFFFFFFFFFF000ULL;

// A limit file: "max" (v2) or a v1 value at/above kV1UnlimitedThreshold means no limit (nullopt).
Result<std::optional<std::uint64_t>> parseLimit(std::string_view text);

// Ordered "key value" lines, unknown keys kept (memory.stat, memory.events, oom_control).
class StatMap {
 public:
  using Entry = std::pair<std::string, std::uint64_t>;

  void set(std::string key, std::uint64_t value);
  std::optional<std::uint64_t> get(std::string_view key) const;
  std::uint64_t getOr(std::string_view key, std::uint64_t fallback = 0) const;
  bool contains(std::string_view key) const { return get(key).has_value(); }
  const std::vector<Entry>& entries() const { return entries_; }
  bool empty() const { return entries_.empty(); }
  std::size_t size() const { return entries_.size(); }

 private:
  std::vector<Entry> entries_;
};

struct ParsedStat {
  StatMap values;
  // Lines that were not "key <number>": garbage, or the last line of a truncated read.
  std::vector<std::string> malformed;
};

// "key value\n" lines (cgroup memory.stat, memory.events, memory.oom_control, v1 memory.stat).
ParsedStat parseKeyValueLines(std::string_view text);

// "Key:   123 kB" lines (/proc/meminfo, /proc/<pid>/status, smaps_rollup). Values with a kB
// unit are converted to bytes; unit-less values (Threads:, HugePages_Total:) are kept as is.
// Lines whose value is not a number (Name:, Umask: 0022 is a number, State: S (sleeping)) are
// skipped silently: those files mix text and numbers by design.
StatMap parseColonKbLines(std::string_view text);

// Pressure stall information, one line per kind ("some", "full").
struct PsiLine {
  double avg10 = 0, avg60 = 0, avg300 = 0;
  std::uint64_t total_us = 0;
};
struct Psi {
  PsiLine some;
  std::optional<PsiLine> full;  // absent for CPU on old kernels; kept optional for memory too
};
Result<Psi> parsePsi(std::string_view text);

// Splits text into lines without copying; a final line without '\n' is included.
std::vector<std::string_view> splitLines(std::string_view text);
// Splits on runs of white space.
std::vector<std::string_view> splitFields(std::string_view line);

}  // namespace headroom
