#include "headroom/model/at_kill.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "attribution_split.h"
#include "headroom/util/units.h"

namespace headroom {
namespace {

// The kernel's figures agree with each other to the page; reading files one by one after the
// kill lets them drift by what is freed meanwhile.
constexpr double kAddsUpFraction = 0.01;
constexpr std::size_t kSlabCachesKept = 10;

std::uint64_t sat(std::uint64_t a, std::uint64_t b) { return a > b ? a - b : 0; }

void checkSum(KillBreakdown& b) {
  const double off = std::abs(static_cast<double>(b.attribution.unattributed));
  b.adds_up = b.usage > 0 && off <= kAddsUpFraction * static_cast<double>(b.usage);
}

// What the task dump says of the domain's processes: their page tables, and the shmem they map
// (6.2+ dumps rss_shmem; before, the statistics' mapped-file figure caps it). Without a dump (no
// kernel report), the victims' page tables as BPF's mark told them.
ProcessSums sumsFromTaskDump(const OomEvent& e, const StatMap& stat, const std::string& stat_name,
                             const char* mapped_key) {
  const std::vector<OomTaskDumpEntry>& tasks = e.tasks;
  ProcessSums s;
  // The mapped part of shmem is an upper bound either way (rss_shmem counts a shared page in
  // every process that maps it; file_mapped counts regular files too): estimated.
  s.estimate = Accuracy::kEstimated;
  s.page_tables_accuracy = Accuracy::kDerived;
  s.page_tables_source = "sum of pgtables_bytes in the kernel's task dump";
  if (tasks.empty()) {
    s.page_tables_source = "the victims' page tables at the mark (no task dump)";
    for (const OomVictim& v : e.victims) s.page_tables += v.pgtables.value_or(0);
  }
  bool rss_shmem = !tasks.empty();
  std::uint64_t dump_shmem = 0;
  for (const OomTaskDumpEntry& t : tasks) {
    s.page_tables += t.pgtables_bytes;
    if (!t.rss_shmem_bytes) rss_shmem = false;
    dump_shmem += t.rss_shmem_bytes.value_or(0);
  }
  if (rss_shmem) {
    s.shmem_mapped = dump_shmem;
    s.shmem_mapped_source = "sum of rss_shmem in the kernel's task dump (capped at shmem)";
  } else {
    s.shmem_mapped = stat.getOr(mapped_key);
    s.shmem_mapped_source = fmt::format("{} {} (capped at shmem: mapped files of every kind)", stat_name, mapped_key);
  }
  return s;
}

std::optional<KillBreakdown> fromKernelReport(const OomEvent& e) {
  const OomMemcgState& k = *e.kernel_memcg;
  if (k.stats.empty() || !k.memory.usage) return std::nullopt;
  KillBreakdown b;
  b.source = KillBreakdown::Source::kKernelReport;
  b.cgroup = normaliseCgroupPath(e.domain_cgroup.value_or(k.stats_cgroup));
  b.usage = *k.memory.usage;
  b.limit = k.memory.limit;
  b.failcnt = k.memory.failcnt;
  if (!b.limit && k.memsw && k.memsw->limit) {  // v1: the memory+swap limit was the one hit
    b.limit = k.memsw->limit;
    b.failcnt = k.memsw->failcnt;
  }
  const bool v2 = k.stats.contains("anon");
  SplitInputs in;
  in.stat = &k.stats;
  in.version = v2 ? 2 : 1;
  in.usage = b.usage;
  in.stat_name = "the OOM report's";
  in.kmem_name = "the OOM report's kmem usage";
  if (k.kmem) in.kmem = k.kmem->usage;
  in.computed = Accuracy::kDerived;
  b.attribution = splitUsage(in, sumsFromTaskDump(e, k.stats, in.stat_name, v2 ? "file_mapped" : "mapped_file"));
  if (!k.memory.limit && b.limit) b.attribution.notes.push_back("the domain's memory+swap limit (v1) was the one hit");
  if (k.stats_cut)
    b.attribution.notes.push_back("the kernel log cut the statistics block short: keys after the cut are missing");
  if (e.kernel_lost_records > 0)
    b.attribution.notes.push_back(
        fmt::format("{} record(s) of the kernel's report were lost before they were read", e.kernel_lost_records));
  checkSum(b);
  return b;
}

// The domain among the files read at the kill: the one the kernel named, else the nearest with
// a limit (the victim's own cgroup when none has one).
const CgroupMemory* domainRead(const OomEvent& e, bool& inferred) {
  inferred = false;
  if (e.domain_cgroup) {
    const std::string want = normaliseCgroupPath(*e.domain_cgroup);
    for (const CgroupMemory& m : e.read_at_kill) {
      if (m.path == want) return &m;
    }
  }
  inferred = true;
  for (const CgroupMemory& m : e.read_at_kill) {
    if (m.limit) return &m;
  }
  return e.read_at_kill.empty() ? nullptr : &e.read_at_kill.front();
}

std::optional<KillBreakdown> fromFilesRead(const OomEvent& e) {
  bool inferred = false;
  const CgroupMemory* m = domainRead(e, inferred);
  if (m == nullptr) return std::nullopt;
  KillBreakdown b;
  b.source = KillBreakdown::Source::kFilesRead;
  b.cgroup = m->path;
  b.domain_inferred = inferred;
  b.usage = m->usage;
  b.limit = m->limit;
  b.failcnt = m->failcnt;
  b.peak = m->peak;
  // The kill's stamp is BPF's (CLOCK_MONOTONIC) or the kernel log's (its own clock, close to it):
  // a read that seems to precede the kill is said as "just after".
  if (e.monotonic_time_ns > 0 && e.read_at_kill_ns >= e.monotonic_time_ns)
    b.read_after_ns = e.read_at_kill_ns - e.monotonic_time_ns;
  SplitInputs in;
  in.stat = &m->stat;
  in.version = m->version;
  in.usage = m->usage;
  in.root = m->path == "/";
  in.usage_from_stat = m->usage_from_stat;
  in.kmem = m->kmem_usage;
  in.measured = Accuracy::kDerived;  // the domain's figures a moment later, not at the kill
  in.computed = Accuracy::kDerived;
  b.attribution =
      splitUsage(in, sumsFromTaskDump(e, m->stat, in.stat_name, m->version == 2 ? "file_mapped" : "mapped_file"));
  b.attribution.notes.push_back(fmt::format(
      "no kernel report of the moment: the domain's files read {} after the kill (what the reaper freed by then is "
      "missing)",
      b.read_after_ns ? fmt::format("{:.1f} ms", static_cast<double>(*b.read_after_ns) / 1e6) : "just"));
  if (b.domain_inferred)
    b.attribution.notes.push_back(
        e.domain_cgroup ? fmt::format("the OOM domain the kernel named, {}, was not among the cgroups read: taken as "
                                      "the nearest cgroup with a limit",
                                      *e.domain_cgroup)
                        : std::string("the OOM domain was not named: taken as the nearest cgroup with a limit"));
  checkSum(b);
  return b;
}

std::optional<KillBreakdown> fromMachine(const OomEvent& e) {
  const OomMachineState& m = *e.kernel_machine;
  const StatMap& c = m.counters;
  if (c.empty()) return std::nullopt;
  KillBreakdown b;
  b.source = KillBreakdown::Source::kMachine;
  b.free_bytes = c.get("free");
  b.ram_bytes = m.ram_bytes;
  b.slab.assign(m.unreclaimable_slab.begin(),
                m.unreclaimable_slab.begin() +
                    static_cast<std::ptrdiff_t>(std::min(kSlabCachesKept, m.unreclaimable_slab.size())));
  Attribution& a = b.attribution;
  const std::uint64_t shmem = c.getOr("shmem");
  const std::uint64_t anon_lru = c.getOr("active_anon") + c.getOr("inactive_anon") + c.getOr("unevictable");
  a.parts.push_back({PartKind::kAnon, sat(anon_lru, shmem), Accuracy::kDerived,
                     "Mem-Info active_anon + inactive_anon + unevictable minus shmem"});
  a.parts.push_back({PartKind::kFile, c.getOr("active_file") + c.getOr("inactive_file"), Accuracy::kDerived,
                     "Mem-Info active_file + inactive_file"});
  ProcessSums sums = sumsFromTaskDump(e, c, "Mem-Info", "mapped");
  const std::uint64_t mapped = std::min(shmem, sums.shmem_mapped);
  a.parts.push_back({PartKind::kShmemMapped, mapped, Accuracy::kEstimated,
                     sums.shmem_mapped_source.find("task dump") != std::string::npos
                         ? sums.shmem_mapped_source
                         : "Mem-Info mapped (capped at shmem)"});
  a.parts.push_back(
      {PartKind::kShmemUnmapped, shmem - mapped, Accuracy::kDerived, "Mem-Info shmem minus the mapped part"});
  struct Key {
    const char* key;
    PartKind kind;
  };
  static constexpr Key kKeys[] = {{"pagetables", PartKind::kPageTables},
                                  {"sec_pagetables", PartKind::kSecPageTables},
                                  {"slab_reclaimable", PartKind::kSlabReclaimable},
                                  {"slab_unreclaimable", PartKind::kSlabUnreclaimable}};
  for (const Key& k : kKeys) {
    if (auto v = c.get(k.key)) a.parts.push_back({k.kind, *v, Accuracy::kExact, fmt::format("Mem-Info {}", k.key)});
  }
  if (auto stacks = m.nodeSum("kernel_stack"))
    a.parts.push_back({PartKind::kKernelStack, *stacks, Accuracy::kExact, "Mem-Info kernel_stack (its nodes' sum)"});
  // In use: the RAM the kernel manages less what was free; the rest of it is the kernel's and
  // its drivers' (vmalloc, per-CPU, DMA buffers, ...), which Mem-Info does not list.
  std::uint64_t listed = 0;
  for (const Part& p : a.parts) listed += p.bytes;
  // The hugetlb pools: neither free nor on any list above, and a classic cause of a global OOM.
  std::uint64_t hugetlb = 0;
  for (const OomHugepages& h : m.hugepages) hugetlb += h.total * h.page_bytes;
  if (hugetlb > 0) {
    b.hugetlb_bytes = hugetlb;
    a.notes.push_back(
        fmt::format("{} of RAM is held by the hugetlb pools (Mem-Info hugepages_total x size, "
                    "their nodes' sum): in use, and in none of the parts",
                    formatBytes(hugetlb)));
  }
  if (m.ram_bytes) {
    const std::uint64_t managed = sat(*m.ram_bytes, m.reserved_bytes.value_or(0));
    b.usage = sat(managed, c.getOr("free") + c.getOr("free_pcp"));
    a.parts.push_back({PartKind::kKernelOther, sat(b.usage, listed + hugetlb), Accuracy::kDerived,
                       "RAM in use (pages RAM - reserved - free) minus every listed part and the hugetlb pools: "
                       "vmalloc, per-CPU, drivers"});
  } else {
    b.usage = listed;
    a.notes.push_back("the report lost its \"pages RAM\" line: memory outside the listed parts is not known");
  }
  a.usage = b.usage;
  std::int64_t total = static_cast<std::int64_t>(hugetlb);
  for (const Part& p : a.parts) total += static_cast<std::int64_t>(p.bytes);
  a.unattributed = static_cast<std::int64_t>(a.usage) - total;
  a.notes.push_back("unevictable (mlocked) pages are counted with anon");
  if (e.kernel_lost_records > 0)
    a.notes.push_back(
        fmt::format("{} record(s) of the kernel's report were lost before they were read", e.kernel_lost_records));
  // kernel_other is the rest by its definition: there is no sum to check (adds_up stays false).
  return b;
}

}  // namespace

const char* toString(KillBreakdown::Source s) {
  switch (s) {
    case KillBreakdown::Source::kKernelReport: return "kernel report";
    case KillBreakdown::Source::kFilesRead: return "files read after the kill";
    case KillBreakdown::Source::kMachine: return "kernel report (Mem-Info)";
  }
  return "unknown";
}

std::optional<KillOverhead> overheadAtKill(const KillBreakdown& b, std::string_view prover_cgroup) {
  if (b.source == KillBreakdown::Source::kMachine || b.cgroup.empty() || prover_cgroup.empty()) return std::nullopt;
  if (!cgroupIsWithin(b.cgroup, normaliseCgroupPath(prover_cgroup))) return std::nullopt;
  KillOverhead o;
  o.exact = b.source == KillBreakdown::Source::kKernelReport;
  o.charge = b.usage;
  auto page_tables = b.attribution.bytesOf(PartKind::kPageTables);
  o.page_tables_known = page_tables.has_value();
  o.page_tables = page_tables.value_or(0) + b.attribution.bytesOf(PartKind::kSecPageTables).value_or(0);
  o.kernel = b.attribution.invisibleBytes() - std::min(b.attribution.invisibleBytes(), o.page_tables);
  o.source = b.source == KillBreakdown::Source::kKernelReport
                 ? std::string("the kernel's OOM report")
                 : fmt::format("the domain's files read {} after the kill",
                               b.read_after_ns ? fmt::format("{:.1f} ms", static_cast<double>(*b.read_after_ns) / 1e6)
                                               : std::string("just"));
  return o;
}

std::optional<KillBreakdown> breakdownAtKill(const OomEvent& e) {
  if (e.kernel_memcg && !e.global) {
    if (auto b = fromKernelReport(e)) return b;
  }
  if (e.kernel_machine && e.global) {
    if (auto b = fromMachine(e)) return b;
  }
  if (!e.global) return fromFilesRead(e);
  return std::nullopt;
}

}  // namespace headroom
