// The BPF rings' records as headroom's types: bytes in, events out, nothing else (the layouts
// are bpf/events.h's). Cgroups stay ids here; the sensors name them (sources/cgroup_index.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <variant>

#include "headroom/sensors/oom_event.h"
#include "headroom/sensors/oom_joiner.h"
#include "headroom/sensors/readings.h"
#include "headroom/sources/process_cache.h"
#include "headroom/util/result.h"

namespace headroom {

// oom:mark_victim. `mark` has no cgroup paths yet; on kernels whose tracepoint carries only a
// pid, `victim_is_task` is false and the victim has its thread id alone.
struct DecodedOomMark {
  OomMark mark;
  std::uint64_t trigger_cgroup_id = 0, victim_cgroup_id = 0;
  bool victim_is_task = false;
};
// The oom_reaper starting or finishing on a victim.
struct DecodedReap {
  pid_t pid = 0;
  bool finished = false;
  std::int64_t ts_ns = 0;
};
// A record of the OOM ring: empty when too short for its type, or of a type it does not know.
using OomRingRecord = std::variant<std::monostate, DecodedOomMark, DecodedReap>;
OomRingRecord decodeOomRecord(std::span<const std::byte> bytes);

// A process's exit (its whole thread group), classified on the kernel's evidence.
struct DecodedExit {
  ExitEvent exit;  // cgroup empty: see cgroup_id
  std::uint64_t cgroup_id = 0;
};
std::optional<DecodedExit> decodeExitRecord(std::span<const std::byte> bytes);

// The task iterator's output (hr_task_record after hr_task_record) as processes: each thread's
// faults added to its process's, kernel threads kept (flagged) so that they can be counted;
// the processes by pid (the order the iterator walks tasks in).
// `ticks_per_second` converts the start time as /proc does (USER_HZ); `page_bytes` the pages.
// An error for a length that is not a whole number of records (a torn read).
// `counters`, when given, receives the sensors' counters the records carry (mmap activity, CUDA
// memory), by process.
struct TaskCounters {
  std::optional<ProcessActivity> activity;
  std::optional<GpuMemory> gpu;
};
// `add_cpu_parts`: add the per-CPU parts of the RSS counters to their folded counts (6.2+), as
// /proc/<pid>/status does since "mm: fix the inaccurate memory statistics issue for users"
// (6.16, and the stable trees it went to: Debian's 6.12.118 has it); false: the folded counts
// alone, as /proc showed them before.
// `drift_pages`: how far a per-CPU counter read without its parts (HR_TASK_RSS_APPROX) may be
// from its sum, in pages (rssDriftPages()); such a process's status says it in `rss_drift`.
Result<std::vector<KernelProcess>> decodeTaskRecords(std::span<const std::byte> bytes, std::uint64_t ticks_per_second,
                                                     std::uint64_t page_bytes, bool add_cpu_parts = true,
                                                     std::unordered_map<pid_t, TaskCounters>* counters = nullptr,
                                                     std::uint64_t drift_pages = 0);

// How far a per-CPU RSS counter's folded `count` may be from its sum with `online_cpus` CPUs
// online, in pages: each CPU holds less than a batch unfolded (lib/percpu_counter.c:
// percpu_counter_add_batch folds a part once it reaches the batch, and compute_batch_value()
// sets the batch to max(32, 2 × the online CPUs); a CPU that goes offline has its part folded).
std::uint64_t rssDriftPages(std::uint64_t online_cpus);

}  // namespace headroom
