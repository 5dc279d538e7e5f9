// How a cgroup's usage is split into parts, whoever read the figures: a sample's memory files
// (attributeCgroup) or the kernel's own report at an OOM kill (breakdownAtKill). Private to
// agent/model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "headroom/model/snapshot.h"
#include "headroom/sources/parse.h"

namespace headroom {

// What the processes of the cgroup add: the mapped part of its shmem, its page tables (v1, where
// memory.stat has no key for them), its threads (v1 kernel stacks, when known).
struct ProcessSums {
  std::uint64_t shmem_mapped = 0;
  std::string shmem_mapped_source;
  Accuracy estimate = Accuracy::kEstimated;  // of the shmem split
  std::uint64_t page_tables = 0;
  std::string page_tables_source;
  Accuracy page_tables_accuracy = Accuracy::kExact;
  std::optional<std::uint64_t> threads;
  std::vector<std::string> notes;
};

struct SplitInputs {
  const StatMap* stat = nullptr;  // memory.stat's keys (v1 or v2 names)
  int version = 2;
  std::uint64_t usage = 0;
  bool root = false;                  // the hierarchy's root
  bool usage_from_stat = false;       // v2 root: usage is memory.stat's sum
  std::optional<std::uint64_t> kmem;  // v1 kernel memory total
  std::string stat_name = "memory.stat";
  std::string kmem_name = "memory.kmem.usage_in_bytes";
  Accuracy measured = Accuracy::kExact;  // a key as read
  Accuracy computed = Accuracy::kExact;  // a difference of keys
};

Attribution splitUsage(const SplitInputs& in, const ProcessSums& sums);

}  // namespace headroom
