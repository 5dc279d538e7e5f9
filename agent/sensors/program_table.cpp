#include "headroom/sensors/detail/program_table.h"

#include <fmt/format.h>
#include <linux/bpf.h>

#include <algorithm>

namespace headroom::detail {
namespace {

// The releases each came in, from the kernel's history: task storage and
// bpf_get_current_task_btf in 5.11 ("bpf: Implement task local storage", "bpf: Implement
// get_current_task_btf and RET_PTR_TO_BTF_ID"), bpf_for_each_map_elem in 5.13 ("bpf: Add
// bpf_for_each_map_elem() helper").
std::vector<FeatureSpec> makeFeatures() {
  return {
      {KernelFeature::kTaskStorage, false, BPF_MAP_TYPE_TASK_STORAGE, "BPF task storage maps", "5.11", "proc_hot"},
      {KernelFeature::kCurrentTaskBtf, true, BPF_FUNC_get_current_task_btf, "bpf_get_current_task_btf", "5.11",
       nullptr},
      {KernelFeature::kForEachMapElem, true, BPF_FUNC_for_each_map_elem, "bpf_for_each_map_elem", "5.13", nullptr},
  };
}

// oom:mark_victim carries the victim's task_struct and uid on new kernels, only a pid on 6.8 and
// older (its fields grew with 6.9).
bool victimTask(const TracepointSignature& sig) { return sig.args >= 2 && sig.first_is_pointer; }
// kmem:rss_stat carries (mm, member, count) before 6.2 and (mm, member) since "mm: convert mm's
// rss stats into percpu_counter" (f1a7941243c1).
bool rssWithCount(const TracepointSignature& sig) { return sig.args >= 3; }

std::vector<const char*> cudaPrograms() {
  std::vector<const char*> out;
  for (const UprobeTarget& t : cudaUprobes()) out.push_back(t.program);
  out.push_back(kCudaReturnProgram);
  return out;
}

std::vector<SensorSpec> makeTable() {
  return {
      {SensorId::kOom,
       AttachKind::kTpBtf,
       "mark_victim",
       {{"mark_victim_task", victimTask, "victim task_struct"}, {"mark_victim_pid", nullptr, "victim pid only"}},
       {},
       {{"start_task_reaping", "start_task_reaping"}, {"finish_task_reaping", "finish_task_reaping"}},
       "",
       "OOM kills come from /dev/kmsg alone",
       {},
       {"oom_ring", "oom_victims", "oom_mms"}},
      {SensorId::kExits,
       AttachKind::kTpBtf,
       "sched_process_exit",
       {{"handle_exit", nullptr, "", KernelFeature::kForEachMapElem},
        {"handle_exit_plain", nullptr, "before 5.13: no CUDA allocation sweep, the CUDA sensor being off"}},
       {},
       {},
       "",
       "exits are not classified in the kernel",
       {},
       {"exit_ring", "oom_victims", "oom_mms", "tracked_cgroups", "fault_runs", "fault_totals", "proc_activity",
        "gpu_mem", "gpu_allocs"}},
      {SensorId::kFaults,
       AttachKind::kTpBtf,
       "page_fault_user",
       {{"count_fault", nullptr, ""}},
       {},
       {},
       "",
       "x86 only; /proc/<pid>/stat still has the counts",
       {KernelFeature::kCurrentTaskBtf},
       {"fault_runs", "fault_totals", "tracked_cgroups"}},
      {SensorId::kMmap,
       AttachKind::kTracepoint,
       "",
       {},
       {"enter_mmap", "exit_mmap", "enter_munmap", "exit_munmap", "enter_mremap", "exit_mremap", "enter_mlock",
        "exit_mlock", "enter_mlock2", "exit_mlock2", "enter_munlock", "exit_munlock"},
       {},
       "tp/syscalls/sys_{enter,exit}_{mmap,munmap,mremap,mlock,mlock2,munlock}",
       "syscall tracepoints unavailable (tracefs not mounted and cannot be mounted)",
       {},
       {"mmap_pending", "proc_activity", "tracked_cgroups"}},
      {SensorId::kRss,
       AttachKind::kTpBtf,
       "rss_stat",
       {{"rss_stat_old", rssWithCount, "before 6.2: fires on counter sync"},
        {"rss_stat_new", nullptr, "6.2+: every change"}},
       {},
       {},
       "",
       "RSS comes from /proc",
       {KernelFeature::kTaskStorage, KernelFeature::kCurrentTaskBtf},
       {"proc_hot", "tracked_cgroups"}},
      {SensorId::kCuda,
       AttachKind::kUprobe,
       "",
       {},
       cudaPrograms(),
       {},
       "",
       "no CUDA memory per process",
       {KernelFeature::kForEachMapElem},
       {"cuda_calls", "cuda_in_runtime", "gpu_mem", "gpu_allocs"}},
  };
}

}  // namespace

const std::vector<UprobeTarget>& cudaUprobes() {
  static const std::vector<UprobeTarget> probes = {
      {"host_alloc", {"cuMemHostAlloc", "cuMemAllocHost_v2", "cuMemAllocHost"}, false},
      {"host_register", {"cuMemHostRegister_v2", "cuMemHostRegister"}, false},
      {"host_free", {"cuMemFreeHost", "cuMemHostUnregister"}, false},
      {"dev_alloc",
       {"cuMemAlloc_v2", "cuMemAlloc", "cuMemAllocManaged", "cuMemAllocAsync", "cuMemAllocAsync_ptsz",
        "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz"},
       false},
      {"dev_alloc_pitch", {"cuMemAllocPitch_v2", "cuMemAllocPitch"}, false},
      {"dev_free", {"cuMemFree_v2", "cuMemFree", "cuMemFreeAsync", "cuMemFreeAsync_ptsz"}, false},
      {"vmm_create", {"cuMemCreate"}, false},
      {"vmm_release", {"cuMemRelease"}, false},
      {"ctx_destroy",
       {"cuCtxDestroy_v2", "cuCtxDestroy", "cuDevicePrimaryCtxReset_v2", "cuDevicePrimaryCtxReset"},
       false},
      {"rt_host_alloc", {"cudaHostAlloc", "cudaMallocHost"}, true},
      {"rt_host_register", {"cudaHostRegister"}, true},
      {"rt_host_free", {"cudaFreeHost", "cudaHostUnregister"}, true},
      {"rt_dev_alloc", {"cudaMalloc", "cudaMallocManaged", "cudaMallocAsync", "cudaMallocAsync_ptsz"}, true},
      {"rt_dev_free", {"cudaFree", "cudaFreeAsync", "cudaFreeAsync_ptsz"}, true},
  };
  return probes;
}

const std::vector<FeatureSpec>& kernelFeatures() {
  static const std::vector<FeatureSpec> features = makeFeatures();
  return features;
}

const FeatureSpec* findFeature(KernelFeature feature) {
  const auto& f = kernelFeatures();
  auto it = std::find_if(f.begin(), f.end(), [&](const FeatureSpec& s) { return s.feature == feature; });
  return it == f.end() ? nullptr : &*it;
}

const std::vector<SensorSpec>& sensorTable() {
  static const std::vector<SensorSpec> table = makeTable();
  return table;
}

const SensorSpec* findSensor(SensorId sensor) {
  const auto& t = sensorTable();
  auto it = std::find_if(t.begin(), t.end(), [&](const SensorSpec& s) { return sensor == s.sensor; });
  return it == t.end() ? nullptr : &*it;
}

std::vector<const char*> programsOf(const SensorSpec& s) {
  std::vector<const char*> out;
  for (const ProgramVariant& v : s.variants) out.push_back(v.program);
  out.insert(out.end(), s.programs.begin(), s.programs.end());
  for (const auto& [program, tracepoint] : s.optional) out.push_back(program);
  return out;
}

const SensorSpec* sensorOfProgram(std::string_view program) {
  for (const SensorSpec& s : sensorTable()) {
    for (const char* p : programsOf(s)) {
      if (program == p) return &s;
    }
  }
  return nullptr;
}

std::vector<SensorId> sensorsUsingMap(std::string_view map) {
  std::vector<SensorId> out;
  for (const SensorSpec& s : sensorTable()) {
    if (std::any_of(s.maps.begin(), s.maps.end(), [&](const char* m) { return map == m; })) out.push_back(s.sensor);
  }
  return out;
}

std::string missingFeaturesReason(const std::vector<KernelFeature>& missing, std::string_view without) {
  std::string out;
  for (std::size_t i = 0; i < missing.size(); ++i) {
    const FeatureSpec* f = findFeature(missing[i]);
    if (f == nullptr) continue;
    if (!out.empty()) out += i + 1 == missing.size() ? " and " : ", ";
    out += fmt::format("{} (Linux {})", f->what, f->since);
  }
  return fmt::format("{} not in this kernel: {}", out, without);
}

}  // namespace headroom::detail
