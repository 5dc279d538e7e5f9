// The per-process maps, read at each sample: RSS (task storage, by a pidfd), faults (per-CPU
// runs and per-process totals), mapping activity, CUDA memory and its live pinned allocations,
// and the counters in .bss.
#include <bpf/bpf.h>
#include <fmt/format.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <unordered_map>

#include "events.h"
#include "sensors_impl.h"

namespace headroom {
namespace {

constexpr std::uint64_t kPageBytes = 4096;
// Entries a batch lookup asks for at once.
constexpr std::uint32_t kBatch = 256;

GpuMemory gpuOf(const gpu_mem& g) {
  return GpuMemory{g.pinned_live, g.pinned_peak,   g.pinned_allocs, g.pinned_frees, g.device_live,
                   g.device_peak, g.device_allocs, g.device_frees,  g.failed_calls, g.implicit_frees};
}

// Every entry of a hash map, in a few syscalls (BPF_MAP_LOOKUP_BATCH, 5.6+), or one key at a
// time where the kernel has no batch for the map.
template <typename V>
std::unordered_map<__u32, V> dumpByTgid(int fd) {
  std::unordered_map<__u32, V> out;
  if (fd < 0) return out;  // a map this kernel could not make
  std::vector<__u32> keys(kBatch);
  std::vector<V> values(kBatch);
  __u64 token = 0;
  bool first = true;
  for (;;) {
    __u32 count = kBatch;
    int err = bpf_map_lookup_batch(fd, first ? nullptr : &token, &token, keys.data(), values.data(), &count, nullptr);
    int code = err != 0 ? errno : 0;
    for (__u32 i = 0; i < count; ++i) out.emplace(keys[i], values[i]);
    first = false;
    if (err == 0) continue;
    if (code == ENOENT) return out;  // the last batch
    break;
  }
  // No batch here: key by key.
  out.clear();
  __u32 key = 0, next = 0;
  bool start = true;
  while (bpf_map_get_next_key(fd, start ? nullptr : &key, &next) == 0) {
    start = false;
    V v{};
    if (bpf_map_lookup_elem(fd, &next, &v) == 0) out.emplace(next, v);
    key = next;
  }
  return out;
}

// Up to this many processes, the maps are read a key at a time rather than whole.
constexpr std::size_t kKeyByKey = 64;

}  // namespace

// A process's page faults: its total of ended runs plus the runs still open on each CPU.
// The per-CPU slots are copied before and after the total; a slot whose sequence moved in
// between was ended meanwhile, and its faults are in the total or in the next answer.
std::optional<std::uint64_t> Sensors::Impl::faultsOf(pid_t tgid) {
  int runs = bpf_map__fd(skel->maps.fault_runs);
  int totals = bpf_map__fd(skel->maps.fault_totals);
  __u32 zero = 0;
  __u32 key = static_cast<__u32>(tgid);
  std::vector<fault_run> before(static_cast<std::size_t>(cpus)), after(static_cast<std::size_t>(cpus));
  fault_total total{};
  if (bpf_map_lookup_elem(runs, &zero, before.data()) != 0 || bpf_map_lookup_elem(totals, &key, &total) != 0 ||
      bpf_map_lookup_elem(runs, &zero, after.data()) != 0) {
    answered_faults.erase(tgid);
    return std::nullopt;
  }
  std::uint64_t sum = total.faults;
  for (std::size_t i = 0; i < after.size(); ++i) {
    const fault_run& r = after[i];
    if (r.seq == before[i].seq && r.seq % 2 == 0 && r.tgid == key && r.mm == total.mm && r.tracked) sum += r.count;
  }
  if (answered_faults.size() > 2 * static_cast<std::size_t>(cfg.max_processes)) answered_faults.clear();
  auto [it, fresh] = answered_faults.try_emplace(tgid, total.mm, sum);
  if (!fresh) {
    if (it->second.first == total.mm) sum = std::max(sum, it->second.second);
    it->second = {total.mm, sum};
  }
  return sum;
}

std::optional<ProcessActivity> Sensors::Impl::activityOf(pid_t tgid, const proc_activity* pa, bool rss, bool faults) {
  ProcessActivity a;
  bool found = false;
  // RSS lives in the leader's task storage (looked up through a pidfd); faults in per-CPU runs
  // and a per-process total. Each costs syscalls per process: only when its sensor is on.
  // proc_hot is not made where the kernel has no task storage (before 5.11).
  if (int hot_fd = bpf_map__fd(skel->maps.proc_hot); rss && hot_fd >= 0) {
    Fd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, tgid, 0)));
    proc_hot hot{};
    if (pidfd.valid()) {
      int fdkey = pidfd.get();
      if (bpf_map_lookup_elem(hot_fd, &fdkey, &hot) == 0 && hot.rss_updates > 0) {
        found = true;
        a.rss_file = hot.rss_file_pages * kPageBytes;
        a.rss_anon = hot.rss_anon_pages * kPageBytes;
        a.rss_shmem = hot.rss_shmem_pages * kPageBytes;
        a.swap = hot.rss_swapents * kPageBytes;
      }
    }
  }
  if (faults) {
    if (auto f = faultsOf(tgid)) {
      found = true;
      a.faults = *f;
    }
  }
  if (pa != nullptr) {
    found = true;
    a.mmap_bytes = pa->mmap_bytes;
    a.munmap_bytes = pa->munmap_bytes;
    a.mremap_grow_bytes = pa->mremap_grow_bytes;
    a.mremap_shrink_bytes = pa->mremap_shrink_bytes;
    a.mlock_bytes = pa->mlock_bytes;
    a.munlock_bytes = pa->munlock_bytes;
  }
  if (!found) return std::nullopt;
  return a;
}

