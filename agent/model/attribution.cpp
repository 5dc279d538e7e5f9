#include <fmt/format.h>

#include <algorithm>

#include "headroom/model/snapshot.h"

namespace headroom {

const char* toString(PartKind k) {
  switch (k) {
    case PartKind::kAnon: return "anon";
    case PartKind::kFile: return "file";
    case PartKind::kShmemMapped: return "shmem_mapped";
    case PartKind::kShmemUnmapped: return "shmem_unmapped";
    case PartKind::kPageTables: return "pagetables";
    case PartKind::kSecPageTables: return "sec_pagetables";
    case PartKind::kSlabReclaimable: return "slab_reclaimable";
    case PartKind::kSlabUnreclaimable: return "slab_unreclaimable";
    case PartKind::kKernelStack: return "kernel_stack";
    case PartKind::kSock: return "sock";
    case PartKind::kPercpu: return "percpu";
    case PartKind::kZswap: return "zswap";
    case PartKind::kKernelOther: return "kernel_other";
  }
  return "unknown";
}

bool isVisible(PartKind k) { return k == PartKind::kAnon || k == PartKind::kFile || k == PartKind::kShmemMapped; }

const std::vector<PartKind>& allPartKinds() {
  static const std::vector<PartKind> kinds = {
      PartKind::kAnon,        PartKind::kFile,          PartKind::kShmemMapped,     PartKind::kShmemUnmapped,
      PartKind::kPageTables,  PartKind::kSecPageTables, PartKind::kSlabReclaimable, PartKind::kSlabUnreclaimable,
      PartKind::kKernelStack, PartKind::kSock,          PartKind::kPercpu,          PartKind::kZswap,
      PartKind::kKernelOther,
  };
  return kinds;
}

const char* toString(Accuracy a) { return a == Accuracy::kExact ? "exact" : "estimated"; }

std::uint64_t Attribution::visibleBytes() const {
  std::uint64_t sum = 0;
  for (const Part& p : parts) {
    if (isVisible(p.kind)) sum += p.bytes;
  }
  return sum;
}

std::uint64_t Attribution::invisibleBytes() const {
  std::uint64_t sum = 0;
  for (const Part& p : parts) {
    if (!isVisible(p.kind)) sum += p.bytes;
  }
  return sum;
}

std::optional<std::uint64_t> Attribution::bytesOf(PartKind k) const {
  for (const Part& p : parts) {
    if (p.kind == k) return p.bytes;
  }
  return std::nullopt;
}

namespace {

std::uint64_t sat(std::uint64_t a, std::uint64_t b) { return a > b ? a - b : 0; }

struct ProcessSums {
  std::uint64_t pss_shmem = 0;
  std::uint64_t page_tables = 0;
  std::uint64_t threads = 0;
  std::size_t without_pss = 0;
};

ProcessSums sumProcesses(const std::vector<const ProcessSample*>& procs) {
  ProcessSums s;
  for (const ProcessSample* p : procs) {
    if (p->smaps) {
      s.pss_shmem += p->smaps->pss_shmem;
    } else {
      // Without PSS the whole RssShmem is counted: an over-estimate of what is mapped.
      s.pss_shmem += p->status.rss_shmem;
      ++s.without_pss;
    }
    s.page_tables += p->status.vm_pte;
    s.threads += p->status.threads;
  }
  return s;
}

// The visible parts and the shmem split, the same on v1 and v2 once the keys are chosen.
void addVisible(Attribution& a, std::uint64_t anon, std::uint64_t cache_with_shmem, std::uint64_t shmem,
                const ProcessSums& sums, const std::string& anon_src, const std::string& cache_src,
                const std::string& shmem_src) {
  a.parts.push_back({PartKind::kAnon, anon, Accuracy::kExact, anon_src});
  a.parts.push_back({PartKind::kFile, sat(cache_with_shmem, shmem), Accuracy::kExact,
                     fmt::format("{} minus {}", cache_src, shmem_src)});
  std::uint64_t mapped = std::min(shmem, sums.pss_shmem);
  a.parts.push_back({PartKind::kShmemMapped, mapped, Accuracy::kEstimated,
                     "sum of Pss_Shmem of the cgroup's processes (capped at shmem)"});
  a.parts.push_back({PartKind::kShmemUnmapped, shmem - mapped, Accuracy::kEstimated,
                     fmt::format("{} minus the mapped part", shmem_src)});
  if (sums.without_pss > 0)
    a.notes.push_back(fmt::format("{} process(es) without readable smaps_rollup: their RssShmem counted as mapped",
                                  sums.without_pss));
}

void attributeV2(Attribution& a, const CgroupMemory& cg, const ProcessSums& sums) {
  const StatMap& st = cg.stat;
  addVisible(a, st.getOr("anon"), st.getOr("file"), st.getOr("shmem"), sums, "memory.stat anon", "memory.stat file",
             "memory.stat shmem");
  struct KernelKey {
    const char* key;
    PartKind kind;
  };
  static constexpr KernelKey kKeys[] = {
      {"pagetables", PartKind::kPageTables},
      {"sec_pagetables", PartKind::kSecPageTables},
      {"slab_reclaimable", PartKind::kSlabReclaimable},
      {"slab_unreclaimable", PartKind::kSlabUnreclaimable},
      {"kernel_stack", PartKind::kKernelStack},
      {"percpu", PartKind::kPercpu},
      {"sock", PartKind::kSock},
      {"zswap", PartKind::kZswap},
  };
  std::uint64_t kernel_listed = 0;
  for (const auto& k : kKeys) {
    auto v = st.get(k.key);
    if (!v) continue;
    a.parts.push_back({k.kind, *v, Accuracy::kExact, fmt::format("memory.stat {}", k.key)});
    // `kernel` (5.18+) holds every kmem charge; sock and zswap are charged apart from it.
    if (k.kind != PartKind::kSock && k.kind != PartKind::kZswap) kernel_listed += *v;
  }
  if (auto kernel = st.get("kernel")) {
    a.parts.push_back({PartKind::kKernelOther, sat(*kernel, kernel_listed), Accuracy::kExact,
                       "memory.stat kernel minus its listed parts"});
  } else {
    a.notes.push_back("memory.stat has no \"kernel\" key (kernel before 5.18): other kernel memory is in unattributed");
  }
  if (cg.usage_from_stat) {
    // The root is never charged: its memory.stat counts the machine's pages, and kernel memory
    // of the root's own processes (charged to no cgroup) is missing from its kernel keys.
    a.notes.push_back(
        "cgroup v2 root: no memory.current, so the usage is the sum of memory.stat's anon, file, kernel and sock "
        "(the machine's pages; kernel memory of processes in the root itself is charged to no cgroup and not in it)");
  }
}

void attributeV1(Attribution& a, const CgroupMemory& cg, const ProcessSums& sums) {
  const StatMap& st = cg.stat;
  // total_* keys are hierarchical, like usage_in_bytes; the plain keys are this cgroup alone.
  auto key = [&](const char* total, const char* local) { return st.contains(total) ? total : local; };
  const char* rss_key = key("total_rss", "rss");
  const char* cache_key = key("total_cache", "cache");
  const char* shmem_key = key("total_shmem", "shmem");
  addVisible(a, st.getOr(rss_key), st.getOr(cache_key), st.getOr(shmem_key), sums,
             fmt::format("memory.stat {}", rss_key), fmt::format("memory.stat {}", cache_key),
             fmt::format("memory.stat {}", shmem_key));
  if (cg.path == "/") {
    // The v1 root's usage_in_bytes is computed from anon + page cache alone: no kernel memory.
    a.notes.push_back(
        "cgroup v1 root: usage_in_bytes counts anon and page cache only, so kernel memory is not split out here");
    return;
  }
  if (!cg.kmem_usage) {
    a.notes.push_back("no memory.kmem.usage_in_bytes (kernel memory accounting off): kernel memory is in unattributed");
    return;
  }
  // v1's memory.stat has no kernel keys: the total is exact, its split is not.
  std::uint64_t kmem = *cg.kmem_usage;
  std::uint64_t pt = std::min(kmem, sums.page_tables);
  std::uint64_t stacks = std::min(kmem - pt, sums.threads * kKernelStackBytes);
  a.parts.push_back({PartKind::kPageTables, pt, Accuracy::kExact, "sum of VmPTE of the cgroup's processes"});
  a.parts.push_back({PartKind::kKernelStack, stacks, Accuracy::kEstimated, "threads x 16 KiB (THREAD_SIZE)"});
  a.parts.push_back({PartKind::kKernelOther, kmem - pt - stacks, Accuracy::kEstimated,
                     "memory.kmem.usage_in_bytes minus page tables and stacks (slab, percpu, ...)"});
  a.notes.push_back(
      "cgroup v1: kernel total from memory.kmem.usage_in_bytes (exact); slab, percpu and the rest are not "
      "split by the kernel and are shown together as kernel_other (estimated)");
}

}  // namespace

Attribution attributeCgroup(const CgroupMemory& cg, const std::vector<const ProcessSample*>& procs) {
  Attribution a;
  a.usage = cg.usage;
  ProcessSums sums = sumProcesses(procs);
  if (cg.version == 2)
    attributeV2(a, cg, sums);
  else
    attributeV1(a, cg, sums);
  std::int64_t total = 0;
  for (const Part& p : a.parts) total += static_cast<std::int64_t>(p.bytes);
  a.unattributed = static_cast<std::int64_t>(a.usage) - total;
  return a;
}

}  // namespace headroom
