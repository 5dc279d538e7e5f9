// Plain data of one OOM kill as the kernel tells it (its task dump, the victim's figures),
// shared by the /dev/kmsg source, the BPF sensors and the model.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace headroom {

// One row of the kernel's task dump of the OOM domain ("Tasks state (memory values in pages)").
struct OomTaskDumpEntry {
  pid_t pid = 0;
  uid_t uid = 0;
  pid_t tgid = 0;
  std::uint64_t total_vm_bytes = 0;
  std::uint64_t rss_bytes = 0;
  std::optional<std::uint64_t> rss_anon_bytes, rss_file_bytes, rss_shmem_bytes;  // 6.x dumps only
  std::uint64_t pgtables_bytes = 0;
  std::uint64_t swap_bytes = 0;
  int oom_score_adj = 0;
  std::string name;
};

struct OomVictim {
  pid_t pid = 0;   // the thread the kernel picked
  pid_t tgid = 0;  // its process
  std::string comm;
  std::optional<uid_t> uid;
  std::optional<int> oom_score_adj;
  std::string cgroup;  // the victim's memory cgroup (task_memcg)
  // The victim's memory when it was chosen, in bytes (from BPF or "Killed process ...").
  std::optional<std::uint64_t> total_vm, anon_rss, file_rss, shmem_rss, pgtables, swap;
  // The kernel marked it but sent no SIGKILL: it was already exiting.
  bool kill_skipped = false;
  // Not named by the kernel: taken for the victim because it left a cgroup whose OOM-kill
  // counter rose (the counters are the only source; see OomCounterWatch).
  bool inferred = false;

  // The process: the kernel picks a thread, people and budgets know processes. The thread id
  // when the process is not known (a kernel whose tracepoint carries only a pid).
  pid_t process() const { return tgid != 0 ? tgid : pid; }
  // What the kernel charged for it at the kill (RSS of every kind and page tables), when the
  // kernel's figures came.
  std::optional<std::uint64_t> charge() const {
    if (!anon_rss) return std::nullopt;
    return *anon_rss + file_rss.value_or(0) + shmem_rss.value_or(0) + pgtables.value_or(0);
  }
};

}  // namespace headroom
