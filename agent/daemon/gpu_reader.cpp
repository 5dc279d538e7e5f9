#include "headroom/daemon/gpu_reader.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace headroom {

void GpuReader::configure(const SensorsConfig& cfg, bool live) {
  if (configured_ && cfg.nvml == enabled_ && cfg.nvml_library == library_ && live == live_) return;  // the same
  configured_ = true;
  nvml_.reset();
  enabled_ = cfg.nvml;
  live_ = live;
  library_ = cfg.nvml_library;
  failing_ = false;
  if (!enabled_ || !live_) {
    state_ = "off";
    reason_ = live_ ? "turned off (sensors.nvml = false)" : "not this machine (a fixture root): no GPUs read";
    return;
  }
  auto n = Nvml::open(library_);
  if (!n) {
    // No library: a machine without NVIDIA's driver, the usual case off a GPU machine.
    state_ = n.error().kind == ErrorKind::kNotFound ? "off" : "degraded";
    reason_ = n.error().describe();
    spdlog::info("gpu: no device memory per process from NVML ({}); the CUDA probes count allocations alone", reason_);
    return;
  }
  nvml_ = std::move(*n);
  auto r = nvml_->read();
  state_ = "active";
  reason_ = fmt::format("NVML through {}", library_);
  if (r) {
    reason_ += fmt::format(": {} GPU{}{}", r->devices.size(), r->devices.size() == 1 ? "" : "s",
                           r->driver_version.empty() ? "" : fmt::format(", driver {}", r->driver_version));
  }
  spdlog::info("gpu: {}", reason_);
}

GpuSample GpuReader::read() {
  GpuSample s;
  s.state = state_;
  s.reason = reason_;
  if (!nvml_) return s;
  auto r = nvml_->read();
  if (!r) {
    if (!failing_) spdlog::warn("gpu: reading NVML failed: {}", r.error().describe());
    failing_ = true;
    s.state = "degraded";
    s.reason = r.error().describe();
    return s;
  }
  if (failing_) spdlog::info("gpu: NVML reads again");
  failing_ = false;
  s.reading = std::make_shared<const GpuReading>(std::move(*r));
  return s;
}

}  // namespace headroom
