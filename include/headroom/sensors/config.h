// What the sensors are asked to do: which sensors, the cgroups to track, ring and map sizes,
// CUDA libraries. Plain data, apart from the libbpf owner, so a config needs no libbpf.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "headroom/sensors/readings.h"

namespace headroom {

struct SensorsConfig {
  bool bpf = true;  // false (--no-bpf): /dev/kmsg and cgroup files only
  bool kmsg = true;
  // The kernel log read from the start of its ring: the reports already in it come out as
  // incidents found after the fact (OomEvent::found_after "kernel_log"), each once.
  bool kmsg_from_start = false;
  bool tasks = true;  // every process in one pass of the task iterator (the collector's source)
  bool faults = true, mmap = true, rss = true, cuda = true;
  // Memory cgroup ids (directory inode numbers) to track; nullopt: every cgroup.
  std::optional<std::vector<std::uint64_t>> tracked_cgroups;
  // Ring and map sizes (ring sizes: a power of two, at least one page).
  std::uint32_t oom_ring_bytes = 256 * 1024;
  std::uint32_t exit_ring_bytes = 256 * 1024;
  std::uint32_t max_processes = 16384;  // per-process counter maps (LRU)
  std::uint32_t max_cuda_allocations = 65536;
  std::uint32_t max_tracked_cgroups = 4096;
  // CUDA: driver libraries (libcuda.so.1) to attach to; empty: found automatically. Runtime
  // targets: libcudart or binaries with the runtime linked in (optional second attach point).
  std::vector<std::string> cuda_libraries;
  std::vector<std::string> cuda_runtime_targets;
  // Device memory per GPU and per process from NVIDIA's management library, loaded at run time
  // (the agent's, not a BPF sensor): a library name the loader finds, or an absolute path.
  bool nvml = true;
  std::string nvml_library = "libnvidia-ml.so.1";
  // Tracepoint names by sensor (faults -> "page_fault_user"), to point a sensor elsewhere; a
  // name this kernel lacks makes that sensor degraded (tests use it to simulate).
  std::map<SensorId, std::string> tracepoints;

  bool operator==(const SensorsConfig&) const = default;
};

}  // namespace headroom
