// What the sensors tell the model, as plain data: each sensor's state, and per-process
// activity and CUDA memory. Kept apart from sensors.h so the model needs no libbpf.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace headroom {

enum class SensorState { kActive, kDegraded, kOff };
inline const char* toString(SensorState s) {
  switch (s) {
    case SensorState::kActive: return "active";
    case SensorState::kDegraded: return "degraded";
    case SensorState::kOff: return "off";
  }
  return "unknown";
}

// Every sensor, in the order their states are listed. Their names (toString) are what the logs,
// the metrics' `sensor` label, the JSON and the --tracepoint flag say.
enum class SensorId { kOom, kKmsg, kExits, kFaults, kMmap, kRss, kCuda, kTasks };
inline constexpr std::array<SensorId, 8> kAllSensors = {SensorId::kOom,    SensorId::kKmsg, SensorId::kExits,
                                                        SensorId::kFaults, SensorId::kMmap, SensorId::kRss,
                                                        SensorId::kCuda,   SensorId::kTasks};
inline const char* toString(SensorId id) {
  switch (id) {
    case SensorId::kOom: return "oom";
    case SensorId::kKmsg: return "kmsg";
    case SensorId::kExits: return "exits";
    case SensorId::kFaults: return "faults";
    case SensorId::kMmap: return "mmap";
    case SensorId::kRss: return "rss";
    case SensorId::kCuda: return "cuda";
    case SensorId::kTasks: return "tasks";
  }
  return "unknown";
}
// The sensor a name says ("faults"), or nullopt.
inline std::optional<SensorId> sensorIdFromName(std::string_view name) {
  for (SensorId id : kAllSensors) {
    if (name == toString(id)) return id;
  }
  return std::nullopt;
}

struct SensorStatus {
  SensorId id = SensorId::kOom;
  SensorState state = SensorState::kOff;
  std::string reason;  // why degraded or off; what it attached to when active
};
// Whether `id` is active among `statuses`.
inline bool sensorActive(const std::vector<SensorStatus>& statuses, SensorId id) {
  for (const SensorStatus& s : statuses) {
    if (s.id == id) return s.state == SensorState::kActive;
  }
  return false;
}
// Whether a kernel source names each OOM kill's victims: oom:mark_victim (BPF) or the kernel's
// own report in /dev/kmsg. Without one, kills are only counted (the cgroups' oom_kill counters).
inline bool namesOomVictims(const std::vector<SensorStatus>& statuses) {
  return sensorActive(statuses, SensorId::kOom) || sensorActive(statuses, SensorId::kKmsg);
}

// Per process, what the sensors counted (all cumulative since the process was first seen).
struct ProcessActivity {
  std::uint64_t faults = 0;
  std::uint64_t mmap_bytes = 0, munmap_bytes = 0, mremap_grow_bytes = 0, mremap_shrink_bytes = 0;
  std::uint64_t mlock_bytes = 0, munlock_bytes = 0;
  std::optional<std::uint64_t> rss_file, rss_anon, rss_shmem, swap;  // bytes, from kmem:rss_stat
};

struct GpuMemory {
  std::uint64_t pinned_live = 0, pinned_peak = 0, pinned_allocs = 0, pinned_frees = 0;
  std::uint64_t device_live = 0, device_peak = 0, device_allocs = 0, device_frees = 0;
  std::uint64_t failed_calls = 0, implicit_frees = 0;
};

// What the sensors knew of one sample's processes (by tgid), handed to the model with it:
// their states, per-process activity and CUDA memory, and where pinned allocations live.
struct SensorReadings {
  std::vector<SensorStatus> status;
  std::map<pid_t, ProcessActivity> activity;
  std::map<pid_t, GpuMemory> gpu;
  std::map<pid_t, bool> pinned_inside_rss;  // from the mappings' VmFlags
};

// What the sensors counted since they started: drops, and the OOM path's latency.
struct SensorCounters {
  std::uint64_t oom_ring_drops = 0, exit_ring_drops = 0, map_full_drops = 0;
  std::uint64_t kmsg_lost = 0, kmsg_reports_abandoned = 0;
  std::uint64_t events = 0;  // records consumed from the rings
  // From oom:mark_victim in the kernel to the record in user space, for the last OOM kill.
  std::optional<std::int64_t> last_oom_mark_latency_ns;
};

}  // namespace headroom
