// `headroom run`: the attempt loop, and the watch over each attempt. See supervisor/supervisor.h.
#include "headroom/supervisor/supervisor.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <csignal>
#include <cstring>

#include "headroom/model/snapshot.h"
#include "headroom/probe/probe.h"
#include "headroom/sensors/sensors.h"
#include "headroom/sources/cgroup_index.h"
#include "headroom/sources/collector.h"
#include "headroom/sources/self_report.h"
#include "headroom/supervisor/prover_cgroup.h"
#include "headroom/supervisor/spawn.h"
#include "headroom/supervisor/verdict.h"
#include "headroom/util/clock.h"
#include "headroom/util/exit_codes.h"
#include "headroom/util/units.h"

extern char** environ;  // NOLINT: POSIX

namespace headroom {
namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_signal = 0;         // the last SIGINT/SIGTERM/SIGHUP received
volatile sig_atomic_t g_signals = 0;        // how many
volatile sig_atomic_t g_from_terminal = 0;  // the last one came from the terminal (the prover got it too)
volatile sig_atomic_t g_signals_seen = 0;   // g_signals when headroom run last looked: later ones stop it

extern "C" void onRunSignal(int sig, siginfo_t* info, void* /*ctx*/) {
  g_signal = sig;
  g_from_terminal = info != nullptr && info->si_code == SI_KERNEL ? 1 : 0;
  g_signals = g_signals + 1;
}

bool signalled() { return g_signals != g_signals_seen; }

const char* signalName(int sig) { return sigabbrev_np(sig) != nullptr ? sigabbrev_np(sig) : "?"; }

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string statusText(int st) {
  if (WIFEXITED(st)) return fmt::format("exited({})", WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return fmt::format("signal {} ({})", WTERMSIG(st), signalName(WTERMSIG(st)));
  return fmt::format("status {:#x}", st);
}

// What a shell would give for this wait status.
int exitCodeOf(int st) {
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return kExitFailure;
}

// How an attempt ended.
struct Outcome {
  int status = 0;
  double seconds = 0;
  bool stopped = false;     // headroom run was asked to stop (SIGINT/SIGTERM)
  Clock::time_point ended;  // when its exit was seen
  Verdict verdict;
  std::string warning;  // an OOM kill: whether it was warned of, in words
};

}  // namespace

void installRunSignalHandlers() {
  struct sigaction sa {};
  sa.sa_sigaction = onRunSignal;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

struct Supervisor::Impl {
  Impl(SupervisorConfig c, std::ostream& out, SourceRoot s, ProverCgroup cg)
      : cfg(std::move(c)), log(out), source(std::move(s)), cgroup(std::move(cg)) {}

  void say(const std::string& line) { log << "headroom run: " << line << "\n" << std::flush; }
  Status prepare();
  int run();
  Result<std::shared_ptr<const Snapshot>> sample(const std::set<pid_t>& tree);
  Result<pid_t> spawn(const BudgetDecision& d, unsigned attempt);
  Outcome supervise(pid_t child, const BudgetDecision& d, std::optional<std::uint64_t> oom_kills_before);
  // Events the sensors hold now, the prover's exits noted in its tree.
  void take(AttemptEvidence& ev, int wait_ms);
  bool waitForReclaim(std::uint64_t held_before, Clock::time_point since);
  std::optional<std::uint64_t> oomKills() const;
  std::uint64_t held() const;
  bool oomSourceActive() const;
  void saveState();

  // The time to OOM of the prover's cgroup, and the hook that tells the prover.
  void forecast(const Snapshot& snap, pid_t child);
  void hookOutcomes();

  SupervisorConfig cfg;
  std::ostream& log;
  SourceRoot source;
  ProverCgroup cgroup;  // before the sensors: removed after they are gone
  std::string state_path;
  std::unique_ptr<Sensors> sensors;
  std::optional<BudgetController> ctl;
  std::optional<ProbeFinding> probe;
  ChargedFigures last_tree;
  OomForecaster forecaster{forecastPolicyOf(cfg.warning)};
  WarningHook hook;
  HookRunner hooks;
  bool warned = false;  // a bound of the prover's cgroup is warned (the prover was told as it began)
};

Supervisor::Supervisor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Supervisor::~Supervisor() = default;

Result<std::unique_ptr<Supervisor>> Supervisor::create(SupervisorConfig cfg, std::ostream& log) {
  if (cfg.command.empty()) return usageError("no command: headroom run [options] -- CMD ARGS...");
  auto source = openSourceRoot(cfg.root);
  if (!source) return source.error();
  auto cgroup = ProverCgroup::open(*source->fs, source->collector->hierarchy(), cfg.cgroup);
  if (!cgroup) return cgroup.error();
  auto impl = std::make_unique<Impl>(std::move(cfg), log, std::move(*source), std::move(*cgroup));
  if (auto st = impl->prepare(); !st) return st.error();
  return std::unique_ptr<Supervisor>(new Supervisor(std::move(impl)));
}

int Supervisor::run() { return impl_->run(); }

void Supervisor::Impl::forecast(const Snapshot& snap, pid_t child) {
  const CgroupSnapshot* own = snap.findCgroup(cgroup.path());
  if (own == nullptr) return;
  for (const BoundReading& r : boundReadings(snap)) {
    if (std::any_of(own->bounds.begin(), own->bounds.end(), [&](const Bound& b) { return b.name == r.bound; }))
      forecaster.observe(r);
  }
  for (const WarningEpisode& w : forecaster.takeChanges()) {
    if (w.ended_ns) {
      say(fmt::format("the warning for {} is over ({})", w.bound, w.end_reason));
      continue;
    }
    const OomEta& e = w.at_start;
    say(fmt::format("warning: {} runs out of memory in ~{:.0f} s ({} held of {}, +{}/s, confidence {})", w.bound,
                    e.eta_seconds.value_or(0), formatBytes(e.held), formatBytes(e.limit),
                    formatBytes(static_cast<std::uint64_t>(std::max(0.0, e.growth_bytes_per_second))),
                    toString(e.confidence)));
  }
  // The prover is told once as a warning of any of its bounds begins, however many follow.
  const std::vector<const WarningEpisode*> active = forecaster.active();
  const bool begins = !active.empty() && !warned;
  warned = !active.empty();
  if (!begins || hook.kind == WarningHook::Kind::kNone) return;
  nlohmann::json situation = toJson(*active.front());
  situation["state"] = "started";
  situation["cgroup"] = cgroup.path();
  say(fmt::format("telling the prover (--on-warning {})", hook.text));
  hooks.fire(hook, situation, {child});
}

void Supervisor::Impl::hookOutcomes() {
  for (const HookRunner::Outcome& o : hooks.poll())
    say(fmt::format("{}--on-warning {}: {}", o.ok ? "" : "WARNING: ", o.hook, o.detail));
}

Status Supervisor::Impl::prepare() {
  hook = *parseWarningHook(cfg.warning.on_warning);  // checked with the flags
  if (cgroup.made())
    say(fmt::format("made memory cgroup {} (removed at the end); it has no limit of its own", cgroup.path()));
  if (cfg.keep_state) {
    state_path = cfg.state_file.empty() ? defaultStatePath(cgroup.path()) : cfg.state_file;
    auto st = loadState(state_path);
    if (!st)
      return badInput(
          fmt::format("{} (remove the file to start afresh, or run with --no-state)", st.error().describe()));
    ctl.emplace(cfg.policy, st->value_or(ControllerState{}));
    if (*st && (*st)->learned_margin > 0)
      say(fmt::format("learned margin {} from {} ({} OOM kill(s) so far)", formatBytes((*st)->learned_margin),
                      state_path, (*st)->oom_kills));
  } else {
    ctl.emplace(cfg.policy);
  }
  ctl->startRun();

  SensorsConfig sc;
  sc.bpf = cfg.bpf;
  sc.faults = sc.mmap = sc.rss = false;  // nothing on the prover's fault path: OOM, exits and pinned memory only
  if (!source.fs->isLive()) sc.bpf = sc.kmsg = false;
  if (auto id = CgroupIndex(source.collector->hierarchy()).idOf(cgroup.path())) sc.tracked_cgroups = std::vector{*id};
  sensors = Sensors::start(*source.fs, sc, source.collector->mounts());
  std::vector<std::string> sources;
  for (const SensorStatus& s : sensors->status()) {
    if (s.state != SensorState::kActive) continue;
    if (s.id == SensorId::kOom) sources.push_back("mark_victim (BPF)");
    if (s.id == SensorId::kKmsg) sources.push_back("/dev/kmsg");
    if (s.id == SensorId::kExits) sources.push_back("exit codes (BPF)");
  }
  sources.push_back(fmt::format("{}'s oom_kill counter", cgroup.path()));
  say(fmt::format("OOM evidence from: {}", fmt::join(sources, ", ")));
  return ok();
}

Result<std::shared_ptr<const Snapshot>> Supervisor::Impl::sample(const std::set<pid_t>& tree) {
  CollectOptions co;
  co.cgroups = {cgroup.path()};
  co.read_smaps = false;  // smaps_rollup walks every page of a large prover: too slow to do 4 times a second
  auto raw = source.collector->collect(co);
  if (!raw) return raw.error();
  SensorReadings readings = sensors->readings(raw->processes);
  auto snap = buildSnapshot(std::move(*raw), RoleMatcher{}, std::move(readings));
  ChargedFigures f;
  for (const ProcessSnapshot& p : snap->processes) {
    if (tree.count(p.sample.pid) != 0) f += chargedFigures(p);
  }
  if (f.processes > 0) last_tree = f;
  return snap;
}

// The cgroup's own OOM-kill counter (v2 memory.events oom_kill, v1 oom_control oom_kill).
std::optional<std::uint64_t> Supervisor::Impl::oomKills() const {
  auto cg = source.collector->hierarchy().read(cgroup.path());
  return cg ? cg->oom_kills : std::nullopt;
}

// What the cgroup holds that the kernel cannot drop at once.
std::uint64_t Supervisor::Impl::held() const {
  auto cg = source.collector->hierarchy().read(cgroup.path());
  if (!cg) return 0;
  std::uint64_t r = reclaimableBytes(*cg);
  return cg->usage > r ? cg->usage - r : 0;
}

bool Supervisor::Impl::oomSourceActive() const { return namesOomVictims(sensors->status()); }

Result<pid_t> Supervisor::Impl::spawn(const BudgetDecision& d, unsigned attempt) {
  SpawnSpec s;
  s.argv = cfg.command;
  for (const std::string& t : cfg.handover.args) s.argv.push_back(*formatBudget(t, d.budget));
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string_view::npos) s.env[std::string(kv.substr(0, eq))] = std::string(kv.substr(eq + 1));
  }
  s.env["HEADROOM_BUDGET_BYTES"] = std::to_string(d.budget);
  s.env["HEADROOM_MARGIN_BYTES"] = std::to_string(d.margin);
  s.env["HEADROOM_BUDGET_GENERATION"] = std::to_string(d.generation);
  s.env["HEADROOM_ATTEMPT"] = std::to_string(attempt);
  for (const auto& [name, tmpl] : cfg.handover.env) s.env[name] = *formatBudget(tmpl, d.budget);
  if (!cfg.handover.file.empty()) {
    if (auto st = writeFileAtomic(cfg.handover.file, *formatBudget(cfg.handover.file_format, d.budget) + "\n"); !st)
      return st.error().wrap("--budget-file");
  }
  if (cgroup.elsewhere()) s.procs_file = cgroup.procsFile();
  s.cgroup = cgroup.path();
  // What the sensors hold from before this attempt (a kill during --probe, a late report of
  // the last attempt's kill) is not this attempt's evidence.
  sensors->poll(0);
  (void)sensors->takeOomEvents();
  (void)sensors->takeExitEvents();
  return spawnProver(s);
}

