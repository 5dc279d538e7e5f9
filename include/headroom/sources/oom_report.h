// Plain data of one OOM kill as the kernel tells it (its task dump, the victim's figures),
// shared by the /dev/kmsg source, the BPF sensors and the model.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "headroom/sources/parse.h"

namespace headroom {

// One "NAME: usage NkB, limit NkB, failcnt N" line of a memory cgroup's OOM report (memory,
// memory+swap and kmem on cgroup v1; memory and swap on v2), in bytes; no limit is nullopt.
struct OomCounterLine {
  std::optional<std::uint64_t> usage, limit, failcnt;
};

// The OOM domain's state as the kernel printed it at the kill: its counters and its statistics
// block ("Memory cgroup stats for PATH:"; v1 keys on v1, memory.stat itself on v2), every key as
// reported, in the kernel's order and unit (bytes, or counts for event keys).
struct OomMemcgState {
  OomCounterLine memory;
  std::optional<OomCounterLine> memsw;  // v1 "memory+swap:"
  std::optional<OomCounterLine> swap;   // v2 "swap:"
  std::optional<OomCounterLine> kmem;   // v1 "kmem:"
  std::string stats_cgroup;             // the path after "Memory cgroup stats for"
  StatMap stats;
  // A line of the block that was not "key number" (a record cut short by the log's line limit):
  // the keys before it are whole, the ones after it are missing.
  bool stats_cut = false;
};

// A node's hugepage pool ("Node 0 hugepages_total=0 hugepages_free=0 hugepages_surp=0
// hugepages_size=2048kB"), counts of pages of that size.
struct OomHugepages {
  int node = 0;
  std::uint64_t page_bytes = 0;
  std::uint64_t total = 0, free = 0, surplus = 0;
};

// One line of "Unreclaimable slab info:" (printed at a global OOM when unreclaimable slab
// outweighs the pages on the LRU lists).
struct OomSlabCache {
  std::string name;
  std::uint64_t used_bytes = 0, total_bytes = 0;
};

// The machine at a global OOM ("Mem-Info:" and what follows it), in bytes.
struct OomMachineState {
  StatMap counters;                            // active_anon, inactive_anon, ..., free (pages -> bytes)
  std::vector<std::pair<int, StatMap>> nodes;  // "Node N key:valuekB ..." per node
  std::vector<OomHugepages> hugepages;
  std::optional<std::uint64_t> pagecache_bytes;   // "N total pagecache pages"
  std::optional<std::uint64_t> swap_cache_bytes;  // "N pages in swap cache"
  std::optional<std::uint64_t> swap_free_bytes, swap_total_bytes;
  std::optional<std::uint64_t> ram_bytes;        // "N pages RAM"
  std::optional<std::uint64_t> reserved_bytes;   // "N pages reserved"
  std::vector<OomSlabCache> unreclaimable_slab;  // largest first
  // A node's sum of one key (kernel_stack is printed per node only).
  std::optional<std::uint64_t> nodeSum(std::string_view key) const;
};

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
  // At the mark, from BPF only (the kernel's log has none of them): the pages it held locked
  // (mm->locked_vm) and pinned for DMA (mm->pinned_vm), and what the CUDA sensor counted of it,
  // host memory pinned through the driver and device memory, live at that moment.
  std::optional<std::uint64_t> locked, pinned_vm, cuda_pinned, cuda_device;
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
