// The probe's parent side: the bounds read live, where the child allocates (a sub-cgroup of its
// own with a hard limit where the hierarchy allows), the stop before the nearest bound, the
// overhead split, the wait for reclaim. The child itself is probe_child.cpp.
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>
#include <utility>

#include "headroom/probe/probe.h"
#include "headroom/sources/parse.h"
#include "headroom/util/clock.h"
#include "headroom/util/units.h"

#include "probe_child.h"

namespace headroom {
namespace {

constexpr std::uint64_t kMiB = 1ULL << 20;

// ---- the parent: bounds, placement, overhead ------------------------------------------------

struct Target {
  std::string path;
  CgroupMemory first;
};

}  // namespace

namespace detail {

Result<ProbeReading> readProbeBounds(const FsRoot& fs, const CgroupHierarchy& h, const std::string& path) {
  ProbeReading r;
  r.time_ns = monotonicNs();
  auto self = h.read(path);
  if (!self) return self.error().wrap(fmt::format("reading cgroup {}", path));
  r.events_high = self->events.getOr("high");
  r.events_max = self->events.getOr("max");
  r.events_oom = self->events.getOr("oom");
  r.under_oom = self->under_oom;
  r.usage = self->usage;
  r.oom_kills = self->oom_kills.value_or(0);
  if (self->pressure) r.pressure_some_us = self->pressure->some.total_us;
  std::optional<std::string> p = path;
  while (p) {
    auto cg = *p == path ? Result<CgroupMemory>(*self) : h.read(*p);
    if (cg) {
      if (cg->limit) r.bounds.push_back(ProbeBound{*p, "limit", *cg->limit, cg->usage});
      if (cg->high && (!cg->limit || *cg->high < *cg->limit))
        r.bounds.push_back(ProbeBound{*p, "memory.high", *cg->high, cg->usage});
    }
    p = parentCgroup(*p);
  }
  auto mi = fs.readFile("/proc/meminfo");
  if (!mi) return mi.error();
  auto m = parseMeminfo(*mi);
  if (!m) return m.error().wrap("parsing /proc/meminfo");
  // The host as a bound: its room is MemAvailable.
  std::uint64_t used = m->mem_total > m->mem_available ? m->mem_total - m->mem_available : 0;
  r.bounds.push_back(ProbeBound{"host", "MemAvailable", m->mem_total, used});
  if (!r.pressure_some_us) {
    // v1 has no per-cgroup PSI: the host's.
    if (auto psi = fs.readFile("/proc/pressure/memory")) {
      if (auto parsed = parsePsi(*psi)) r.pressure_some_us = parsed->some.total_us;
    }
  }
  return r;
}

}  // namespace detail

namespace {

const ProbeBound* tightest(const ProbeReading& r) {
  const ProbeBound* best = nullptr;
  for (const ProbeBound& b : r.bounds) {
    std::uint64_t room = b.limit > b.usage_before ? b.limit - b.usage_before : 0;
    if (!best || room < (best->limit > best->usage_before ? best->limit - best->usage_before : 0)) best = &b;
  }
  return best;
}

// The probe's own sub-cgroup, removed when it goes.
class SubCgroup {
 public:
  static Result<SubCgroup> create(const CgroupHierarchy& h, const std::string& parent, const std::string& name) {
    auto dir = h.open(parent);
    if (!dir) return dir.error();
    if (::mkdirat(dir->fd(), name.c_str(), 0755) != 0)
      return errnoError(fmt::format("creating the probe's cgroup {}/{}", parent == "/" ? "" : parent, name));
    std::string path = (parent == "/" ? "" : parent) + "/" + name;
    auto sub = h.open(path);
    if (!sub) {
      ::unlinkat(dir->fd(), name.c_str(), AT_REMOVEDIR);
      return sub.error();
    }
    return SubCgroup(std::move(*dir), std::move(*sub), name, path, h.version());
  }
  SubCgroup(SubCgroup&& o) noexcept
      : parent_(std::move(o.parent_)),
        dir_(std::move(o.dir_)),
        name_(std::exchange(o.name_, std::string())),  // the moved-from one removes nothing
        path_(std::move(o.path_)),
        version_(o.version_) {}
  SubCgroup& operator=(SubCgroup&&) = delete;
  SubCgroup(const SubCgroup&) = delete;
  ~SubCgroup() {
    if (name_.empty()) return;
    // A memcg with charges still going offline says EBUSY for a moment.
    for (int i = 0; i < 100; ++i) {
      if (::unlinkat(parent_.fd(), name_.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT) return;
      ::usleep(20000);
    }
  }
  const std::string& path() const { return path_; }
  Status setLimit(std::uint64_t bytes) const {
    return dir_.writeFile(version_ == 1 ? "memory.limit_in_bytes" : "memory.max", std::to_string(bytes));
  }
  Status addProcess(pid_t pid) const { return dir_.writeFile("cgroup.procs", std::to_string(pid)); }
  // What is still charged to the probe's own cgroup.
  std::optional<std::uint64_t> usage() const {
    auto t = dir_.readFile(version_ == 1 ? "memory.usage_in_bytes" : "memory.current");
    if (!t) return std::nullopt;
    auto v = parseU64(trim(*t));
    return v ? std::optional<std::uint64_t>(*v) : std::nullopt;
  }

 private:
  SubCgroup(Dir parent, Dir dir, std::string name, std::string path, int version)
      : parent_(std::move(parent)),
        dir_(std::move(dir)),
        name_(std::move(name)),
        path_(std::move(path)),
        version_(version) {}
  Dir parent_, dir_;
  std::string name_, path_;
  int version_;
};

}  // namespace

// v2's "no internal processes" rule: a cgroup can give children the memory controller only
// through its cgroup.subtree_control.

bool detail::probeSubCgroupPossible(const CgroupHierarchy& h, const std::string& path) {
  if (h.version() == 1) return true;
  auto dir = h.open(path);
  if (!dir) return false;
  auto ctl = dir->readFile("cgroup.subtree_control");
  if (!ctl) return false;
  for (auto w : splitFields(*ctl)) {
    if (w == "memory") return true;
  }
  return false;
}

namespace {

// The kernel's own parts of a cgroup's charge (page tables, slab, stacks, ...), from its
// memory.stat (v2) or kmem counter (v1): charged at once, unlike per-process RSS, which lags on
// kernels before 6.2 by up to 64 faults a thread (a huge page each, with THP).
std::map<std::string, std::int64_t> kernelParts(const Snapshot& s, const std::string& path) {
  std::map<std::string, std::int64_t> out;
  if (const CgroupSnapshot* c = s.findCgroup(path)) {
    for (const Part& p : c->attribution.parts) {
      if (!isVisible(p.kind) && p.kind != PartKind::kShmemUnmapped)
        out[toString(p.kind)] = static_cast<std::int64_t>(p.bytes);
    }
  }
  return out;
}

}  // namespace

Result<ProbeResult> runProbe(const FsRoot& fs, const Collector& collector, const ProbeOptions& opts) {
  const CgroupHierarchy& h = collector.hierarchy();
  ProbeResult res;
  res.started_at = unixSeconds();
  auto t_start = monotonicNs();
  if (opts.chunk == 0) return badInput("--chunk 0: the chunk must be at least 4 MiB");
  std::string target = opts.cgroup.empty() ? std::string() : normaliseCgroupPath(opts.cgroup);
  if (target.empty()) {
    auto own = callersMemoryCgroup(fs, h);
    if (!own) return own.error().wrap("finding the caller's memory cgroup");
    target = *own;
  }
  if (auto d = h.open(target); !d)
    return badInput(fmt::format("--cgroup {}: not a cgroup of the v{} memory hierarchy at {} ({})", target, h.version(),
                                fs.display(h.mount().mount_point), d.error().describe()));
  res.cgroup = target;

  auto first = detail::readProbeBounds(fs, h, target);
  if (!first) return first.error();
  const ProbeBound* tight = tightest(*first);
  res.bound = *tight;
  res.cgroup_limit_bytes = tight->limit;
  res.usage_before_bytes = first->usage;
  res.oom_kills_before = first->oom_kills;
  std::uint64_t room0 = tight->limit > tight->usage_before ? tight->limit - tight->usage_before : 0;
  std::uint64_t margin = opts.stop_margin.value_or(defaultStopMargin(tight->limit));
  if (opts.stop_margin && *opts.stop_margin >= tight->limit)
    return badInput(fmt::format("--stop-margin {} is not smaller than the limit {} of {} ({})",
                                formatBytes(*opts.stop_margin), formatBytes(tight->limit), tight->name, tight->kind));
  res.stop_margin_bytes = margin;
  unsigned threads = opts.threads != 0 ? opts.threads : std::max(1u, std::thread::hardware_concurrency());
  res.threads = opts.touch == TouchMode::kMemset ? 1 : threads;
  res.touch = toString(opts.touch);

  CollectOptions co;
  co.cgroups = {target};
  co.read_smaps = false;

  // Where the child runs: a sub-cgroup with a hard limit just under the room, so that an
  // overshoot can only ever kill the probe; else the target itself, as the OOM killer's
  // first choice.
  std::optional<SubCgroup> sub;
  if (detail::probeSubCgroupPossible(h, target)) {
    auto s = SubCgroup::create(h, target, fmt::format("headroom-probe-{}", ::getpid()));
    if (!s) return s.error();
    sub.emplace(std::move(*s));
    std::uint64_t hard = room0 > margin / 2 ? room0 - margin / 2 : 0;
    hard = std::max<std::uint64_t>(hard, 8 * kMiB);
    if (auto st = sub->setLimit(hard); !st) return st.error().wrap("limiting the probe's cgroup");
    res.placement = fmt::format("sub-cgroup {} (hard limit {}), oom_score_adj 1000", sub->path(), formatBytes(hard));
  } else {
    res.placement = fmt::format("target cgroup {} (v2 leaf without memory delegation), oom_score_adj 1000", target);
  }

  auto child = detail::ProbeChild::start(opts.touch, threads);
  if (!child) return child.error();
  // The OOM killer's first choice in any domain, whatever else happens.
  if (auto st = fs.openDir(fmt::format("/proc/{}", child->pid())); st) (void)st->writeFile("oom_score_adj", "1000");
  if (sub) {
    if (auto st = sub->addProcess(child->pid()); !st) return st.error().wrap("moving the probe child into its cgroup");
  } else {
    // Placed, or no probe at all: a child left in the caller's cgroup would measure another one.
    auto dir = h.open(target);
    if (!dir) return dir.error().wrap(fmt::format("opening {} for the probe child", target));
    if (auto st = dir->writeFile("cgroup.procs", std::to_string(child->pid())); !st)
      return st.error().wrap(fmt::format("moving the probe child into {}", target));
  }

  // The baseline once the child is in place and warm: its own footprint (a forked process's
  // copied pages, its threads' stacks; a huge page for a few bytes with THP "always") is the
  // probe's, not overhead that the prover would pay.
  child->send("W");
  if (auto w = child->reply(std::chrono::minutes(1)); !w || w->rfind("WARM", 0) != 0)
    return ioError("the probe child did not answer its warm-up");
  if (auto warm = detail::readProbeBounds(fs, h, target)) {
    *first = std::move(*warm);
    res.bound = *tightest(*first);
    res.usage_before_bytes = first->usage;
  }
  auto before_raw = collector.collect(co);
  if (!before_raw) return before_raw.error();
  auto before = buildSnapshot(std::move(*before_raw), RoleMatcher());

  ProbeReading last = *first;
  std::uint64_t peak = res.usage_before_bytes;
  std::int64_t touch_ns = 0;
  bool populate_fell_back = false;
  std::shared_ptr<const Snapshot> at_peak;
  bool child_died = false;
  for (;;) {
    ProbeDecision d = decideProbeStep(*first, last, res.allocated_bytes, opts, margin);
    if (d.step != ProbeStep::kContinue) {
      res.stop_reason = d.reason;
      res.aborted = d.step == ProbeStep::kAbortPressure;
      break;
    }
    child->send(fmt::format("A {}", d.next_chunk));
    auto reply = child->reply(std::chrono::minutes(5));
    if (!reply) {
      child_died = true;
      res.stop_reason =
          "the probe child died while touching a chunk (its own cgroup's hard limit: only the probe was killed)";
      break;
    }
    if (reply->rfind("ERR", 0) == 0) {
      int e = std::atoi(reply->c_str() + 4);
      res.stop_reason =
          fmt::format("the kernel refused the next chunk of {}: {}", formatBytes(d.next_chunk), std::strerror(e));
      break;
    }
    auto words = splitFields(*reply);
    if (words.size() >= 4) {
      touch_ns += std::strtoll(std::string(words[2]).c_str(), nullptr, 10);
      populate_fell_back = populate_fell_back || words[3] == "0";
    }
    res.allocated_bytes += d.next_chunk;
    ++res.probe_chunks;
    auto now = detail::readProbeBounds(fs, h, target);
    if (!now) return now.error();
    last = std::move(*now);
    if (last.usage >= peak) {
      peak = last.usage;
      // Who grew, at the peak (before anything is released).
      if (auto raw = collector.collect(co)) at_peak = buildSnapshot(std::move(*raw), RoleMatcher());
    }
  }
  res.usage_peak_bytes = peak;
  if (const ProbeBound* t = tightest(last)) {
    std::uint64_t room = t->limit > t->usage_before ? t->limit - t->usage_before : 0;
    res.allocatable_bytes = res.allocated_bytes + room;
  }
  res.touch_seconds = static_cast<double>(touch_ns) / 1e9;
  res.bytes_per_second = touch_ns > 0 ? static_cast<double>(res.allocated_bytes) / res.touch_seconds : 0;
  if (populate_fell_back) res.touch = "threads (populate unsupported by this kernel)";

  // Release, then wait (bounded) for the charge to come back.
  if (!child_died) {
    child->send("R");
    (void)child->reply(std::chrono::minutes(1));
  }
  (void)child->finish();
  auto t_release = monotonicNs();
  // Back near the start: the probe's own charge gone. With a sub-cgroup that is exact (its
  // usage); without, the target's usage back to where it would be without the probe (a
  // neighbour that grew meanwhile keeps what it took).
  const std::uint64_t tolerance = std::max<std::uint64_t>(8 * kMiB, res.usage_before_bytes / 100);
  const std::uint64_t without_probe =
      std::max(res.usage_before_bytes,
               res.usage_peak_bytes > res.allocated_bytes ? res.usage_peak_bytes - res.allocated_bytes : 0);
  auto deadline = std::chrono::steady_clock::now() + opts.reclaim_timeout;
  for (;;) {
    auto cg = h.read(target);
    if (cg) res.usage_after_bytes = cg->usage;
    bool back = false;
    if (sub) {
      auto left = sub->usage();
      back = left && *left <= tolerance / 2;
    } else {
      back = cg && cg->usage <= without_probe + tolerance;
    }
    if (back) {
      res.reclaimed = true;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    ::usleep(20000);
  }
  res.reclaim_seconds = static_cast<double>(monotonicNs() - t_release) / 1e9;
  sub.reset();
  if (auto cg = h.read(target)) res.oom_kills_after = cg->oom_kills.value_or(0);

  // The overhead, split honestly: the others' growth, then the kernel's part by component.
  res.overhead_bytes = static_cast<std::int64_t>(res.usage_peak_bytes) -
                       static_cast<std::int64_t>(res.usage_before_bytes) -
                       static_cast<std::int64_t>(res.allocated_bytes);
  // The kernel's part is its parts' growth; the rest of the overhead is what the others (and
  // their page cache and tmpfs files) took meanwhile. Without a snapshot at the peak, all of it
  // is called overhead of the kernel: nothing says otherwise.
  res.kernel_overhead_bytes = res.overhead_bytes;
  if (at_peak) {
    res.kernel_overhead_bytes = 0;
    auto a = kernelParts(*before, target);
    for (const auto& [kind, bytes] : kernelParts(*at_peak, target)) {
      std::int64_t delta = bytes - (a.count(kind) ? a[kind] : 0);
      res.kernel_overhead_bytes += delta;
      if (delta != 0) res.kernel_overhead_parts.emplace_back(kind, delta);
    }
  }
  res.others_growth_bytes = res.overhead_bytes - res.kernel_overhead_bytes;
  res.duration_seconds = static_cast<double>(monotonicNs() - t_start) / 1e9;
  return res;
}

}  // namespace headroom
