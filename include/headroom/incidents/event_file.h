// The events file (docs/events.md): one JSON line per OOM record, appended whole, rotated by size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "headroom/sources/fs_root.h"  // Fd
#include "headroom/util/result.h"

namespace headroom {

struct EventFileOptions {
  std::string path;                       // absolute
  std::uint64_t max_bytes = 16ULL << 20;  // a line that would take the file past this rotates it first
  std::size_t max_files = 5;              // rotated files kept: <path>.1 (newest) .. <path>.<max_files>
};

struct EventFileStats {
  std::uint64_t lines = 0;
  std::uint64_t failures = 0;
  std::uint64_t rotations = 0;
  std::uint64_t reopens = 0;  // the path named another file (moved away by logrotate): opened again
  std::uint64_t bytes = 0;    // the current file's size
};

// Appends event lines: O_APPEND, one write() and an fdatasync per line. A line that would take
// the file past max_bytes rotates it first (<path> -> <path>.1 -> ... ; the oldest beyond
// max_files is removed); a line longer than max_bytes alone goes into a file of its own. Before
// each line the path is checked: a file moved or removed under it (logrotate without
// copytruncate) is followed by a new file at the path. A write that fails part-way is cut off
// again, so the file never holds half a line. Never throws.
class EventFile {
 public:
  static Result<std::unique_ptr<EventFile>> open(const EventFileOptions& opts);
  EventFile(const EventFile&) = delete;
  EventFile& operator=(const EventFile&) = delete;

  Status append(std::string_view line);
  // Closes and opens the path again (SIGHUP: after an external rotation).
  Status reopen();
  const EventFileStats& stats() const { return stats_; }
  const std::string& path() const { return opts_.path; }

 private:
  explicit EventFile(EventFileOptions o) : opts_(std::move(o)) {}
  Status openPath();
  Status rotate();
  Status followPath();  // opens the path again when it no longer names the open file
  EventFileOptions opts_;
  Fd fd_;
  EventFileStats stats_;
};

}  // namespace headroom