std::optional<ProcessActivity> Sensors::activity(pid_t tgid) const {
  Impl& m = *impl_;  // the fault sums are a cache
  if (!m.skel) return std::nullopt;
  __u32 key = static_cast<__u32>(tgid);
  proc_activity pa{};
  bool has = bpf_map_lookup_elem(bpf_map__fd(m.skel->maps.proc_activity), &key, &pa) == 0;
  return m.activityOf(tgid, has ? &pa : nullptr, m.active(SensorId::kRss), m.active(SensorId::kFaults));
}

std::optional<GpuMemory> Sensors::gpu(pid_t tgid) const {
  const Impl& m = *impl_;
  if (!m.skel) return std::nullopt;
  __u32 key = static_cast<__u32>(tgid);
  gpu_mem g{};
  if (bpf_map_lookup_elem(bpf_map__fd(m.skel->maps.gpu_mem), &key, &g) != 0) return std::nullopt;
  return gpuOf(g);
}

std::vector<std::uint64_t> Sensors::pinnedAddresses(pid_t tgid) const {
  std::vector<std::uint64_t> out;
  const Impl& m = *impl_;
  if (!m.skel) return out;
  int fd = bpf_map__fd(m.skel->maps.gpu_allocs);
  gpu_alloc_key key{}, next{};
  bool first = true;
  while (bpf_map_get_next_key(fd, first ? nullptr : &key, &next) == 0) {
    first = false;
    if (next.tgid == static_cast<__u32>(tgid) && next.kind == HR_ALLOC_PINNED) out.push_back(next.addr);
    key = next;
  }
  return out;
}

