// Device memory per GPU and per process, from NVIDIA's management library (libnvidia-ml.so.1,
// the driver's). Loaded at run time: the agent runs and builds without it, and a machine without
// the driver says so instead of failing. The library's answers become plain values here; the
// snapshot carries them (Snapshot::gpus).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "headroom/util/result.h"

namespace headroom {

// One process's device memory on one GPU, as the driver accounts it (its allocations and its
// contexts' own). Absent where the driver will not say (NVML_VALUE_NOT_AVAILABLE).
struct GpuProcessMemory {
  pid_t pid = 0;
  std::optional<std::uint64_t> used_bytes;
};

struct GpuDevice {
  unsigned index = 0;
  std::string uuid;  // GPU-xxxxxxxx-...
  std::string name;  // the product name
  std::uint64_t total_bytes = 0, used_bytes = 0;
  std::vector<GpuProcessMemory> processes;  // compute processes, by pid
};

// One reading of every GPU.
struct GpuReading {
  std::vector<GpuDevice> devices;
  std::string library;         // the library the figures came from
  std::string driver_version;  // "" where the library did not say
  // The device memory the driver reports for `pid` on all GPUs together; absent when it runs on
  // none, or no GPU said how much.
  std::optional<std::uint64_t> processBytes(pid_t pid) const;
};

// What a sample knows of the GPUs: the reading, or why there is none.
struct GpuSample {
  std::shared_ptr<const GpuReading> reading;  // null: none this sample
  std::string state = "off";                  // "active", "off" (no library, or turned off), "degraded"
  std::string reason;                         // what was read through what, or why nothing was
};

class Nvml {
 public:
  // Loads `library` ("libnvidia-ml.so.1": the loader's search path, or an absolute path) and
  // initialises it. notFound when the library is not there; unsupported when it is but the driver
  // is not (no kernel module, no device), with the library's own words.
  static Result<std::unique_ptr<Nvml>> open(const std::string& library);
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  Result<GpuReading> read() const;
  const std::string& library() const;

 private:
  struct Api;
  explicit Nvml(std::unique_ptr<Api> api);
  std::unique_ptr<Api> api_;
};

}  // namespace headroom
