// What the sensors tell the model, as plain data: each sensor's state, and per-process
// activity and CUDA memory. Kept apart from sensors.h so the model needs no libbpf.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace headroom {

enum class SensorState { kActive, kDegraded, kOff };
const char* toString(SensorState s);

struct SensorStatus {
  std::string name;  // oom, kmsg, exits, faults, mmap, rss, cuda
  SensorState state = SensorState::kOff;
  std::string reason;  // why degraded or off; what it attached to when active
};

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

}  // namespace headroom
