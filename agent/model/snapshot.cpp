#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "headroom/model/snapshot.h"

namespace headroom {

const CgroupSnapshot* Snapshot::findCgroup(std::string_view path) const {
  for (const auto& c : cgroups) {
    if (c.memory.path == path) return &c;
  }
  return nullptr;
}

const ProcessSnapshot* Snapshot::findProcess(pid_t pid) const {
  for (const auto& p : processes) {
    if (p.sample.pid == pid) return &p;
  }
  return nullptr;
}

namespace {

std::uint64_t pssOrRss(const ProcessSample& p) { return p.smaps ? p.smaps->pss : p.status.vm_rss; }

ProcessAttribution visibleOf(const ProcessSample& p) {
  ProcessAttribution a;
  a.rss = p.status.vm_rss;
  a.rss_anon = p.status.rss_anon;
  a.rss_file = p.status.rss_file;
  a.rss_shmem = p.status.rss_shmem;
  if (p.smaps) {
    a.pss = p.smaps->pss;
    a.pss_anon = p.smaps->pss_anon;
    a.pss_file = p.smaps->pss_file;
    a.pss_shmem = p.smaps->pss_shmem;
  }
  a.page_tables = p.status.vm_pte;
  a.locked = p.status.vm_lck;
  a.swap = p.status.vm_swap;
  return a;
}

// `total` × `mine` / `all`, rounded down, exact: in 128 bits, not x87's long double (which
// changes the FPU's rounding mode around each conversion back: the sample's hottest code once).
std::uint64_t shareOf(std::uint64_t total, std::uint64_t mine, std::uint64_t all) {
  if (all == 0) return 0;
  if (mine >= all) return total;
  __extension__ typedef unsigned __int128 Wide;  // NOLINT(modernize-use-using): __extension__ needs typedef
  return static_cast<std::uint64_t>(static_cast<Wide>(total) * mine / all);
}

// A cgroup's invisible overhead, to be shared among the processes attributed to it.
struct Overhead {
  std::uint64_t stacks = 0;  // kernel stacks: by thread share
  std::uint64_t rest = 0;    // the rest of the kernel's charge: by PSS share
  std::uint64_t threads = 0, pss = 0;
};

Overhead overheadOf(const Attribution& cg_attr) {
  Overhead o;
  o.stacks = cg_attr.bytesOf(PartKind::kKernelStack).value_or(0);
  for (const Part& part : cg_attr.parts) {
    switch (part.kind) {
      case PartKind::kSlabReclaimable:
      case PartKind::kSlabUnreclaimable:
      case PartKind::kSock:
      case PartKind::kPercpu:
      case PartKind::kZswap:
      case PartKind::kSecPageTables:
      case PartKind::kKernelOther: o.rest += part.bytes; break;
      default: break;
    }
  }
  return o;
}

// A process's share of its cgroup's invisible overhead: its own page tables (exact), kernel
// stacks by its share of the threads, the rest of the kernel's charge by its share of PSS.
// Unmapped shmem belongs to nobody's mapping and is given to no process.
void shareOverhead(ProcessAttribution& pa, const ProcessSample& p, const Overhead& cg) {
  pa.overhead_share =
      p.status.vm_pte + shareOf(cg.stacks, p.status.threads, cg.threads) + shareOf(cg.rest, pssOrRss(p), cg.pss);
  pa.overhead_rule = p.smaps ? "own VmPTE + kernel stacks by thread share + other kernel memory by PSS share"
                             : "own VmPTE + kernel stacks by thread share + other kernel memory by RSS share (no PSS)";
}

// Between two walks the sample read a few processes: the counts of what the processes were are
// the walk's, what this sample read (the files, the cost, the refreshed) its own.
void carryWalkFigures(CollectStats& now, const CollectStats& walk) {
  now.processes_seen = walk.processes_seen;
  now.processes_read = walk.processes_read;
  now.processes_vanished = walk.processes_vanished;
  now.processes_failed = walk.processes_failed;
  now.processes_skipped = walk.processes_skipped;
  now.processes_without_pss = walk.processes_without_pss;
  now.processes_pss_pending = walk.processes_pss_pending;
  now.kernel_threads = walk.kernel_threads;
  now.processes_outside_mount = walk.processes_outside_mount;
  now.process_source = walk.process_source;
  now.processes_walked_ns = walk.processes_walked_ns;
}

}  // namespace

std::uint64_t reclaimableBytes(const CgroupMemory& cg) {
  const StatMap& st = cg.stat;
  // v1's usage is hierarchical, and so are its total_* keys; v2's memory.stat is hierarchical.
  bool v1 = cg.version == 1;
  std::uint64_t lru =
      st.getOr(v1 ? "total_inactive_file" : "inactive_file") + st.getOr(v1 ? "total_active_file" : "active_file");
  std::uint64_t busy = st.getOr(v1 ? "total_dirty" : "file_dirty") +
                       st.getOr(v1 ? "total_writeback" : "file_writeback") +
                       st.getOr(v1 ? "total_mapped_file" : "file_mapped");
  return lru > busy ? lru - busy : 0;
}

std::shared_ptr<const Snapshot> buildSnapshot(RawSample raw, const RoleMatcher& roles, SensorReadings sensors,
                                              const Snapshot* carry_from) {
  auto snap = std::make_shared<Snapshot>();
  snap->wall_time_ns = raw.wall_time_ns;
  snap->monotonic_time_ns = raw.monotonic_time_ns;
  snap->completed_monotonic_ns = raw.completed_monotonic_ns;
  snap->mode = raw.mounts.mode();
  snap->memory_version = raw.memory_version;
  if (const CgroupMount* m = raw.mounts.memoryMount()) snap->memory_mount = m->mount_point;
  snap->host = HostSnapshot{std::move(raw.meminfo), raw.host_pressure};
  snap->self_pid = raw.self_pid;
  snap->focus_pid = raw.focus_pid;
  snap->stats = std::move(raw.stats);
  snap->sensors = std::move(sensors.status);

  // Each process is attributed to the deepest watched cgroup that holds it, and counted in the
  // subtree of every watched cgroup that holds it: worked out once per cgroup the processes are
  // in (a few), not once per process.
  struct Placement {
    SharedString deepest;             // shared by its processes' snapshots
    std::vector<std::size_t> within;  // indices into raw.cgroups
  };
  std::unordered_map<std::string, Placement> placements;
  std::vector<SharedString> watched;  // one path for all the processes attributed to it
  watched.reserve(raw.cgroups.size());
  // Between walks, the paths the carried processes hold already: a carried process attributed to
  // the same cgroup as before stays as it was (shared, not copied).
  std::unordered_map<std::string_view, SharedString> known;
  if (raw.stats.processes_carried && carry_from != nullptr) {
    const SharedString* previous = nullptr;
    for (const ProcessSnapshot& p : carry_from->processes) {
      if (previous != nullptr && previous->sharesWith(p.cgroup)) continue;
      known.try_emplace(p.cgroup.str(), p.cgroup);
      previous = &p.cgroup;
    }
  }
  for (const CgroupMemory& cg : raw.cgroups) {
    auto it = known.find(cg.path);
    watched.push_back(it != known.end() ? it->second : SharedString(cg.path));
  }
  // The processes of a cgroup mostly come in a row, naming it with the same shared path: the
  // last placement is tried first.
  SharedString last_path;
  const Placement* last = nullptr;
  auto placementOf = [&](const SharedString& path) -> const Placement& {
    if (last != nullptr && last_path == path) return *last;
    last_path = path;
    auto it = placements.find(path);
    if (it != placements.end()) return *(last = &it->second);
    Placement pl;
    for (std::size_t ci = 0; ci < raw.cgroups.size(); ++ci) {
      const std::string& w = raw.cgroups[ci].path;
      if (!cgroupIsWithin(path, w)) continue;
      pl.within.push_back(ci);
      if (w.size() >= pl.deepest.size()) pl.deepest = watched[ci];
    }
    return *(last = &placements.emplace(path, std::move(pl)).first->second);
  };
  // A process read this sample: made in place, the sample moved in first (no whole
  // ProcessSnapshot moved per process), with its role, visible figures and the sensors' overlay.
  auto make = [&](ProcessSample&& sample) {
    ProcessSnapshot& ps = snap->processes.emplace_back();
    ps.sample = std::move(sample);
    const ProcessSample& p = ps.sample;
    ps.role = roles.matchSampled(p.pid, raw.self_pid, p.comm, p.cmdline, p.memory_cgroup);
    ps.attribution = visibleOf(p);
    if (auto it = sensors.activity.find(p.pid); it != sensors.activity.end()) ps.activity = it->second;
    if (auto it = sensors.gpu.find(p.pid); it != sensors.gpu.end()) {
      const GpuMemory& g = it->second;
      PinnedOverlay pin;
      pin.live_bytes = g.pinned_live;
      pin.peak_bytes = g.pinned_peak;
      pin.allocations = g.pinned_allocs;
      pin.source = "uprobes on the CUDA API";
      auto res = sensors.pinned_inside_rss.find(p.pid);
      pin.residency = res == sensors.pinned_inside_rss.end() ? PinnedOverlay::Residency::kUnknown
                      : res->second                          ? PinnedOverlay::Residency::kInsideRss
                                                             : PinnedOverlay::Residency::kOutsideRss;
      ps.attribution.pinned = pin;
      ps.attribution.device_bytes = g.device_live;
      ps.attribution.device_peak_bytes = g.device_peak;
    }
  };
  // Which processes were made from this sample's readings (their overhead shares are worked out
  // below); the others are carried from the last walk as they were.
  std::vector<bool> fresh;
  // Every carried process at the index it had (none gone, none added): the last order by size
  // holds but for the processes read again.
  bool same_places = false;
  if (raw.stats.processes_carried && carry_from != nullptr) {
    same_places = true;
    carryWalkFigures(snap->stats, carry_from->stats);
    std::unordered_map<pid_t, std::size_t> read_now;
    for (std::size_t j = 0; j < raw.processes.size(); ++j) read_now.emplace(raw.processes[j].pid, j);
    const std::unordered_set<pid_t> asked(raw.refreshed.begin(), raw.refreshed.end());
    snap->processes.reserve(carry_from->processes.size());
    for (std::size_t i = 0; i < carry_from->processes.size(); ++i) {
      const pid_t pid = carry_from->processes[i].sample.pid;
      if (!asked.contains(pid)) {
        snap->processes.push_shared(carry_from->processes.shared(i));
        fresh.push_back(false);
        continue;
      }
      auto it = read_now.find(pid);
      if (it == read_now.end()) {  // gone (or moved out of the watched cgroups)
        same_places = false;
        continue;
      }
      make(std::move(raw.processes[it->second]));
      fresh.push_back(true);
      read_now.erase(it);
    }
    // Read and not in the last walk's list (started since, in a cgroup read again whole): after
    // the carried ones, in pid order.
    for (ProcessSample& p : raw.processes) {
      if (!read_now.contains(p.pid)) continue;
      make(std::move(p));
      fresh.push_back(true);
      same_places = false;
    }
  } else {
    snap->processes.reserve(raw.processes.size());
    for (auto& raw_process : raw.processes) make(std::move(raw_process));
    fresh.assign(snap->processes.size(), true);
  }
  std::vector<const Placement*> placed_at;  // each process's, by index
  placed_at.reserve(snap->processes.size());
  for (std::size_t i = 0; i < snap->processes.size(); ++i) {
    const Placement& placed = placementOf(std::as_const(snap->processes)[i].sample.memory_cgroup);
    placed_at.push_back(&placed);
    // A carried process is copied only when the cgroup it is attributed to changed.
    if (std::as_const(snap->processes)[i].cgroup != placed.deepest) snap->processes[i].cgroup = placed.deepest;
  }

  // Every cgroup read, watched or ancestor, by path: each watched cgroup asks for each of its
  // ancestors.
  std::unordered_map<std::string_view, const CgroupMemory*> by_path;
  for (const auto& [path, cg] : raw.ancestors) by_path.emplace(path, &cg);
  for (const auto& cg : raw.cgroups) by_path.insert_or_assign(cg.path, &cg);  // a watched one first
  auto limitOf = [&](const std::string& path) -> const CgroupMemory* {
    auto it = by_path.find(path);
    return it == by_path.end() ? nullptr : it->second;
  };
  // Every cgroup's bounds before any is moved into the snapshot: a watched cgroup is also the
  // ancestor that bounds the watched cgroups below it.
  std::vector<std::vector<Bound>> bounds(raw.cgroups.size());
  for (std::size_t i = 0; i < raw.cgroups.size(); ++i) {
    const CgroupMemory& cg = raw.cgroups[i];
    if (cg.limit) bounds[i].push_back(Bound{cg.path, *cg.limit, cg.usage, reclaimableBytes(cg), cg.light});
    for (auto parent = parentCgroup(cg.path); parent; parent = parentCgroup(*parent)) {
      const CgroupMemory* a = limitOf(*parent);
      if (a != nullptr && a->limit)
        bounds[i].push_back(Bound{a->path, *a->limit, a->usage, reclaimableBytes(*a), a->light});
    }
  }

  // Each watched cgroup's processes by PSS, largest first, ties in pid order as read: one order of
  // every process (on the figures beside their indices), dealt out to the cgroups in that order.
  // Between two walks with every process in its place, the last order with those read again
  // moved to where they now belong; else one sort.
  std::vector<std::uint64_t> pss(snap->processes.size());
  for (std::size_t i = 0; i < pss.size(); ++i) pss[i] = pssOrRss(std::as_const(snap->processes)[i].sample);
  const auto larger = [&](std::size_t x, std::size_t y) { return pss[x] != pss[y] ? pss[x] > pss[y] : x < y; };
  std::vector<std::size_t> order;
  if (same_places && carry_from->by_size && carry_from->by_size->size() == pss.size()) {
    order = *carry_from->by_size;
    std::erase_if(order, [&](std::size_t i) { return fresh[i]; });
    for (std::size_t i = 0; i < fresh.size(); ++i) {
      if (fresh[i]) order.insert(std::lower_bound(order.begin(), order.end(), i, larger), i);
    }
  } else {
    order.resize(pss.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), larger);
  }
  std::vector<std::vector<std::size_t>> members(raw.cgroups.size());
  for (std::size_t i : order) {
    for (std::size_t ci : placed_at[i]->within) members[ci].push_back(i);
  }
  snap->by_size = std::make_shared<const std::vector<std::size_t>>(std::move(order));

