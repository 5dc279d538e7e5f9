// The parts of the kernel log's OOM parser (sources/oom_log.h) that its files share: each kind
// of line a report holds, read on its own, every form the kernels since 2.6.32 print. Private
// to agent/sources.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/sources/oom_log.h"
#include "headroom/sources/oom_report.h"

namespace headroom::oom_log_detail {

inline constexpr std::uint64_t kPage = 4096;

// "65536kB" in bytes; without the unit the value was cut short and is not a number to trust.
std::optional<std::uint64_t> kbValue(std::string_view v);
// One line of Mem-Info and what follows it: the machine's counters (pages), a node's summary,
// its hugepages, swap, RAM, reserved; zone and free-list lines are not kept.
void parseMachineLine(std::string_view line, OomMachineState& m);
// One line of "Unreclaimable slab info:" ("kmalloc-4k  123KB  456KB").
void parseSlabLine(std::string_view line, std::vector<OomSlabCache>& out);

// "comm invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0"
struct HeaderLine {
  std::string comm, gfp_mask;
  std::optional<int> order, oom_score_adj;
};
std::optional<HeaderLine> headerLine(std::string_view msg);

// "CPU: 1 PID: 7060 Comm: x Not tainted 6.1.0-57-amd64 #1" (with "UID: 0" on 6.x), and 2.6's
// "Pid: 7060, comm: x Not tainted 2.6.32-754.el6.x86_64 #1".
struct CpuLine {
  pid_t pid = 0;
  std::string comm, release;
};
std::optional<CpuLine> cpuLine(std::string_view msg);

// "Killed process P (comm) total-vm:..., anon-rss:..." (after "Out of memory: " or "Memory
// cgroup out of memory: " since 4.19), 2.6.32's "Killed process P, UID U, (comm) total-vm:...",
// and a line cut anywhere after the pid.
struct KilledLine {
  OomVictim victim;
  bool memcg = false;  // "Memory cgroup out of memory: Killed process"
  bool cut = false;    // the line ends before the comm or the figures
};
std::optional<KilledLine> killedLine(std::string_view msg);

// "[Memory cgroup ]Out of memory: Kill process P (comm) score S or sacrifice child" (before 5.0).
struct KillLine {
  pid_t pid = 0;
  std::string comm;
  bool memcg = false;
};
std::optional<KillLine> killLine(std::string_view msg);

// "oom-kill:constraint=...,oom_memcg=...,task_memcg=...,task=comm,pid=P,uid=U" into `r`; the
// victim it names (pid 0: the line was cut before its pid was whole).
std::optional<KillLine> oomKillLine(std::string_view msg, KernelOomReport& r);

// "Task in /a/b killed as a result of limit of /a" (before 4.19; "Task in " may be cut off).
struct TaskInLine {
  std::string task, limit;
};
std::optional<TaskInLine> taskInLine(std::string_view msg);

// "oom_reaper: reaped process P (comm), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB"
struct ReaperLine {
  pid_t pid = 0;
  std::string comm;
  OomReaped left;
};
std::optional<ReaperLine> reaperLine(std::string_view msg);

// "Tasks in /a are going to be killed due to memory.oom.group set": the cgroup.
std::optional<std::string> groupLine(std::string_view msg);

// "usage 65536kB, limit 65536kB, failcnt 23" (after "memory: " / "memory+swap: " / ...).
OomCounterLine counterLine(std::string_view rest);

// The task dump's header ("[  pid  ]   uid  tgid total_vm      rss ... name", "[ pid ]" before
// 4.19): its columns after the pid.
std::optional<std::vector<std::string>> taskHeader(std::string_view msg);
// One row of it ("[   7060]     0  7060    52618 ... name"), read by those columns.
std::optional<OomTaskDumpEntry> taskRow(std::string_view msg, const std::vector<std::string>& cols);

// "Memory cgroup stats for /a:" (a block follows), or before 4.19 one line per cgroup of the
// domain's tree, "Memory cgroup stats for /a/b: cache:0KB rss:1024KB ..." (its own pages, so the
// domain's are their sum): the path, and the figures of the one-line form added into `stats`.
std::optional<std::string> statsHeader(std::string_view msg, StatMap& stats, bool& one_line);

}  // namespace headroom::oom_log_detail
