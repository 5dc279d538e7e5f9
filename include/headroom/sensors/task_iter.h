// The task iterator (iter/task, bpf/tasks.bpf.c): every process of the machine in one read,
// as the collector's ProcessSource. A BPF object of its own, loaded apart from the sensors.
#pragma once

#include <memory>
#include <vector>

#include "headroom/sensors/ring_decode.h"
#include "headroom/sources/process_cache.h"
#include "headroom/util/result.h"

namespace headroom {

class TaskIterator final : public ProcessSource {
 public:
  // Loads and attaches the iterator. Fails, saying why, where this kernel or this process cannot
  // (no BTF, no CAP_BPF/CAP_PERFMON, or a pid namespace other than the initial one: the records
  // carry the kernel's pids, /proc a namespace's).
  // `activity_fd` and `gpu_fd`: the sensors' per-process maps (proc_activity, gpu_mem), shared
  // so that one pass reads them too; -1: maps of its own (empty).
  static Result<std::unique_ptr<TaskIterator>> open(int memory_version, int activity_fd = -1, int gpu_fd = -1);
  ~TaskIterator() override;
  TaskIterator(const TaskIterator&) = delete;
  TaskIterator& operator=(const TaskIterator&) = delete;

  const char* name() const override { return "bpf-task-iterator"; }
  Result<std::vector<KernelProcess>> read() override;
  // On a kernel with per-CPU RSS counters (6.2+) only these processes' counters are summed over
  // every CPU (at most HR_RSS_EXACT_MAX, 256): the rest are read as their folded counts, one read
  // each however many CPUs there are, with the drift that leaves said in ProcStatus::rss_drift.
  void sumExactly(const std::vector<pid_t>& pids) override;
  // The sensors' counters the last read() carried, once: a second call (or one after a failed
  // read) has none, and the caller reads the maps itself.
  std::optional<std::unordered_map<pid_t, TaskCounters>> takeCounters();

  struct Impl;

 private:
  explicit TaskIterator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace headroom