  for (std::size_t ci = 0; ci < raw.cgroups.size(); ++ci) {
    CgroupMemory& cg = raw.cgroups[ci];
    CgroupSnapshot cs;
    std::vector<const ProcessSample*> subtree;
    cs.processes = std::move(members[ci]);
    subtree.reserve(cs.processes.size());
    for (std::size_t i : cs.processes) subtree.push_back(&std::as_const(snap->processes)[i].sample);
    cs.attribution = attributeCgroup(cg, subtree);

    cs.bounds = std::move(bounds[ci]);
    const Meminfo& mi = snap->host.meminfo;
    cs.bounds.push_back(Bound{"host", mi.mem_total, mi.mem_total - std::min(mi.mem_total, mi.mem_available), 0});
    cs.tightest = *std::min_element(cs.bounds.begin(), cs.bounds.end(),
                                    [](const Bound& x, const Bound& y) { return x.room() < y.room(); });
    if (auto named = raw.workloads.find(cg.path); named != raw.workloads.end())
      cs.workload = std::move(named->second);
    else
      cs.workload.identity = identifyCgroup(cg.path);
    cs.memory = std::move(cg);
    snap->cgroups.push_back(std::move(cs));
  }

  // Overhead shares, against the cgroup each process is attributed to.
  for (std::size_t ci = 0; ci < snap->cgroups.size(); ++ci) {
    const CgroupSnapshot& cs = snap->cgroups[ci];
    Overhead overhead = overheadOf(cs.attribution);
    for (std::size_t i : cs.processes) {
      const ProcessSample& p = std::as_const(snap->processes)[i].sample;
      overhead.threads += p.status.threads;
      overhead.pss += pssOrRss(p);
    }
    for (std::size_t i : cs.processes) {
      if (!fresh[i] || std::as_const(snap->processes)[i].cgroup != watched[ci]) continue;
      ProcessSnapshot& ps = snap->processes[i];
      shareOverhead(ps.attribution, ps.sample, overhead);
    }
  }