void Supervisor::Impl::take(AttemptEvidence& ev, int wait_ms) {
  sensors->poll(wait_ms);
  for (OomEvent& e : sensors->takeOomEvents()) ev.ooms.push_back(std::move(e));
  for (ExitEvent& x : sensors->takeExitEvents()) {
    ev.tree.noteExit(x);
    if (x.pid == ev.child) ev.exit = x;
  }
}

Outcome Supervisor::Impl::supervise(pid_t child, const BudgetDecision& d,
                                    std::optional<std::uint64_t> oom_kills_before) {
  Outcome out;
  auto t0 = Clock::now();
  AttemptEvidence ev;
  ev.child = child;
  ev.cgroup = cgroup.path();
  ev.tree.members = {child};
  ev.oom_kills_before = oom_kills_before;
  ev.budget = d.budget;
  int seen_signals = g_signals_seen;
  auto next_sample = Clock::now();
  last_tree = {};
  std::optional<int> status;
  while (!status) {
    if (g_signals != seen_signals) {
      seen_signals = g_signals;
      g_signals_seen = seen_signals;
      out.stopped = true;
      // A terminal's signal reached the prover's process group already.
      if (!g_from_terminal) {
        say(fmt::format("{} received: passing it on to the prover (pid {})", signalName(g_signal), child));
        ::kill(child, g_signal);
      }
    }
    int st = 0;
    if (::waitpid(child, &st, WNOHANG) == child) {
      status = st;
      break;
    }
    if (Clock::now() >= next_sample) {
      if (auto snap = sample(ev.tree.members)) {
        // The prover's tree: its children and theirs, as far as the sample shows.
        std::set<pid_t>& m = ev.tree.members;
        std::size_t known = m.size();
        for (bool grew = true; grew;) {
          grew = false;
          for (const ProcessSnapshot& p : (*snap)->processes) {
            if (!m.count(p.sample.pid) && m.count(p.sample.status.ppid)) grew = m.insert(p.sample.pid).second;
          }
        }
        if (m.size() != known) (void)sample(m);  // figures for the processes found just now
        forecast(**snap, child);
      }
      next_sample += cfg.sample_interval;
      if (next_sample < Clock::now()) next_sample = Clock::now() + cfg.sample_interval;
    }
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_sample - Clock::now());
    take(ev, static_cast<int>(std::clamp<std::int64_t>(wait.count(), 0, 50)));
    hookOutcomes();
  }
  out.status = *status;
  out.ended = Clock::now();
  out.seconds = seconds(out.ended - t0);

  ev.wait_status = out.status;
  ev.oom_kills_after = oomKills();
  ev.oom_source_active = oomSourceActive();
  // What is in the rings already: the exits of the prover's descendants come before its own.
  take(ev, 0);
  // The kernel's report settles a moment after the kill: waited for when there is a kill to
  // explain, never on a clean exit.
  for (auto end = Clock::now() + std::chrono::seconds(3); Clock::now() < end && awaitsOomReport(ev);) take(ev, 50);
  ev.last_tree = last_tree;
  if (!cfg.self_report.empty()) {
    if (auto v = readSelfReport(SelfReportSource{SelfReportSource::Kind::kFile, cfg.self_report, ""}))
      ev.self_reported = *v;
  }
  ev.now_ns = monotonicNs();
  out.verdict = classifyAttempt(ev);
  if (!ev.ooms.empty()) {
    const OomEvent& k = ev.ooms.front();
    const std::string bound =
        k.global ? "host" : (k.domain_cgroup ? normaliseCgroupPath(*k.domain_cgroup) : cgroup.path());
    const std::int64_t at = k.monotonic_time_ns > 0 ? k.monotonic_time_ns : monotonicNs();
    out.warning = forecaster.verdict(bound, at).text;
    forecaster.killed(bound, at);
  }
  return out;
}

