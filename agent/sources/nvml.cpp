// NVML through dlopen: the few calls headroom needs, declared as nvml.h declares them (the
// library's ABI is stable across drivers; each versioned call is tried newest first).
#include "headroom/sources/nvml.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>

namespace headroom {
namespace {

using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlInsufficientSize = 7;
constexpr unsigned long long kNvmlValueNotAvailable = ~0ULL;  // NVML_VALUE_NOT_AVAILABLE (-1)

struct NvmlMemory {  // nvmlMemory_t
  unsigned long long total, free, used;
};
struct NvmlProcessInfoV1 {  // nvmlProcessInfo_v1_t
  unsigned int pid;
  unsigned long long usedGpuMemory;
};
struct NvmlProcessInfo {  // nvmlProcessInfo_v2_t and nvmlProcessInfo_t (_v3): the same layout
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
};
static_assert(sizeof(NvmlProcessInfoV1) == 16 && sizeof(NvmlProcessInfo) == 24, "NVML's process records");

constexpr std::size_t kMaxProcesses = 4096;  // per GPU: NVML's own tools ask for far fewer

}  // namespace

struct Nvml::Api {
  void* handle = nullptr;
  std::string library;
  NvmlReturn (*shutdown)() = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  NvmlReturn (*count)(unsigned*) = nullptr;
  NvmlReturn (*by_index)(unsigned, NvmlDevice*) = nullptr;
  NvmlReturn (*name)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*uuid)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*memory)(NvmlDevice, NvmlMemory*) = nullptr;
  NvmlReturn (*driver_version)(char*, unsigned) = nullptr;
  NvmlReturn (*processes)(NvmlDevice, unsigned*, NvmlProcessInfo*) = nullptr;       // _v3 or _v2
  NvmlReturn (*processes_v1)(NvmlDevice, unsigned*, NvmlProcessInfoV1*) = nullptr;  // the first

  ~Api() {
    if (shutdown != nullptr) shutdown();
    if (handle != nullptr) ::dlclose(handle);
  }
  std::string says(NvmlReturn r) const {
    const char* s = error_string != nullptr ? error_string(r) : nullptr;
    return s != nullptr ? fmt::format("{} ({})", s, r) : fmt::format("NVML error {}", r);
  }
  template <typename F>
  void find(F& f, std::initializer_list<const char*> names) {
    for (const char* n : names) {
      if (void* p = ::dlsym(handle, n); p != nullptr) {
        f = reinterpret_cast<F>(p);  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast): dlsym's answer
        return;
      }
    }
  }
};

Nvml::Nvml(std::unique_ptr<Api> api) : api_(std::move(api)) {}
Nvml::~Nvml() = default;
const std::string& Nvml::library() const { return api_->library; }

