#include <fmt/format.h>

#include <algorithm>

#include "attribution_split.h"
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

const char* toString(Accuracy a) {
  switch (a) {
    case Accuracy::kExact: return "exact";
    case Accuracy::kDerived: return "derived";
    case Accuracy::kEstimated: return "estimated";
  }
  return "unknown";
}

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

ProcessSums sumsOf(const ProcessTotals& t) {
  ProcessSums s;
  s.shmem_mapped_source = "sum of Pss_Shmem of the cgroup's processes (capped at shmem)";
  s.page_tables_source = "sum of VmPTE of the cgroup's processes";
  s.shmem_mapped = t.shmem_mapped;
  s.page_tables = t.page_tables;
  s.threads = t.threads;
  if (t.without_pss > 0)
    s.notes.push_back(
        fmt::format("{} process(es) without readable smaps_rollup: their RssShmem counted as mapped", t.without_pss));
  return s;
}

// The visible parts and the shmem split, the same on v1 and v2 once the keys are chosen.
void addVisible(Attribution& a, const SplitInputs& in, const char* anon_key, const char* cache_key,
                const char* shmem_key, const ProcessSums& sums) {
  const StatMap& st = *in.stat;
  std::uint64_t shmem = st.getOr(shmem_key);
  a.parts.push_back({PartKind::kAnon, st.getOr(anon_key), in.measured, fmt::format("{} {}", in.stat_name, anon_key)});
  a.parts.push_back({PartKind::kFile, sat(st.getOr(cache_key), shmem), in.computed,
                     fmt::format("{0} {1} minus {0} {2}", in.stat_name, cache_key, shmem_key)});
  std::uint64_t mapped = std::min(shmem, sums.shmem_mapped);
  a.parts.push_back({PartKind::kShmemMapped, mapped, sums.estimate, sums.shmem_mapped_source});
  a.parts.push_back({PartKind::kShmemUnmapped, shmem - mapped, sums.estimate,
                     fmt::format("{} {} minus the mapped part", in.stat_name, shmem_key)});
  // What the processes' figures lack comes first, as the split of shmem is where it matters.
  a.notes.insert(a.notes.end(), sums.notes.begin(), sums.notes.end());
}

void splitV2(Attribution& a, const SplitInputs& in, const ProcessSums& sums) {
  const StatMap& st = *in.stat;
  addVisible(a, in, "anon", "file", "shmem", sums);
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
    a.parts.push_back({k.kind, *v, in.measured, fmt::format("{} {}", in.stat_name, k.key)});
    // `kernel` (5.18+) holds every kmem charge; sock and zswap are charged apart from it.
    if (k.kind != PartKind::kSock && k.kind != PartKind::kZswap) kernel_listed += *v;
  }
  if (!st.get("pagetables")) {
    a.notes.push_back(fmt::format(
        "{} has no \"pagetables\" key (kernel before 5.11): the page tables are in unattributed", in.stat_name));
  }
  if (auto kernel = st.get("kernel")) {
    a.parts.push_back({PartKind::kKernelOther, sat(*kernel, kernel_listed), in.computed,
                       fmt::format("{} kernel minus its listed parts", in.stat_name)});
  } else {
    a.notes.push_back(fmt::format(
        "{} has no \"kernel\" key (kernel before 5.18): other kernel memory is in unattributed", in.stat_name));
  }
  if (in.usage_from_stat) {
    // The root is never charged: its memory.stat counts the machine's pages, and kernel memory
    // of the root's own processes (charged to no cgroup) is missing from its kernel keys.
    a.notes.push_back(
        "cgroup v2 root: no memory.current, so the usage is the sum of memory.stat's anon, file, kernel and sock "
        "(the machine's pages; kernel memory of processes in the root itself is charged to no cgroup and not in it)");
  }
}