bool Supervisor::Impl::waitForReclaim(std::uint64_t held_before, Clock::time_point since) {
  auto t0 = Clock::now();
  // Back to where it was before the attempt, give or take what a cgroup's counters drift.
  std::uint64_t slack = std::max<std::uint64_t>(8ULL << 20, held_before / 50);
  std::uint64_t target = held_before + slack;
  std::uint64_t h = held();
  std::uint64_t start = h;
  while (h > target) {
    if (signalled()) return false;
    if (Clock::now() - t0 >= cfg.reclaim_timeout) {
      say(fmt::format("usage did not fall back in {:.1f} s (holds {}, {} before the attempt): retrying anyway",
                      seconds(Clock::now() - t0), formatBytes(h), formatBytes(held_before)));
      return true;
    }
    sensors->poll(50);
    (void)sensors->takeOomEvents();
    (void)sensors->takeExitEvents();
    h = held();
  }
  say(fmt::format(
      "reclaimed {:.2f} s after the prover ended ({:.2f} s of waiting): {} -> {} held, {} before the attempt",
      seconds(Clock::now() - since), seconds(Clock::now() - t0), formatBytes(start), formatBytes(h),
      formatBytes(held_before)));
  return true;
}

void Supervisor::Impl::saveState() {
  if (state_path.empty()) return;
  if (auto st = headroom::saveState(state_path, ctl->state()); !st)
    say(fmt::format("WARNING: the learned margin is not kept: {}", st.error().describe()));
}

