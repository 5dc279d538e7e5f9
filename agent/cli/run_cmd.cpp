// `headroom run -- CMD ARGS...`: supervises a prover. Each attempt gets a budget from the
// controller; each exit is classified on the kernel's evidence (the sensors' OOM events, the
// cgroup's oom_kill counter), never on "137 means OOM"; a confirmed OOM kill grows the margin,
// waits for the kernel to reclaim, and retries. Single-threaded (it forks the prover).
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <thread>

#include "headroom/cli/commands.h"
#include "headroom/controller/controller.h"
#include "headroom/probe/probe.h"
#include "headroom/sources/self_report.h"
#include "headroom/util/units.h"

extern char** environ;  // NOLINT: POSIX

namespace headroom::cli {
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

void installSignalHandlers() {
  struct sigaction sa {};
  sa.sa_sigaction = onRunSignal;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

std::int64_t monoNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string statusText(int st) {
  if (WIFEXITED(st)) return fmt::format("exited({})", WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return fmt::format("signal {} ({})", WTERMSIG(st), sigabbrev_np(WTERMSIG(st)) ? sigabbrev_np(WTERMSIG(st)) : "?");
  return fmt::format("status {:#x}", st);
}

// What a shell would give for this wait status.
int exitCodeOf(int st) {
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return kExitFailure;
}

bool validEnvName(std::string_view n) {
  if (n.empty() || std::isdigit(static_cast<unsigned char>(n[0]))) return false;
  return std::all_of(n.begin(), n.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// "123", "512MiB" or {"used_bytes": N}: what the prover says it uses.
std::optional<std::uint64_t> readSelfReport(const std::string& path) {
  auto text = readSelfReportFile(path);
  if (!text) return std::nullopt;
  std::string t = *text;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.erase(t.begin());
  if (t.empty()) return std::nullopt;
  if (t.front() == '{') {
    auto j = nlohmann::json::parse(t, nullptr, false);
    if (j.is_discarded() || !j.contains("used_bytes") || !j["used_bytes"].is_number_unsigned()) return std::nullopt;
    return j["used_bytes"].get<std::uint64_t>();
  }
  auto v = parseSize(t);
  return v ? std::optional<std::uint64_t>(*v) : std::nullopt;
}

// The prover's processes as last sampled: what the kill evidence needs from them.
struct TreeFigures {
  std::uint64_t charge = 0;  // RSS + page tables (+ pinned outside RSS)
  std::uint64_t pinned = 0;  // per process the larger of VmLck and live pinned (CUDA) bytes
  std::uint64_t page_tables = 0;
  std::uint64_t kernel = 0;  // share of the cgroup's other kernel memory
  std::size_t processes = 0;
};

// The prover's process tree: the child started and its descendants, found in samples (ppid)
// and in exit events (the parent at exit), so that a wrapper's child that was forked and killed
// between two samples still counts as the prover.
struct ProverTree {
  std::set<pid_t> members;
  std::map<pid_t, pid_t> parents;  // pid -> parent, from exits
  bool contains(pid_t pid) const {
    for (int depth = 0; depth < 64 && pid > 1; ++depth) {
      if (members.count(pid) != 0) return true;
      auto it = parents.find(pid);
      if (it == parents.end()) return false;
      pid = it->second;
    }
    return false;
  }
  void noteExit(const ExitEvent& x) {
    if (x.parent_pid > 0 && parents.size() < 65536) parents[x.pid] = x.parent_pid;
  }
};

struct Outcome {
  int status = 0;
  double seconds = 0;
  bool prover_oom = false;  // the prover (or a process of its tree) was OOM-killed: confirmed
  bool other_oom = false;   // another process in its cgroup was, while it ran
  bool stopped = false;     // headroom run was asked to stop (SIGINT/SIGTERM)
  Clock::time_point ended;  // when its exit was seen
  std::string evidence;     // in words
  std::optional<KillEvidence> kill;
};

class Supervisor {
 public:
  Supervisor(const RunOptions& o, std::ostream& err) : o_(o), err_(err) {}
  int run();

 private:
  Status prepare();
  void say(const std::string& line) { err_ << "headroom run: " << line << "\n" << std::flush; }
  Result<std::shared_ptr<const Snapshot>> sample(const std::set<pid_t>& tree);
  Result<pid_t> spawn(const BudgetDecision& d, unsigned attempt);
  Outcome supervise(pid_t child, const BudgetDecision& d, std::optional<std::uint64_t> oom_kills_before);
  void classify(Outcome& out, pid_t child, ProverTree& tree, const BudgetDecision& d,
                std::optional<std::uint64_t> oom_kills_before,
                const std::vector<OomEvent>& events, const std::optional<ExitEvent>& exit_event);
  bool waitForReclaim(std::uint64_t held_before, Clock::time_point since);
  std::optional<std::uint64_t> oomKills();
  std::uint64_t held();
  void saveState();
  void cleanup();

  const RunOptions& o_;
  std::ostream& err_;
  BudgetPolicy policy_;
  std::chrono::milliseconds reclaim_timeout_{};
  std::chrono::milliseconds sample_interval_{};
  std::string state_path_;
  std::optional<Host> host_;
  std::string cgroup_;
  bool move_into_cgroup_ = false;  // the prover runs elsewhere than headroom run itself
  bool created_cgroup_ = false;
  std::unique_ptr<Sensors> sensors_;
  std::optional<BudgetController> ctl_;
  std::optional<ProbeFinding> probe_;
  TreeFigures last_tree_;
  std::map<std::string, std::string> budget_env_;  // NAME -> template
};

Status Supervisor::prepare() {
  auto bad = [](std::string msg) { return unexpected(makeError(0, std::move(msg))); };
  if (o_.command.empty()) return bad("no command: headroom run [options] -- CMD ARGS...");
  auto policy = policyFromFlags(o_.policy);
  if (!policy) return unexpected(policy.error());
  policy_ = *policy;
  auto rt = parseDuration(o_.reclaim_timeout);
  if (!rt) return bad(fmt::format("--reclaim-timeout \"{}\": {}", o_.reclaim_timeout, rt.error().describe()));
  reclaim_timeout_ = *rt;
  auto si = parseDuration(o_.sample_interval);
  if (!si) return bad(fmt::format("--sample-interval \"{}\": {}", o_.sample_interval, si.error().describe()));
  if (si->count() < 10) return bad(fmt::format("--sample-interval \"{}\": at least 10ms", o_.sample_interval));
  sample_interval_ = *si;
  for (const std::string& spec : o_.budget_env) {
    auto eq = spec.find('=');
    std::string name = spec.substr(0, eq);
    std::string tmpl = eq == std::string::npos ? o_.budget_format : spec.substr(eq + 1);
    if (!validEnvName(name)) return bad(fmt::format("--budget-env \"{}\": \"{}\" is not a variable name", spec, name));
    if (auto f = formatBudget(tmpl, 0); !f) return bad(fmt::format("--budget-env \"{}\": {}", spec, f.error().describe()));
    budget_env_[name] = tmpl;
  }
  for (const std::string& t : o_.budget_arg) {
    if (auto f = formatBudget(t, 0); !f) return bad(fmt::format("--budget-arg: {}", f.error().describe()));
  }
  if (auto f = formatBudget(o_.budget_format, 0); !f) return bad(fmt::format("--budget-format: {}", f.error().describe()));
  if (!o_.budget_file.empty() && o_.budget_file.front() != '/')
    return bad(fmt::format("--budget-file \"{}\": an absolute path, please", o_.budget_file));

  auto host = openHost(o_.root);
  if (!host) return unexpected(host.error());
  host_ = std::move(*host);
  const CgroupHierarchy& h = host_->collector->hierarchy();
  auto own = callersMemoryCgroup(*host_->fs, h);
  if (!own) return unexpected(own.error().wrap("finding headroom run's own memory cgroup"));
  cgroup_ = o_.cgroup.empty() ? *own : normaliseCgroupPath(o_.cgroup);
  move_into_cgroup_ = cgroup_ != *own;
  if (!h.open(cgroup_)) {
    auto parent = parentCgroup(cgroup_);
    if (!parent || !h.open(*parent))
      return bad(fmt::format("--cgroup {}: neither it nor its parent exists in the v{} memory hierarchy at {}", cgroup_,
                             h.version(), host_->fs->display(h.mount().mount_point)));
    std::string dir = host_->fs->display(h.directoryOf(cgroup_));
    if (::mkdir(dir.c_str(), 0755) != 0) return unexpected(errnoError(fmt::format("--cgroup {}: making {}", cgroup_, dir)));
    created_cgroup_ = true;
    say(fmt::format("made memory cgroup {} (removed at the end); it has no limit of its own", cgroup_));
  }

  if (!o_.no_state) {
    state_path_ = o_.state_file.empty() ? defaultStatePath(cgroup_) : o_.state_file;
    auto st = loadState(state_path_);
    if (!st)
      return bad(fmt::format("{} (remove the file to start afresh, or run with --no-state)", st.error().describe()));
    ctl_.emplace(policy_, st->value_or(ControllerState{}));
    if (*st && (*st)->learned_margin > 0)
      say(fmt::format("learned margin {} from {} ({} OOM kill(s) so far)", formatBytes((*st)->learned_margin), state_path_,
                      (*st)->oom_kills));
  } else {
    ctl_.emplace(policy_);
  }
  ctl_->startRun();

  SensorsConfig sc;
  sc.bpf = o_.bpf;
  sc.faults = sc.mmap = sc.rss = false;  // nothing on the prover's fault path: OOM, exits and pinned memory only
  if (!host_->fs->isLive()) sc.bpf = sc.kmsg = false;
  auto dir = h.open(cgroup_);
  struct stat sb {};
  if (dir && ::fstat(dir->fd(), &sb) == 0) sc.tracked_cgroups = std::vector<std::uint64_t>{sb.st_ino};
  sensors_ = Sensors::start(*host_->fs, sc, host_->collector->mounts());
  std::vector<std::string> sources;
  for (const SensorStatus& s : sensors_->status()) {
    if (s.state != SensorState::kActive) continue;
    if (s.name == "oom") sources.push_back("mark_victim (BPF)");
    if (s.name == "kmsg") sources.push_back("/dev/kmsg");
    if (s.name == "exits") sources.push_back("exit codes (BPF)");
  }
  sources.push_back(fmt::format("{}'s oom_kill counter", cgroup_));
  say(fmt::format("OOM evidence from: {}", fmt::join(sources, ", ")));
  return ok();
}

Result<std::shared_ptr<const Snapshot>> Supervisor::sample(const std::set<pid_t>& tree) {
  CollectOptions co;
  co.cgroups = {cgroup_};
  co.read_smaps = false;  // smaps_rollup walks every page of a large prover: too slow to do 4 times a second
  auto raw = host_->collector->collect(co);
  if (!raw) return unexpected(raw.error());
  SensorReadings readings = sensors_->readings(raw->processes);
  auto snap = buildSnapshot(std::move(*raw), RoleMatcher{}, std::move(readings));
  TreeFigures f;
  for (const ProcessSnapshot& p : snap->processes) {
    if (!tree.count(p.sample.pid)) continue;
    const ProcStatus& s = p.sample.status;
    std::uint64_t pinned = p.attribution.pinned ? p.attribution.pinned->live_bytes : 0;
    f.charge += s.vm_rss + s.vm_pte;
    if (p.attribution.pinned && p.attribution.pinned->residency == PinnedOverlay::Residency::kOutsideRss) f.charge += pinned;
    f.pinned += std::max(s.vm_lck, pinned);
    f.page_tables += s.vm_pte;
    f.kernel += p.attribution.overhead_share > s.vm_pte ? p.attribution.overhead_share - s.vm_pte : 0;
    ++f.processes;
  }
  if (f.processes > 0) last_tree_ = f;
  return snap;
}

// The cgroup's own OOM-kill counter (v2 memory.events oom_kill, v1 oom_control oom_kill).
std::optional<std::uint64_t> Supervisor::oomKills() {
  auto cg = host_->collector->hierarchy().read(cgroup_);
  return cg ? cg->oom_kills : std::nullopt;
}

// What the cgroup holds that the kernel cannot drop at once.
std::uint64_t Supervisor::held() {
  auto cg = host_->collector->hierarchy().read(cgroup_);
  if (!cg) return 0;
  std::uint64_t r = reclaimableBytes(*cg);
  return cg->usage > r ? cg->usage - r : 0;
}

Result<pid_t> Supervisor::spawn(const BudgetDecision& d, unsigned attempt) {
  // Everything the child needs is made before fork: it only moves itself and execs.
  std::vector<std::string> args = o_.command;
  for (const std::string& t : o_.budget_arg) args.push_back(*formatBudget(t, d.budget));
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  env["HEADROOM_BUDGET_BYTES"] = std::to_string(d.budget);
  env["HEADROOM_MARGIN_BYTES"] = std::to_string(d.margin);
  env["HEADROOM_BUDGET_GENERATION"] = std::to_string(d.generation);
  env["HEADROOM_ATTEMPT"] = std::to_string(attempt);
  for (const auto& [name, tmpl] : budget_env_) env[name] = *formatBudget(tmpl, d.budget);
  if (!o_.budget_file.empty()) {
    if (auto st = writeFileAtomic(o_.budget_file, *formatBudget(o_.budget_format, d.budget) + "\n"); !st)
      return unexpected(st.error().wrap("--budget-file"));
  }
  std::vector<std::string> env_strings;
  env_strings.reserve(env.size());
  for (const auto& [k, v] : env) env_strings.push_back(fmt::format("{}={}", k, v));
  std::vector<char*> argv, envp;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string procs = host_->fs->display(host_->collector->hierarchy().directoryOf(cgroup_)) + "/cgroup.procs";
  // What the sensors hold from before this attempt (a kill during --probe, a late report of
  // the last attempt's kill) is not this attempt's evidence.
  sensors_->poll(0);
  (void)sensors_->takeOomEvents();
  (void)sensors_->takeExitEvents();

  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return unexpected(errnoError("pipe"));
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    return unexpected(errnoError("fork"));
  }
  if (pid == 0) {
    // The child: async-signal-safe calls only.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &dfl, nullptr);
    int report[2] = {0, 0};  // stage, errno
    if (move_into_cgroup_) {
      int fd = ::open(procs.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0 || ::write(fd, "0", 1) != 1) {
        report[0] = 1;
        report[1] = errno;
        (void)!::write(pipefd[1], report, sizeof report);
        ::_exit(126);
      }
      ::close(fd);
    }
    ::execvpe(argv[0], argv.data(), envp.data());
    report[0] = 2;
    report[1] = errno;
    (void)!::write(pipefd[1], report, sizeof report);
    ::_exit(127);
  }
  ::close(pipefd[1]);
  int report[2] = {0, 0};
  ssize_t n;
  do {
    n = ::read(pipefd[0], report, sizeof report);
  } while (n < 0 && errno == EINTR);
  ::close(pipefd[0]);
  if (n == static_cast<ssize_t>(sizeof report)) {
    int st = 0;
    ::waitpid(pid, &st, 0);
    if (report[0] == 1)
      return unexpected(makeError(report[1], fmt::format("moving the prover into {} ({})", cgroup_, procs)));
    return unexpected(makeError(report[1], fmt::format("starting {}", o_.command.front())));
  }
  return pid;
}

Outcome Supervisor::supervise(pid_t child, const BudgetDecision& d, std::optional<std::uint64_t> oom_kills_before) {
  Outcome out;
  auto t0 = Clock::now();
  ProverTree tree;
  tree.members = {child};
  std::vector<OomEvent> events;
  std::optional<ExitEvent> exit_event;
  auto drain = [&] {
    for (OomEvent& e : sensors_->takeOomEvents()) events.push_back(std::move(e));
    for (ExitEvent& x : sensors_->takeExitEvents()) {
      tree.noteExit(x);
      if (x.pid == child) exit_event = x;
    }
  };
  int seen_signals = g_signals_seen;
  auto next_sample = Clock::now();
  last_tree_ = {};
  std::optional<int> status;
  while (!status) {
    if (g_signals != seen_signals) {
      seen_signals = g_signals;
      g_signals_seen = seen_signals;
      out.stopped = true;
      // A terminal's signal reached the prover's process group already.
      if (!g_from_terminal) {
        say(fmt::format("{} received: passing it on to the prover (pid {})", sigabbrev_np(g_signal) ? sigabbrev_np(g_signal) : "signal", child));
        ::kill(child, g_signal);
      }
    }
    int st = 0;
    pid_t r = ::waitpid(child, &st, WNOHANG);
    if (r == child) {
      status = st;
      break;
    }
    if (Clock::now() >= next_sample) {
      if (auto snap = sample(tree.members)) {
        // The prover's tree: its children and theirs, as far as the sample shows.
        std::set<pid_t>& m = tree.members;
        std::size_t known = m.size();
        for (bool grew = true; grew;) {
          grew = false;
          for (const ProcessSnapshot& p : (*snap)->processes) {
            if (!m.count(p.sample.pid) && m.count(p.sample.status.ppid)) grew = m.insert(p.sample.pid).second;
          }
        }
        if (m.size() != known) (void)sample(m);  // figures for the processes found just now
      }
      next_sample += sample_interval_;
      if (next_sample < Clock::now()) next_sample = Clock::now() + sample_interval_;
    }
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_sample - Clock::now());
    sensors_->poll(static_cast<int>(std::clamp<std::int64_t>(wait.count(), 0, 50)));
    drain();
  }
  out.status = *status;
  out.ended = Clock::now();
  out.seconds = seconds(out.ended - t0);
  classify(out, child, tree, d, oom_kills_before, events, exit_event);
  return out;
}

void Supervisor::classify(Outcome& out, pid_t child, ProverTree& tree, const BudgetDecision& d,
                          std::optional<std::uint64_t> oom_kills_before,
                          const std::vector<OomEvent>& early, const std::optional<ExitEvent>& early_exit) {
  std::vector<OomEvent> events = early;
  std::optional<ExitEvent> exit_event = early_exit;
  bool sigkill = WIFSIGNALED(out.status) && WTERMSIG(out.status) == SIGKILL;
  auto after = oomKills();
  // A counter read only once says nothing: never compare against a missing "before".
  bool counter_known = after.has_value() && oom_kills_before.has_value();
  std::uint64_t rose = counter_known && *after > *oom_kills_before ? *after - *oom_kills_before : 0;

  // The kernel's report settles a moment after the kill: wait for it when there is a kill to
  // explain (the counter rose, or a SIGKILL and no counter to ask), never on a clean exit.
  auto inCgroup = [&](const OomVictim& v) {
    pid_t tgid = v.tgid != 0 ? v.tgid : v.pid;
    return tree.contains(tgid) || (!v.cgroup.empty() && cgroupIsWithin(normaliseCgroupPath(v.cgroup), cgroup_));
  };
  auto victimsSeen = [&] {
    std::size_t n = 0;
    for (const OomEvent& e : events)
      for (const OomVictim& v : e.victims) n += !v.kill_skipped && inCgroup(v);
    return n;
  };
  bool active_oom_source = false;
  for (const SensorStatus& s : sensors_->status())
    active_oom_source |= (s.name == "oom" || s.name == "kmsg") && s.state == SensorState::kActive;
  auto take = [&](int wait_ms) {
    sensors_->poll(wait_ms);
    for (OomEvent& e : sensors_->takeOomEvents()) events.push_back(std::move(e));
    for (ExitEvent& x : sensors_->takeExitEvents()) {
      tree.noteExit(x);
      if (x.pid == child) exit_event = x;
    }
  };
  // What is in the rings already: the exits of the prover's descendants come before its own.
  take(0);
  if (active_oom_source && (rose > 0 || (sigkill && !counter_known))) {
    auto end = Clock::now() + std::chrono::seconds(3);
    while (Clock::now() < end && victimsSeen() < std::max<std::uint64_t>(rose, 1)) take(50);
  }

  const OomVictim* prover_victim = nullptr;
  const OomEvent* prover_event = nullptr;
  const OomVictim* other_victim = nullptr;
  for (const OomEvent& e : events) {
    for (const OomVictim& v : e.victims) {
      if (v.kill_skipped || !inCgroup(v)) continue;
      pid_t tgid = v.tgid != 0 ? v.tgid : v.pid;
      // The prover is its whole tree: a wrapper's child killed is the prover killed.
      if (tree.contains(tgid) && prover_victim == nullptr) {
        prover_victim = &v;
        prover_event = &e;
      } else if (!tree.contains(tgid) && other_victim == nullptr) {
        other_victim = &v;
      }
    }
  }
  std::string counter = counter_known ? fmt::format("{} oom_kill {} -> {}", cgroup_, *oom_kills_before, *after)
                                      : fmt::format("{} has no oom_kill counter", cgroup_);
  bool exit_says_oom = exit_event && exit_event->kind == ExitKind::kOomKilled;

  bool prover_killed = sigkill || (prover_victim != nullptr && prover_victim->tgid != child && prover_victim->pid != child);
  if (prover_killed && (prover_victim != nullptr || (sigkill && exit_says_oom))) {
    out.prover_oom = true;
    std::string by = prover_event != nullptr ? (prover_event->from_bpf && prover_event->from_kmsg ? "mark_victim + /dev/kmsg"
                                                : prover_event->from_bpf                         ? "mark_victim"
                                                                                                  : "/dev/kmsg")
                                             : "the exit sensor (marked by the OOM killer)";
    pid_t victim = prover_victim != nullptr ? (prover_victim->tgid != 0 ? prover_victim->tgid : prover_victim->pid) : child;
    out.evidence = fmt::format("OOM kill of pid {}{} confirmed by the kernel ({}; {})", victim,
                               victim == child ? "" : fmt::format(" (of the prover's tree, started by pid {})", child), by, counter);
    if (prover_event != nullptr && prover_event->domain_cgroup)
      out.evidence += fmt::format("; OOM domain {}", *prover_event->domain_cgroup);
  } else if (sigkill && rose > 0 && other_victim == nullptr) {
    // No sensor named the victim, but the kernel's own counter says a kill happened here.
    out.prover_oom = true;
    out.evidence = fmt::format("OOM kill in {} confirmed by the kernel's counter ({}); victim not named: {}", cgroup_, counter,
                               active_oom_source ? "no OOM report arrived within 3 s" : "no OOM sensor is active");
  } else if (other_victim != nullptr || (rose > 0 && !sigkill)) {
    out.other_oom = true;
    out.evidence = other_victim != nullptr
                       ? fmt::format("OOM kill of pid {} ({}) beside the prover in {} ({})", other_victim->tgid != 0 ? other_victim->tgid : other_victim->pid,
                                     other_victim->comm, cgroup_, counter)
                       : fmt::format("an OOM kill in {} while the prover ran ({})", cgroup_, counter);
  } else if (sigkill) {
    out.evidence = fmt::format("signal 9, not an OOM kill (no OOM kill of pid {}: {}{})", child, counter,
                               active_oom_source ? ", no mark_victim or kernel report for it" : "");
  }

  if (out.prover_oom || out.other_oom) {
    KillEvidence k;
    k.time_ns = monoNs();
    k.what = out.evidence;
    k.prover_victim = out.prover_oom;
    k.budget = d.budget;
    k.charge = last_tree_.charge;
    if (prover_victim != nullptr && prover_victim->anon_rss) {
      k.charge = *prover_victim->anon_rss + prover_victim->file_rss.value_or(0) + prover_victim->shmem_rss.value_or(0) +
                 prover_victim->pgtables.value_or(0);
    }
    k.page_tables = prover_victim != nullptr && prover_victim->pgtables ? *prover_victim->pgtables : last_tree_.page_tables;
    k.pinned = last_tree_.pinned;
    k.kernel = last_tree_.kernel;
    if (!o_.self_report.empty()) k.self_reported = readSelfReport(o_.self_report);
    out.kill = k;
  }
}

bool Supervisor::waitForReclaim(std::uint64_t held_before, Clock::time_point since) {
  auto t0 = Clock::now();
  // Back to where it was before the attempt, give or take what a cgroup's counters drift.
  std::uint64_t slack = std::max<std::uint64_t>(8ULL << 20, held_before / 50);
  std::uint64_t target = held_before + slack;
  std::uint64_t h = held();
  std::uint64_t start = h;
  while (h > target) {
    if (g_signals != g_signals_seen) return false;
    if (Clock::now() - t0 >= reclaim_timeout_) {
      say(fmt::format("usage did not fall back in {:.1f} s (holds {}, {} before the attempt): retrying anyway",
                      seconds(Clock::now() - t0), formatBytes(h), formatBytes(held_before)));
      return true;
    }
    sensors_->poll(50);
    (void)sensors_->takeOomEvents();
    (void)sensors_->takeExitEvents();
    h = held();
  }
  say(fmt::format("reclaimed {:.2f} s after the prover ended ({:.2f} s of waiting): {} -> {} held, {} before the attempt",
                  seconds(Clock::now() - since), seconds(Clock::now() - t0), formatBytes(start), formatBytes(h),
                  formatBytes(held_before)));
  return true;
}

void Supervisor::saveState() {
  if (state_path_.empty()) return;
  if (auto st = headroom::saveState(state_path_, ctl_->state()); !st)
    say(fmt::format("WARNING: the learned margin is not kept: {}", st.error().describe()));
}

void Supervisor::cleanup() {
  sensors_.reset();
  if (!created_cgroup_) return;
  std::string dir = host_->fs->display(host_->collector->hierarchy().directoryOf(cgroup_));
  // The prover's last processes may take a moment to leave after they died.
  for (int i = 0; i < 50 && ::rmdir(dir.c_str()) != 0 && errno == EBUSY; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

int Supervisor::run() {
  if (auto st = prepare(); !st) {
    err_ << "headroom run: " << st.error().describe() << "\n";
    cleanup();
    return st.error().code == 0 ? kExitBadInput : kExitFailure;
  }
  if (o_.probe) {
    ProbeOptions po;
    po.cgroup = cgroup_;
    if (!o_.probe_stop_margin.empty()) {
      auto m = parseSize(o_.probe_stop_margin);
      if (!m) {
        err_ << "headroom run: --probe-stop-margin \"" << o_.probe_stop_margin << "\": " << m.error().describe() << "\n";
        cleanup();
        return kExitBadInput;
      }
      po.stop_margin = *m;
    }
    po.reclaim_timeout = reclaim_timeout_;
    auto r = runProbe(*host_->fs, *host_->collector, po);
    if (r) {
      probe_ = ProbeFinding{r->allocatable_bytes, 0, monoNs()};
      say(fmt::format("probe: {} allocatable in {} ({})", formatBytes(r->allocatable_bytes), cgroup_, r->stop_reason));
    } else {
      say(fmt::format("WARNING: the probe failed, so it caps nothing: {}", r.error().describe()));
    }
  }

  int last_status = -1;
  unsigned attempts = policy_.max_retries + 1;
  for (unsigned attempt = 1;; ++attempt) {
    auto snap = sample({});
    if (!snap) {
      err_ << "headroom run: reading " << cgroup_ << ": " << snap.error().describe() << "\n";
      cleanup();
      return last_status >= 0 ? exitCodeOf(last_status) : kExitFailure;
    }
    auto in = budgetInputs(**snap, ProverScope{cgroup_, std::set<pid_t>{}});
    if (!in) {
      err_ << "headroom run: " << in.error().describe() << "\n";
      cleanup();
      return last_status >= 0 ? exitCodeOf(last_status) : kExitFailure;
    }
    in->probe = probe_;
    BudgetDecision d = ctl_->decide(*in);
    if (!d.valid) {
      say(fmt::format("no budget can be given: {}", d.reason));
      cleanup();
      return last_status >= 0 ? exitCodeOf(last_status) : kExitFailure;
    }
    if (g_signals != g_signals_seen) {
      say("stopped by a signal before the attempt started: not started");
      cleanup();
      return last_status >= 0 ? exitCodeOf(last_status) : 128 + static_cast<int>(g_signal);
    }
    std::uint64_t held_before = held();
    std::optional<std::uint64_t> kills_before = oomKills();
    auto pid = spawn(d, attempt);
    if (!pid) {
      say(pid.error().describe());
      cleanup();
      // 126/127 as a shell says them, for the prover that could not be placed or started;
      // headroom's own failures (the budget file, fork) are 1.
      if (pid.error().message.rfind("moving the prover", 0) == 0) return 126;
      if (pid.error().message.rfind("starting ", 0) == 0) return 127;
      return kExitFailure;
    }
    say(fmt::format("attempt {}/{} starts: pid {}, {}", attempt, attempts, *pid, d.reason));
    Outcome out = supervise(*pid, d, kills_before);
    last_status = out.status;
    std::string verdict = out.prover_oom ? "oom_killed" : statusText(out.status);
    say(fmt::format("attempt {}/{}: budget {} ({} bytes), margin {} -> {} after {:.2f} s{}{}", attempt, attempts,
                    formatBytes(d.budget), d.budget, formatBytes(d.margin), verdict, out.seconds,
                    out.evidence.empty() ? "" : ": ", out.evidence));

    bool clean = WIFEXITED(out.status) && WEXITSTATUS(out.status) == 0;
    if (out.kill) {
      MarginChange c = ctl_->onOomKill(*out.kill);
      saveState();
      say(c.reason);
    }
    if (clean) {
      if (!out.kill) {
        if (auto c = ctl_->onCleanRun()) say(c->reason);
        saveState();
      }
      say(fmt::format("done: the prover succeeded on attempt {} with a budget of {} (margin {})", attempt,
                      formatBytes(d.budget), formatBytes(d.margin)));
      cleanup();
      return kExitOk;
    }
    if (out.stopped) {
      say(fmt::format("stopped by a signal: not retried; the prover's status was {}", statusText(out.status)));
      cleanup();
      return exitCodeOf(out.status);
    }
    if (!out.prover_oom && !out.other_oom) {
      std::string why = WIFSIGNALED(out.status) && WTERMSIG(out.status) == SIGKILL
                            ? out.evidence
                            : WIFSIGNALED(out.status) ? fmt::format("the prover crashed ({})", statusText(out.status))
                                                      : fmt::format("the prover failed ({})", statusText(out.status));
      say(fmt::format("not retried: {}", why));
      cleanup();
      return exitCodeOf(out.status);
    }
    if (!ctl_->retryAllowed()) {
      say(fmt::format("giving up: {} attempts, each ended by an OOM kill (--max-retries {}); last budget {}, margin now {}; "
                      "the learned margin is kept in {}",
                      attempt, policy_.max_retries, formatBytes(d.budget), formatBytes(ctl_->state().learned_margin),
                      state_path_.empty() ? "no file (--no-state)" : state_path_));
      cleanup();
      return exitCodeOf(out.status);
    }
    if (!waitForReclaim(held_before, out.ended)) {
      say(fmt::format("stopped by a signal while waiting for reclaim: not retried; the prover's status was {}",
                      statusText(out.status)));
      cleanup();
      return exitCodeOf(out.status);
    }
  }
}

}  // namespace

int runSupervisor(const RunOptions& opts, std::ostream& /*out*/, std::ostream& err) {
  installSignalHandlers();
  Supervisor s(opts, err);
  return s.run();
}

}  // namespace headroom::cli