void splitV1(Attribution& a, const SplitInputs& in, const ProcessSums& sums) {
  const StatMap& st = *in.stat;
  // total_* keys are hierarchical, like usage_in_bytes; the plain keys are this cgroup alone.
  auto key = [&](const char* total, const char* local) { return st.contains(total) ? total : local; };
  addVisible(a, in, key("total_rss", "rss"), key("total_cache", "cache"), key("total_shmem", "shmem"), sums);
  if (in.root) {
    // The v1 root's usage_in_bytes is computed from anon + page cache alone: no kernel memory.
    a.notes.push_back(
        "cgroup v1 root: usage_in_bytes counts anon and page cache only, so kernel memory is not split out here");
    return;
  }
  if (!in.kmem) {
    a.notes.push_back(
        fmt::format("no {} (kernel memory accounting off): kernel memory is in unattributed", in.kmem_name));
    return;
  }
  // v1's memory.stat has no kernel keys: the total is exact, its split is not.
  std::uint64_t kmem = *in.kmem;
  std::uint64_t pt = std::min(kmem, sums.page_tables);
  a.parts.push_back({PartKind::kPageTables, pt, sums.page_tables_accuracy, sums.page_tables_source});
  std::uint64_t stacks = 0;
  if (sums.threads) {
    stacks = std::min(kmem - pt, *sums.threads * kKernelStackBytes);
    a.parts.push_back({PartKind::kKernelStack, stacks, Accuracy::kEstimated, "threads x 16 KiB (THREAD_SIZE)"});
  }
  a.parts.push_back(
      {PartKind::kKernelOther, kmem - pt - stacks, sums.threads ? Accuracy::kEstimated : in.computed,
       fmt::format("{} minus page tables{} (slab, percpu, ...)", in.kmem_name, sums.threads ? " and stacks" : "")});
  a.notes.push_back(fmt::format(
      "cgroup v1: kernel total from {} (exact); slab, {}percpu and the rest are not split by the kernel and are "
      "shown together as kernel_other ({})",
      in.kmem_name, sums.threads ? "" : "kernel stacks, ",
      toString(sums.threads ? Accuracy::kEstimated : in.computed)));
}

}  // namespace

Attribution splitUsage(const SplitInputs& in, const ProcessSums& sums) {
  Attribution a;
  a.usage = in.usage;
  if (in.version == 2)
    splitV2(a, in, sums);
  else
    splitV1(a, in, sums);
  std::int64_t total = 0;
  for (const Part& p : a.parts) total += static_cast<std::int64_t>(p.bytes);
  a.unattributed = static_cast<std::int64_t>(a.usage) - total;
  return a;
}

void ProcessTotals::add(const ProcessSample& p) {
  if (p.smaps) {
    shmem_mapped += p.smaps->pss_shmem;
    size += p.smaps->pss;
  } else {
    // Without PSS the whole RssShmem is counted: an over-estimate of what is mapped.
    shmem_mapped += p.status.rss_shmem;
    size += p.status.vm_rss;
    ++without_pss;
  }
  page_tables += p.status.vm_pte;
  threads += p.status.threads;
}

void ProcessTotals::remove(const ProcessSample& p) {
  if (p.smaps) {
    shmem_mapped -= p.smaps->pss_shmem;
    size -= p.smaps->pss;
  } else {
    shmem_mapped -= p.status.rss_shmem;
    size -= p.status.vm_rss;
    --without_pss;
  }
  page_tables -= p.status.vm_pte;
  threads -= p.status.threads;
}

Attribution attributeCgroup(const CgroupMemory& cg, const std::vector<const ProcessSample*>& procs) {
  ProcessTotals totals;
  for (const ProcessSample* p : procs) totals.add(*p);
  return attributeCgroup(cg, totals);
}

Attribution attributeCgroup(const CgroupMemory& cg, const ProcessTotals& totals) {
  SplitInputs in;
  in.stat = &cg.stat;
  in.version = cg.version;
  in.usage = cg.usage;
  in.root = cg.path == "/";
  in.usage_from_stat = cg.usage_from_stat;
  in.kmem = cg.kmem_usage;
  return splitUsage(in, sumsOf(totals));
}

}  // namespace headroom
