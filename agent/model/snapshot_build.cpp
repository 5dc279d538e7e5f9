// buildSnapshot: one collection made into a snapshot, from scratch at a walk, or between two walks
// from the last snapshot with the processes read again put in.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "headroom/model/snapshot.h"

namespace headroom {
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

Overhead overheadOf(const CgroupSnapshot& cs) {
  Overhead o;
  o.stacks = cs.attribution.bytesOf(PartKind::kKernelStack).value_or(0);
  for (const Part& part : cs.attribution.parts) {
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
  o.threads = cs.totals.threads;
  o.pss = cs.totals.size;
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

constexpr std::size_t kNowhere = static_cast<std::size_t>(-1);

// Where a process belongs: attributed to the deepest watched cgroup that holds it, counted in the
// subtree of every watched cgroup that holds it. Worked out once per cgroup the processes are in
// (a few), not once per process.
struct Placement {
  SharedString deepest;               // the watched cgroup's path, shared by its processes' snapshots
  std::size_t deepest_at = kNowhere;  // its index in the sample's cgroups
  std::vector<std::size_t> within;    // indices into the sample's cgroups
};

class Placements {
 public:
  // `watched`: each of `cgroups`' paths, as the processes attributed to it are to hold it.
  Placements(const std::vector<CgroupMemory>& cgroups, std::vector<SharedString> watched)
      : cgroups_(cgroups), watched_(std::move(watched)) {}

  const SharedString& watched(std::size_t ci) const { return watched_[ci]; }

  const Placement& of(const SharedString& memory_cgroup) {
    // The processes of a cgroup mostly come in a row, naming it with the same shared path: the
    // last placement is tried first.
    if (last_ != nullptr && last_path_ == memory_cgroup) return *last_;
    last_path_ = memory_cgroup;
    auto it = placements_.find(memory_cgroup);
    if (it != placements_.end()) return *(last_ = &it->second);
    Placement pl;
    for (std::size_t ci = 0; ci < cgroups_.size(); ++ci) {
      const std::string& w = cgroups_[ci].path;
      if (!cgroupIsWithin(memory_cgroup, w)) continue;
      pl.within.push_back(ci);
      if (pl.deepest_at == kNowhere || w.size() >= pl.deepest.size()) {
        pl.deepest = watched_[ci];
        pl.deepest_at = ci;
      }
    }
    // Node-based: a placement stays where it is as others are added.
    return *(last_ = &placements_.emplace(memory_cgroup, std::move(pl)).first->second);
  }

 private:
  const std::vector<CgroupMemory>& cgroups_;
  std::vector<SharedString> watched_;
  std::unordered_map<std::string, Placement> placements_;
  SharedString last_path_;
  const Placement* last_ = nullptr;
};

std::uint32_t cgroupColumn(const Placement& placed) {
  return placed.deepest_at == kNowhere ? Snapshot::ProcessColumns::kNoCgroup
                                       : static_cast<std::uint32_t>(placed.deepest_at);
}

// A process read this sample, with its role, visible figures and the sensors' overlay.
void fillProcess(ProcessSnapshot* ps, ProcessSample&& sample, const RoleMatcher& roles, pid_t self_pid,
                 const SensorReadings& sensors) {
  ps->sample = std::move(sample);
  const ProcessSample& p = ps->sample;
  ps->role = roles.matchSampled(p.pid, self_pid, p.comm, p.cmdline, p.memory_cgroup);
  ps->attribution = visibleOf(p);
  if (auto it = sensors.activity.find(p.pid); it != sensors.activity.end())
    ps->activity = std::make_shared<const ProcessActivity>(it->second);
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
    ps->attribution.pinned = std::make_shared<const PinnedOverlay>(std::move(pin));
    ps->attribution.device_bytes = g.device_live;
    ps->attribution.device_peak_bytes = g.device_peak;
  }
}

std::shared_ptr<ProcessSnapshot> makeProcess(ProcessSample&& sample, const RoleMatcher& roles, pid_t self_pid,
                                             const SensorReadings& sensors) {
  auto ps = std::make_shared<ProcessSnapshot>();
  fillProcess(ps.get(), std::move(sample), roles, self_pid, sensors);
  return ps;
}

// The processes of one snapshot as its cgroups take them: each cgroup's members by size and
// their totals, and the processes made from this sample's readings (whose overhead shares are
// to be worked out; the others keep their walk's).
struct Membership {
  std::vector<std::vector<std::size_t>> members;  // by the sample's cgroups
  std::vector<ProcessTotals> totals;
  // The processes made from this sample's readings, written through these until the snapshot is
  // published, and the cgroup each is attributed to.
  std::vector<std::pair<ProcessSnapshot*, std::size_t>> fresh;
};

// `order` (indices, largest first by `sizes`, ties by index) with `moved` (sorted) taken out
// and each of `put_back` inserted where it now belongs.
void reorder(std::vector<std::size_t>& order, const std::vector<std::size_t>& moved,
             const std::vector<std::size_t>& put_back, const std::vector<std::uint64_t>& sizes) {
  const auto larger = [&](std::size_t x, std::size_t y) { return sizes[x] != sizes[y] ? sizes[x] > sizes[y] : x < y; };
  std::erase_if(order, [&](std::size_t i) { return std::binary_search(moved.begin(), moved.end(), i); });
  for (std::size_t i : put_back) order.insert(std::lower_bound(order.begin(), order.end(), i, larger), i);
}

// Between two walks, with every process where the last snapshot had it (none gone, none come)
// and the same cgroups watched: the last snapshot's list, order and totals, the processes read
// again replaced in them. False (nothing done) where that does not hold.
bool carryInPlace(Snapshot& snap, RawSample& raw, const Snapshot& last, const RoleMatcher& roles,
                  const SensorReadings& sensors, std::shared_ptr<Snapshot::ProcessColumns>& columns,
                  std::vector<SharedString>& watched, Membership& m) {
  const Snapshot::ProcessColumns* had = last.columns.get();
  if (had == nullptr || !had->pid_order || !last.by_size || had->pids.size() != last.processes.size() ||
      last.by_size->size() != last.processes.size() || last.cgroups.size() != raw.cgroups.size())
    return false;
  std::unordered_map<std::string_view, const CgroupSnapshot*> last_cgroups;
  for (const CgroupSnapshot& c : last.cgroups) last_cgroups.emplace(c.memory.path, &c);
  std::vector<const CgroupSnapshot*> was;
  for (const CgroupMemory& cg : raw.cgroups) {
    auto it = last_cgroups.find(cg.path);
    if (it == last_cgroups.end() || it->second->name.empty()) return false;
    was.push_back(it->second);
  }
  const std::vector<pid_t>& pids = had->pids;
  auto indexOf = [&](pid_t pid) -> std::size_t {
    auto it = std::lower_bound(pids.begin(), pids.end(), pid);
    return it != pids.end() && *it == pid ? static_cast<std::size_t>(it - pids.begin()) : kNowhere;
  };
  // Each process read is one of the list's, read once; each of the list's asked for was read (not
  // gone).
  std::vector<std::size_t> at;
  at.reserve(raw.processes.size());
  std::unordered_set<pid_t> read;
  for (const ProcessSample& p : raw.processes) {
    at.push_back(indexOf(p.pid));
    if (at.back() == kNowhere || !read.insert(p.pid).second) return false;
  }
  for (pid_t pid : raw.refreshed) {
    if (!read.contains(pid) && indexOf(pid) != kNowhere) return false;
  }

  for (std::size_t ci = 0; ci < was.size(); ++ci) watched.push_back(was[ci]->name);
  Placements places(raw.cgroups, watched);
  snap.processes = last.processes;  // a pointer a chunk
  columns = std::make_shared<Snapshot::ProcessColumns>(*had);
  // Its cgroup column by the sample's cgroups (the last snapshot's were in its own order).
  std::vector<std::uint32_t> to_sample(last.cgroups.size());
  for (std::size_t ci = 0; ci < was.size(); ++ci)
    to_sample[static_cast<std::size_t>(was[ci] - last.cgroups.data())] = static_cast<std::uint32_t>(ci);
  for (std::uint32_t& c : columns->cgroup) {
    if (c != Snapshot::ProcessColumns::kNoCgroup) c = to_sample[c];
  }
  m.totals.resize(raw.cgroups.size());
  for (std::size_t ci = 0; ci < was.size(); ++ci) m.totals[ci] = was[ci]->totals;
  std::vector<bool> touched(raw.cgroups.size(), false);
  std::vector<std::pair<std::size_t, const Placement*>> made;  // (index, where it is now)
  for (std::size_t j = 0; j < raw.processes.size(); ++j) {
    const std::size_t i = at[j];
    const ProcessSnapshot& before = last.processes[i];
    for (std::size_t ci : places.of(before.sample.memory_cgroup).within) {
      m.totals[ci].remove(before.sample);
      touched[ci] = true;
    }
    std::shared_ptr<ProcessSnapshot> now = makeProcess(std::move(raw.processes[j]), roles, raw.self_pid, sensors);
    const Placement& placed = places.of(now->sample.memory_cgroup);
    now->cgroup = placed.deepest;
    for (std::size_t ci : placed.within) {
      m.totals[ci].add(now->sample);
      touched[ci] = true;
    }
    columns->sizes[i] = pssOrRss(now->sample);
    columns->rss[i] = now->attribution.rss;
    columns->roles[i] = now->role;
    columns->cgroup[i] = cgroupColumn(placed);
    if (placed.deepest_at != kNowhere) m.fresh.emplace_back(now.get(), placed.deepest_at);
    made.emplace_back(i, &placed);
    snap.processes.set_shared(i, std::move(now));
  }
  std::vector<std::size_t> moved;
  moved.reserve(made.size());
  for (const auto& [i, placed] : made) moved.push_back(i);
  std::sort(moved.begin(), moved.end());
  auto order = std::make_shared<std::vector<std::size_t>>(*last.by_size);
  reorder(*order, moved, moved, columns->sizes);
  snap.by_size = std::move(order);
  m.members.resize(raw.cgroups.size());
  for (std::size_t ci = 0; ci < was.size(); ++ci) {
    m.members[ci] = was[ci]->processes;
    if (!touched[ci]) continue;
    std::vector<std::size_t> in_it;
    for (const auto& [i, placed] : made) {
      if (std::find(placed->within.begin(), placed->within.end(), ci) != placed->within.end()) in_it.push_back(i);
    }
    reorder(m.members[ci], moved, in_it, columns->sizes);
  }
  return true;
}

// The rest: every process placed and summed. A walk's are all made from the sample; between two
// walks the last snapshot's are carried (shared) but for those read again (replaced) or gone
// (dropped), and those read and new to it come after them.
void placeEvery(Snapshot& snap, RawSample& raw, const Snapshot* carry_from, const RoleMatcher& roles,
                const SensorReadings& sensors, std::shared_ptr<Snapshot::ProcessColumns>& columns,
                std::vector<SharedString>& watched, Membership& m) {
  // Between walks, a carried process attributed to the same cgroup as before keeps the path it
  // holds (shared, not copied): the last snapshot's cgroups hold the same strings.
  std::unordered_map<std::string_view, SharedString> known;
  if (carry_from != nullptr)
    for (const CgroupSnapshot& c : carry_from->cgroups) {
      if (!c.name.empty()) known.emplace(c.memory.path, c.name);
    }
  for (const CgroupMemory& cg : raw.cgroups) {
    auto it = known.find(cg.path);
    watched.push_back(it != known.end() ? it->second : SharedString(cg.path));
  }
  Placements places(raw.cgroups, watched);
  std::vector<ProcessSnapshot*> fresh;  // by index: made from this sample (written through this), or carried
  // Every carried process at the index it had (none gone, none added): the last order by size
  // holds but for the processes read again.
  bool same_places = false;
  if (carry_from != nullptr) {
    same_places = true;
    std::unordered_map<pid_t, std::size_t> read_now;
    for (std::size_t j = 0; j < raw.processes.size(); ++j) read_now.emplace(raw.processes[j].pid, j);
    const std::unordered_set<pid_t> asked(raw.refreshed.begin(), raw.refreshed.end());
    snap.processes.reserve(carry_from->processes.size());
    for (std::size_t i = 0; i < carry_from->processes.size(); ++i) {
      const pid_t pid = carry_from->processes[i].sample.pid;
      if (!asked.contains(pid)) {
        snap.processes.push_shared(carry_from->processes.shared(i));
        fresh.push_back(nullptr);
        continue;
      }
      auto it = read_now.find(pid);
      if (it == read_now.end()) {  // gone (or moved out of the watched cgroups)
        same_places = false;
        continue;
      }
      auto made = makeProcess(std::move(raw.processes[it->second]), roles, raw.self_pid, sensors);
      fresh.push_back(made.get());
      snap.processes.push_shared(std::move(made));
      read_now.erase(it);
    }
    // Read and not in the last walk's list (started since, in a cgroup read again whole): after
    // the carried ones, in pid order.
    for (ProcessSample& p : raw.processes) {
      if (!read_now.contains(p.pid)) continue;
      auto made = makeProcess(std::move(p), roles, raw.self_pid, sensors);
      fresh.push_back(made.get());
      snap.processes.push_shared(std::move(made));
      same_places = false;
    }
  } else {
    // A walk's processes made in blocks of a chunk's worth, one allocation a block (not one a
    // process, nor a reference count each): each process shared through its block, which goes
    // when the last of them does.
    const std::size_t n = raw.processes.size();
    snap.processes.reserve(n);
    fresh.reserve(n);
    for (std::size_t at = 0; at < n; at += ProcessList::kChunk) {
      auto block = std::make_shared<std::vector<ProcessSnapshot>>(std::min(ProcessList::kChunk, n - at));
      for (std::size_t k = 0; k < block->size(); ++k) {
        ProcessSnapshot* ps = &(*block)[k];
        fillProcess(ps, std::move(raw.processes[at + k]), roles, raw.self_pid, sensors);
        fresh.push_back(ps);
        snap.processes.push_shared(std::shared_ptr<const ProcessSnapshot>(block, ps));
      }
    }
  }

  const std::size_t n = snap.processes.size();
  columns = std::make_shared<Snapshot::ProcessColumns>();
  columns->pids.reserve(n);
  columns->sizes.reserve(n);
  columns->rss.reserve(n);
  columns->roles.reserve(n);
  columns->cgroup.reserve(n);
  m.totals.resize(raw.cgroups.size());
  std::vector<const Placement*> placed_at;  // each process's, by index
  placed_at.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const ProcessSnapshot& p = std::as_const(snap.processes)[i];
    const Placement& placed = places.of(p.sample.memory_cgroup);
    placed_at.push_back(&placed);
    // A carried process is copied only when the cgroup it is attributed to changed.
    if (p.cgroup != placed.deepest) (fresh[i] != nullptr ? *fresh[i] : snap.processes[i]).cgroup = placed.deepest;
    for (std::size_t ci : placed.within) m.totals[ci].add(p.sample);
    if (fresh[i] != nullptr && placed.deepest_at != kNowhere) m.fresh.emplace_back(fresh[i], placed.deepest_at);
    columns->pids.push_back(p.sample.pid);
    columns->sizes.push_back(pssOrRss(p.sample));
    columns->rss.push_back(p.attribution.rss);
    columns->roles.push_back(p.role);
    columns->cgroup.push_back(cgroupColumn(placed));
  }
  columns->pid_order = std::is_sorted(columns->pids.begin(), columns->pids.end());

  // Each watched cgroup's processes by size, largest first, ties in pid order as read: one order
  // of every process, dealt out to the cgroups in that order. Between two walks with every
  // process in its place, the last order with those read again moved to where they now belong;
  // else one sort.
  const std::vector<std::uint64_t>& sizes = columns->sizes;
  std::vector<std::size_t> order;
  if (same_places && carry_from->by_size && carry_from->by_size->size() == n) {
    order = *carry_from->by_size;
    std::vector<std::size_t> moved;
    for (std::size_t i = 0; i < n; ++i) {
      if (fresh[i] != nullptr) moved.push_back(i);
    }
    reorder(order, moved, moved, sizes);
  } else {
    order.resize(n);
    for (std::size_t i = 0; i < n; ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](std::size_t x, std::size_t y) { return sizes[x] != sizes[y] ? sizes[x] > sizes[y] : x < y; });
  }
  m.members.resize(raw.cgroups.size());
  for (std::size_t i : order) {
    for (std::size_t ci : placed_at[i]->within) m.members[ci].push_back(i);
  }
  snap.by_size = std::make_shared<const std::vector<std::size_t>>(std::move(order));
}

