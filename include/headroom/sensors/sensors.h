// BPF sensors: owners of the libbpf skeletons (open -> set rodata and map sizes -> load ->
// attach, each step checked, RAII), the ring-buffer consumer, and the /dev/kmsg OOM source.
// Every sensor reports its state; one that cannot attach never stops the others.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "headroom/sources/cgroup.h"
#include "headroom/sources/fs_root.h"
#include "headroom/sources/procfs.h"
#include "headroom/sensors/config.h"
#include "headroom/sensors/oom_event.h"
#include "headroom/util/result.h"
#include "headroom/sensors/readings.h"

struct exitcount_bpf;
struct btf;

namespace headroom {

// Routes libbpf's own log lines into spdlog (once per process; idempotent).
void routeLibbpfLogToSpdlog();

namespace detail {
// Keeps libbpf's warnings on this thread while it lives (to learn which program failed).
class LibbpfLogCapture {
 public:
  LibbpfLogCapture();
  ~LibbpfLogCapture();
  LibbpfLogCapture(const LibbpfLogCapture&) = delete;
  LibbpfLogCapture& operator=(const LibbpfLogCapture&) = delete;
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  std::string* previous_;
};
// The program named in libbpf's "prog 'NAME': failed to load", or "".
std::string failedProgram(const std::string& log);
}  // namespace detail

// Whether this kernel exposes a tracepoint, told by BTF alone (no tracefs needed):
// a `btf_trace_<name>` typedef exists for every tracepoint the kernel has.
bool kernelHasTracepoint(const std::string& name);

struct ExitCount {
  std::uint64_t thread_exits = 0;
  bool group_dead = false;
  int exit_code = 0;  // wait-status style: (status << 8) | terminating signal
};

class ExitCounter {
 public:
  // Opens, sizes the map to `max_groups`, loads and attaches; each step's failure is an error
  // that says which step.
  static Result<ExitCounter> start(std::uint32_t max_groups = 4096);

  std::optional<ExitCount> lookup(pid_t tgid) const;
  std::uint64_t totalExits() const;

 private:
  struct SkelDeleter {
    void operator()(exitcount_bpf* s) const;
  };
  explicit ExitCounter(std::unique_ptr<exitcount_bpf, SkelDeleter> s) : skel_(std::move(s)) {}
  std::unique_ptr<exitcount_bpf, SkelDeleter> skel_;
};

class Sensors {
 public:
  // Never fails because a sensor is missing: each sensor's state says what happened.
  static std::unique_ptr<Sensors> start(const FsRoot& fs, const SensorsConfig& cfg, const CgroupMounts& mounts);
  ~Sensors();
  Sensors(const Sensors&) = delete;
  Sensors& operator=(const Sensors&) = delete;

  const std::vector<SensorStatus>& status() const;
  // Consumes what the rings and /dev/kmsg hold, waiting up to timeout_ms for the first record.
  void poll(int timeout_ms);
  std::vector<OomEvent> takeOomEvents();
  std::vector<ExitEvent> takeExitEvents();

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
  // Attaches the CUDA probes to one more library or binary (absolute path).
  Status attachCuda(const std::string& path, bool runtime);
  // Looks for libcuda.so* in the maps of these processes and attaches to any new one.
  void discoverCuda(const std::vector<pid_t>& pids);

  struct Impl;

 private:
  explicit Sensors(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Which of two tracepoint signatures this kernel has, told by BTF: the number of arguments of
// btf_trace_<name> (without the leading void *) and whether the first is a pointer.
struct TracepointSignature {
  bool exists = false;
  int args = 0;
  bool first_is_pointer = false;
};
// `vmlinux`: the kernel's BTF when the caller holds it (else it is loaded for this call).
TracepointSignature tracepointSignature(const std::string& name, const ::btf* vmlinux = nullptr);

}  // namespace headroom
