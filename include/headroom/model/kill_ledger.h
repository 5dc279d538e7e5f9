// Each OOM victim's memory at its kill, every kind side by side: RAM as the kernel charged it
// (anon, file, shmem) and its page tables; the pages it held locked and pinned for DMA; the host
// memory the CUDA probes saw it pin through the driver and the device memory it allocated, both
// live at the kill; and the device memory the driver reported for it at the last sample (NVML).
// Each figure from the source that had it, absent where none did (a kernel log alone tells RAM,
// page tables and swap), and the notes say which. Pure.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "headroom/model/snapshot.h"
#include "headroom/sensors/oom_event.h"

namespace headroom {

struct KillLedger {
  pid_t pid = 0;
  std::string comm;
  // The kernel's figures at the kill (BPF's mark, or the kernel's report).
  std::optional<std::uint64_t> anon, file, shmem, page_tables, swap;
  // BPF at the mark: mm->locked_vm and mm->pinned_vm.
  std::optional<std::uint64_t> locked, pinned_vm;
  // The CUDA probes' live figures: at the kill (BPF's mark), else the last sample's.
  std::optional<std::uint64_t> cuda_pinned, cuda_device;
  bool cuda_at_kill = false;  // false: the CUDA figures are the last sample's
  // Where the pinned bytes live, by the last sample's mappings: inside RSS (counted in anon or
  // shmem above) or outside it (the driver's own pages: charged to no RAM figure here).
  PinnedOverlay::Residency pinned_residency = PinnedOverlay::Residency::kUnknown;
  // NVML's device memory for the process at the last sample, and how long before the kill.
  std::optional<std::uint64_t> gpu_memory;
  std::optional<double> gpu_memory_age_seconds;
  std::vector<std::string> notes;  // what is missing, and why

  // Host memory the process held at the kill: RAM, page tables, and the CUDA pinned bytes known
  // to live outside RSS. Absent without the kernel's RAM figures.
  std::optional<std::uint64_t> hostBytes() const;
};

// One ledger per victim of `e`, in its order; `last` (may be null) is the last sample before the
// kill, for what the kill's own sources lack.
std::vector<KillLedger> killLedgers(const OomEvent& e, const Snapshot* last);

// {pid, comm, ram: {anon_bytes, file_bytes, shmem_bytes}, page_tables_bytes, swap_bytes,
//  locked_bytes, pinned_vm_bytes, cuda: {pinned_bytes, device_bytes, at_kill, pinned_residency},
//  gpu_memory: {bytes, age_seconds, source}, host_bytes, notes}
nlohmann::json toJson(const KillLedger& l);

}  // namespace headroom