// The cgroups of the snapshot, each with its processes and their totals, its bounds and its
// split; then the overhead shares of the processes made from this sample.
void addCgroups(Snapshot& snap, RawSample& raw, const std::vector<SharedString>& watched, Membership& m,
                Snapshot::ProcessColumns& columns) {
  // Every cgroup read, watched or ancestor, by path: each watched cgroup asks for each of its
  // ancestors.
  std::unordered_map<std::string_view, const CgroupMemory*> by_path;
  for (const auto& [path, cg] : raw.ancestors) by_path.emplace(path, &cg);
  for (const auto& cg : raw.cgroups) by_path.insert_or_assign(cg.path, &cg);  // a watched one first
  // Every cgroup's bounds before any is moved into the snapshot: a watched cgroup is also the
  // ancestor that bounds the watched cgroups below it.
  std::vector<std::vector<Bound>> bounds(raw.cgroups.size());
  for (std::size_t i = 0; i < raw.cgroups.size(); ++i) {
    const CgroupMemory& cg = raw.cgroups[i];
    if (cg.limit) bounds[i].push_back(Bound{cg.path, *cg.limit, cg.usage, reclaimableBytes(cg), cg.light});
    for (auto parent = parentCgroup(cg.path); parent; parent = parentCgroup(*parent)) {
      auto it = by_path.find(*parent);
      const CgroupMemory* a = it == by_path.end() ? nullptr : it->second;
      if (a != nullptr && a->limit)
        bounds[i].push_back(Bound{a->path, *a->limit, a->usage, reclaimableBytes(*a), a->light});
    }
  }

  std::vector<Overhead> overhead(raw.cgroups.size());
  std::vector<CgroupSnapshot> made(raw.cgroups.size());
  for (std::size_t ci = 0; ci < raw.cgroups.size(); ++ci) {
    CgroupMemory& cg = raw.cgroups[ci];
    CgroupSnapshot& cs = made[ci];
    cs.processes = std::move(m.members[ci]);
    cs.totals = m.totals[ci];
    cs.name = watched[ci];
    cs.attribution = attributeCgroup(cg, cs.totals);
    cs.bounds = std::move(bounds[ci]);
    const Meminfo& mi = snap.host.meminfo;
    cs.bounds.push_back(Bound{"host", mi.mem_total, mi.mem_total - std::min(mi.mem_total, mi.mem_available), 0});
    cs.tightest = *std::min_element(cs.bounds.begin(), cs.bounds.end(),
                                    [](const Bound& x, const Bound& y) { return x.room() < y.room(); });
    if (auto named = raw.workloads.find(cg.path); named != raw.workloads.end())
      cs.workload = std::move(named->second);
    else
      cs.workload.identity = identifyCgroup(cg.path);
    cs.memory = std::move(cg);
    overhead[ci] = overheadOf(cs);
  }

  // Overhead shares, against the cgroup each process is attributed to.
  for (const auto& [ps, ci] : m.fresh) shareOverhead(ps->attribution, ps->sample, overhead[ci]);

  // By usage, largest first; the cgroup column follows them.
  std::vector<std::size_t> by_usage(made.size());
  for (std::size_t ci = 0; ci < made.size(); ++ci) by_usage[ci] = ci;
  std::stable_sort(by_usage.begin(), by_usage.end(),
                   [&](std::size_t x, std::size_t y) { return made[x].memory.usage > made[y].memory.usage; });
  std::vector<std::uint32_t> placed_at(made.size());
  snap.cgroups.reserve(made.size());
  for (std::size_t ci : by_usage) {
    placed_at[ci] = static_cast<std::uint32_t>(snap.cgroups.size());
    snap.cgroups.push_back(std::move(made[ci]));
  }
  for (std::uint32_t& c : columns.cgroup) {
    if (c != Snapshot::ProcessColumns::kNoCgroup) c = placed_at[c];
  }
  columns.cgroup_count = snap.cgroups.size();
}

}  // namespace

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
  snap->gpu = std::move(raw.gpu);
  snap->stats = std::move(raw.stats);
  snap->sensors = std::move(sensors.status);

  const Snapshot* last = snap->stats.processes_carried ? carry_from : nullptr;
  if (last != nullptr) carryWalkFigures(snap->stats, last->stats);
  std::shared_ptr<Snapshot::ProcessColumns> columns;
  std::vector<SharedString> watched;
  Membership m;
  if (last == nullptr || !carryInPlace(*snap, raw, *last, roles, sensors, columns, watched, m)) {
    watched.clear();
    m = Membership{};
    placeEvery(*snap, raw, last, roles, sensors, columns, watched, m);
  }
  addCgroups(*snap, raw, watched, m, *columns);
  snap->columns = std::move(columns);
  return snap;
}

}  // namespace headroom
