// procfs sources: per-process memory (status, smaps_rollup, stat, comm, cmdline, cgroup) and the
// host's /proc/meminfo and /proc/pressure/memory. Parsers are pure; readers go through FsRoot.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/sources/cgroup.h"
#include "headroom/sources/fs_root.h"
#include "headroom/sources/parse.h"
#include "headroom/util/result.h"
#include "headroom/util/shared_string.h"

namespace headroom {

// /proc/<pid>/status, in bytes.
struct ProcStatus {
  pid_t tgid = 0;
  pid_t ppid = 0;
  uid_t uid = 0;               // real uid
  bool kernel_thread = false;  // no mm: "Kthread: 1", or no VmRSS line on older kernels
  std::uint64_t vm_size = 0, vm_rss = 0, vm_hwm = 0;
  std::uint64_t rss_anon = 0, rss_file = 0, rss_shmem = 0;
  std::uint64_t vm_pte = 0, vm_lck = 0, vm_pin = 0, vm_swap = 0;
  std::uint32_t threads = 0;
  // How far vm_rss (and its parts) may be from the kernel's exact sum: the task iterator reads
  // most processes' per-CPU counters (6.2+) without their per-CPU parts; 0: exact, as /proc says.
  std::uint64_t rss_drift = 0;
};
Result<ProcStatus> parseProcStatus(std::string_view text);

// /proc/<pid>/smaps_rollup, in bytes. PSS splits each shared page among its mappers.
struct SmapsRollup {
  std::uint64_t rss = 0, pss = 0, pss_anon = 0, pss_file = 0, pss_shmem = 0;
  std::uint64_t swap = 0, swap_pss = 0, locked = 0, anon_huge = 0;
};
Result<SmapsRollup> parseSmapsRollup(std::string_view text);

// The fields of /proc/<pid>/stat that headroom uses.
struct ProcStat {
  pid_t pid = 0;
  std::string comm;  // as in the parentheses (may hold spaces and ')')
  char state = '?';
  pid_t ppid = 0;
  std::uint64_t minflt = 0, majflt = 0;
  std::uint64_t utime_ticks = 0, stime_ticks = 0;
  std::uint64_t start_time_ticks = 0;  // since boot; with the pid, the process's identity
  std::uint32_t threads = 0;
  std::uint64_t vsize_bytes = 0, rss_pages = 0;  // what a sampler needs to tell "nothing moved"
};
Result<ProcStat> parseProcStat(std::string_view text);

// /proc/<pid>/statm's resident set ("size resident shared text lib data dt", in pages) in bytes:
// VmRSS without the sixty lines of status around it.
Result<std::uint64_t> parseStatmResidentBytes(std::string_view text, std::uint64_t page_bytes);
// A process's resident set from its statm under `fs`: the one cheap read of a process between samples.
Result<std::uint64_t> readResidentBytes(const FsRoot& fs, pid_t pid);

// NUL-separated argv, joined with spaces (trailing NULs dropped).
std::string parseCmdline(std::string_view text);

// /proc/meminfo, in bytes; every key kept, common ones named.
struct Meminfo {
  StatMap all;
  std::uint64_t mem_total = 0, mem_free = 0, mem_available = 0;
  std::uint64_t buffers = 0, cached = 0, shmem = 0, anon_pages = 0, mlocked = 0;
  std::uint64_t page_tables = 0, sec_page_tables = 0, kernel_stack = 0;
  std::uint64_t slab = 0, s_reclaimable = 0, s_unreclaim = 0, percpu = 0;
  std::uint64_t swap_total = 0, swap_free = 0;
  std::uint64_t hugepages_total = 0, hugepages_free = 0, hugepage_size = 0, hugetlb = 0;
  // True when MemAvailable was missing (kernels before 3.14) and was estimated.
  bool mem_available_estimated = false;
};
Result<Meminfo> parseMeminfo(std::string_view text);

// A process read at one moment; pid + start time identifies it across pid reuse.
struct ProcessSample {
  pid_t pid = 0;
  std::uint64_t start_time_ticks = 0;
  pid_t ppid = 0;
  uid_t uid = 0;
  std::string comm;
  SharedString cmdline;  // read once per program: shared by every sample of it
  ProcStatus status;
  std::optional<SmapsRollup> smaps;  // nullopt when unreadable (another user's, no CAP_SYS_PTRACE)
  // CLOCK_MONOTONIC when `smaps` was read: a long-running sampler re-reads PSS only when due
  // (process_cache.h), so the figure may be older than the sample.
  std::int64_t smaps_read_ns = 0;
  std::optional<int> oom_score_adj;  // when the source reads it (the task iterator)
  std::uint64_t minflt = 0, majflt = 0;
  // As /proc/<pid>/cgroup shows them, read without the cache (the collector lets go of it once placed).
  std::shared_ptr<const ProcCgroups> cgroups;
  SharedString memory_cgroup;  // the memory cgroup, relative to the hierarchy's mount (collector)
};

// A process's sample as /proc/<pid>/stat and status say who it is and what it holds (the
// thread count from stat, which a cached reader reads more often than status); the command
// line, PSS and cgroups are the reader's to add.
ProcessSample procfsSample(pid_t pid, const ProcStat& st, const ProcStatus& status);

enum class ReadOutcome { kOk, kVanished, kKernelThread, kSkipped, kFailed };

struct ProcessRead {
  ReadOutcome outcome = ReadOutcome::kFailed;
  ProcessSample sample;  // valid when kOk
  Error error;           // when kFailed
  // The sampler's cache's copy of the process's cgroups (process_cache.h), valid until the
  // cache's next forget(): a cached read points at it instead of copying it into the sample.
  const ProcCgroups* cached_cgroups = nullptr;
  // No PSS yet: its first smaps_rollup read waits for the sampler's budget (process_cache.h).
  bool pss_pending = false;
  const ProcCgroups& cgroups() const {
    static const ProcCgroups kNone;
    return cached_cgroups != nullptr ? *cached_cgroups : sample.cgroups ? *sample.cgroups : kNone;
  }
};

// Reads /proc/<pid>/* through one held directory fd, so that a pid reused mid-read fails
// (ESRCH) instead of mixing two processes. A process that exits mid-read is kVanished.
// `want`, when given, is asked with the process's cgroups before anything else is read; a
// process it refuses is kSkipped.
ProcessRead readProcess(const FsRoot& fs, pid_t pid, bool with_smaps = true,
                        const std::function<bool(const ProcCgroups&)>& want = {});

// One mapping of /proc/<pid>/smaps: its range and VmFlags ("rd wr mr mw me lo ac ...").
struct SmapsVma {
  std::uint64_t start = 0, end = 0;
  std::vector<std::string> flags;
  bool hasFlag(std::string_view f) const;
};
std::vector<SmapsVma> parseSmapsVmas(std::string_view text);

// Whether pinned allocations at these addresses are inside the process's RSS: a driver that
// pins user pages keeps them in ordinary (locked) anonymous mappings, counted in RSS; one that
// maps its own memory uses VM_IO / VM_PFNMAP mappings ("io", "pf"), which no RSS shows.
// nullopt when no address falls in a mapping.
std::optional<bool> pinnedInsideRss(const std::vector<SmapsVma>& vmas, const std::vector<std::uint64_t>& addrs);

// The numeric entries of /proc.
Result<std::vector<pid_t>> listPids(const FsRoot& fs);
// This process's pid: getpid() on the live root, else where the tree's /proc/self link points
// (a fixture tree's, like the real one); 0 when neither says.
pid_t selfPid(const FsRoot& fs);

}  // namespace headroom