  std::stable_sort(snap->cgroups.begin(), snap->cgroups.end(),
                   [](const CgroupSnapshot& x, const CgroupSnapshot& y) { return x.memory.usage > y.memory.usage; });
  return snap;
}

VictimPlace placeVictim(const OomVictim& v, const Snapshot* snap, const RoleMatcher& roles) {
  pid_t tgid = v.process();
  if (snap != nullptr) {
    // Labelled like its process series (the watched cgroup it is attributed to), so that
    // PromQL can join the two.
    if (const ProcessSnapshot* p = snap->findProcess(tgid); p != nullptr && p->sample.comm == v.comm)
      return {p->cgroup, p->role, p};
  }
  // Normalised like the snapshot's paths, so that its series join the cgroup's.
  return {v.cgroup.empty() ? std::string() : normaliseCgroupPath(v.cgroup), roles.match(tgid, 0, v.comm, "", v.cgroup),
          nullptr};
}

std::vector<pid_t> processesToSumExactly(const Snapshot& snap, const std::function<bool(const Bound&)>& near,
                                         std::size_t max) {
  std::vector<std::pair<int, const ProcessSnapshot*>> chosen;  // (0: prover, 1: near a bound)
  for (const ProcessSnapshot& p : snap.processes) {
    if (p.role == Role::kProver) chosen.emplace_back(0, &p);
  }
  for (const CgroupSnapshot& c : snap.cgroups) {
    if (std::none_of(c.bounds.begin(), c.bounds.end(), [&](const Bound& b) { return b.name != "host" && near(b); }))
      continue;
    for (std::size_t i : c.processes) {
      if (snap.processes[i].role != Role::kProver) chosen.emplace_back(1, &snap.processes[i]);
    }
  }
  std::stable_sort(chosen.begin(), chosen.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second->sample.status.vm_rss > b.second->sample.status.vm_rss;
  });
  std::vector<pid_t> out;
  std::unordered_set<pid_t> seen;  // a process is under each of its cgroup's ancestors too
  for (const auto& [group, p] : chosen) {
    if (out.size() == max) break;
    if (seen.insert(p->sample.pid).second) out.push_back(p->sample.pid);
  }
  return out;
}

}  // namespace headroom
