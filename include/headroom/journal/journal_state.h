// What an agent leaves beside its OOM journal for the next one (docs/journal.md, "The state
// beside the journal"): the boot it ran in and how far it read that boot's kernel log, the kills
// it had seen but not yet recorded (their records as far as they went), and each cgroup's OOM-kill
// count at its last sample. Read once at start; written whole and atomically.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "headroom/util/result.h"

namespace headroom {

struct JournalState {
  std::string boot_id;  // /proc/sys/kernel/random/boot_id of the boot this describes
  // Every OOM report of that boot's kernel log whose first record comes before this sequence
  // number is in the journal, or in in_flight.
  std::optional<std::uint64_t> kernel_log_seq;
  // Kills seen and not yet in the journal, by a key of the agent that saw them: each one's
  // record as far as it went (the sample before the kill, the flight, the first source's word).
  std::map<std::string, nlohmann::json> in_flight;
  // Each sampled cgroup's own OOM-kill count (memory.events.local / memory.oom_control), 0s
  // included: a cgroup not listed was not sampled.
  std::map<std::string, std::uint64_t> oom_kill_counts;

  bool operator==(const JournalState&) const = default;
};

// The state file of a journal file: "<journal file>.state".
std::string journalStateFileOf(const std::string& journal_file);

// Pure: the file's text, and back. A text that is not such a state is an error naming `display`.
std::string serialiseJournalState(const JournalState& s);
Result<JournalState> parseJournalState(std::string_view text, std::string_view display);

// A missing file is nullopt; one larger than kMaxJournalStateBytes or unreadable is an error
// naming it.
inline constexpr std::size_t kMaxJournalStateBytes = 64ULL << 20;
Result<std::optional<JournalState>> readJournalState(const std::string& path);
// Replaces the file atomically (temporary file, fsync, rename, fsync of the directory).
Status writeJournalState(const std::string& path, const JournalState& s);

}  // namespace headroom