SensorCounters Sensors::counters() const {
  const Impl& m = *impl_;
  SensorCounters c;
  if (m.skel) {
    c.oom_ring_drops = __atomic_load_n(&m.skel->bss->ring_drops[HR_RING_OOM], __ATOMIC_RELAXED);
    c.exit_ring_drops = __atomic_load_n(&m.skel->bss->ring_drops[HR_RING_EXIT], __ATOMIC_RELAXED);
    c.map_full_drops = __atomic_load_n(&m.skel->bss->map_full_drops, __ATOMIC_RELAXED);
  }
  if (m.kmsg) c.kmsg_lost = m.kmsg->lost();
  c.kmsg_reports_abandoned = m.kmsg_parser.abandoned();
  c.events = m.events;
  c.last_oom_mark_latency_ns = m.last_mark_latency_ns;
  return c;
}

SensorReadings Sensors::readings(const std::vector<ProcessSample>& processes) const {
  Impl& m = *impl_;
  SensorReadings r;
  r.status = status();
  if (!m.skel) return r;
  // The maps' counters: from this sample's pass of the task iterator when it ran, else the maps
  // whole in batches (a syscall per process costs more than the batches' walk of every bucket).
  std::unordered_map<__u32, proc_activity> activities;
  std::unordered_map<__u32, gpu_mem> gpus;
  std::optional<std::unordered_map<pid_t, TaskCounters>> carried;
  if (m.tasks) carried = m.tasks->takeCounters();
  if (!carried && processes.size() <= kKeyByKey) {
    // A few processes (those read again between two walks): a lookup each.
    const int activity_fd = bpf_map__fd(m.skel->maps.proc_activity), gpu_fd = bpf_map__fd(m.skel->maps.gpu_mem);
    for (const ProcessSample& p : processes) {
      auto key = static_cast<__u32>(p.pid);
      proc_activity pa{};
      gpu_mem g{};
      if (activity_fd >= 0 && bpf_map_lookup_elem(activity_fd, &key, &pa) == 0) activities.emplace(key, pa);
      if (gpu_fd >= 0 && bpf_map_lookup_elem(gpu_fd, &key, &g) == 0) gpus.emplace(key, g);
    }
  } else if (!carried) {
    activities = dumpByTgid<proc_activity>(bpf_map__fd(m.skel->maps.proc_activity));
    gpus = dumpByTgid<gpu_mem>(bpf_map__fd(m.skel->maps.gpu_mem));
  }
  const bool rss = m.active(SensorId::kRss), faults = m.active(SensorId::kFaults);
  for (const ProcessSample& p : processes) {
    auto key = static_cast<__u32>(p.pid);
    std::optional<GpuMemory> gpu;
    if (carried) {
      auto c = carried->find(p.pid);
      const TaskCounters* tc = c == carried->end() ? nullptr : &c->second;
      if (tc == nullptr && !rss && !faults) continue;  // nothing counted for it: most processes
      auto a = m.activityOf(p.pid, nullptr, rss, faults);
      if (tc && tc->activity) {
        ProcessActivity merged = *tc->activity;
        if (a) {
          merged.faults = a->faults;
          merged.rss_file = a->rss_file;
          merged.rss_anon = a->rss_anon;
          merged.rss_shmem = a->rss_shmem;
          merged.swap = a->swap;
        }
        a = merged;
      }
      if (a) r.activity[p.pid] = *a;
      if (tc) gpu = tc->gpu;
    } else {
      auto pa = activities.find(key);
      if (auto a = m.activityOf(p.pid, pa == activities.end() ? nullptr : &pa->second, rss, faults))
        r.activity[p.pid] = *a;
      if (auto g = gpus.find(key); g != gpus.end()) gpu = gpuOf(g->second);
    }
    if (!gpu) continue;
    r.gpu[p.pid] = *gpu;
    if (gpu->pinned_live == 0) continue;
    // Where the pinned pages live decides whether they are already in the visible sum.
    auto smaps = m.fs->readFile(fmt::format("/proc/{}/smaps", p.pid));
    if (!smaps) continue;
    if (auto inside = pinnedInsideRss(parseSmapsVmas(*smaps), pinnedAddresses(p.pid)))
      r.pinned_inside_rss[p.pid] = *inside;
  }
  return r;
}

}  // namespace headroom
