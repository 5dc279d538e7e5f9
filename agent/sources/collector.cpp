#include "headroom/sources/collector.h"

#include "headroom/util/clock.h"

#include <time.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <set>
#include <unordered_map>
#include <utility>

namespace headroom {
namespace {

// How often a hierarchy whose cgroup namespace root was not located walks again.
constexpr std::chrono::seconds kNsRetryInterval{60};

}  // namespace

Result<Collector> Collector::create(const FsRoot& fs) {
  auto mounts = discoverCgroupMounts(fs);
  if (!mounts) return mounts.error();
  const CgroupMount* mm = mounts->memoryMount();
  if (mm == nullptr) {
    return notFound(fmt::format("no memory cgroup controller found in {} (mode {}{})",
                                fs.display("/proc/self/mountinfo"), toString(mounts->mode()),
                                mounts->v2 ? ", and the v2 root does not list memory" : ""));
  }
  CgroupHierarchy h = CgroupHierarchy::create(fs, mounts->memoryVersion(), *mm);
  return Collector(fs, std::move(*mounts), std::move(h));
}

Result<RawSample> Collector::collect(const CollectOptions& opts) const {
  const ThreadCpu cpu_start = threadCpu();
  RawSample raw;
  raw.wall_time_ns = realtimeNs();
  raw.monotonic_time_ns = monotonicNs();
  raw.mounts = mounts_;
  raw.memory_version = hierarchy_.version();
  raw.self_pid = selfPid(*fs_);
  raw.focus_pid = opts.pid;
  CollectStats& stats = raw.stats;

  auto meminfo_text = fs_->readFile("/proc/meminfo");
  if (!meminfo_text) return meminfo_text.error();
  auto meminfo = parseMeminfo(*meminfo_text);
  if (!meminfo) return meminfo.error().wrap(fmt::format("parsing {}", fs_->display("/proc/meminfo")));
  raw.meminfo = std::move(*meminfo);

  if (auto psi_text = fs_->readFile("/proc/pressure/memory")) {
    auto psi = parsePsi(*psi_text);
    if (psi)
      raw.host_pressure = *psi;
    else
      stats.warnings.push_back(
          psi.error().wrap(fmt::format("parsing {}", fs_->display("/proc/pressure/memory"))).describe());
  }

  const int version = hierarchy_.version();
  hierarchy_.retryLocate(kNsRetryInterval);
  if (auto w = hierarchy_.nsWarning()) stats.warnings.push_back(*w);
  // One mapping for the whole tick, even if a retry elsewhere changes it meanwhile.
  const CgroupNsMap ns = hierarchy_.nsMap();
  auto outsideMount = [&] {
    return fmt::format("outside what the v{} hierarchy mounted at {} shows ({})", version,
                       fs_->display(hierarchy_.mount().mount_point), hierarchy_.nsDescription());
  };

  // The scope: cgroup subtrees, or everything.
  std::vector<std::string> scopes;
  for (const std::string& c : opts.cgroups) {
    std::string scope = normaliseCgroupPath(c);
    auto dir = hierarchy_.open(scope);
    if (!dir && opts.missing_cgroups_ok) {
      stats.cgroups_missing.push_back(scope);
      continue;
    }
    if (!dir) {
      return makeError(dir.error().kind,
                       fmt::format("cgroup {} not found in the v{} memory hierarchy at {}: {}", scope, version,
                                   fs_->display(hierarchy_.mount().mount_point), dir.error().describe()));
    }
    scopes.push_back(std::move(scope));
  }
  if (opts.pid) {
    ProcessRead focus = readProcess(*fs_, *opts.pid, false);
    if (focus.outcome == ReadOutcome::kKernelThread)
      return badInput(fmt::format("pid {} is a kernel thread: it has no user memory", *opts.pid));
    if (focus.outcome != ReadOutcome::kOk)
      return makeError(focus.outcome == ReadOutcome::kVanished ? ErrorKind::kNotFound : focus.error.kind,
                       fmt::format("pid {}: {}", *opts.pid, focus.error.describe()));
    auto own = focus.cgroups().memoryPath(version);
    if (!own) return notFound(fmt::format("pid {} is in no v{} memory cgroup", *opts.pid, version));
    auto p = mapNsPath(ns, *own);
    if (!p) return notFound(fmt::format("pid {} is in cgroup {}, {}", *opts.pid, *own, outsideMount()));
    // --pid and --cgroup together: the pid's cgroup must lie inside a given one.
    if (!scopes.empty() &&
        std::none_of(scopes.begin(), scopes.end(), [&](const std::string& s) { return cgroupIsWithin(*p, s); }))
      return badInput(fmt::format("pid {} is in cgroup {}, outside --cgroup {}", *opts.pid, *p, scopes.front()));
    scopes = {*p};
  }

  // Every watched cgroup missing: nothing is in scope (not everything).
  if (scopes.empty() && !opts.cgroups.empty()) {
    raw.completed_monotonic_ns = monotonicNs();
    return raw;
  }
  std::set<std::string> watched(scopes.begin(), scopes.end());
  const std::set<std::string> scopes_set(scopes.begin(), scopes.end());
  // Each memory cgroup a process names, placed once a sample: its path under the mount (or
  // nothing: another namespace's), and whether it is in scope. Most processes share a few.
  struct Placement {
    std::optional<SharedString> path;  // shared by the samples of its processes
    bool in_scope = false;
  };
  std::unordered_map<std::string, Placement> placed;
  const std::pair<const std::string, Placement>* last = nullptr;  // a cgroup's processes mostly come in a row
  auto placeOf = [&](const std::string& own) -> const Placement& {
    if (last != nullptr && last->first == own) return last->second;
    auto it = placed.find(own);
    if (it != placed.end()) return (last = &*it)->second;
    Placement pl;
    if (auto path = mapNsPath(ns, own)) pl.path = SharedString(std::move(*path));
    pl.in_scope = pl.path && (scopes.empty() || std::any_of(scopes.begin(), scopes.end(), [&](const std::string& s) {
                                return cgroupIsWithin(*pl.path, s);
                              }));
    return (last = &*placed.emplace(own, std::move(pl)).first)->second;
  };
  auto ownOf = [version](const ProcCgroups& cg) -> const std::optional<std::string>& {
    return version == 1 ? cg.v1_memory : cg.v2;
  };
  // A std::function once, not one built (and allocated) for each process read.
  const std::function<bool(const ProcCgroups&)> inScope = [&](const ProcCgroups& cg) {
    if (scopes.empty()) return true;
    const auto& own = ownOf(cg);
    return own && placeOf(*own).in_scope;
  };
  std::pair<pid_t, std::string> first_outside;
  // One process's read, whatever the source: counted by outcome, placed in its memory cgroup.
  auto take = [&](pid_t pid, ProcessRead&& r) {
    switch (r.outcome) {
      case ReadOutcome::kOk: break;
      case ReadOutcome::kVanished: ++stats.processes_vanished; return;
      case ReadOutcome::kKernelThread: ++stats.kernel_threads; return;
      case ReadOutcome::kSkipped: return;
      case ReadOutcome::kFailed:
        ++stats.processes_failed;
        stats.warnings.push_back(r.error.describe());
        return;
    }
    const auto& own = ownOf(r.cgroups());
    if (!own) {
      ++stats.processes_failed;
      stats.warnings.push_back(fmt::format("pid {} is in no v{} memory cgroup", pid, version));
      return;
    }
    const Placement& pl = placeOf(*own);
    if (!pl.path) {
      // Another cgroup namespace's, beyond the mount: counted, and said once a tick below.
      if (stats.processes_outside_mount++ == 0) first_outside = {pid, *own};
      return;
    }
    r.sample.memory_cgroup = *pl.path;
    r.sample.cgroups.reset();  // placed: the raw lines are not kept (each kept sample would hold them)
    if (r.pss_pending)
      ++stats.processes_pss_pending;
    else if (opts.read_smaps && !r.sample.smaps)
      ++stats.processes_without_pss;
    raw.processes.push_back(std::move(r.sample));
    ++stats.processes_read;
  };
  auto full = [&]() -> bool {
    ++stats.processes_seen;
    if (raw.processes.size() < opts.max_processes) return false;
    ++stats.processes_skipped;
    return true;
  };

  const std::int64_t now = monotonicNs();
  const ThreadCpu cpu_processes = threadCpu();
  bool listed = false;
  bool walk = opts.walk;
  std::vector<pid_t> refresh;
  if (!walk) {
    refresh = opts.refresh;
    for (const std::string& c : opts.refresh_cgroups) {
      auto dir = hierarchy_.open(normaliseCgroupPath(c));
      auto text = dir ? dir->readFile("cgroup.procs") : Result<std::string>(dir.error());
      if (!text) continue;  // gone since the walk: its processes with it
      for (pid_t pid : cgroupProcsPids(*text)) refresh.push_back(pid);
    }
    std::sort(refresh.begin(), refresh.end());
    refresh.erase(std::unique(refresh.begin(), refresh.end()), refresh.end());
    walk = refresh.size() > opts.refresh_at_most;  // reading them would cost more than a walk
  }
  if (opts.cache) {
    opts.cache->beginSample(now);
    if (walk) raw.processes.reserve(opts.cache->size() + opts.cache->size() / 8 + 16);
  }
  if (!walk) {
    // Between two walks: the processes asked for, from /proc (a few: the cost of a walk is
    // what this saves), the cache kept whole for the next walk.
    listed = true;
    stats.processes_carried = true;
    raw.refreshed = refresh;
    for (pid_t pid : refresh) {
      const std::size_t before = raw.processes.size();
      take(pid, opts.cache ? readProcessCached(*fs_, pid, *opts.cache, opts.read_smaps, now, inScope, stats.proc_reads)
                           : readProcess(*fs_, pid, opts.read_smaps, inScope));
      stats.processes_refreshed += raw.processes.size() - before;
    }
    for (const std::string& c : opts.carried_cgroups) watched.insert(c);
  }
  if (walk && opts.cache && opts.source) {
    opts.source->sumExactly(opts.exact);
    auto tasks = opts.source->read();
    if (tasks) {
      listed = true;
      stats.process_source = opts.source->name();
      // Some kernels' task iterator never visits the first task of the namespace (pid 1 here,
      // on 6.18): it is read from /proc when the kernel has it, first, so that the processes
      // stay in pid order.
      const bool saw_init =
          std::any_of(tasks->begin(), tasks->end(), [](const KernelProcess& k) { return k.pid == 1; });
      if (!saw_init && fs_->exists("/proc/1/stat") && !full())
        take(1, readProcessCached(*fs_, 1, *opts.cache, opts.read_smaps, now, inScope, stats.proc_reads));
      for (const KernelProcess& k : *tasks) {
        if (full()) continue;
        take(k.pid, completeKernelProcess(*fs_, k, *opts.cache, opts.read_smaps, now, inScope, stats.proc_reads));
      }
    } else {
      stats.warnings.push_back(
          tasks.error()
              .wrap(fmt::format("reading every process through the {}; /proc instead", opts.source->name()))
              .describe());
    }
  }
  if (!listed) {
    auto pids = listPids(*fs_);
    if (!pids) return pids.error();
    for (pid_t pid : *pids) {
      if (full()) continue;
      take(pid, opts.cache ? readProcessCached(*fs_, pid, *opts.cache, opts.read_smaps, now, inScope, stats.proc_reads)
                           : readProcess(*fs_, pid, opts.read_smaps, inScope));
    }
  }
  if (opts.cache && walk) opts.cache->forget();
  if (walk) stats.processes_walked_ns = now;
  for (const auto& [own, pl] : placed) {
    if (pl.path && pl.in_scope) watched.insert(*pl.path);
  }
  const ThreadCpu cpu_cgroups = threadCpu();
  stats.processes_cpu = cpu_cgroups - cpu_processes;

  if (stats.processes_outside_mount > 0) {
    stats.warnings.push_back(fmt::format(
        "{} process(es) in cgroups {}, not read (first: pid {} in {}); mount the host's cgroup tree (/sys/fs/cgroup) "
        "to see them",
        stats.processes_outside_mount, outsideMount(), first_outside.first, first_outside.second));
  }

  // Between two walks the cgroups far from every bound (not among those read again) are read
  // lightly: their usage, limit and OOM counters; their breakdown is the last whole read's.
  std::set<std::string> whole;
  if (!walk)
    for (const std::string& c : opts.refresh_cgroups) whole.insert(normaliseCgroupPath(c));
  auto readCgroup = [&](const std::string& path, bool light = false) {
    return opts.cgroup_files != nullptr ? opts.cgroup_files->read(hierarchy_, path, light) : hierarchy_.read(path);
  };
  for (const std::string& path : watched) {
    auto cg = readCgroup(path, !walk && !whole.contains(path));
    if (!cg) {
      // A cgroup of the last walk's processes removed since (all of them gone) is not an error.
      const bool carried_gone =
          cg.error().kind == ErrorKind::kNotFound && !scopes_set.contains(path) &&
          std::find(opts.carried_cgroups.begin(), opts.carried_cgroups.end(), path) != opts.carried_cgroups.end();
      if (!carried_gone) stats.warnings.push_back(cg.error().wrap(fmt::format("cgroup {}", path)).describe());
      continue;
    }
    raw.cgroups.push_back(std::move(*cg));
  }
  // Every ancestor bounds its descendants; read each once.
  for (const CgroupMemory& cg : raw.cgroups) {
    for (auto parent = parentCgroup(cg.path); parent; parent = parentCgroup(*parent)) {
      if (raw.ancestors.count(*parent) != 0 || watched.count(*parent) != 0) continue;
      auto a = readCgroup(*parent);
      if (!a) {
        // The v2 root has no memory.current/memory.max: it bounds nothing but the host.
        if (!(version == 2 && *parent == "/"))
          stats.warnings.push_back(a.error().wrap(fmt::format("ancestor cgroup {}", *parent)).describe());
        continue;
      }
      raw.ancestors.emplace(*parent, std::move(*a));
    }
  }
  if (opts.cgroup_files != nullptr) opts.cgroup_files->sweep();
  raw.completed_monotonic_ns = monotonicNs();
  stats.cgroups_cpu = (threadCpu() - cpu_cgroups) + (cpu_processes - cpu_start);
  return raw;
}

Result<SourceRoot> openSourceRoot(const std::string& root) {
  auto fs = FsRoot::open(root);
  if (!fs) return fs.error().wrap("--root").as(ErrorKind::kBadInput);
  SourceRoot r;
  r.fs = std::make_unique<FsRoot>(std::move(*fs));
  auto collector = Collector::create(*r.fs);  // holds r.fs: a unique_ptr keeps its address
  if (!collector) return collector.error().as(ErrorKind::kBadInput);
  r.collector = std::make_unique<Collector>(std::move(*collector));
  return r;
}

}  // namespace headroom
