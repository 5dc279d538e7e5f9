#include "headroom/sensors/ring_decode.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>

#include "events.h"

namespace headroom {
namespace {

constexpr std::uint64_t kPageBytes = 4096;

std::string commOf(const char (&c)[HR_COMM_LEN]) { return std::string(c, strnlen(c, HR_COMM_LEN)); }

// The record as its struct, when the bytes hold one whole.
template <typename T>
std::optional<T> as(std::span<const std::byte> bytes) {
  if (bytes.size() < sizeof(T)) return std::nullopt;
  T v{};
  std::memcpy(&v, bytes.data(), sizeof v);
  return v;
}

DecodedOomMark decodeMark(const oom_victim_event& e) {
  DecodedOomMark d;
  OomMark& m = d.mark;
  m.ts_ns = static_cast<std::int64_t>(e.ts_ns);
  m.trigger_pid = static_cast<pid_t>(e.trigger.pid);
  m.trigger_tgid = static_cast<pid_t>(e.trigger.tgid);
  m.trigger_comm = commOf(e.trigger.comm);
  d.trigger_cgroup_id = e.trigger_cgroup_id;
  OomVictim& v = m.victim;
  v.pid = static_cast<pid_t>(e.victim.pid);
  d.victim_is_task = (e.flags & HR_OOM_VICTIM_TASK) != 0;
  if ((e.flags & HR_OOM_VICTIM_GPU) != 0) {
    v.cuda_pinned = e.victim_gpu.pinned_live;
    v.cuda_device = e.victim_gpu.device_live;
  }
  if (!d.victim_is_task) return d;
  v.tgid = static_cast<pid_t>(e.victim.tgid);
  v.comm = commOf(e.victim.comm);
  v.uid = e.victim_uid;
  v.oom_score_adj = e.victim_oom_score_adj;
  d.victim_cgroup_id = e.victim_cgroup_id;
  v.total_vm = e.victim_total_vm_pages * kPageBytes;
  v.anon_rss = e.victim_rss_anon_pages * kPageBytes;
  v.file_rss = e.victim_rss_file_pages * kPageBytes;
  v.shmem_rss = e.victim_rss_shmem_pages * kPageBytes;
  v.swap = e.victim_swapents * kPageBytes;
  v.pgtables = e.victim_pgtables_bytes;
  if (e.victim_mm != 0) {
    v.locked = e.victim_locked_pages * kPageBytes;
    v.pinned_vm = e.victim_pinned_pages * kPageBytes;
  }
  v.kill_skipped = (e.flags & HR_OOM_VICTIM_EXITING) != 0;
  return d;
}

}  // namespace

OomRingRecord decodeOomRecord(std::span<const std::byte> bytes) {
  auto type = as<std::uint32_t>(bytes);
  if (!type) return {};
  if (*type == HR_EV_OOM_VICTIM) {
    if (auto e = as<oom_victim_event>(bytes)) return decodeMark(*e);
  } else if (*type == HR_EV_REAP_START || *type == HR_EV_REAP_FINISH) {
    if (auto e = as<reap_event>(bytes))
      return DecodedReap{static_cast<pid_t>(e->pid), *type == HR_EV_REAP_FINISH, static_cast<std::int64_t>(e->ts_ns)};
  }
  return {};
}

std::optional<DecodedExit> decodeExitRecord(std::span<const std::byte> bytes) {
  auto e = as<exit_event>(bytes);
  if (!e || e->type != HR_EV_EXIT) return std::nullopt;
  DecodedExit d;
  d.exit = classifyExit(static_cast<pid_t>(e->task.tgid), e->exit_code, (e->flags & HR_EXIT_OOM_MARKED) != 0,
                        (e->flags & HR_EXIT_SHARES_OOM_MM) != 0);
  d.exit.comm = commOf(e->task.comm);
  d.exit.parent_pid = static_cast<pid_t>(e->parent_tgid);
  d.exit.monotonic_time_ns = static_cast<std::int64_t>(e->ts_ns);
  d.cgroup_id = e->cgroup_id;
  return d;
}

std::uint64_t rssDriftPages(std::uint64_t online_cpus) {
  const std::uint64_t batch = std::max<std::uint64_t>(32, 2 * online_cpus);
  return (batch - 1) * std::max<std::uint64_t>(1, online_cpus);
}

Result<std::vector<KernelProcess>> decodeTaskRecords(std::span<const std::byte> bytes, std::uint64_t ticks_per_second,
                                                     std::uint64_t page_bytes, bool add_cpu_parts,
                                                     std::unordered_map<pid_t, TaskCounters>* counters,
                                                     std::uint64_t drift_pages) {
  if (counters != nullptr) counters->clear();
  constexpr std::size_t kSize = sizeof(hr_task_record);
  if (bytes.size() % kSize != 0)
    return badData(
        fmt::format("task iterator output of {} bytes is not a whole number of {}-byte records", bytes.size(), kSize));
  if (ticks_per_second == 0 || page_bytes == 0) return badData("task records: zero tick rate or page size");
  const std::uint64_t ns_per_tick = 1'000'000'000ULL / ticks_per_second;
  std::vector<KernelProcess> out;
  out.reserve(bytes.size() / kSize);
  // The threads' own faults, added to their leaders' once every leader is in (a leader's pid is
  // its first thread's, but a reused tgid's threads may be seen on either side of it).
  struct ThreadFaults {
    pid_t tgid;
    std::uint64_t minflt, majflt;
  };
  std::vector<ThreadFaults> threads;
  for (std::size_t off = 0; off < bytes.size(); off += kSize) {
    hr_task_record r{};
    std::memcpy(&r, bytes.data() + off, kSize);
    const auto tgid = static_cast<pid_t>(r.tgid);
    if ((r.flags & HR_TASK_THREAD) != 0) {
      threads.push_back({tgid, r.min_flt, r.maj_flt});
      continue;
    }
    KernelProcess k;
    k.pid = tgid;
    k.kernel_thread = (r.flags & (HR_TASK_KTHREAD | HR_TASK_NO_MM)) != 0;
    if ((r.flags & HR_TASK_KTHREAD) == 0) {
      k.ppid = static_cast<pid_t>(r.ppid);
      k.uid = r.uid;
      k.start_time_ticks = r.start_boottime_ns / ns_per_tick;
      k.comm = commOf(r.comm);
      k.cgroup_id = r.cgroup_id;
      k.oom_score_adj = r.oom_score_adj;
      k.minflt = r.min_flt;
      k.majflt = r.maj_flt;
      ProcStatus& s = k.status;
      s.tgid = tgid;
      s.ppid = k.ppid;
      s.uid = k.uid;
      s.kernel_thread = k.kernel_thread;
      // As /proc shows them: the per-CPU parts added where it adds them, clamped at zero.
      const bool parts = add_cpu_parts && (r.flags & HR_TASK_RSS_PARTS) != 0;
      // A torn or garbled record's counts may be anything: their sum saturates, never overflows.
      auto pages = [&](__s64 count, int member) -> std::uint64_t {
        __s64 v = count;
        if (parts && __builtin_add_overflow(count, r.rss_cpu_parts[member], &v))
          v = r.rss_cpu_parts[member] < 0 ? 0 : std::numeric_limits<__s64>::max();
        return v < 0 ? 0 : static_cast<std::uint64_t>(v) * page_bytes;
      };
      s.rss_file = pages(r.rss_file, 0);
      s.rss_anon = pages(r.rss_anon, 1);
      s.rss_shmem = pages(r.rss_shmem, 3);
      s.vm_rss = s.rss_anon + s.rss_file + s.rss_shmem;
      // Three counters make the RSS, each as far off as its unfolded parts may take it.
      if ((r.flags & HR_TASK_RSS_APPROX) != 0) s.rss_drift = 3 * drift_pages * page_bytes;
      s.vm_hwm = std::max<std::uint64_t>(r.hiwater_rss * page_bytes, s.vm_rss);  // as task_mem() shows VmHWM
      s.vm_size = r.total_vm * page_bytes;
      s.vm_lck = r.locked_vm * page_bytes;
      s.vm_pin = r.pinned_vm * page_bytes;
      s.vm_swap = pages(r.swapents, 2);
      s.vm_pte = r.pgtables_bytes;
      s.threads = r.threads;
      if (counters != nullptr && (r.flags & (HR_TASK_ACTIVITY | HR_TASK_GPU)) != 0) {
        TaskCounters& c = (*counters)[tgid];
        if ((r.flags & HR_TASK_ACTIVITY) != 0) {
          const proc_activity& pa = r.activity;
          ProcessActivity a;
          a.mmap_bytes = pa.mmap_bytes;
          a.munmap_bytes = pa.munmap_bytes;
          a.mremap_grow_bytes = pa.mremap_grow_bytes;
          a.mremap_shrink_bytes = pa.mremap_shrink_bytes;
          a.mlock_bytes = pa.mlock_bytes;
          a.munlock_bytes = pa.munlock_bytes;
          c.activity = a;
        }
        if ((r.flags & HR_TASK_GPU) != 0) {
          const gpu_mem& g = r.gpu;
          c.gpu = GpuMemory{g.pinned_live, g.pinned_peak,   g.pinned_allocs, g.pinned_frees, g.device_live,
                            g.device_peak, g.device_allocs, g.device_frees,  g.failed_calls, g.implicit_frees};
        }
      }
    }
    out.push_back(std::move(k));
  }
  // The iterator walks tasks by pid: the leaders come sorted (sorted here should a kernel not).
  const auto byPid = [](const KernelProcess& a, const KernelProcess& b) { return a.pid < b.pid; };
  if (!std::is_sorted(out.begin(), out.end(), byPid)) std::sort(out.begin(), out.end(), byPid);
  for (const ThreadFaults& t : threads) {
    auto it =
        std::lower_bound(out.begin(), out.end(), t.tgid, [](const KernelProcess& k, pid_t pid) { return k.pid < pid; });
    if (it == out.end() || it->pid != t.tgid) continue;  // the leader exited between the two: going
    it->minflt += t.minflt;
    it->majflt += t.majflt;
  }
  return out;
}

}  // namespace headroom
