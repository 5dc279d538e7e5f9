// The model: one immutable Snapshot per tick (host, cgroups, processes with roles) and the
// Attribution that splits each cgroup's usage into visible and invisible parts. No I/O here.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/model/process_list.h"
#include "headroom/model/roles.h"
#include "headroom/sensors/oom_event.h"
#include "headroom/sensors/readings.h"
#include "headroom/sources/cgroup.h"
#include "headroom/sources/collector.h"
#include "headroom/sources/oom_report.h"
#include "headroom/sources/procfs.h"
#include "headroom/sources/workload.h"
#include "headroom/util/shared_string.h"

namespace headroom {

// The fixed set of parts a cgroup's usage is split into (also the `kind` metric label).
enum class PartKind {
  // visible: what processes' memory shows
  kAnon,
  kFile,         // page cache, without shmem
  kShmemMapped,  // shmem/tmpfs pages some process in the cgroup maps
  // invisible: charged to the cgroup, shown by no process's RSS
  kShmemUnmapped,  // tmpfs files / shm segments that no process in the cgroup maps
  kPageTables,
  kSecPageTables,
  kSlabReclaimable,
  kSlabUnreclaimable,
  kKernelStack,
  kSock,
  kPercpu,
  kZswap,
  kKernelOther,  // the rest of the kernel's charge (vmalloc, driver allocations, ...)
};
const char* toString(PartKind k);
bool isVisible(PartKind k);
const std::vector<PartKind>& allPartKinds();

// exact: a figure the kernel keeps, as read; derived: computed from exact figures (a difference,
// a sum over the kernel's task dump); estimated: from a rule of thumb or an upper bound.
enum class Accuracy { kExact, kDerived, kEstimated };
const char* toString(Accuracy a);

struct Part {
  PartKind kind;
  std::uint64_t bytes = 0;
  Accuracy accuracy = Accuracy::kExact;
  std::string source;  // where the number comes from: "memory.stat pagetables", "sum of VmPTE"
};

struct Attribution {
  std::uint64_t usage = 0;
  std::vector<Part> parts;  // visible first, then invisible
  // usage minus every part: never silently dropped. Negative when the kernel's counters
  // disagree (per-CPU charge batching), which is shown, not hidden.
  std::int64_t unattributed = 0;
  std::vector<std::string> notes;  // what is estimated and why

  std::uint64_t visibleBytes() const;
  std::uint64_t invisibleBytes() const;
  std::optional<std::uint64_t> bytesOf(PartKind k) const;
};

// Which part of a process's memory is pinned for device DMA; filled by the sensors. An
// overlay: it says where pinned bytes already are, it is never added to the parts.
struct PinnedOverlay {
  enum class Residency { kUnknown, kInsideRss, kOutsideRss };
  std::uint64_t live_bytes = 0;
  std::uint64_t peak_bytes = 0;
  std::uint64_t allocations = 0;
  Residency residency = Residency::kUnknown;
  std::string source;  // "uprobe libcuda.so.1", ...
};

struct ProcessAttribution {
  std::uint64_t rss = 0, rss_anon = 0, rss_file = 0, rss_shmem = 0;
  std::optional<std::uint64_t> pss, pss_anon, pss_file, pss_shmem;  // absent without smaps_rollup
  std::uint64_t page_tables = 0;                                    // VmPTE, exact
  std::uint64_t locked = 0;                                         // VmLck
  std::uint64_t swap = 0;
  // This process's share of its cgroup's invisible overhead, and the rule that made it.
  std::uint64_t overhead_share = 0;
  std::string_view overhead_rule;                                // one of the model's fixed texts
  std::shared_ptr<const PinnedOverlay> pinned;                   // held apart: most processes have none
  std::optional<std::uint64_t> device_bytes, device_peak_bytes;  // CUDA device memory (sensors)
};

struct ProcessSnapshot {
  ProcessSample sample;
  Role role = Role::kSystem;
  SharedString cgroup;  // the watched cgroup it is attributed to (its own, or nearest ancestor)
  ProcessAttribution attribution;
  std::shared_ptr<const ProcessActivity> activity;  // from the BPF sensors, when they run (held apart: most have none)
};

using ProcessList = SharedList<ProcessSnapshot>;

// One limit that bounds a cgroup: its own, an ancestor's, or the host's MemAvailable.
struct Bound {
  std::string name;  // cgroup path, or "host"
  std::uint64_t limit = 0;
  std::uint64_t usage = 0;
  // Page cache under this bound the kernel can drop at once (see reclaimableBytes); host: 0,
  // since MemAvailable already counts what can be reclaimed.
  std::uint64_t reclaimable = 0;
  // Its cgroup read lightly (CgroupMemory::light): `reclaimable` is the last whole read's, no
  // figure to make a trend of.
  bool light = false;
  std::uint64_t room() const { return limit > usage ? limit - usage : 0; }
};

// What the processes in a cgroup's subtree add up to, for its split and their overhead shares.
// Kept with the snapshot: the next one between two walks takes away and adds again only the
// processes read again, not every process summed anew.
struct ProcessTotals {
  std::uint64_t shmem_mapped = 0;  // Pss_Shmem; RssShmem where PSS is unknown (an over-estimate)
  std::uint64_t page_tables = 0;   // VmPTE
  std::uint64_t threads = 0;
  std::uint64_t size = 0;         // PSS; RSS where PSS is unknown
  std::uint64_t without_pss = 0;  // processes without a readable smaps_rollup
  void add(const ProcessSample& p);
  void remove(const ProcessSample& p);
  friend bool operator==(const ProcessTotals&, const ProcessTotals&) = default;
};

// Page cache the kernel can drop at once, from memory.stat (v1 total_* keys, v2 keys): the
// file LRUs less dirty, writeback and mapped pages (clean, unmapped cache).
std::uint64_t reclaimableBytes(const CgroupMemory& cg);

struct CgroupSnapshot {
  CgroupMemory memory;
  Attribution attribution;
  std::vector<Bound> bounds;           // every bound, own first; host last
  std::optional<Bound> tightest;       // the bound with the least room
  std::vector<std::size_t> processes;  // indices into Snapshot::processes, by PSS descending
  ProcessTotals totals;                // of those processes
  SharedString name;                   // memory.path, one string with its processes' `cgroup`
  Workload workload;                   // what operators call it (filled by whoever can look names up)

