// The kernel log as /dev/kmsg gives it: its records ("pri,seq,ts,flags;message") and a
// non-blocking reader (CAP_SYSLOG). The OOM reports in it are assembled by sources/oom_log.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/sources/fs_root.h"
#include "headroom/sources/log_text.h"
#include "headroom/util/result.h"

namespace headroom {

struct KmsgRecord {
  int priority = 0;  // syslog level (0-7)
  int facility = 0;
  std::uint64_t seq = 0;
  std::uint64_t ts_us = 0;  // microseconds since boot (the kernel's log clock)
  std::string message;      // first line; continuation lines (" KEY=VALUE") are dropped
};

// "pri,seq,ts,flags[,...];message"
Result<KmsgRecord> parseKmsgRecord(std::string_view raw);

// The record as the log's lines: its seq, clock and facility, its escaped newlines ("\x0a":
// 6.1 prints a cgroup's statistics and Mem-Info so) made lines.
std::vector<LogLine> logLines(const KmsgRecord& rec);

// Non-blocking reader of /dev/kmsg, starting at its end (or at the beginning).
class KmsgReader {
 public:
  static Result<KmsgReader> open(const FsRoot& fs, bool from_start = false);
  // Every record available now; never blocks.
  std::vector<KmsgRecord> readAvailable();
  // Records overwritten before we read them (the gaps in the sequence numbers read).
  std::uint64_t lost() const { return lost_; }
  // The sequence number of the first record read, and of the record the next read begins at.
  std::optional<std::uint64_t> firstSeq() const { return first_seq_; }
  std::optional<std::uint64_t> nextSeq() const { return next_seq_; }
  int fd() const { return fd_.get(); }

 private:
  explicit KmsgReader(Fd fd) : fd_(std::move(fd)) {}
  Fd fd_;
  std::uint64_t lost_ = 0;
  std::optional<std::uint64_t> first_seq_, next_seq_;
};

}  // namespace headroom
