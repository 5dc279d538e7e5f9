// The sensors' facade: start (the state of every sensor, BPF through the loader, /dev/kmsg), the
// consumer of the rings and the kernel log (records decoded, OOM incidents joined), and the
// state registry.
#include "headroom/sensors/sensors.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <csignal>
#include <cstddef>
#include <span>
#include <utility>

#include "headroom/sensors/ring_decode.h"
#include "headroom/sources/procfs.h"
#include "headroom/util/clock.h"
#include "sensors_impl.h"

namespace headroom {
namespace {

// A consumer that never takes exits must not grow the queue without limit.
constexpr std::size_t kMaxQueuedExits = 65536;
// How long a SIGKILL'd exit waits for the OOM killer's mark that may follow it (the kill is sent
// first; the mark's program can run after the victim's exit on a busy machine).
constexpr std::int64_t kLateMarkWaitNs = 250'000'000;
constexpr std::size_t kRecentMarks = 256;
// Incidents begun and not yet taken (takeStartedOoms), kept at most.
constexpr std::size_t kMaxStarted = 256;
// Ancestors read at a kill: deeper than any real hierarchy, and bounded.
constexpr int kMaxReadAtKillDepth = 16;

}  // namespace

SensorStatus& Sensors::Impl::status(SensorId id) {
  for (auto& s : statuses) {
    if (s.id == id) return s;
  }
  statuses.push_back(SensorStatus{id, SensorState::kOff, ""});
  return statuses.back();
}

void Sensors::Impl::set(SensorId id, SensorState st, std::string reason) {
  SensorStatus& s = status(id);
  const char* name = toString(id);
  s.state = st;
  s.reason = std::move(reason);
  if (st == SensorState::kDegraded)
    spdlog::warn("sensor {} degraded: {}", name, s.reason);
  else
    spdlog::info("sensor {} {}: {}", name, toString(st), s.reason);
}

std::string Sensors::Impl::tracepoint(SensorId sensor, const std::string& dflt) const {
  auto it = cfg.tracepoints.find(sensor);
  return it == cfg.tracepoints.end() ? dflt : it->second;
}

std::string Sensors::Impl::cgroupPath(std::uint64_t id) {
  if (cgroups) return cgroups->pathOf(id);
  return id == 0 ? "" : fmt::format("cgroup-id:{}", id);
}

std::vector<CgroupMemory> Sensors::Impl::readAtKill(const std::string& cgroup) const {
  std::vector<CgroupMemory> out;
  if (!hierarchy || cgroup.empty() || cgroup.rfind("cgroup-id:", 0) == 0) return out;
  std::optional<std::string> path = normaliseCgroupPath(cgroup);
  for (int depth = 0; path && depth < kMaxReadAtKillDepth; ++depth, path = parentCgroup(*path)) {
    // The victim's own cgroup whatever it holds; above it, those whose limit could be the domain's.
    auto m = hierarchy->read(*path);
    if (m && (depth == 0 || m->limit)) out.push_back(std::move(*m));
  }
  return out;
}

void Sensors::Impl::onOomRecord(const void* data, std::size_t size) {
  ++events;
  auto record = decodeOomRecord(std::span(static_cast<const std::byte*>(data), size));
  std::int64_t now = monotonicNs();
  if (auto* d = std::get_if<DecodedOomMark>(&record)) {
    OomMark& m = d->mark;
    last_mark_latency_ns = now - m.ts_ns;
    m.trigger_cgroup = cgroupPath(d->trigger_cgroup_id);
    if (d->victim_is_task) {
      m.victim.cgroup = cgroupPath(d->victim_cgroup_id);
    } else {
      // Only a thread id: the process is dying but usually still readable.
      auto r = readProcess(*fs, m.victim.pid, false);
      if (r.outcome == ReadOutcome::kOk) {
        m.victim.tgid = r.sample.status.tgid;
        m.victim.comm = r.sample.comm;
      }
    }
    // At once, before an orchestrator removes the cgroup that held the victim.
    m.read_at_kill_ns = monotonicNs();
    m.read_at_kill = readAtKill(!m.victim.cgroup.empty() ? m.victim.cgroup : m.trigger_cgroup);
    lateMark(m.victim.process());
    recent_marks.push_back(m.victim.process());
    if (recent_marks.size() > kRecentMarks) recent_marks.pop_front();
    joiner.addMark(m, now);
  } else if (auto* reap = std::get_if<DecodedReap>(&record)) {
    joiner.addReap(reap->pid, reap->finished, reap->ts_ns);
  }
}

void Sensors::Impl::onExitRecord(const void* data, std::size_t size) {
  ++events;
  auto d = decodeExitRecord(std::span(static_cast<const std::byte*>(data), size));
  if (!d) return;
  d->exit.cgroup = cgroupPath(d->cgroup_id);
  answered_faults.erase(d->exit.pid);
  holdOrQueue(std::move(d->exit), monotonicNs());
}

void Sensors::Impl::holdOrQueue(ExitEvent e, std::int64_t now_ns) {
  const bool sigkill = e.kind == ExitKind::kSignaled && e.signal == SIGKILL;
  if (sigkill && std::find(recent_marks.begin(), recent_marks.end(), e.pid) != recent_marks.end()) {
    held_exits.push_back(HeldExit{std::move(e), now_ns});
    lateMark(held_exits.back().exit.pid);
    return;
  }
  if (sigkill && held_exits.size() < kMaxQueuedExits) {
    held_exits.push_back(HeldExit{std::move(e), now_ns + kLateMarkWaitNs});
    return;
  }
  exits.push_back(std::move(e));
  if (exits.size() > kMaxQueuedExits) exits.erase(exits.begin(), exits.begin() + kMaxQueuedExits / 2);
}

void Sensors::Impl::lateMark(pid_t tgid) {
  for (auto it = held_exits.begin(); it != held_exits.end(); ++it) {
    if (it->exit.pid != tgid) continue;
    ExitEvent e = classifyExit(it->exit.pid, it->exit.wait_status, true, it->exit.shares_oom_mm);
    e.parent_pid = it->exit.parent_pid;
    e.comm = std::move(it->exit.comm);
    e.cgroup = std::move(it->exit.cgroup);
    e.monotonic_time_ns = it->exit.monotonic_time_ns;
    e.note = "marked by the OOM killer just after its SIGKILL (the kernel sends the kill first)";
    held_exits.erase(it);
    exits.push_back(std::move(e));
    return;
  }
}

void Sensors::Impl::releaseHeld(std::int64_t now_ns, bool all) {
  for (auto it = held_exits.begin(); it != held_exits.end();) {
    if (all || it->until_ns <= now_ns) {
      exits.push_back(std::move(it->exit));
      it = held_exits.erase(it);
    } else {
      ++it;
    }
  }
  if (exits.size() > kMaxQueuedExits) exits.erase(exits.begin(), exits.begin() + kMaxQueuedExits / 2);
}

void Sensors::Impl::startKmsg() {
  if (!cfg.kmsg) {
    set(SensorId::kKmsg, SensorState::kOff, "switched off in the configuration");
    return;
  }
  auto r = KmsgReader::open(*fs, cfg.kmsg_from_start);
  if (!r) {
    set(SensorId::kKmsg, SensorState::kDegraded, r.error().describe());
    return;
  }
  kmsg.emplace(std::move(*r));
  set(SensorId::kKmsg, SensorState::kActive,
      fs->display("/dev/kmsg") + (cfg.kmsg_from_start ? " (read from the start of its ring)" : ""));
}

void Sensors::Impl::readRingAtStart() {
  // What the ring holds now: the reports of kills the agent did not see, each as the kernel
  // printed it. (BPF's mark of a kill during this start, whose report is read here, comes as a
  // live incident of its own: the journal knows it by its victim and time, and keeps one.) A
  // report still being written when the read ends is finished by the live reads.
  OomJoiner found(OomJoiner::Options{.expect_bpf = false, .expect_kmsg = true, .settle_ns = 0, .max_wait_ns = 0});
  const std::int64_t now = monotonicNs(), wall = realtimeNs();
  for (const auto& rec : kmsg->readAvailable()) {
    for (const LogLine& line : logLines(rec)) {
      for (auto& report : kmsg_parser.feed(line))
        found.addReport(report, static_cast<std::int64_t>(report.ts_us) * 1000, now);
    }
  }
  log_start = kmsg->firstSeq();
  std::uint64_t n = 0;
  for (OomEvent& e : found.takeReady(now, wall)) {
    // The live joiner numbers its incidents from 1: these take ids from the far end, which it
    // never reaches.
    e.id = (std::uint64_t{1} << 62) + ++n;
    e.found_after = "kernel_log";
    e.wall_time_ns = wall - (now - e.monotonic_time_ns);  // the kernel log's clock is CLOCK_MONOTONIC
    found_at_start.push_back(std::move(e));
  }
}

void Sensors::Impl::onReport(const KernelOomReport& report, std::int64_t now) {
  // Without BPF's mark the report is the first word of the kill: the files are read now.
  std::vector<CgroupMemory> read;
  std::int64_t read_ns = 0;
  if (status(SensorId::kOom).state != SensorState::kActive && hierarchy) {
    read_ns = monotonicNs();
    std::string where = report.task_memcg ? *report.task_memcg : report.oom_memcg.value_or("");
    if (auto rel = hierarchy->toMountRelative(where)) read = readAtKill(*rel);
  }
  // The kernel log's clock is the monotonic clock in microseconds.
  joiner.addReport(report, static_cast<std::int64_t>(report.ts_us) * 1000, now, std::move(read), read_ns);
}

void Sensors::Impl::startTasks() {
  if (!cfg.bpf) return;  // said with the other BPF sensors
  if (!cfg.tasks) {
    set(SensorId::kTasks, SensorState::kOff, "switched off in the configuration: every process read from /proc");
    return;
  }
  if (!hierarchy) {
    set(SensorId::kTasks, SensorState::kDegraded, "no memory cgroup hierarchy: every process read from /proc");
    return;
  }
  // The sensors' per-process maps read in the same pass, when the sensors' object is loaded.
  int activity_fd = skel ? bpf_map__fd(skel->maps.proc_activity) : -1;
  int gpu_fd = skel ? bpf_map__fd(skel->maps.gpu_mem) : -1;
  auto it = TaskIterator::open(hierarchy->version(), activity_fd, gpu_fd);
  if (!it) {
    set(SensorId::kTasks, SensorState::kDegraded, it.error().describe() + "; every process read from /proc");
    return;
  }
  tasks = std::move(*it);
  set(SensorId::kTasks, SensorState::kActive,
      "iter/task: every process in one read; /proc for cmdline, new cgroups and PSS");
}

Sensors::Sensors(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Sensors::~Sensors() = default;

std::unique_ptr<Sensors> Sensors::start(const FsRoot& fs, const SensorsConfig& cfg, const CgroupMounts& mounts) {
  auto impl = std::make_unique<Impl>();
  impl->fs = &fs;
  impl->cfg = cfg;
  impl->mounts = mounts;
  if (const CgroupMount* m = mounts.memoryMount()) impl->hierarchy.emplace(fs, mounts.memoryVersion(), *m);
  if (impl->hierarchy) impl->cgroups.emplace(*impl->hierarchy);
  for (SensorId id : kAllSensors) impl->status(id);
  if (cfg.bpf) {
    impl->startBpf();
  } else {
    for (SensorId id : kAllSensors) {
      if (id != SensorId::kKmsg) impl->set(id, SensorState::kOff, "BPF switched off (--no-bpf)");
    }
  }
  impl->startKmsg();
  impl->startTasks();
  OomJoiner::Options jo;
  jo.expect_bpf = impl->status(SensorId::kOom).state == SensorState::kActive;
  jo.expect_kmsg = impl->status(SensorId::kKmsg).state == SensorState::kActive;
  impl->joiner = OomJoiner(jo);
  if (impl->kmsg && cfg.kmsg_from_start) impl->readRingAtStart();  // into the joiner just made
  if (impl->cgroups) impl->cgroups->rebuild();
  return std::unique_ptr<Sensors>(new Sensors(std::move(impl)));
}

const std::vector<SensorStatus>& Sensors::status() const { return impl_->statuses; }

ProcessSource* Sensors::processSource() const { return impl_->tasks.get(); }

Status Sensors::Impl::preparePollSet(int wake_fd, int watch_fd) {
  const std::array<int, 4> want{rings ? ring_buffer__epoll_fd(rings.get()) : -1, kmsg ? kmsg->fd() : -1, wake_fd,
                                watch_fd};
  if (poll_set.valid() && want == poll_fds) return ok();
  poll_fds = {-1, -1, -1, -1};
  poll_set = Fd(::epoll_create1(EPOLL_CLOEXEC));
  if (!poll_set.valid()) return errnoError("epoll_create1");
  for (int fd : want) {
    if (fd < 0) continue;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (::epoll_ctl(poll_set.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      Error e = errnoError(fmt::format("epoll_ctl(ADD, {})", fd));
      poll_set = Fd();
      return e;
    }
  }
  poll_fds = want;
  return ok();
}

void Sensors::poll(int timeout_ms, int wake_fd, int watch_fd) {
  Impl& m = *impl_;
  // An incident waiting for its other source or to settle is looked at again soon, whatever the
  // caller's timeout: nothing else would wake the wait for it.
  if (m.joiner.pending() > 0 || !m.held_exits.empty()) timeout_ms = timeout_ms < 0 ? 100 : std::min(timeout_ms, 100);
  // One wait on everything that brings work: a ring's record (an irq_work wakes the rings' epoll
  // at once; on a machine without self-IPI, at the next timer tick, which NO_HZ keeps running
  // while one is pending), a kernel log line, the caller's wakeup. No short slices: 100 wakeups
  // a second cost an idle agent 0.85 % of a core here and made no OOM record sooner (make
  // bench: 0.2 ms either way).
  if (auto st = m.preparePollSet(wake_fd, watch_fd); st) {
    std::array<epoll_event, 4> evs{};
    const int n = ::epoll_wait(m.poll_set.get(), evs.data(), static_cast<int>(evs.size()), timeout_ms);
    for (int i = 0; i < n; ++i) {
      if (evs[static_cast<std::size_t>(i)].data.fd == wake_fd) {
        std::uint64_t count = 0;
        while (::read(wake_fd, &count, sizeof count) == static_cast<ssize_t>(sizeof count)) {
        }
      }
    }
  } else if (timeout_ms > 0) {
    if (!std::exchange(m.poll_warned, true))
      spdlog::warn("waiting on the rings and the kernel log: {} (looked at every 100 ms instead)",
                   st.error().describe());
    ::usleep(static_cast<useconds_t>(std::min(timeout_ms, 100)) * 1000);
  }
  // Consumed whether or not the wait said so: should a wakeup ever be missed, the next wait's
  // end still reads it.
  if (m.rings) ring_buffer__consume(m.rings.get());
  std::int64_t now = monotonicNs();
  if (m.kmsg) {
    for (const auto& rec : m.kmsg->readAvailable()) {
      for (const LogLine& line : logLines(rec)) {
        for (auto& report : m.kmsg_parser.feed(line)) m.onReport(report, now);
      }
    }
  }
  // Begun before they are ready (an incident can be both in one poll): told in that order.
  for (auto& e : m.joiner.takeStarted()) m.started.push_back(std::move(e));
  // A user that never takes them (headroom run, top) keeps the newest few: bounded.
  if (m.started.size() > kMaxStarted)
    m.started.erase(m.started.begin(), m.started.end() - static_cast<std::ptrdiff_t>(kMaxStarted));
  for (auto& e : m.joiner.takeReady(now, realtimeNs())) m.ooms.push_back(std::move(e));
}

std::vector<OomEvent> Sensors::takeOomEvents() {
  Impl& m = *impl_;
  // The kills the start's read found come first, once.
  std::vector<OomEvent> out = std::exchange(m.found_at_start, {});
  for (OomEvent& e : m.ooms) out.push_back(std::move(e));
  m.ooms.clear();
  return out;
}

std::vector<OomEvent> Sensors::takeStartedOoms() { return std::exchange(impl_->started, {}); }

std::optional<KernelLogPosition> Sensors::kernelLog() const {
  const Impl& m = *impl_;
  if (!m.kmsg) return std::nullopt;
  KernelLogPosition p;
  p.from_start = m.cfg.kmsg_from_start;
  p.ring_start = m.log_start;
  p.settled = m.kmsg->nextSeq().value_or(m.log_start.value_or(0));
  // Not before what is still being read, nor what the agent was not given yet.
  if (auto open = m.kmsg_parser.openSince()) p.settled = std::min(p.settled, *open);
  if (auto untold = m.joiner.untoldSince()) p.settled = std::min(p.settled, *untold);
  for (const OomEvent& e : m.started) {
    if (e.kmsg_seq) p.settled = std::min(p.settled, *e.kmsg_seq);
  }
  return p;
}
std::vector<ExitEvent> Sensors::takeExitEvents() {
  impl_->releaseHeld(monotonicNs());
  return std::exchange(impl_->exits, {});
}

Status Sensors::trackCgroups(const std::vector<std::uint64_t>& ids) { return impl_->trackCgroupsNow(ids); }

}  // namespace headroom