  std::optional<std::uint64_t> headroom() const {
    return tightest ? std::optional<std::uint64_t>(tightest->room()) : std::nullopt;
  }
};

struct HostSnapshot {
  Meminfo meminfo;
  std::optional<Psi> pressure;
};

struct Snapshot {
  std::int64_t wall_time_ns = 0;
  std::int64_t monotonic_time_ns = 0;
  std::int64_t completed_monotonic_ns = 0;  // its last file read (RawSample's)
  CgroupMode mode = CgroupMode::kNone;
  int memory_version = 0;
  std::string memory_mount;
  HostSnapshot host;
  std::vector<CgroupSnapshot> cgroups;  // by usage descending
  // In pid order (a walk's), each shared with the snapshots it did not change in.
  ProcessList processes;
  // Indices into `processes` by PSS (RSS where PSS is unknown) descending, ties by index: the
  // order each cgroup's `processes` is in (kept from one snapshot to the next between walks).
  std::shared_ptr<const std::vector<std::size_t>> by_size;
  // What the passes over every process read of each, by index, side by side: a pass reads these
  // (a few bytes a process, in a row) instead of each process's snapshot (hundreds of bytes, each
  // elsewhere in memory); the next snapshot between two walks finds the processes read again by
  // their pids. Made with the snapshot (see columnsOf for one made otherwise).
  struct ProcessColumns {
    static constexpr std::uint32_t kNoCgroup = UINT32_MAX;
    std::vector<pid_t> pids;
    std::vector<std::uint64_t> sizes;  // PSS; RSS where PSS is unknown
    std::vector<std::uint64_t> rss;    // VmRSS
    std::vector<Role> roles;
    std::vector<std::uint32_t> cgroup;  // index into `cgroups` of the one it is attributed to
    std::size_t cgroup_count = 0;       // of `cgroups`, when these were made
    bool pid_order = false;             // pids ascending
  };
  std::shared_ptr<const ProcessColumns> columns;
  pid_t self_pid = 0;
  std::optional<pid_t> focus_pid;
  CollectStats stats;
  std::vector<SensorStatus> sensors;
  // Device memory per GPU and per process as the driver reports it (NVML), or why not.
  GpuSample gpu;

  const CgroupSnapshot* findCgroup(std::string_view path) const;
  const ProcessSnapshot* findProcess(pid_t pid) const;
};

// `snap`'s columns: its own when it was built with them and its processes and cgroups still
// number the same, else made from its processes. Whoever changes a built snapshot's processes or
// cgroups in place (a test) resets `columns`.
std::shared_ptr<const Snapshot::ProcessColumns> columnsOf(const Snapshot& snap);

// Stack size of one thread in the kernel (THREAD_SIZE: 16 KiB on x86-64 and arm64), used to
// estimate kernel stacks where the kernel does not count them per cgroup (v1).
inline constexpr std::uint64_t kKernelStackBytes = 16 * 1024;

// Splits one cgroup's usage given the processes in its subtree (pure).
Attribution attributeCgroup(const CgroupMemory& cg, const std::vector<const ProcessSample*>& procs);
Attribution attributeCgroup(const CgroupMemory& cg, const ProcessTotals& totals);

// Where an OOM victim belongs, for its metrics and the budget: the process of the same pid and
// comm in `snap` (a reused pid is not taken for it) with its watched cgroup and role; else,
// when it started and died between two samples, its own memory cgroup and the role the rules
// give it.
struct VictimPlace {
  std::string cgroup;
  Role role = Role::kSystem;
  const ProcessSnapshot* process = nullptr;  // in `snap`, when it was there
};
VictimPlace placeVictim(const OomVictim& v, const Snapshot* snap, const RoleMatcher& roles);

// The workloads of an OOM kill: of the cgroup it is about (the journal record's) and of each
// victim's cgroup, in the order of OomEvent::victims.
struct OomWorkloads {
  Workload cgroup;
  std::vector<Workload> victims;
};

// Builds the snapshot from one collection and what the sensors knew of it. Each cgroup's
// workload: the sample's (raw.workloads, names included), else its identity from the path.
// A collection between two walks (raw.stats.processes_carried) takes its processes from
// `carry_from` (the last snapshot): shared, those read again (raw.refreshed) replaced or, gone,
// dropped, those read and new to it added after them; the carried keep the figures, roles and
// overhead shares of their walk. When none went and none came (the usual case), the work is in
// the processes read again: the rest are neither read nor summed again, each cgroup's totals and
// order the last snapshot's with those few taken out and put back.
std::shared_ptr<const Snapshot> buildSnapshot(RawSample raw, const RoleMatcher& roles, SensorReadings sensors = {},
                                              const Snapshot* carry_from = nullptr);

// The processes whose RSS must be exact at the next sample where the per-process source
// approximates it (ProcessSource::sumExactly), at most `max`: the prover's, then those of the
// cgroups with a bound that `near` says is close to its limit, each group largest first.
std::vector<pid_t> processesToSumExactly(const Snapshot& snap, const std::function<bool(const Bound&)>& near,
                                         std::size_t max);

}  // namespace headroom
