// The task iterator (iter/task, bpf/tasks.bpf.c): every process of the machine in one read,
// as the collector's ProcessSource. A BPF object of its own, loaded apart from the sensors.
#pragma once

#include <memory>
#include <vector>

#include "headroom/sources/process_cache.h"
#include "headroom/util/result.h"

namespace headroom {

class TaskIterator final : public ProcessSource {
 public:
  // Loads and attaches the iterator. Fails, saying why, where this kernel or this process cannot
  // (no BTF, no CAP_BPF/CAP_PERFMON, or a pid namespace other than the initial one: the records
  // carry the kernel's pids, /proc a namespace's).
  static Result<std::unique_ptr<TaskIterator>> open(int memory_version);
  ~TaskIterator() override;
  TaskIterator(const TaskIterator&) = delete;
  TaskIterator& operator=(const TaskIterator&) = delete;

  const char* name() const override { return "bpf-task-iterator"; }
  Result<std::vector<KernelProcess>> read() override;

  struct Impl;

 private:
  explicit TaskIterator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace headroom
