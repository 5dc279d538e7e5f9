// The kernel's OOM reports in its log, from any kernel (2.6.32's RHEL 6 lines to 6.x) and from
// any part of them: a whole report ("invoked oom-killer" .. "Killed process", the reaper's line,
// memory.oom.group's further kills), or an excerpt that starts after its header (at the call
// trace, at "Memory cgroup out of memory", a grep of the kill lines). A kill is taken only from a
// line that proves it: "Killed process", "Kill process P (comm) score S", "oom-kill:...", the
// reaper's "reaped process". What the text does not show stays unknown, never guessed. The live
// agent (/dev/kmsg records) and `headroom explain` (saved text, sources/log_text.h) share it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/sources/log_text.h"
#include "headroom/sources/oom_report.h"

namespace headroom {

// The line that proves a kill.
enum class KillProof {
  kNone,         // an OOM report without a kill line (the text ends first, or nothing was killable)
  kKilledLine,   // "Killed process P (comm) total-vm:..." (every kernel)
  kKillLine,     // "Kill process P (comm) score S or sacrifice child" (before 5.0) alone
  kOomKillLine,  // "oom-kill:...,task=comm,pid=P,..." (4.19 and later) alone
  kReaperLine,   // "oom_reaper: reaped process P (comm), now anon-rss:..." alone
};
const char* toString(KillProof p);

// The reaper's line: what the victim still held once the reaper had unmapped what it could.
struct OomReaped {
  std::uint64_t anon_rss = 0, file_rss = 0, shmem_rss = 0;
};

// One kill of an OOM report (a memory.oom.group incident has several, sharing `incident`).
struct KernelOomReport {
  std::uint64_t first_seq = 0, last_seq = 0;  // kernel sequence numbers (text: line numbers)
  std::uint64_t incident = 0;                 // the kills of one incident share it
  std::uint64_t ts_us = 0;                    // the kernel's clock at the kill line (0: not printed)
  std::size_t first_line = 0, last_line = 0;  // where the report is in the text (1-based)
  std::string stamp;                          // the kill line's wall time as the text printed it
  std::string host;                           // the host a syslog or journal line named
  std::string kernel_release;                 // from the "CPU: ... Comm: ... Not tainted X" line
  bool header_seen = false;                   // the "invoked oom-killer" line was read
  std::string trigger_comm;
  std::optional<pid_t> trigger_pid;
  std::string gfp_mask;
  std::optional<int> order;
  std::optional<int> trigger_oom_score_adj;
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
  KillProof proof = KillProof::kNone;
  bool victim_line_cut = false;     // the kill line ends before the victim's figures
  bool oom_kill_line_cut = false;   // the "oom-kill:" line ends before its uid: its last value may be cut
  bool nothing_killable = false;    // "Out of memory and no killable processes..."
  bool oom_group_incident = false;  // memory.oom.group's line is in this incident
  std::optional<pid_t> chosen_pid;  // "Kill process P ... or sacrifice child": the one picked
  std::optional<OomReaped> reaped;  // the reaper's line for this victim
  std::vector<OomTaskDumpEntry> tasks;
  bool memcg_report = false;  // "Memory cgroup out of memory" (vs global "Out of memory")
  // memory.oom.group: the other members killed with the victim come as reports of their own
  // sharing `incident` and this flag.
  bool oom_group = false;
};

// Feeds lines one by one. Live (`kAtKill`): a report the moment its kill line arrives, as the
// agent needs it. Text (`kAtEnd`): every report at finish(), with the reaper's line and every
// memory.oom.group kill in them, and incidents without a kill too (proof kNone). Another
// program's lines (LogLine::kernel false) are no report's.
class OomLogAssembler {
 public:
  enum class Emit { kAtKill, kAtEnd };
  explicit OomLogAssembler(Emit emit = Emit::kAtKill) : emit_(emit) {}
  std::vector<KernelOomReport> feed(const LogLine& line);
  // The text ended: what is still open, complete as far as the text goes (kAtEnd).
  std::vector<KernelOomReport> finish();
  // Reports that began and never reached a kill before the next began (counted in both modes).
  std::uint64_t abandoned() const { return abandoned_; }
  // The first sequence number of the report being read when none of its kills was given yet: a
  // kill may still come from it.
  std::optional<std::uint64_t> openSince() const {
    return cur_ && kills_.empty() && !pending_ ? std::optional<std::uint64_t>(cur_->first_seq) : std::nullopt;
  }

 private:
  struct Pending {
    pid_t pid = 0;
    std::string comm;
    KillProof proof = KillProof::kNone;
  };
  enum class Block { kNone, kStats, kMachine, kSlab, kTasks };

  Emit emit_;
  std::optional<KernelOomReport> cur_;  // the incident being read (shared fields, no victim yet)
  std::vector<KernelOomReport> kills_;  // its kills so far (kAtEnd), or the last one (kAtKill)
  std::optional<Pending> pending_;      // a kill proven by a line that precedes "Killed process"
  bool group_armed_ = false;            // "... due to memory.oom.group set" was seen
  std::vector<std::string> task_columns_;
  Block block_ = Block::kNone;
  std::size_t block_lines_ = 0;
  std::optional<std::uint64_t> last_seq_;
  std::uint64_t next_incident_ = 1;
  std::uint64_t abandoned_ = 0;
  std::deque<LogLine> recent_;  // the kernel's lines before a report, for one that starts headless
  // Kills of reports already closed: kAtEnd keeps them all until finish() (the reaper's line may
  // come after the next report); kAtKill the last few victims' pids, so that a late reaper's
  // line is not taken for a kill of its own.
  std::vector<KernelOomReport> done_;
  std::deque<pid_t> done_pids_;

  void open(const LogLine& line, bool header);
  void openHeadless(const LogLine& line);
  std::vector<KernelOomReport> close();
  std::vector<KernelOomReport> addKill(KernelOomReport kill, const LogLine& line);
  void feedBlockLine(std::string_view text, bool maybe_cut);
  void remember(const LogLine& line);
};

// Every OOM incident's reports in saved text of any form (sources/log_text.h), in order.
std::vector<KernelOomReport> parseOomLog(const LogText& text);
std::vector<KernelOomReport> parseOomLog(std::string_view text);

}  // namespace headroom
