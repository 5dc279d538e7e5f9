// Processes across samples. A long-running sampler reads each process's /proc files only where
// nothing cheaper has the figure, and only when it may have changed:
// - from a kernel-side source (ProcessSource: the BPF task iterator, one read for every task of
//   the machine), /proc is read for a process's cmdline once per program it runs, its
//   /proc/<pid>/cgroup only when its cgroup id is new, and smaps_rollup when PSS is due;
// - from /proc alone, `cgroup` and `stat` every sample, `status` only for a process whose size,
//   resident pages or thread count (all three in `stat`) moved, smaps_rollup when PSS is due.
// PSS (a walk of the process's page tables in the kernel: tens of microseconds even for a small
// process) is due on first sight, when RSS has moved by pss_step since it was read, or when it is
// pss_max_age old. A process whose RSS moved, or one of kPssAlwaysBytes or more, is read when
// due; the others (first sight, age) take a read from a budget of pss_reads_per_second (and a
// burst of kPssBurst): on a machine of ten thousand small processes PSS ages past pss_max_age
// rather than the reads costing more than everything else the sample does.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "headroom/sources/cgroup.h"
#include "headroom/sources/fs_root.h"
#include "headroom/sources/procfs.h"
#include "headroom/util/result.h"
#include "headroom/util/shared_string.h"

namespace headroom {

// One process as a kernel-side source sees it: what /proc/<pid>/status and stat would say.
struct KernelProcess {
  pid_t pid = 0;
  pid_t ppid = 0;
  uid_t uid = 0;
  std::uint64_t start_time_ticks = 0;  // as /proc/<pid>/stat's starttime
  std::string comm;
  std::uint64_t cgroup_id = 0;  // the memory cgroup's (v2: the process's cgroup's) kernfs id
  int oom_score_adj = 0;
  bool kernel_thread = false;  // or a leader without an mm: /proc shows no memory for it either
  ProcStatus status;
  std::uint64_t minflt = 0, majflt = 0;  // every thread's, the exited ones' included
};

// A source of every process of the machine in one read (the sensors' task iterator).
class ProcessSource {
 public:
  virtual ~ProcessSource() = default;
  virtual const char* name() const = 0;
  virtual Result<std::vector<KernelProcess>> read() = 0;
  // The processes whose memory figures the next reads must give exactly, where the source
  // approximates the rest to keep its cost per process flat (the task iterator on a kernel with
  // per-CPU RSS counters); at most kMaxExact are taken, the first ones first.
  static constexpr std::size_t kMaxExact = 256;
  virtual void sumExactly(const std::vector<pid_t>& pids) { (void)pids; }
};

struct PssPolicy {
  std::chrono::nanoseconds max_age = std::chrono::seconds(60);
  std::uint64_t step = 4ULL << 20;      // bytes of RSS movement
  std::uint64_t reads_per_second = 32;  // small processes' reads on first sight or for age
};
// A process this large has its PSS read whenever due, beyond the budget.
inline constexpr std::uint64_t kPssAlwaysBytes = 8ULL << 20;
// The budget's reads a sampler may take at once (its start, a burst of new processes).
inline constexpr double kPssBurst = 256;

// What the sampler remembers of one process (pid + start time).
struct CachedProcess {
  std::uint64_t start_time_ticks = 0;
  std::string comm;  // the comm the cmdline was read under: a new one (exec) reads it again
  SharedString cmdline;
  bool cmdline_read = false;
  std::uint64_t cgroup_id = 0;  // kernel source: the id `cgroups` was read for
  // Shared by the processes of one cgroup where the kernel source names it by id.
  std::shared_ptr<const ProcCgroups> cgroups;
  std::optional<SmapsRollup> smaps;
  std::int64_t smaps_read_ns = 0;    // CLOCK_MONOTONIC
  std::uint64_t smaps_read_rss = 0;  // the RSS when it was read
  bool smaps_unreadable = false;     // permissions: not tried again for this process
  // /proc only: stat's size, resident pages and threads when status was read; status itself.
  std::uint64_t status_vsize = 0, status_rss_pages = 0;
  std::uint32_t status_threads = 0;
  std::optional<ProcStatus> status;
  std::int64_t status_read_ns = 0;
  std::uint64_t seen = 0;      // the sample that last saw it
  bool kernel_thread = false;  // /proc only: then its stat alone tells it is still the same one
};

class ProcessCache {
 public:
  explicit ProcessCache(PssPolicy pss = {}) : pss_(pss) {}

  const PssPolicy& pss() const { return pss_; }
  // The entry for pid, emptied when the pid now belongs to another process.
  CachedProcess& entry(pid_t pid, std::uint64_t start_time_ticks);
  // The entry for pid if there is one (whoever holds the pid now).
  CachedProcess* find(pid_t pid);
  // Starts a sample at `now_ns` (CLOCK_MONOTONIC: the PSS budget refills with time); forget()
  // then drops the processes it did not see.
  void beginSample(std::int64_t now_ns);
  void forget();
  std::size_t size() const { return by_pid_.size(); }
  // A kernel cgroup id's memory cgroup path, as /proc/<pid>/cgroup named it.
  std::shared_ptr<const ProcCgroups> cgroupsOf(std::uint64_t id) const;
  void rememberCgroups(std::uint64_t id, std::shared_ptr<const ProcCgroups> cg);

  // Whether to read the process's PSS now; a read for age or first sight of a small process
  // takes one from the budget, and waits when there is none.
  bool pssDue(const CachedProcess& e, std::uint64_t rss, std::int64_t now_ns);
  // Reads the budget put off since the sampler started (due, none left).
  std::uint64_t pssDeferred() const { return pss_deferred_; }

 private:
  PssPolicy pss_;
  std::uint64_t sample_ = 0;
  double pss_tokens_ = kPssBurst;
  std::int64_t pss_refilled_ns_ = 0;
  std::uint64_t pss_deferred_ = 0;
  std::unordered_map<pid_t, CachedProcess> by_pid_;
  std::unordered_map<std::uint64_t, std::shared_ptr<const ProcCgroups>> by_cgroup_id_;
};

// How one process's figures were found.
struct ProcFileReads {
  std::size_t files = 0;  // /proc files read
  std::size_t status = 0, smaps = 0, cmdline = 0, cgroup = 0;
};

// readProcess() against the cache: stat first, status and smaps_rollup only when due (above).
ProcessRead readProcessCached(const FsRoot& fs, pid_t pid, ProcessCache& cache, bool with_smaps, std::int64_t now_ns,
                              const std::function<bool(const ProcCgroups&)>& want, ProcFileReads& reads);

// A process from a kernel-side source, completed from /proc where only /proc has it (cmdline,
// the cgroup path of a new cgroup id, PSS when due).
ProcessRead completeKernelProcess(const FsRoot& fs, const KernelProcess& k, ProcessCache& cache, bool with_smaps,
                                  std::int64_t now_ns, const std::function<bool(const ProcCgroups&)>& want,
                                  ProcFileReads& reads);

}  // namespace headroom
