#include "headroom/sources/process_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

namespace headroom {
namespace {

bool isGone(const Error& e) { return e.kind == ErrorKind::kNotFound; }

ProcessRead failed(const Error& e) {
  ProcessRead out;
  out.outcome = isGone(e) ? ReadOutcome::kVanished : ReadOutcome::kFailed;
  out.error = e;
  return out;
}

ProcessRead outcome(ReadOutcome o) {
  ProcessRead out;
  out.outcome = o;
  return out;
}

// A file of /proc/<pid>, read through the held directory; an empty file of a process that is
// exiting reads as vanished.
Result<std::string> readNonEmpty(const Dir& dir, std::string_view name, ProcFileReads& reads) {
  ++reads.files;
  auto text = dir.readFile(name);
  if (!text) return text.error();
  if (text->empty()) return notFound(fmt::format("{}/{} is empty", dir.path(), name));
  return text;
}

// smaps_rollup into the cache entry. An error only when the process went away or the file is
// garbage; unreadable (permissions, kernels before 4.14) marks the entry and is not an error.
std::optional<Error> readSmaps(const Dir& dir, CachedProcess& e, std::uint64_t rss, std::int64_t now_ns,
                               ProcFileReads& reads) {
  ++reads.files;
  ++reads.smaps;
  auto text = dir.readFile("smaps_rollup");
  if (!text) {
    if (isGone(text.error()) && !dir.exists("stat")) return text.error();
    e.smaps_unreadable = true;
    e.smaps.reset();
    return std::nullopt;
  }
  if (text->empty()) return notFound(fmt::format("{}/smaps_rollup is empty", dir.path()));
  auto sm = parseSmapsRollup(*text);
  if (!sm) return sm.error().wrap(fmt::format("parsing {}/smaps_rollup", dir.path()));
  e.smaps = *sm;
  e.smaps_read_ns = now_ns;
  e.smaps_read_rss = rss;
  return std::nullopt;
}

Result<ProcStat> readStat(const Dir& dir, ProcFileReads& reads) {
  auto text = readNonEmpty(dir, "stat", reads);
  if (!text) return text.error();
  auto st = parseProcStat(*text);
  if (!st) return st.error().wrap(fmt::format("parsing {}/stat", dir.path()));
  return st;
}

Result<ProcCgroups> readCgroups(const Dir& dir, ProcFileReads& reads) {
  ++reads.cgroup;
  auto text = readNonEmpty(dir, "cgroup", reads);
  if (!text) return text.error();
  auto cg = parseProcCgroup(*text);
  if (!cg) return cg.error().wrap(fmt::format("parsing {}/cgroup", dir.path()));
  return cg;
}

// The command line is read again only when the comm changed (an exec).
std::optional<Error> refreshCmdline(const Dir& dir, CachedProcess& e, const std::string& comm, ProcFileReads& reads) {
  if (e.cmdline_read && e.comm == comm) return std::nullopt;
  ++reads.cmdline;
  ++reads.files;
  auto cmdline = dir.readFile("cmdline");
  if (!cmdline) return cmdline.error();
  e.cmdline = parseCmdline(*cmdline);
  e.comm = comm;
  e.cmdline_read = true;
  return std::nullopt;
}

// The sample, with what the cache holds: the command line, PSS (when asked for) and the cgroups.
ProcessRead sampled(ProcessSample s, const CachedProcess& e, bool with_smaps) {
  ProcessRead out;
  out.outcome = ReadOutcome::kOk;
  out.sample = std::move(s);
  out.sample.cmdline = e.cmdline;
  if (with_smaps && e.smaps) {
    out.sample.smaps = e.smaps;
    out.sample.smaps_read_ns = e.smaps_read_ns;
  }
  out.pss_pending = with_smaps && !e.smaps && !e.smaps_unreadable;
  if (e.cgroups) out.cached_cgroups = &*e.cgroups;
  return out;
}

}  // namespace

CachedProcess& ProcessCache::entry(pid_t pid, std::uint64_t start_time_ticks) {
  auto [it, fresh] = by_pid_.try_emplace(pid);
  CachedProcess& e = it->second;
  if (!fresh && e.start_time_ticks != start_time_ticks) e = CachedProcess{};
  e.start_time_ticks = start_time_ticks;
  e.seen = sample_;
  return e;
}

CachedProcess* ProcessCache::find(pid_t pid) {
  auto it = by_pid_.find(pid);
  return it == by_pid_.end() ? nullptr : &it->second;
}

void ProcessCache::forget() {
  std::erase_if(by_pid_, [&](const auto& kv) { return kv.second.seen != sample_; });
  // Ids of cgroups no process is in any more (a removed cgroup's id is never reused).
  if (by_cgroup_id_.size() > 2 * by_pid_.size() + 64) {
    std::unordered_map<std::uint64_t, std::shared_ptr<const ProcCgroups>> live;
    for (const auto& [pid, e] : by_pid_) {
      auto it = by_cgroup_id_.find(e.cgroup_id);
      if (it != by_cgroup_id_.end()) live.insert(*it);
    }
    by_cgroup_id_ = std::move(live);
  }
}

std::shared_ptr<const ProcCgroups> ProcessCache::cgroupsOf(std::uint64_t id) const {
  if (id == 0) return nullptr;
  auto it = by_cgroup_id_.find(id);
  return it == by_cgroup_id_.end() ? nullptr : it->second;
}

void ProcessCache::rememberCgroups(std::uint64_t id, std::shared_ptr<const ProcCgroups> cg) {
  if (id != 0) by_cgroup_id_[id] = std::move(cg);
}

void ProcessCache::beginSample(std::int64_t now_ns) {
  ++sample_;
  if (pss_refilled_ns_ != 0 && now_ns > pss_refilled_ns_) {
    const double seconds = static_cast<double>(now_ns - pss_refilled_ns_) / 1e9;
    pss_tokens_ = std::min(kPssBurst, pss_tokens_ + seconds * static_cast<double>(pss_.reads_per_second));
  }
  pss_refilled_ns_ = now_ns;
}

bool ProcessCache::pssDue(const CachedProcess& e, std::uint64_t rss, std::int64_t now_ns) {
  if (e.smaps_unreadable) return false;
  if (e.smaps) {
    const std::uint64_t moved = rss > e.smaps_read_rss ? rss - e.smaps_read_rss : e.smaps_read_rss - rss;
    if (moved >= pss_.step) return true;
    if (now_ns - e.smaps_read_ns < pss_.max_age.count()) return false;
  }
  if (rss >= kPssAlwaysBytes) return true;
  if (pss_tokens_ < 1) {
    ++pss_deferred_;
    return false;
  }
  pss_tokens_ -= 1;
  return true;
}

ProcessRead readProcessCached(const FsRoot& fs, pid_t pid, ProcessCache& cache, bool with_smaps, std::int64_t now_ns,
                              const std::function<bool(const ProcCgroups&)>& want, ProcFileReads& reads) {
  auto dir = fs.openDir(fmt::format("/proc/{}", pid));
  if (!dir) return failed(dir.error());

  // A kernel thread seen before: its stat alone says it is still the same one.
  if (CachedProcess* known = cache.find(pid); known && known->kernel_thread) {
    auto text = readNonEmpty(*dir, "stat", reads);
    if (!text) return failed(text.error());
    auto st = parseProcStat(*text);
    if (st && st->start_time_ticks == known->start_time_ticks) {
      cache.entry(pid, st->start_time_ticks);  // seen in this sample
      return outcome(ReadOutcome::kKernelThread);
    }
  }

  // The cgroup first, as readProcess(): a process can be moved at any time.
  auto cg = readCgroups(*dir, reads);
  if (!cg) return failed(cg.error());
  if (want && !want(*cg)) return outcome(ReadOutcome::kSkipped);

  auto st = readStat(*dir, reads);
  if (!st) return failed(st.error());
  CachedProcess& e = cache.entry(pid, st->start_time_ticks);
  e.cgroups = std::make_shared<const ProcCgroups>(std::move(*cg));

  // status (uid, the RSS split, page tables, locked and pinned) only when the size, the resident
  // pages or the thread count moved (stat has all three), or at the PSS period.
  bool status_due = !e.status || e.status_vsize != st->vsize_bytes || e.status_rss_pages != st->rss_pages ||
                    e.status_threads != st->threads || now_ns - e.status_read_ns >= cache.pss().max_age.count();
  if (status_due) {
    auto status_text = readNonEmpty(*dir, "status", reads);
    ++reads.status;
    if (!status_text) return failed(status_text.error());
    auto status = parseProcStatus(*status_text);
    if (!status) return failed(status.error().wrap(fmt::format("parsing {}/status", dir->path())));
    e.status = *status;
    e.status_vsize = st->vsize_bytes;
    e.status_rss_pages = st->rss_pages;
    e.status_threads = st->threads;
    e.status_read_ns = now_ns;
  }
  e.kernel_thread = e.status->kernel_thread;
  if (e.kernel_thread) return outcome(ReadOutcome::kKernelThread);

  if (auto err = refreshCmdline(*dir, e, st->comm, reads)) return failed(*err);
  if (with_smaps && cache.pssDue(e, e.status->vm_rss, now_ns)) {
    if (auto err = readSmaps(*dir, e, e.status->vm_rss, now_ns, reads)) return failed(*err);
  }
  return sampled(procfsSample(pid, *st, *e.status), e, with_smaps);
}

ProcessRead completeKernelProcess(const FsRoot& fs, const KernelProcess& k, ProcessCache& cache, bool with_smaps,
                                  std::int64_t now_ns, const std::function<bool(const ProcCgroups&)>& want,
                                  ProcFileReads& reads) {
  if (k.kernel_thread) return outcome(ReadOutcome::kKernelThread);
  CachedProcess& e = cache.entry(k.pid, k.start_time_ticks);

  // /proc/<pid> only when something is due; then its stat tells whether the pid still names the
  // process the kernel source saw (pid reuse between the two reads).
  std::optional<Dir> dir;
  auto openDir = [&]() -> std::optional<Error> {
    if (dir) return std::nullopt;
    auto d = fs.openDir(fmt::format("/proc/{}", k.pid));
    if (!d) return d.error();
    dir.emplace(std::move(*d));
    return std::nullopt;
  };

  if (!e.cgroups || e.cgroup_id != k.cgroup_id || k.cgroup_id == 0) {
    if (auto known = cache.cgroupsOf(k.cgroup_id)) {
      e.cgroups = std::move(known);
    } else {
      if (auto err = openDir()) return failed(*err);
      auto cg = readCgroups(*dir, reads);
      if (!cg) return failed(cg.error());
      e.cgroups = std::make_shared<const ProcCgroups>(std::move(*cg));
      cache.rememberCgroups(k.cgroup_id, e.cgroups);
    }
    e.cgroup_id = k.cgroup_id;
  }
  if (want && !want(*e.cgroups)) return outcome(ReadOutcome::kSkipped);

  if (!e.cmdline_read || e.comm != k.comm) {
    if (auto err = openDir()) return failed(*err);
    if (auto err = refreshCmdline(*dir, e, k.comm, reads)) return failed(*err);
  }
  if (with_smaps && cache.pssDue(e, k.status.vm_rss, now_ns)) {
    if (auto err = openDir()) return failed(*err);
    if (auto err = readSmaps(*dir, e, k.status.vm_rss, now_ns, reads)) return failed(*err);
  }
  if (dir) {
    auto st = readStat(*dir, reads);
    if (!st) return failed(st.error());
    if (st->start_time_ticks != k.start_time_ticks)
      return failed(notFound(fmt::format("pid {} was reused while it was read", k.pid)));
  }
  ProcessSample s;
  s.pid = k.pid;
  s.start_time_ticks = k.start_time_ticks;
  s.ppid = k.ppid;
  s.uid = k.uid;
  s.comm = k.comm;
  s.status = k.status;
  s.oom_score_adj = k.oom_score_adj;
  s.minflt = k.minflt;
  s.majflt = k.majflt;
  return sampled(std::move(s), e, with_smaps);
}

}  // namespace headroom