Result<std::unique_ptr<Nvml>> Nvml::open(const std::string& library) {
  auto api = std::make_unique<Api>();
  api->library = library;
  api->handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (api->handle == nullptr) {
    const char* why = ::dlerror();
    return unexpected(notFound(fmt::format("loading {}: {}", library, why != nullptr ? why : "not found")));
  }
  NvmlReturn (*init)() = nullptr;
  api->find(init, {"nvmlInit_v2", "nvmlInit"});
  api->find(api->error_string, {"nvmlErrorString"});
  api->find(api->count, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"});
  api->find(api->by_index, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"});
  api->find(api->name, {"nvmlDeviceGetName"});
  api->find(api->uuid, {"nvmlDeviceGetUUID"});
  api->find(api->memory, {"nvmlDeviceGetMemoryInfo"});
  api->find(api->driver_version, {"nvmlSystemGetDriverVersion"});
  api->find(api->processes, {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"});
  api->find(api->processes_v1, {"nvmlDeviceGetComputeRunningProcesses"});
  if (init == nullptr || api->count == nullptr || api->by_index == nullptr || api->memory == nullptr ||
      (api->processes == nullptr && api->processes_v1 == nullptr))
    return unexpected(
        unsupported(fmt::format("{} lacks the calls headroom needs (nvmlInit, nvmlDeviceGetCount, "
                                "nvmlDeviceGetMemoryInfo, nvmlDeviceGetComputeRunningProcesses)",
                                library)));
  if (NvmlReturn r = init(); r != kNvmlSuccess)
    return unexpected(unsupported(fmt::format("nvmlInit through {}: {}", library, api->says(r))));
  api->shutdown = reinterpret_cast<NvmlReturn (*)()>(::dlsym(api->handle, "nvmlShutdown"));  // NOLINT
  return std::unique_ptr<Nvml>(new Nvml(std::move(api)));
}

Result<GpuReading> Nvml::read() const {
  const Api& a = *api_;
  GpuReading out;
  out.library = a.library;
  if (a.driver_version != nullptr) {
    std::array<char, 96> v{};
    if (a.driver_version(v.data(), v.size()) == kNvmlSuccess) out.driver_version = v.data();
  }
  unsigned n = 0;
  if (NvmlReturn r = a.count(&n); r != kNvmlSuccess)
    return unexpected(ioError(fmt::format("nvmlDeviceGetCount: {}", a.says(r))));
  for (unsigned i = 0; i < n; ++i) {
    NvmlDevice dev = nullptr;
    if (NvmlReturn r = a.by_index(i, &dev); r != kNvmlSuccess)
      return unexpected(ioError(fmt::format("nvmlDeviceGetHandleByIndex({}): {}", i, a.says(r))));
    GpuDevice d;
    d.index = i;
    std::array<char, 96> text{};
    if (a.name != nullptr && a.name(dev, text.data(), text.size()) == kNvmlSuccess) d.name = text.data();
    text.fill('\0');
    if (a.uuid != nullptr && a.uuid(dev, text.data(), text.size()) == kNvmlSuccess) d.uuid = text.data();
    NvmlMemory mem{};
    if (NvmlReturn r = a.memory(dev, &mem); r != kNvmlSuccess)
      return unexpected(ioError(fmt::format("nvmlDeviceGetMemoryInfo(GPU {}): {}", i, a.says(r))));
    d.total_bytes = mem.total;
    d.used_bytes = mem.used;
    // Asked with room for 64, then for as many as the driver says there are (they may come and
    // go between the two calls: the second answer counts).
    for (unsigned room = 64;;) {
      unsigned count = room;
      NvmlReturn r = 0;
      std::map<pid_t, std::optional<std::uint64_t>> by_pid;
      auto take = [&](unsigned pid, unsigned long long used) {
        auto& slot = by_pid[static_cast<pid_t>(pid)];
        if (used == kNvmlValueNotAvailable) return;
        slot = slot.value_or(0) + used;  // a process with several contexts on one GPU
      };
      if (a.processes != nullptr) {
        std::vector<NvmlProcessInfo> infos(room);
        r = a.processes(dev, &count, infos.data());
        for (unsigned k = 0; r == kNvmlSuccess && k < std::min(count, room); ++k)
          take(infos[k].pid, infos[k].usedGpuMemory);
      } else {
        std::vector<NvmlProcessInfoV1> infos(room);
        r = a.processes_v1(dev, &count, infos.data());
        for (unsigned k = 0; r == kNvmlSuccess && k < std::min(count, room); ++k)
          take(infos[k].pid, infos[k].usedGpuMemory);
      }
      if (r == kNvmlInsufficientSize && count > room && room < kMaxProcesses) {
        room = static_cast<unsigned>(std::min<std::size_t>(count + 16, kMaxProcesses));
        continue;
      }
      if (r != kNvmlSuccess)
        return unexpected(ioError(fmt::format("nvmlDeviceGetComputeRunningProcesses(GPU {}): {}", i, a.says(r))));
      for (auto& [pid, used] : by_pid) d.processes.push_back(GpuProcessMemory{pid, used});
      break;
    }
    out.devices.push_back(std::move(d));
  }
  return out;
}

std::optional<std::uint64_t> GpuReading::processBytes(pid_t pid) const {
  std::optional<std::uint64_t> sum;
  for (const GpuDevice& d : devices) {
    for (const GpuProcessMemory& p : d.processes) {
      if (p.pid == pid && p.used_bytes) sum = sum.value_or(0) + *p.used_bytes;
    }
  }
  return sum;
}

}  // namespace headroom
