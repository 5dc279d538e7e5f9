// The agent's view of the GPUs: NVML opened at start (and at a reload that changes its settings),
// read once a sample. A machine without the library or the driver says so once and the samples
// go on without it; the CUDA probes still count what each process allocates.
#pragma once

#include <memory>
#include <string>

#include "headroom/sensors/config.h"
#include "headroom/sources/nvml.h"

namespace headroom {

class GpuReader {
 public:
  // Opens the library per `cfg` (nvml, nvml_library), logging what it found once; `live`: the
  // machine itself is read (not a fixture root, whose GPUs are none).
  void configure(const SensorsConfig& cfg, bool live = true);
  // The GPUs now, or why not: a read that fails is said once and the sample carries the reason.
  GpuSample read();

 private:
  std::unique_ptr<Nvml> nvml_;
  bool configured_ = false, enabled_ = false, live_ = true;
  std::string library_;
  std::string state_ = "off", reason_;
  bool failing_ = false;
};

}  // namespace headroom