int Supervisor::Impl::run() {
  if (cfg.probe) {
    ProbeOptions po;
    po.cgroup = cgroup.path();
    po.stop_margin = cfg.probe_stop_margin;
    po.reclaim_timeout = cfg.reclaim_timeout;
    if (auto r = runProbe(*source.fs, *source.collector, po)) {
      probe = ProbeFinding{r->allocatable_bytes, 0, monotonicNs()};
      say(fmt::format("probe: {} allocatable in {} ({})", formatBytes(r->allocatable_bytes), cgroup.path(),
                      r->stop_reason));
    } else {
      say(fmt::format("WARNING: the probe failed, so it caps nothing: {}", r.error().describe()));
    }
  }

  int last_status = -1;
  auto lastOr = [&](int otherwise) { return last_status >= 0 ? exitCodeOf(last_status) : otherwise; };
  unsigned attempts = cfg.policy.max_retries + 1;
  for (unsigned attempt = 1;; ++attempt) {
    auto snap = sample({});
    if (!snap) {
      say(fmt::format("reading {}: {}", cgroup.path(), snap.error().describe()));
      return lastOr(kExitFailure);
    }
    auto in = budgetInputs(**snap, ProverScope{cgroup.path(), std::set<pid_t>{}});
    if (!in) {
      say(in.error().describe());
      return lastOr(kExitFailure);
    }
    in->probe = probe;
    BudgetDecision d = ctl->decide(*in);
    if (!d.valid) {
      say(fmt::format("no budget can be given: {}", d.reason));
      return lastOr(kExitFailure);
    }
    if (signalled()) {
      say("stopped by a signal before the attempt started: not started");
      return lastOr(128 + static_cast<int>(g_signal));
    }
    std::uint64_t held_before = held();
    std::optional<std::uint64_t> kills_before = oomKills();
    auto pid = spawn(d, attempt);
    if (!pid) {
      say(pid.error().describe());
      return exitCodeFor(pid.error());
    }
    say(fmt::format("attempt {}/{} starts: pid {}, {}", attempt, attempts, *pid, d.reason));
    Outcome out = supervise(*pid, d, kills_before);
    last_status = out.status;
    const Verdict& v = out.verdict;
    std::string verdict = v.prover_oom ? "oom_killed" : statusText(out.status);
    say(fmt::format("attempt {}/{}: budget {} ({} bytes), margin {} -> {} after {:.2f} s{}{}", attempt, attempts,
                    formatBytes(d.budget), d.budget, formatBytes(d.margin), verdict, out.seconds,
                    v.evidence.empty() ? "" : ": ", v.evidence));

    if (!out.warning.empty() && (v.prover_oom || v.other_oom)) say(fmt::format("the OOM kill: {}", out.warning));
    bool clean = WIFEXITED(out.status) && WEXITSTATUS(out.status) == 0;
    if (v.kill) {
      MarginChange c = ctl->onOomKill(*v.kill);
      saveState();
      say(c.reason);
    }
    if (clean) {
      if (!v.kill) {
        if (auto c = ctl->onCleanRun()) say(c->reason);
        saveState();
      }
      say(fmt::format("done: the prover succeeded on attempt {} with a budget of {} (margin {})", attempt,
                      formatBytes(d.budget), formatBytes(d.margin)));
      return kExitOk;
    }
    if (out.stopped) {
      say(fmt::format("stopped by a signal: not retried; the prover's status was {}", statusText(out.status)));
      return exitCodeOf(out.status);
    }
    if (!v.prover_oom && !v.other_oom) {
      std::string why = WIFSIGNALED(out.status) && WTERMSIG(out.status) == SIGKILL ? v.evidence
                        : WIFSIGNALED(out.status) ? fmt::format("the prover crashed ({})", statusText(out.status))
                                                  : fmt::format("the prover failed ({})", statusText(out.status));
      say(fmt::format("not retried: {}", why));
      return exitCodeOf(out.status);
    }
    if (!ctl->retryAllowed()) {
      say(fmt::format(
          "giving up: {} attempts, each ended by an OOM kill (--max-retries {}); last budget {}, margin now {}; "
          "the learned margin is kept in {}",
          attempt, cfg.policy.max_retries, formatBytes(d.budget), formatBytes(ctl->state().learned_margin),
          state_path.empty() ? "no file (--no-state)" : state_path));
      return exitCodeOf(out.status);
    }
    if (!waitForReclaim(held_before, out.ended)) {
      say(fmt::format("stopped by a signal while waiting for reclaim: not retried; the prover's status was {}",
                      statusText(out.status)));
      return exitCodeOf(out.status);
    }
  }
}

}  // namespace headroom
