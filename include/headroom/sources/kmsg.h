// The kernel's own OOM report, read from /dev/kmsg: exact on every kernel version. Parses
// records, assembles the lines of one report ("invoked oom-killer" .. "Killed process") and
// keeps the OOM domain, the victim's figures and the task dump. Needs CAP_SYSLOG to read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/sources/fs_root.h"
#include "headroom/sources/oom_report.h"
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

// One complete OOM report from the kernel log.
struct KernelOomReport {
  std::uint64_t first_seq = 0, last_seq = 0;
  std::uint64_t ts_us = 0;  // of the "Killed process" line
  std::string trigger_comm;
  std::optional<pid_t> trigger_pid;
  std::string gfp_mask;
  int order = 0;
  std::optional<std::uint64_t> memcg_usage_bytes, memcg_limit_bytes, memcg_failcnt;
  // A memory cgroup OOM: the domain's counters and statistics at the kill.
  std::optional<OomMemcgState> memcg;
  // A global OOM: the machine's counters at the kill.
  std::optional<OomMachineState> machine;
  // Records of this report the log lost (overwritten before they were read): what is here is
  // true, but parts may be missing.
  std::uint64_t lost_records = 0;
  std::string constraint;
  std::optional<std::string> oom_memcg;   // the OOM domain (the cgroup at its limit)
  std::optional<std::string> task_memcg;  // the victim's cgroup
  bool global_oom = false;
  OomVictim victim;
  std::vector<OomTaskDumpEntry> tasks;
  bool memcg_report = false;  // "Memory cgroup out of memory" (vs global "Out of memory")
  // memory.oom.group: the other members killed with the victim come as reports of their own
  // sharing first_seq (the incident) and this flag.
  bool oom_group = false;
};

// Feeds records one by one; returns a report when its "Killed process" line arrives. A report
// cut short (a new one starts first) is dropped and counted. Records from user space (facility
// other than the kernel's) are not part of any report; a record whose text holds escaped
// newlines ("\x0a": 6.1 prints the statistics block and Mem-Info so) is read line by line.
class KmsgOomParser {
 public:
  std::optional<KernelOomReport> feed(const KmsgRecord& rec);
  std::uint64_t abandoned() const { return abandoned_; }

 private:
  std::optional<KernelOomReport> cur_;
  std::optional<KernelOomReport> group_;  // the incident whose memory.oom.group kills follow
  bool group_armed_ = false;              // "... due to memory.oom.group set" was seen
  std::vector<std::string> task_columns_;
  enum class Block { kNone, kStats, kMachine, kSlab };
  Block block_ = Block::kNone;   // the multi-line block the report is in
  std::size_t block_lines_ = 0;  // lines taken into the report's blocks
  std::optional<std::uint64_t> last_seq_;
  std::uint64_t abandoned_ = 0;
  void feedLine(std::string_view line);
};

// Parses every record of a text dump (one record per line, as `cat /dev/kmsg` prints them).
std::vector<KernelOomReport> parseKmsgOomReports(std::string_view text);

// Non-blocking reader of /dev/kmsg, starting at its end (or at the beginning).
class KmsgReader {
 public:
  static Result<KmsgReader> open(const FsRoot& fs, bool from_start = false);
  // Every record available now; never blocks.
  std::vector<KmsgRecord> readAvailable();
  std::uint64_t lost() const { return lost_; }  // records overwritten before we read them
  int fd() const { return fd_.get(); }

 private:
  explicit KmsgReader(Fd fd) : fd_(std::move(fd)) {}
  Fd fd_;
  std::uint64_t lost_ = 0;
};

}  // namespace headroom
