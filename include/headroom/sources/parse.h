// Parsers for the kernel's text formats (cgroup and /proc files), apart from any I/O.
// Every number goes through std::from_chars; "max", empty and truncated values are handled.
#pragma once

#include <cstddef>
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
  using Entry = std::pair<std::string_view, std::uint64_t>;  // the key is a view into the map

  void set(std::string_view key, std::uint64_t value);
  std::optional<std::uint64_t> get(std::string_view key) const;
  std::uint64_t getOr(std::string_view key, std::uint64_t fallback = 0) const;
  bool contains(std::string_view key) const { return get(key).has_value(); }
  bool empty() const { return slots_.empty(); }
  std::size_t size() const { return slots_.size(); }
  // Room for `entries` keys of `key_bytes` in all, so that filling the map allocates once each.
  void reserve(std::size_t entries, std::size_t key_bytes);

  // The entries in the order they were first set, as (key, value) pairs made on the fly.
  class Entries {
   public:
    class Iterator {
     public:
      using value_type = Entry;
      using difference_type = std::ptrdiff_t;
      Iterator() = default;
      Iterator(const StatMap* m, std::size_t i) : m_(m), i_(i) {}
      Entry operator*() const { return m_->entry(i_); }
      Iterator& operator++() {
        ++i_;
        return *this;
      }
      Iterator operator++(int) {
        Iterator was = *this;
        ++i_;
        return was;
      }
      bool operator==(const Iterator& o) const { return i_ == o.i_; }

     private:
      const StatMap* m_ = nullptr;
      std::size_t i_ = 0;
    };
    explicit Entries(const StatMap* m) : m_(m) {}
    Iterator begin() const { return {m_, 0}; }
    Iterator end() const { return {m_, m_->size()}; }
    std::size_t size() const { return m_->size(); }
    Entry operator[](std::size_t i) const { return m_->entry(i); }
    Entry front() const { return m_->entry(0); }

   private:
    const StatMap* m_;
  };
  Entries entries() const { return Entries(this); }

 private:
  // Every key in one string, each entry naming its slice: a file's worth of keys is three
  // allocations (keys, slots, index), not one per key longer than a short string holds.
  struct Slot {
    std::uint32_t at = 0, length = 0;
    std::uint64_t value = 0;
  };
  std::string_view keyOf(const Slot& s) const { return std::string_view(keys_).substr(s.at, s.length); }
  Entry entry(std::size_t i) const { return {keyOf(slots_[i]), slots_[i].value}; }

  // Where `key` is in table_, or the free place where it would go.
  std::size_t probe(std::string_view key) const;
  void rehash(std::size_t table_size);

  std::string keys_;
  std::vector<Slot> slots_;
  // Open addressing by the key's hash, a power of two at most half full: each entry's slot
  // number + 1 (0: free). A key is found without a scan of the others (memory.stat has seventy,
  // and the attribution asks for thirty of them).
  std::vector<std::uint32_t> table_;
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
