// One OOM incident from its sources: the BPF marks of oom:mark_victim and the kernel's report in
// /dev/kmsg, joined by victim and time, the victims of one incident grouped (memory.oom.group).
// Pure logic, no I/O.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "headroom/sensors/oom_event.h"
#include "headroom/sources/oom_log.h"

namespace headroom {

// What oom:mark_victim told, with cgroup ids already resolved to paths.
struct OomMark {
  std::int64_t ts_ns = 0;  // CLOCK_MONOTONIC
  pid_t trigger_pid = 0, trigger_tgid = 0;
  std::string trigger_comm;
  std::string trigger_cgroup;
  OomVictim victim;  // tgid 0 and no figures on kernels whose tracepoint carries only a pid
  // The cgroups' files read when the mark came (OomEvent::read_at_kill).
  std::vector<CgroupMemory> read_at_kill;
  std::int64_t read_at_kill_ns = 0;
};

// Joins the BPF marks and the kernel's reports of one OOM incident (by victim pid, within a
// few seconds), groups the victims of one incident (memory.oom.group), and emits each incident
// once it has settled: every expected source seen, or the wait is over. Pure logic, no I/O.
class OomJoiner {
 public:
  struct Options {
    bool expect_bpf = true;
    bool expect_kmsg = true;
    std::int64_t settle_ns = 200'000'000;      // quiet time before an incident is complete
    std::int64_t max_wait_ns = 2'000'000'000;  // wait for the other source at most this long
    std::int64_t match_window_ns = 5'000'000'000;
  };
  OomJoiner() = default;
  explicit OomJoiner(Options o) : opts_(o) {}

  void addMark(const OomMark& m, std::int64_t now_ns);
  // `report_mono_ns`: the report's kernel timestamp on CLOCK_MONOTONIC. `read_at_kill`: the
  // cgroups' files read when the report came, where no mark did (OomEvent::read_at_kill).
  void addReport(const KernelOomReport& r, std::int64_t report_mono_ns, std::int64_t now_ns,
                 std::vector<CgroupMemory> read_at_kill = {}, std::int64_t read_at_kill_ns = 0);
  void addReap(pid_t pid, bool finished, std::int64_t ts_ns);
  // Incidents ready to be told.
  std::vector<OomEvent> takeReady(std::int64_t now_ns, std::int64_t wall_now_ns);
  // Incidents begun since the last call, as first seen (each once, its id the one takeReady
  // gives it later): what the agent makes durable before it waits for the rest.
  std::vector<OomEvent> takeStarted();
  // The first kernel log sequence number of the incidents takeStarted() has not given yet.
  std::optional<std::uint64_t> untoldSince() const;
  std::size_t pending() const { return pending_.size(); }

 private:
  struct Pending {
    OomEvent event;
    std::uint64_t kmsg_incident = 0;  // first_seq of its kernel report, 0 if none yet
    std::int64_t first_seen_ns = 0, last_update_ns = 0;
    std::vector<pid_t> marked, reported;  // victims seen by each source
    bool started_told = false;            // takeStarted() gave it
  };
  Pending& begin(std::int64_t ts_ns, std::int64_t now_ns);
  Pending* findFor(pid_t victim, std::int64_t ts_ns);
  Options opts_;
  std::vector<Pending> pending_;
  std::uint64_t next_id_ = 1;
};

}  // namespace headroom
