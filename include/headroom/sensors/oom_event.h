// What the sensors tell of OOM kills and exits: one OOM incident (joined from the BPF events and
// the kernel's own report, sensors/oom_joiner.h), and every exit classified (exited, signaled,
// oom_killed) on the kernel's evidence, never on "137 means OOM".
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "headroom/sources/cgroup.h"
#include "headroom/sources/oom_report.h"

namespace headroom {

// One OOM incident: one OOM domain, one trigger, one or more victims (memory.oom.group).
struct OomEvent {
  std::uint64_t id = 0;
  std::int64_t wall_time_ns = 0;       // when headroom learned of it
  std::int64_t monotonic_time_ns = 0;  // kernel time of the first victim's mark (or kmsg stamp)
  std::vector<OomVictim> victims;
  // The task whose allocation failed (mark_victim runs in its context).
  pid_t trigger_pid = 0, trigger_tgid = 0;
  std::string trigger_comm;
  std::string trigger_cgroup;
  // The OOM domain: the cgroup that hit its limit (oom_memcg), or the whole machine.
  std::string constraint;  // CONSTRAINT_MEMCG, CONSTRAINT_NONE, ...
  std::optional<std::string> domain_cgroup;
  bool global = false;
  std::optional<std::uint64_t> domain_limit_bytes, domain_usage_bytes;  // "memory: usage .., limit .."
  std::vector<OomTaskDumpEntry> tasks;                                  // who held what at the kill
  bool from_bpf = false, from_kmsg = false;
  // Without BPF or /dev/kmsg: a cgroup's OOM-kill counter rose by counted_kills between two
  // samples (memory.events.local / memory.oom_control). The domain is then unknown.
  bool from_counter = false;
  std::string counter_cgroup;
  std::uint64_t counted_kills = 0;
  std::optional<std::int64_t> reap_start_ns, reap_finish_ns;
  // The kernel's own picture of the moment (/dev/kmsg): the OOM domain's counters and statistics
  // (a memory cgroup OOM), or the machine's (a global one); records of it the log lost.
  std::optional<OomMemcgState> kernel_memcg;
  std::optional<OomMachineState> kernel_machine;
  std::uint64_t kernel_lost_records = 0;
  // The memory files of the victim's cgroup and of its ancestors with a limit, read the moment
  // the kill was seen (BPF's mark, else the kernel's report), before anyone could remove them,
  // nearest first. read_at_kill_ns: CLOCK_MONOTONIC when the read began.
  std::vector<CgroupMemory> read_at_kill;
  std::int64_t read_at_kill_ns = 0;
  // The sequence number of the kernel report's first record in /dev/kmsg (with the boot id, what
  // names this kill for good: the journal never holds one twice).
  std::optional<std::uint64_t> kmsg_seq;
  // How a kill the agent did not see happen was found: "" (seen live), "kernel_log" (in the
  // kernel's log read from its start), "in_flight" (seen by an agent that stopped before its
  // record was written), "counters" (a cgroup's OOM-kill counter rose while no agent ran).
  std::string found_after;

  const OomVictim* victim(pid_t tgid) const;
};

// How far the sensors have read the kernel log (/dev/kmsg), in its sequence numbers.
struct KernelLogPosition {
  bool from_start = false;                  // the first read began at the start of the ring
  std::optional<std::uint64_t> ring_start;  // the oldest record the ring held at that read
  // Every report whose first record comes before this has been handed out (started or ready).
  std::uint64_t settled = 0;
};

// One OOM kill in one line, for logs and the terminal: victims, OOM domain and limit, trigger,
// constraint, sources. Comms are made printable.
std::string describeOom(const OomEvent& e);

enum class ExitKind { kExited, kSignaled, kOomKilled };
const char* toString(ExitKind k);

struct ExitEvent {
  pid_t pid = 0;         // the process (tgid)
  pid_t parent_pid = 0;  // its parent's tgid when it exited (0: unknown)
  std::string comm;
  int wait_status = 0;
  ExitKind kind = ExitKind::kExited;
  int code = 0;                // exit code when kExited
  int signal = 0;              // terminating signal when kSignaled / kOomKilled
  bool oom_marked = false;     // mark_victim named it
  bool shares_oom_mm = false;  // it shared a victim's mm
  std::string cgroup;
  std::int64_t monotonic_time_ns = 0;
  std::string note;  // e.g. "marked by the OOM killer while already exiting: kill skipped"

  // "exited(0)", "signaled(9)", "oom_killed".
  std::string describe() const;
};

// Classifies a wait status with the kernel's evidence: only a SIGKILL of a process the OOM
// killer named (or that shared a named victim's mm) is oom_killed.
ExitEvent classifyExit(pid_t pid, int wait_status, bool oom_marked, bool shares_oom_mm);

}  // namespace headroom
