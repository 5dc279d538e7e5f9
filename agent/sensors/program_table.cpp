#include "headroom/sensors/detail/program_table.h"

#include <algorithm>

namespace headroom::detail {
namespace {

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
       "OOM kills come from /dev/kmsg alone"},
      {SensorId::kExits,
       AttachKind::kTpBtf,
       "sched_process_exit",
       {{"handle_exit", nullptr, ""}},
       {},
       {},
       "",
       "exits are not classified in the kernel"},
      {SensorId::kFaults,
       AttachKind::kTpBtf,
       "page_fault_user",
       {{"count_fault", nullptr, ""}},
       {},
       {},
       "",
       "x86 only; /proc/<pid>/stat still has the counts"},
      {SensorId::kMmap,
       AttachKind::kTracepoint,
       "",
       {},
       {"enter_mmap", "exit_mmap", "enter_munmap", "exit_munmap", "enter_mremap", "exit_mremap", "enter_mlock",
        "exit_mlock", "enter_mlock2", "exit_mlock2", "enter_munlock", "exit_munlock"},
       {},
       "tp/syscalls/sys_{enter,exit}_{mmap,munmap,mremap,mlock,mlock2,munlock}",
       "syscall tracepoints unavailable (tracefs not mounted and cannot be mounted)"},
      {SensorId::kRss,
       AttachKind::kTpBtf,
       "rss_stat",
       {{"rss_stat_old", rssWithCount, "before 6.2: fires on counter sync"},
        {"rss_stat_new", nullptr, "6.2+: every change"}},
       {},
       {},
       "",
       "RSS comes from /proc"},
      {SensorId::kCuda, AttachKind::kUprobe, "", {}, cudaPrograms(), {}, "", "no CUDA memory per process"},
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

}  // namespace headroom::detail
