// The sensors: the owner of headroom's BPF object (open -> rodata and map sizes -> load ->
// attach, each step checked, RAII), its rings' consumer, the per-process maps, the CUDA uprobes,
// and the /dev/kmsg OOM source. Every sensor reports its state; one that cannot attach never
// stops the others (the programs are declared once in sensors/detail/program_table.h).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "headroom/sensors/config.h"
#include "headroom/sensors/libbpf_log.h"
#include "headroom/sensors/oom_event.h"
#include "headroom/sensors/readings.h"
#include "headroom/sources/cgroup.h"
#include "headroom/sources/fs_root.h"
#include "headroom/sources/process_cache.h"
#include "headroom/sources/procfs.h"
#include "headroom/util/result.h"

namespace headroom {

class Sensors {
 public:
  // Never fails because a sensor is missing: each sensor's state says what happened.
  static std::unique_ptr<Sensors> start(const FsRoot& fs, const SensorsConfig& cfg, const CgroupMounts& mounts);
  ~Sensors();
  Sensors(const Sensors&) = delete;
  Sensors& operator=(const Sensors&) = delete;

  const std::vector<SensorStatus>& status() const;
  // Every process of the machine in one read (the task iterator); nullptr when the "tasks"
  // sensor is not active. Lives as long as this.
  ProcessSource* processSource() const;
  // Consumes what the rings and /dev/kmsg hold, waiting up to timeout_ms (-1: no limit) for the
  // first record, or until `wake_fd` (an eventfd, when given) is written to; it is drained. Also
  // until `watch_fd` is readable (the early warning's notifications), which its owner drains.
  void poll(int timeout_ms, int wake_fd = -1, int watch_fd = -1);
  // Incidents ready to be told; the first call gives the kills the start's read of the ring
  // found (kmsg_from_start: found_after "kernel_log") before any other.
  std::vector<OomEvent> takeOomEvents();
  std::vector<ExitEvent> takeExitEvents();
  // Incidents first seen since the last call, before their sources are joined (each once, its
  // id the one takeOomEvents() gives it later): what the agent makes durable before it waits.
  std::vector<OomEvent> takeStartedOoms();
  // How far the kernel log has been read (nullopt without /dev/kmsg).
  std::optional<KernelLogPosition> kernelLog() const;

  std::optional<ProcessActivity> activity(pid_t tgid) const;
  std::optional<GpuMemory> gpu(pid_t tgid) const;
  // Addresses of a process's live pinned allocations (for their residency).
  std::vector<std::uint64_t> pinnedAddresses(pid_t tgid) const;
  SensorCounters counters() const;
  // What the sensors know of these processes, for the model. For a process with live pinned
  // allocations its smaps is read, to tell whether the pinned pages are inside its RSS.
  SensorReadings readings(const std::vector<ProcessSample>& processes) const;

  // Replaces the set of tracked cgroups (when the config filters by cgroup).
  Status trackCgroups(const std::vector<std::uint64_t>& ids);
  // Attaches the CUDA uprobes to one more library or binary (absolute path).
  Status attachCuda(const std::string& path, bool runtime);
  // Looks for libcuda.so* in the maps of these processes and attaches to any new one.
  void discoverCuda(const std::vector<pid_t>& pids);

  struct Impl;

 private:
  explicit Sensors(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace headroom
