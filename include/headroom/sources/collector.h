// The collector reads every source once per tick into a RawSample: host meminfo and PSI, the
// memory cgroups to watch (and their ancestors, which bound them), and the processes in them.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "headroom/sources/cgroup.h"
#include "headroom/sources/cgroup_files.h"
#include "headroom/sources/fs_root.h"
#include "headroom/sources/nvml.h"
#include "headroom/sources/process_cache.h"
#include "headroom/sources/procfs.h"
#include "headroom/sources/workload.h"
#include "headroom/util/clock.h"
#include "headroom/util/result.h"

namespace headroom {

struct CollectOptions {
  // Watch these cgroups (and their descendants that hold processes); empty: every memory
  // cgroup that holds a process.
  std::vector<std::string> cgroups;
  // A watched cgroup that does not exist (yet, or any more: systemd removes a stopped unit's)
  // is counted in stats.cgroups_missing instead of failing the whole collection.
  bool missing_cgroups_ok = false;
  // Watch the memory cgroup of this process.
  std::optional<pid_t> pid;
  bool read_smaps = true;
  // Bound on processes read per tick; beyond it processes are counted, not read.
  std::size_t max_processes = 20000;
  // A long-running sampler's memory of processes: with it, /proc files are read only when due
  // (process_cache.h). Without it every file of every process is read (one-shot commands).
  ProcessCache* cache = nullptr;
  // The cgroups' memory files held open between samples (cgroup_files.h); without it each file
  // is opened and closed at each read.
  CgroupFileCache* cgroup_files = nullptr;
  // With `cache`: every process of the machine in one read from the kernel (the task iterator)
  // instead of listing /proc. A failed read falls back to /proc for that sample, with a warning.
  ProcessSource* source = nullptr;
  // With `source`: the processes whose figures must be exact (ProcessSource::sumExactly), those
  // that matter most first.
  std::vector<pid_t> exact;
  // false: a sample between two walks of every process. Only the processes in `refresh` are read
  // (from /proc, with the cache: the prover's), the rest are the last walk's (buildSnapshot
  // carries them); the cgroups read are the watched ones and `carried_cgroups` (the last walk's).
  bool walk = true;
  std::vector<pid_t> refresh;
  std::vector<std::string> carried_cgroups;
  // With walk false: cgroups each of whose processes is read again, those started since the
  // walk too (their cgroup.procs: the prover's budget cgroup, those near a bound). More than
  // `refresh_at_most` processes to read in all: the collection walks instead. These and every
  // ancestor are read whole; the other cgroups lightly (with `cgroup_files`: their usage, limit
  // and OOM counters, the rest as their last whole read found it; CgroupMemory::light).
  std::vector<std::string> refresh_cgroups;
  std::size_t refresh_at_most = 64;
};

struct CollectStats {
  std::size_t processes_seen = 0;
  std::size_t processes_read = 0;
  std::size_t processes_vanished = 0;     // exited between listing and reading
  std::size_t processes_failed = 0;       // unreadable for another reason (see warnings)
  std::size_t processes_skipped = 0;      // over max_processes
  std::size_t processes_without_pss = 0;  // smaps_rollup not readable (permissions)
  std::size_t processes_pss_pending = 0;  // PSS not read yet: the read budget comes to them later
  std::size_t kernel_threads = 0;
  // In cgroups the mounted hierarchy does not show (another cgroup namespace's, seen through
  // the namespace's own mount): not read, said in warnings.
  std::size_t processes_outside_mount = 0;
  std::vector<std::string> cgroups_missing;  // watched cgroups absent (missing_cgroups_ok)
  std::string process_source = "procfs";     // where the per-process figures came from
  ProcFileReads proc_reads;                  // the /proc files read for them
  // What this sample cost the sampling thread: the processes (the task iterator or /proc), and
  // the rest (meminfo, PSI, the cgroups' files).
  ThreadCpu processes_cpu, cgroups_cpu;
  // A sample between two walks (CollectOptions::walk false): the processes are the last walk's,
  // but for those read again (processes_refreshed); the counts above are then the walk's.
  bool processes_carried = false;
  std::size_t processes_refreshed = 0;
  std::int64_t processes_walked_ns = 0;  // CLOCK_MONOTONIC of the walk the processes are from
  std::vector<std::string> warnings;
};

struct RawSample {
  std::int64_t wall_time_ns = 0;       // CLOCK_REALTIME
  std::int64_t monotonic_time_ns = 0;  // CLOCK_MONOTONIC
  // CLOCK_MONOTONIC when its last file had been read: a sample that began before an OOM kill
  // may have read the victim's cgroup after it, so "before the kill" is judged by this.
  std::int64_t completed_monotonic_ns = 0;
  CgroupMounts mounts;
  int memory_version = 0;  // 1 or 2: the hierarchy that carries the memory controller
  Meminfo meminfo;
  std::optional<Psi> host_pressure;               // /proc/pressure/memory (absent without PSI)
  std::vector<CgroupMemory> cgroups;              // the watched cgroups
  std::map<std::string, CgroupMemory> ancestors;  // their ancestors, by path (bounds)
  std::vector<ProcessSample> processes;           // every process in a watched cgroup's subtree
  // Between two walks (stats.processes_carried): every pid asked for (CollectOptions::refresh),
  // read again (in `processes`) or gone; the snapshot carries the rest.
  std::vector<pid_t> refreshed;
  // The watched cgroups' workloads by path, where their names were looked up
  // (WorkloadResolver::name); a cgroup without one is known by its path alone.
  std::unordered_map<std::string, Workload> workloads;
  pid_t self_pid = 0;
  std::optional<pid_t> focus_pid;  // --pid: the process the user asked about
  GpuSample gpu;                   // the GPUs' device memory (NVML), where the caller read them
  CollectStats stats;
};

class Collector {
 public:
  // Discovers the cgroup mounts; fails when /proc is unreadable or no memory controller exists.
  static Result<Collector> create(const FsRoot& fs);

  Result<RawSample> collect(const CollectOptions& opts) const;

  const CgroupMounts& mounts() const { return mounts_; }
  const CgroupHierarchy& hierarchy() const { return hierarchy_; }

 private:
  Collector(const FsRoot& fs, CgroupMounts mounts, CgroupHierarchy h)
      : fs_(&fs), mounts_(std::move(mounts)), hierarchy_(std::move(h)) {}

  const FsRoot* fs_;
  CgroupMounts mounts_;
  CgroupHierarchy hierarchy_;
};

// What every subcommand opens first: the root /proc and /sys are read under (--root: "/" live, a
// container's view of the host, a fixture tree), and the collector over the memory hierarchy
// found there. The collector holds the root: both live as long as this.
struct SourceRoot {
  std::unique_ptr<FsRoot> fs;
  std::unique_ptr<Collector> collector;  // reads through *fs
};
// Errors (a root that cannot be opened, no memory controller under it) are the caller's bad input.
Result<SourceRoot> openSourceRoot(const std::string& root);

}  // namespace headroom
