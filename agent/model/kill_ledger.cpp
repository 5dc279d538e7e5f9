#include "headroom/model/kill_ledger.h"

#include <algorithm>

namespace headroom {
namespace {

using nlohmann::json;

template <typename T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

const char* residencyText(PinnedOverlay::Residency r) {
  switch (r) {
    case PinnedOverlay::Residency::kInsideRss: return "inside_rss";
    case PinnedOverlay::Residency::kOutsideRss: return "outside_rss";
    case PinnedOverlay::Residency::kUnknown: break;
  }
  return "unknown";
}

// The victim in the last sample: the same pid and comm (a reused pid is not it).
const ProcessSnapshot* lastOf(const OomVictim& v, const Snapshot* last) {
  if (last == nullptr) return nullptr;
  const ProcessSnapshot* p = last->findProcess(v.process());
  if (p == nullptr || (!v.comm.empty() && p->sample.comm != v.comm)) return nullptr;
  return p;
}

}  // namespace

std::optional<std::uint64_t> KillLedger::hostBytes() const {
  if (!anon) return std::nullopt;
  std::uint64_t sum = *anon + file.value_or(0) + shmem.value_or(0) + page_tables.value_or(0);
  if (pinned_residency == PinnedOverlay::Residency::kOutsideRss) sum += cuda_pinned.value_or(0);
  return sum;
}

std::vector<KillLedger> killLedgers(const OomEvent& e, const Snapshot* last) {
  std::vector<KillLedger> out;
  for (const OomVictim& v : e.victims) {
    KillLedger l;
    l.pid = v.process();
    l.comm = v.comm;
    l.anon = v.anon_rss;
    l.file = v.file_rss;
    l.shmem = v.shmem_rss;
    l.page_tables = v.pgtables;
    l.swap = v.swap;
    l.locked = v.locked;
    l.pinned_vm = v.pinned_vm;
    l.cuda_pinned = v.cuda_pinned;
    l.cuda_device = v.cuda_device;
    l.cuda_at_kill = v.cuda_pinned.has_value() || v.cuda_device.has_value();
    const ProcessSnapshot* p = lastOf(v, last);
    if (p != nullptr) {
      const ProcessAttribution& a = p->attribution;
      if (a.pinned) l.pinned_residency = a.pinned->residency;
      if (!l.cuda_at_kill && (a.pinned || a.device_bytes)) {
        if (a.pinned) l.cuda_pinned = a.pinned->live_bytes;
        l.cuda_device = a.device_bytes;
      }
    }
    if (last != nullptr && last->gpu.reading) {
      l.gpu_memory = last->gpu.reading->processBytes(l.pid);
      if (l.gpu_memory && e.monotonic_time_ns != 0 && last->monotonic_time_ns != 0)
        l.gpu_memory_age_seconds =
            static_cast<double>(std::max<std::int64_t>(0, e.monotonic_time_ns - last->monotonic_time_ns)) / 1e9;
    }
    if (!e.from_bpf && last == nullptr) {
      // A kernel log alone (`headroom explain`, or a kill found in the log after the fact).
      l.notes.emplace_back(
          "from the kernel's log: RAM, page tables and swap only; locked, DMA-pinned, CUDA and GPU memory are read "
          "by the agent at the kill");
      if (!l.anon) l.notes.emplace_back("the log has no \"Killed process\" line with the victim's RAM");
      out.push_back(std::move(l));
      continue;
    }
    if (!l.anon) l.notes.emplace_back("no RAM figures: neither BPF nor the kernel's report gave the victim's");
    if (!l.locked && !v.inferred)
      l.notes.emplace_back("locked and DMA-pinned pages: no BPF mark of the victim to read");
    if (l.cuda_pinned || l.cuda_device) {
      if (!l.cuda_at_kill) l.notes.emplace_back("CUDA figures of the last sample before the kill (none at the kill)");
    } else if (p == nullptr && !l.cuda_at_kill) {
      l.notes.emplace_back("no CUDA figures: the victim was in no sample and BPF counted nothing of it at the kill");
    }
    if (!l.gpu_memory && last != nullptr && last->gpu.reading)
      l.notes.emplace_back("NVML listed no device memory for it at the last sample");
    out.push_back(std::move(l));
  }
  return out;
}

json toJson(const KillLedger& l) {
  json cuda = nullptr;
  if (l.cuda_pinned || l.cuda_device)
    cuda = {{"pinned_bytes", opt(l.cuda_pinned)},
            {"device_bytes", opt(l.cuda_device)},
            {"at_kill", l.cuda_at_kill},
            {"pinned_residency", residencyText(l.pinned_residency)}};
  json gpu = nullptr;
  if (l.gpu_memory)
    gpu = {{"bytes", *l.gpu_memory}, {"age_seconds", opt(l.gpu_memory_age_seconds)}, {"source", "NVML"}};
  return {{"pid", l.pid},
          {"comm", l.comm},
          {"ram", {{"anon_bytes", opt(l.anon)}, {"file_bytes", opt(l.file)}, {"shmem_bytes", opt(l.shmem)}}},
          {"page_tables_bytes", opt(l.page_tables)},
          {"swap_bytes", opt(l.swap)},
          {"locked_bytes", opt(l.locked)},
          {"pinned_vm_bytes", opt(l.pinned_vm)},
          {"cuda", std::move(cuda)},
          {"gpu_memory", std::move(gpu)},
          {"host_bytes", opt(l.hostBytes())},
          {"notes", l.notes}};
}

}  // namespace headroom
