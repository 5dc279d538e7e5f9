// `headroom agent`: the sidecar. The main thread samples every interval, recomputes the prover's
// budget and consumes the sensors' events between samples; the HTTP thread serves what the last
// sample, the last budget and the events say. SIGTERM/SIGINT stop it cleanly, SIGHUP reloads the
// config.
#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <ostream>
#include <set>
#include <utility>

#include "headroom/cli/commands.h"
#include "headroom/controller/controller.h"
#include "headroom/exporter/exporter.h"
#include "headroom/exporter/http.h"
#include "headroom/journal/journal.h"
#include "headroom/model/oom_counter.h"
#include "headroom/sources/parse.h"
#include "headroom/sources/self_report.h"
#include "headroom/sensors/sensors.h"
#include "headroom/model/snapshot_json.h"
#include "headroom/util/units.h"
#include "headroom/version.h"

namespace headroom::cli {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool> g_stop{false};
std::atomic<bool> g_reload{false};

extern "C" void onAgentSignal(int sig) {
  if (sig == SIGHUP) g_reload = true;
  else g_stop = true;
}

void installSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = onAgentSignal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaction(sig, &sa, nullptr);
  // A scraper that hangs up mid-answer must not kill the agent.
  std::signal(SIGPIPE, SIG_IGN);
}

double unixNow() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

std::int64_t monoNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// Tells systemd (when NOTIFY_SOCKET says it listens; a no-op otherwise).
void notify(const std::string& state) { sd_notify(0, state.c_str()); }

ExporterLimits limitsOf(const AgentConfig& c) {
  ExporterLimits l;
  l.top_processes = c.top_processes;
  l.max_cgroups = c.max_cgroups;
  l.max_series = c.max_series;
  return l;
}

HttpResponse jsonResponse(int status, const nlohmann::json& j) {
  return HttpResponse{status, "application/json", dumpJson(j) + "\n"};
}

struct Captured {
  int status = -1;  // wait status; -1 when it could not start or ran out of time
  std::string out, err;
};

// Runs argv to completion (posix_spawn: safe from a threaded process), capturing its output.
Captured runCaptured(const std::vector<std::string>& argv, std::chrono::seconds timeout) {
  Captured c;
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return c;
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return c;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&fa, err[1], STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));  // NOLINT: posix_spawn's type
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  ::close(err[1]);
  if (rc != 0) {
    ::close(out[0]);
    ::close(err[0]);
    c.err = std::strerror(rc);
    return c;
  }
  auto end = Clock::now() + timeout;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0 && Clock::now() < end) {
    if (::poll(fds, 2, 200) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP)) == 0) continue;
      char buf[4096];
      ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        (i == 0 ? c.out : c.err).append(buf, static_cast<std::size_t>(n));
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) ::close(f.fd);
  }
  if (open_fds > 0) ::kill(pid, SIGKILL);  // out of time
  int st = 0;
  ::waitpid(pid, &st, 0);
  c.status = open_fds > 0 ? -1 : st;
  return c;
}

bool hasProverRule(const std::vector<RoleRule>& rules) {
  return std::any_of(rules.begin(), rules.end(), [](const RoleRule& r) { return r.role == Role::kProver; });
}

class Agent {
 public:
  // `fs` and `self_fs` outlive the agent (the collector holds the first).
  Agent(const AgentOptions& opts, AgentConfig cfg, const FsRoot& fs, const FsRoot& self_fs, Collector collector)
      : opts_(opts),
        cfg_(std::move(cfg)),
        fs_(fs),
        self_fs_(self_fs),
        collector_(std::move(collector)),
        roles_(cfg_.role_rules),
        exporter_(limitsOf(cfg_)) {
    self_.start_time_seconds = unixNow();
    started_mono_ns_ = monoNs();
  }

  ~Agent() { server_.reset(); }  // no HTTP thread may outlive what it reads
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  int run(std::ostream& err);

 private:
  void startSensors();
  void startJournal();
  void journalOom(const OomEvent& e);  // before the budget reacts: the record holds the budget in force
  void readSelfReport();
  void sample();
  // The prover's budget, each sample: which cgroup, the controller's decision, what is served.
  std::string budgetCgroup() const;  // configured, or where the prover was last seen; "" none
  void addBudgetCgroup(RawSample& raw) const;
  void updateBudget(const Snapshot& snap);
  void openController(const std::string& cgroup);
  void saveBudgetState(const char* why);
  void budgetUnavailable(const std::string& why, const std::string& cgroup = "");
  void budgetOnOom(const OomEvent& e);
  void writeBudgetFile(const BudgetDecision& d);
  std::size_t consumeEvents();  // the OOM kills among them
  void handleOom(const OomEvent& e);  // metrics, log, journal, budget, /v1/ooms
  // Without a kernel source of OOM kills: those the cgroups' counters show since the last sample.
  void countedOoms(const Snapshot& snap);
  void reload();
  void updateSelf();
  std::pair<std::string, Role> resolveVictim(const OomVictim& v) const;
  // The memory cgroup ids (directory inodes) the BPF filter should hold for `paths`.
  std::vector<std::uint64_t> cgroupIds(const std::vector<std::string>& paths) const;
  SensorCounters counters() const;  // monotonic across sensor restarts

  HttpResponse metrics();
  HttpResponse healthz() const;
  HttpResponse snapshotJson() const;
  HttpResponse oomsJson(const HttpQuery& q) const;
  HttpResponse probe(const HttpQuery& q);
  HttpResponse budgetJson() const;
  void publishProbeSettings();  // what the HTTP thread may read of the config

  const AgentOptions& opts_;
  AgentConfig cfg_;
  const FsRoot& fs_;
  const FsRoot& self_fs_;  // the live / for the agent's own footprint, whatever --root says
  Collector collector_;
  RoleMatcher roles_;
  Exporter exporter_;
  std::unique_ptr<Sensors> sensors_;
  std::unique_ptr<HttpServer> server_;
  AgentSelf self_;
  std::unique_ptr<JournalWriter> journal_;
  std::string journal_off_;  // why the journal is off ("" when on)
  FlightRecorder flight_;
  // The last samples (main thread only): an OOM record describes the last one before the kill,
  // and the kill is reported up to a few seconds after it, when samples of the emptied cgroup
  // have come in already.
  std::deque<std::shared_ptr<const Snapshot>> recent_;
  HostInfo host_;
  std::optional<SelfReportSource> self_src_;
  std::optional<std::uint64_t> self_reported_;  // the prover's word at the last sample
  std::string self_report_error_;               // said once, until it reads again
  std::set<pid_t> cuda_checked_;  // pids whose maps were searched for libcuda
  OomCounterWatch counter_watch_;  // OOM kills from the cgroups' counters (no kernel source)
  bool counters_only_said_ = false;
  std::uint64_t counted_ids_ = 0;
  std::string last_sample_error_;
  std::vector<std::string> last_missing_;       // watched cgroups missing at the last sample
  std::vector<std::uint64_t> tracked_ids_;      // what the BPF cgroup filter holds
  SensorCounters counter_base_;                 // what sensors stopped by a reload had counted
  Clock::time_point last_sample_start_{};
  std::int64_t started_mono_ns_ = 0;

  // The budget (main thread only).
  std::optional<BudgetController> controller_;
  std::string controller_cgroup_;   // the cgroup controller_ decides for
  std::string prover_seen_in_;      // auto mode: the cgroup the prover was last seen in
  std::string state_path_;
  bool state_frozen_ = false;       // the state file was unreadable: never overwritten
  bool state_save_failing_ = false; // said once, until a save works again
  bool state_unsaved_ = false;      // learned something the file does not hold yet
  bool grown_unpublished_ = false;  // the margin grew and no decision has used it yet
  std::optional<std::int64_t> clean_since_ns_;  // prover present, no kill, since then
  std::uint64_t published_generation_ = 0;
  std::string budget_unavailable_;  // the reason last logged, so it is said once
  bool budget_file_failing_ = false;
  bool budget_now_ = false;         // a kill grew the margin: decide again at once
  // What this sample will publish, handed to the HTTP thread with the snapshot, after the
  // exporter's update: /v1/budget never shows a generation /metrics does not have yet.
  struct BudgetPublication {
    HttpResponse response;
    std::string cgroup;
    std::uint64_t prover_usage = 0;
  };
  std::optional<BudgetPublication> budget_pending_;

  // Read by the HTTP thread.
  mutable std::mutex mu_;
  nlohmann::json journal_state_;  // for /healthz
  std::shared_ptr<const Snapshot> snapshot_;
  std::vector<SensorStatus> sensor_status_;
  std::deque<std::string> ooms_;  // each event dumped, so its size is what it costs
  std::uint64_t ooms_total_ = 0;
  std::int64_t last_sample_mono_ns_ = 0;  // 0: none yet
  std::int64_t interval_ns_ = 0;
  std::uint64_t samples_total_ = 0;
  std::uint64_t sample_failures_total_ = 0;
  std::string last_error_;
  double last_scrape_s_ = 0;
  bool probe_enabled_ = false;
  Clock::duration probe_min_interval_{};
  std::string probe_cgroup_;
  std::optional<Clock::time_point> last_probe_;
  std::mutex probe_running_;           // one probe at a time
  std::atomic<bool> sample_soon_{false};  // a probe finished: show its figures now
  std::atomic<bool> probe_active_{false};  // the budget holds still while a probe allocates
  HttpResponse budget_response_{503, "application/json", "{\"error\":\"no sample yet: the first budget comes with the first sample\"}\n"};
  std::string budget_cgroup_published_;     // for the probe handler
  std::uint64_t prover_usage_published_ = 0;
  std::optional<std::pair<std::string, ProbeFinding>> probe_finding_;  // by cgroup
};

void Agent::publishProbeSettings() {
  std::lock_guard lock(mu_);
  probe_enabled_ = cfg_.probe_enabled;
  probe_min_interval_ = cfg_.probe_min_interval;
  probe_cgroup_ = cfg_.probe_cgroup;
}

HttpResponse Agent::probe(const HttpQuery& q) {
  std::string cgroup;
  Clock::duration min_interval{};
  {
    std::lock_guard lock(mu_);
    if (!probe_enabled_) {
      exporter_.countProbe("refused");
      return jsonResponse(403, {{"error", "the probe is off: set probe.enabled = true (--probe.enabled)"}});
    }
    cgroup = probe_cgroup_;
    min_interval = probe_min_interval_;
  }
  if (auto it = q.find("cgroup"); it != q.end()) cgroup = it->second;
  if (cgroup.empty()) {
    exporter_.countProbe("refused");
    return jsonResponse(400, {{"error", "which cgroup? ?cgroup=PATH, or config key probe.cgroup"}});
  }
  std::unique_lock running(probe_running_, std::try_to_lock);
  if (!running.owns_lock()) {
    exporter_.countProbe("refused");
    return jsonResponse(409, {{"error", "a probe is running"}});
  }
  {
    std::lock_guard lock(mu_);
    auto now = Clock::now();
    if (last_probe_ && now - *last_probe_ < min_interval) {
      exporter_.countProbe("refused");
      double wait = std::chrono::duration<double>(*last_probe_ + min_interval - now).count();
      return jsonResponse(429, {{"error", "probed too recently (config key probe.min_interval)"},
                                {"retry_after_seconds", wait}});
    }
    last_probe_ = now;
  }
  // The probe forks a child that allocates: run it as its own process, never from this
  // threaded one.
  auto exe = self_fs_.readLink("/proc/self/exe");
  if (!exe) {
    exporter_.countProbe("failed");
    return jsonResponse(500, {{"error", exe.error().describe()}});
  }
  std::vector<std::string> argv = {*exe, "--root", opts_.root, "probe", "--json", "--cgroup", cgroup};
  for (const char* opt : {"stop_margin", "chunk", "max", "touch"}) {
    if (auto it = q.find(opt); it != q.end()) {
      std::string flag = std::string("--") + opt;
      std::replace(flag.begin(), flag.end(), '_', '-');
      argv.insert(argv.end(), {flag, it->second});
    }
  }
  spdlog::info("probe of {} requested", cgroup);
  // A probe of the prover's cgroup caps its budget (allocatable plus what the prover held when
  // it started); while it allocates, the budget holds still rather than follow the probe.
  bool for_budget = false;
  std::uint64_t prover_usage = 0;
  {
    std::lock_guard lock(mu_);
    for_budget = !budget_cgroup_published_.empty() && normaliseCgroupPath(cgroup) == budget_cgroup_published_;
    prover_usage = prover_usage_published_;
  }
  std::int64_t probe_start_ns = monoNs();
  if (for_budget) probe_active_ = true;
  Captured c = runCaptured(argv, std::chrono::minutes(15));
  probe_active_ = false;
  int code = c.status >= 0 && WIFEXITED(c.status) ? WEXITSTATUS(c.status) : -1;
  if (code == kExitBadInput) {
    exporter_.countProbe("refused");
    std::string msg = c.err;
    while (!msg.empty() && msg.back() == '\n') msg.pop_back();
    return jsonResponse(400, {{"error", msg}});
  }
  auto j = nlohmann::json::parse(c.out, nullptr, false);
  if ((code != kExitOk && code != kExitAborted) || j.is_discarded()) {
    exporter_.countProbe("failed");
    spdlog::error("probe of {} failed (exit {}): {}", cgroup, code, c.err);
    return jsonResponse(500, {{"error", fmt::format("the probe failed (exit {}): {}", code, c.err)}});
  }
  Exporter::ProbeFigures f;
  f.allocatable_bytes = j.value("allocatable_bytes", 0.0);
  f.allocated_bytes = j.value("allocated_bytes", 0.0);
  f.others_growth_bytes = j.value("others_growth_bytes", 0.0);
  f.kernel_overhead_bytes = j.value("kernel_overhead_bytes", 0.0);
  f.bytes_per_second = j.value("bytes_per_second", 0.0);
  f.duration_seconds = j.value("duration_seconds", 0.0);
  f.timestamp_s = j.value("started_at", unixNow());
  f.aborted = j.value("aborted", false);
  exporter_.recordProbe(j.value("cgroup", cgroup), f);
  exporter_.countProbe(f.aborted ? "aborted" : "done");
  if (for_budget) {
    // An aborted probe stopped where pressure rose: that is a fair cap too.
    std::lock_guard lock(mu_);
    probe_finding_.emplace(normaliseCgroupPath(j.value("cgroup", cgroup)),
                           ProbeFinding{static_cast<std::uint64_t>(f.allocatable_bytes), prover_usage, probe_start_ns});
  }
  spdlog::info("probe of {}: {} allocatable{}", cgroup, formatBytes(static_cast<std::uint64_t>(f.allocatable_bytes)),
               f.aborted ? " (aborted: pressure rose)" : "");
  sample_soon_ = true;
  return jsonResponse(200, j);
}

void Agent::startSensors() {
  SensorsConfig sc = cfg_.sensors;
  // Watching some cgroups: the per-process programs count only those (filtered in the kernel).
  if (!cfg_.cgroups.empty()) {
    tracked_ids_ = cgroupIds(cfg_.cgroups);
    sc.tracked_cgroups = tracked_ids_;
  } else {
    tracked_ids_.clear();
  }
  // The sensors read the live kernel: a fixture root has none.
  if (!fs_.isLive()) {
    sc.bpf = false;
    sc.kmsg = false;
  }
  sensors_ = Sensors::start(fs_, sc, collector_.mounts());
  cuda_checked_.clear();  // Sensors::start logged each sensor's state
  std::lock_guard lock(mu_);
  sensor_status_ = sensors_->status();
}

std::string Agent::budgetCgroup() const {
  if (!cfg_.budget.enabled) return {};
  return cfg_.budget.cgroup.empty() ? prover_seen_in_ : cfg_.budget.cgroup;
}

void Agent::addBudgetCgroup(RawSample& raw) const {
  // Watching every cgroup that holds a process, a prover cgroup still empty (the launch script
  // asks before the prover starts) would be missing: read it, and its ancestors for the bounds.
  std::string path = budgetCgroup();
  if (path.empty()) return;
  auto has = [&](const std::string& p) {
    return std::any_of(raw.cgroups.begin(), raw.cgroups.end(), [&](const CgroupMemory& c) { return c.path == p; });
  };
  if (has(path)) return;
  auto cg = collector_.hierarchy().read(path);
  if (!cg) return;  // budgetInputs says it is not there
  for (auto parent = parentCgroup(path); parent; parent = parentCgroup(*parent)) {
    if (raw.ancestors.count(*parent) != 0 || has(*parent)) continue;
    if (auto a = collector_.hierarchy().read(*parent)) raw.ancestors.emplace(*parent, std::move(*a));
  }
  raw.cgroups.push_back(std::move(*cg));
}

void Agent::openController(const std::string& cgroup) {
  if (controller_) saveBudgetState("the prover's cgroup changed");
  state_path_ = cfg_.budget.state_file.empty() ? defaultStatePath(cgroup) : cfg_.budget.state_file;
  state_frozen_ = false;
  state_save_failing_ = false;
  state_unsaved_ = false;
  ControllerState state;
  auto loaded = loadState(state_path_);
  if (!loaded) {
    // Overwriting it would throw away what an operator may want to read or repair.
    spdlog::warn("budget: {}; starting from a fresh state, and leaving that file as it is: nothing learned is "
                 "saved until it is repaired or removed",
                 loaded.error().describe());
    state_frozen_ = true;
  } else if (*loaded) {
    state = std::move(**loaded);
    spdlog::info("budget for {}: state from {}: learned margin {}, {} OOM kill(s), {} clean period(s)", cgroup, state_path_,
                 formatBytes(state.learned_margin), state.oom_kills, state.clean_runs);
  } else {
    spdlog::info("budget for {}: no state at {} yet, starting fresh", cgroup, state_path_);
  }
  state.retries = 0;  // `headroom run`'s count; the agent retries nothing
  controller_.emplace(cfg_.budget.policy, std::move(state));
  controller_cgroup_ = cgroup;
  clean_since_ns_.reset();
  grown_unpublished_ = false;
}

void Agent::saveBudgetState(const char* why) {
  if (!controller_ || !state_unsaved_) return;
  if (state_frozen_) {
    spdlog::warn("budget: not saving the state ({}): {} was unreadable at start and is left as it is", why, state_path_);
    return;
  }
  auto st = saveState(state_path_, controller_->state());
  if (!st) {
    if (!state_save_failing_)
      spdlog::warn("budget: cannot save the state ({}): {}; learning in memory only until it can", why, st.error().describe());
    state_save_failing_ = true;
    return;
  }
  if (state_save_failing_) spdlog::info("budget: state saved to {} again", state_path_);
  state_save_failing_ = false;
  state_unsaved_ = false;
}

void Agent::budgetUnavailable(const std::string& why, const std::string& cgroup) {
  if (why != budget_unavailable_) {
    spdlog::warn("no budget: {}", why);
    budget_unavailable_ = why;
  }
  exporter_.clearBudget();
  nlohmann::json j = {{"error", why}};
  if (!cgroup.empty()) j["cgroup"] = cgroup;
  budget_pending_ = BudgetPublication{jsonResponse(503, j), cgroup, 0};
}

void Agent::updateBudget(const Snapshot& snap) {
  if (!cfg_.budget.enabled) {
    controller_.reset();
    budgetUnavailable("the budget is off (budget.enabled = false)");
    return;
  }
  if (cfg_.budget.cgroup.empty()) {
    if (!hasProverRule(cfg_.role_rules)) {
      budgetUnavailable(
          "no prover to budget for: add a role rule for it (roles.rules, --role-rule prover=comm:NAME) or set "
          "budget.cgroup (--budget.cgroup)");
      return;
    }
    // The prover's cgroup: where the largest prover-role process is attributed; kept while a
    // prover runs there, and remembered when none runs (a launch script asks before it starts).
    const ProcessSnapshot* largest = nullptr;
    bool still_there = false;
    for (const ProcessSnapshot& p : snap.processes) {
      if (p.role != Role::kProver) continue;
      still_there = still_there || p.cgroup == prover_seen_in_;
      if (largest == nullptr || p.attribution.rss > largest->attribution.rss) largest = &p;
    }
    if (largest != nullptr && !still_there && !largest->cgroup.empty()) {
      spdlog::info("budget: the prover ({}, pid {}) runs in {}", largest->sample.comm, largest->sample.pid, largest->cgroup);
      prover_seen_in_ = largest->cgroup;
    }
    if (prover_seen_in_.empty()) {
      std::string rules;
      for (const RoleRule& r : cfg_.role_rules) {
        if (r.role == Role::kProver) rules += fmt::format("{}{}", rules.empty() ? "" : ", ", r.text());
      }
      budgetUnavailable(fmt::format("no process matching the prover rule(s) {} has been seen yet, and budget.cgroup is "
                                    "not set (set it to have a budget before the prover starts)",
                                    rules));
      return;
    }
  }
  const std::string cgroup = budgetCgroup();
  if (!controller_ || controller_cgroup_ != cgroup) openController(cgroup);
  if (probe_active_) return;  // the probe's allocations are not the neighbours' growth

  auto in = budgetInputs(snap, ProverScope{cgroup, std::nullopt});
  if (in) in->self_reported = self_reported_;
  if (!in) {
    budgetUnavailable(fmt::format("the prover's cgroup {} could not be read: it does not exist (yet), or is gone",
                                  cgroup),
                      cgroup);
    return;
  }
  {
    std::lock_guard lock(mu_);
    if (probe_finding_ && probe_finding_->first == cgroup) in->probe = probe_finding_->second;
  }
  // A clean period: the prover ran through it without an OOM kill.
  if (in->prover_processes == 0) {
    clean_since_ns_.reset();
  } else if (!clean_since_ns_) {
    clean_since_ns_ = in->time_ns;
  } else if (in->time_ns - *clean_since_ns_ >=
             std::chrono::duration_cast<std::chrono::nanoseconds>(cfg_.budget.policy.clean_period).count()) {
    clean_since_ns_ = in->time_ns;
    if (auto change = controller_->onCleanRun()) {
      spdlog::info("budget for {}: {}", cgroup, change->reason);
      exporter_.countMarginChange(cgroup, "give_back");
    }
    state_unsaved_ = true;
    saveBudgetState("a clean period");
  }

  BudgetDecision d = controller_->decide(*in);
  grown_unpublished_ = false;
  budget_unavailable_.clear();
  exporter_.recordBudget(d);
  if (d.generation != published_generation_) {
    if (d.valid) spdlog::info("budget for {}: generation {}: {}", cgroup, d.generation, d.reason);
    else spdlog::warn("no budget for {} (generation {}): {}", cgroup, d.generation, d.reason);
    writeBudgetFile(d);
    published_generation_ = d.generation;
  } else {
    spdlog::debug("budget for {}: {}", cgroup, d.reason);
  }
  double when = snap.wall_time_ns > 0 ? static_cast<double>(snap.wall_time_ns) / 1e9 : unixNow();
  nlohmann::json doc = headroom::budgetJson(d, controller_->state(), when);
  HttpResponse r;
  if (d.valid) {
    r = jsonResponse(200, doc);
  } else {
    r = jsonResponse(503, {{"error", fmt::format("no budget for {}: {}", cgroup, d.reason)}, {"cgroup", cgroup}, {"decision", doc}});
  }
  budget_pending_ = BudgetPublication{std::move(r), cgroup, in->prover_usage};
}

void Agent::writeBudgetFile(const BudgetDecision& d) {
  if (cfg_.budget.file.empty()) return;
  // No budget: no file, rather than a stale number a launch script would take for current.
  Status st = ok();
  if (!d.valid) {
    if (::unlink(cfg_.budget.file.c_str()) != 0 && errno != ENOENT)
      st = errnoError(fmt::format("removing {} (no budget)", cfg_.budget.file));
  } else {
    st = writeFileAtomic(cfg_.budget.file, fmt::format("{}\n", d.budget));
  }
  if (!st) {
    if (!budget_file_failing_) spdlog::warn("budget: cannot write the budget file: {}", st.error().describe());
    budget_file_failing_ = true;
    return;
  }
  if (budget_file_failing_) spdlog::info("budget: the budget file {} is written again", cfg_.budget.file);
  budget_file_failing_ = false;
}

void Agent::budgetOnOom(const OomEvent& e) {
  if (!cfg_.budget.enabled) return;
  std::shared_ptr<const Snapshot> snap;
  {
    std::lock_guard lock(mu_);
    snap = snapshot_;
  }
  KillEvidence k;
  k.time_ns = e.monotonic_time_ns != 0 ? e.monotonic_time_ns : monoNs();
  k.prover_victim = false;
  bool any = false;
  std::string cgroup = budgetCgroup();
  std::string what;
  for (const OomVictim& v : e.victims) {
    if (v.kill_skipped) continue;  // already exiting: the kernel sent no kill
    auto [attributed, role] = resolveVictim(v);
    // Auto mode: a prover killed before any sample saw it still tells where it runs.
    if (cgroup.empty() && cfg_.budget.cgroup.empty() && role == Role::kProver && !attributed.empty()) {
      spdlog::info("budget: the prover ({}, pid {}) ran in {}", v.comm, v.tgid, attributed);
      prover_seen_in_ = attributed;
      cgroup = attributed;
    }
    const std::string& memcg = v.cgroup.empty() ? attributed : v.cgroup;
    if (cgroup.empty() || !cgroupIsWithin(memcg, cgroup)) continue;
    bool prover = role == Role::kProver;
    // The prover's own kill is the evidence; a kill beside it counts only when none of the
    // prover's processes was a victim.
    if (prover && !k.prover_victim) {
      std::int64_t at = k.time_ns;
      k = KillEvidence{};
      k.time_ns = at;
      k.prover_victim = true;
      what.clear();
    } else if (!prover && k.prover_victim) {
      continue;
    }
    any = true;
    const ProcessSnapshot* p = nullptr;
    if (snap) {
      p = snap->findProcess(v.tgid != 0 ? v.tgid : v.pid);
      if (p != nullptr && p->sample.comm != v.comm) p = nullptr;  // a reused pid
    }
    if (v.anon_rss) {
      k.charge += *v.anon_rss + v.file_rss.value_or(0) + v.shmem_rss.value_or(0) + v.pgtables.value_or(0);
      k.page_tables += v.pgtables.value_or(0);
    } else if (p != nullptr) {  // the kernel's figures did not come: the last sample's
      k.charge += p->attribution.rss + p->attribution.page_tables;
      k.page_tables += p->attribution.page_tables;
    }
    if (p != nullptr) {
      k.pinned += p->attribution.pinned ? p->attribution.pinned->live_bytes : p->attribution.locked;
      k.kernel += p->attribution.overhead_share;
    }
    what += fmt::format("{}pid {} ({}) in {}", what.empty() ? "" : ", ", v.tgid != 0 ? v.tgid : v.pid, v.comm, memcg);
  }
  // The counter rose inside the prover's cgroup and no gone process stands for the kill.
  if (!any && e.from_counter && !cgroup.empty() && cgroupIsWithin(e.counter_cgroup, cgroup)) {
    any = true;
    what = fmt::format("{} kill(s) counted in {}", e.counted_kills, e.counter_cgroup);
  }
  if (!any) return;
  k.what = fmt::format("{}: {}", e.from_bpf ? "mark_victim" : e.from_kmsg ? "kernel OOM report" : "OOM-kill counter", what);
  if (!controller_ || controller_cgroup_ != cgroup) openController(cgroup);
  if (grown_unpublished_) {
    // Killed under the budget the last growth already answered: growing again would count one
    // shortfall twice.
    spdlog::warn("budget for {}: OOM kill ({}) before the grown margin was published: margin kept", cgroup, k.what);
    return;
  }
  if (controller_->lastValid()) k.budget = controller_->lastValid()->budget;  // the one it ran under
  MarginChange c = controller_->onOomKill(k);
  spdlog::warn("budget for {}: {}", cgroup, c.reason);
  exporter_.countMarginChange(cgroup, "oom_kill");
  grown_unpublished_ = true;
  clean_since_ns_.reset();
  state_unsaved_ = true;
  saveBudgetState("an OOM kill");
  budget_now_ = true;
}

void Agent::startJournal() {
  journal_.reset();  // the old file's lock goes first
  flight_.setWindow(std::chrono::duration_cast<std::chrono::nanoseconds>(cfg_.journal.flight_window).count());
  if (!cfg_.journal.enabled) {
    journal_off_ = "journal.enabled = false";
  } else if (auto w = JournalWriter::open(JournalOptions{cfg_.journal.path, cfg_.journal.max_bytes}); !w) {
    journal_off_ = w.error().describe();
    spdlog::error("the OOM journal is off: {} (the agent keeps running; set journal.path or --journal to another place)",
                  journal_off_);
  } else {
    journal_ = std::move(*w);
    journal_off_.clear();
    const JournalStats& st = journal_->stats();
    if (!st.torn_file.empty())
      spdlog::warn("journal {}: a torn last record (a crash mid-write) was set aside in {}", journal_->path(), st.torn_file);
    if (st.damaged_records > 0)
      spdlog::warn("journal {}: {} damaged record(s) found; readers skip them", journal_->path(), st.damaged_records);
    spdlog::info("journal: OOM kills are recorded in {}", journal_->path());
  }
  std::lock_guard lock(mu_);
  journal_state_ = journal_ ? nlohmann::json{{"state", "on"}, {"path", journal_->path()}}
                            : nlohmann::json{{"state", "off"}, {"path", cfg_.journal.path}, {"reason", journal_off_}};
}

void Agent::readSelfReport() {
  self_reported_.reset();
  if (!self_src_) return;
  Result<std::string> body = self_src_->kind == SelfReportSource::Kind::kFile
                                 ? readSelfReportFile(self_src_->location)
                                 : [&]() -> Result<std::string> {
                                     // Short: a slow prover endpoint must not stall the sample.
                                     auto r = httpGet(self_src_->location, std::chrono::milliseconds(500));
                                     if (!r) return unexpected(r.error());
                                     if (r->status != 200)
                                       return makeError(0, fmt::format("GET {}: HTTP {}", self_src_->location, r->status));
                                     return std::move(r->body);
                                   }();
  Result<std::uint64_t> v = body ? extractSelfReport(*self_src_, *body) : Result<std::uint64_t>(unexpected(body.error()));
  if (!v) {
    ++self_.self_report_failures_total;
    if (v.error().describe() != self_report_error_) {
      self_report_error_ = v.error().describe();
      spdlog::warn("prover.self_report: {}", self_report_error_);
    }
    return;
  }
  if (!self_report_error_.empty()) spdlog::info("prover.self_report reads again");
  self_report_error_.clear();
  self_reported_ = *v;
}

void Agent::journalOom(const OomEvent& e) {
  if (!journal_) return;
  // The kill's time on both clocks: the kernel's monotonic stamp, and the wall clock by the
  // distance from now.
  std::int64_t now_mono = monoNs();
  std::int64_t kill_mono = e.monotonic_time_ns > 0 && e.monotonic_time_ns <= now_mono ? e.monotonic_time_ns : now_mono;
  auto kill_wall = static_cast<std::int64_t>(unixNow() * 1e9) - (now_mono - kill_mono);
  // Samples read whole before the kill: one that began before it but read the victim's cgroup
  // after it would show the memory already freed.
  std::shared_ptr<const Snapshot> snap;
  for (const auto& r : recent_) {
    if ((r->completed_monotonic_ns != 0 ? r->completed_monotonic_ns : r->monotonic_time_ns) <= kill_mono) snap = r;
  }
  if (!snap && !recent_.empty()) snap = recent_.front();  // none before it: the oldest kept, said by its sampled_at
  RecordContext ctx;
  ctx.event = &e;
  ctx.last = snap.get();
  ctx.cgroup = oomRecordCgroup(e, ctx.last);
  for (FlightPoint& p : flight_.points(ctx.cgroup)) {
    bool done_before = p.completed_monotonic_ns != 0 ? p.completed_monotonic_ns <= kill_mono : p.wall_time_ns <= kill_wall;
    if (done_before) ctx.flight.push_back(std::move(p));  // what came before the kill
  }
  ctx.flight_window_ns = flight_.window();
  // The budget in force at the kill: for the prover's cgroup, inside what died or around it.
  std::string bc = budgetCgroup();
  bool prover_here = !bc.empty() && !ctx.cgroup.empty() && (cgroupIsWithin(bc, ctx.cgroup) || cgroupIsWithin(ctx.cgroup, bc));
  if (prover_here && controller_ && controller_cgroup_ == bc && controller_->lastValid())
    ctx.budget = &*controller_->lastValid();
  if (prover_here) ctx.self_reported = self_reported_;
  ctx.sensors = sensors_->status();
  ctx.host = host_;
  ctx.top_per_role = cfg_.top_processes;
  auto id = journal_->append(makeOomRecord(ctx));
  if (!id) {
    ++self_.journal_write_failures_total;
    spdlog::error("journal: the OOM kill could not be recorded: {}", id.error().describe());
    return;
  }
  spdlog::info("journal: OOM kill recorded as record {} in {} (headroom report --id {})", *id, journal_->path(), *id);
}

void Agent::updateSelf() {
  if (auto st = self_fs_.readFile("/proc/self/status")) {
    if (auto p = parseProcStatus(*st)) self_.rss_bytes = p->vm_rss;
  }
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) == 0) {
    self_.cpu_seconds = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                        static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  }
}

void Agent::sample() {
  auto t0 = Clock::now();
  last_sample_start_ = t0;
  CollectOptions co;
  co.cgroups = cfg_.cgroups;
  // The prover's cgroup is sampled whatever else is watched: its processes make the budget.
  if (std::string bc = budgetCgroup(); !bc.empty() && !co.cgroups.empty() &&
      std::none_of(co.cgroups.begin(), co.cgroups.end(), [&](const std::string& w) { return cgroupIsWithin(bc, w); }))
    co.cgroups.push_back(bc);
  co.missing_cgroups_ok = true;
  co.read_smaps = cfg_.smaps;
  co.max_processes = cfg_.max_processes;
  auto raw = collector_.collect(co);
  if (!raw) {
    ++self_.sample_failures_total;
    // Said once per distinct failure, not once per tick.
    if (raw.error().describe() != last_sample_error_) {
      last_sample_error_ = raw.error().describe();
      spdlog::error("sampling failed: {}", last_sample_error_);
    }
    std::lock_guard lock(mu_);
    sample_failures_total_ = self_.sample_failures_total;
    last_error_ = last_sample_error_;
    return;
  }
  if (raw->stats.cgroups_missing != last_missing_) {
    for (const std::string& c : raw->stats.cgroups_missing)
      spdlog::warn("watched cgroup {} does not exist (yet, or any more): sampling the rest, and it when it appears", c);
    last_missing_ = raw->stats.cgroups_missing;
  }
  if (!last_sample_error_.empty()) {
    spdlog::info("sampling works again");
    last_sample_error_.clear();
  }
  // CUDA libraries: look in the maps of processes not seen before (bounded by the live set).
  std::vector<pid_t> fresh;
  std::set<pid_t> live;
  for (const ProcessSample& p : raw->processes) {
    live.insert(p.pid);
    if (!cuda_checked_.count(p.pid)) fresh.push_back(p.pid);
  }
  cuda_checked_ = std::move(live);
  if (!fresh.empty()) sensors_->discoverCuda(fresh);
  if (!cfg_.cgroups.empty()) {
    // Descendants that hold processes appear and go: the filter follows them.
    std::vector<std::string> paths = cfg_.cgroups;
    for (const CgroupMemory& c : raw->cgroups) paths.push_back(c.path);
    auto ids = cgroupIds(paths);
    if (ids != tracked_ids_) {
      if (auto st = sensors_->trackCgroups(ids); st) tracked_ids_ = std::move(ids);
      else spdlog::warn("updating the BPF cgroup filter: {}", st.error().describe());
    }
  }
  SensorReadings readings = sensors_->readings(raw->processes);
  addBudgetCgroup(*raw);
  auto snap = buildSnapshot(std::move(*raw), roles_, std::move(readings));
  readSelfReport();
  std::map<std::string, std::uint64_t> self_by_cgroup;
  if (std::string bc = budgetCgroup(); !bc.empty() && self_reported_) self_by_cgroup[bc] = *self_reported_;
  flight_.record(*snap, self_by_cgroup);
  countedOoms(*snap);  // against the last sample, before this one is published
  updateBudget(*snap);

  ++self_.samples_total;
  self_.last_sample_duration_s = std::chrono::duration<double>(Clock::now() - t0).count();
  self_.last_sample_timestamp_s = unixNow();
  updateSelf();
  if (journal_) {
    const JournalStats& js = journal_->stats();
    self_.journal_up = true;
    self_.journal_records_total = js.records_written;
    self_.journal_write_failures_total = std::max(self_.journal_write_failures_total, js.write_failures);
    self_.journal_damaged_records_total = js.damaged_records;
    self_.journal_bytes = js.bytes;
  } else {
    self_.journal_up = false;
  }
  exporter_.update(*snap, counters(), self_);

  std::lock_guard lock(mu_);
  recent_.push_back(snap);
  // Enough to reach back past the OOM sources' settle time (2 s) at any interval; bounded.
  while (recent_.size() > 64 ||
         (recent_.size() > 2 && recent_.back()->monotonic_time_ns - recent_.front()->monotonic_time_ns > 10'000'000'000))
    recent_.pop_front();
  snapshot_ = std::move(snap);
  if (budget_pending_) {
    budget_response_ = std::move(budget_pending_->response);
    budget_cgroup_published_ = std::move(budget_pending_->cgroup);
    prover_usage_published_ = budget_pending_->prover_usage;
    budget_pending_.reset();
  }
  sensor_status_ = sensors_->status();
  last_sample_mono_ns_ = monoNs();
  interval_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(cfg_.interval).count();
  samples_total_ = self_.samples_total;
  last_error_.clear();
}

std::vector<std::uint64_t> Agent::cgroupIds(const std::vector<std::string>& paths) const {
  std::set<std::uint64_t> ids;
  for (const std::string& p : paths) {
    auto dir = collector_.hierarchy().open(normaliseCgroupPath(p));
    struct stat st {};
    if (dir && ::fstat(dir->fd(), &st) == 0) ids.insert(st.st_ino);
  }
  return {ids.begin(), ids.end()};
}

SensorCounters Agent::counters() const {
  SensorCounters c = sensors_->counters();
  c.oom_ring_drops += counter_base_.oom_ring_drops;
  c.exit_ring_drops += counter_base_.exit_ring_drops;
  c.map_full_drops += counter_base_.map_full_drops;
  c.kmsg_lost += counter_base_.kmsg_lost;
  c.kmsg_reports_abandoned += counter_base_.kmsg_reports_abandoned;
  c.events += counter_base_.events;
  if (!c.last_oom_mark_latency_ns) c.last_oom_mark_latency_ns = counter_base_.last_oom_mark_latency_ns;
  return c;
}

std::pair<std::string, Role> Agent::resolveVictim(const OomVictim& v) const {
  pid_t tgid = v.tgid != 0 ? v.tgid : v.pid;
  std::shared_ptr<const Snapshot> snap;
  {
    std::lock_guard lock(mu_);
    snap = snapshot_;
  }
  if (snap) {
    // Labelled like its process series (the watched cgroup it is attributed to), so that
    // PromQL can join the two.
    if (const ProcessSnapshot* p = snap->findProcess(tgid); p && p->sample.comm == v.comm) return {p->cgroup, p->role};
  }
  // Not in the last sample (it started and died between two): the rules still apply.
  return {v.cgroup, roles_.match(tgid, 0, v.comm, "", v.cgroup)};
}

void Agent::handleOom(const OomEvent& e) {
  double when = e.wall_time_ns > 0 ? static_cast<double>(e.wall_time_ns) / 1e9 : unixNow();
  for (const OomVictim& v : e.victims) {
    if (v.kill_skipped) continue;  // already exiting: the kernel sent no kill
    auto [cgroup, role] = resolveVictim(v);
    exporter_.recordOomKill(cgroup.empty() ? "unknown" : cgroup, role, v.comm, when);
  }
  // Counted kills no gone process could stand for: counted still, the process unknown.
  if (e.from_counter) {
    for (std::size_t i = e.victims.size(); i < e.counted_kills; ++i)
      exporter_.recordOomKill(e.counter_cgroup, roles_.match(0, 0, "", "", e.counter_cgroup), "unknown", when);
  }
  spdlog::warn("{}", describeOom(e));
  journalOom(e);
  budgetOnOom(e);
  // A global OOM on a big host dumps every task: keep the largest, say how many there were.
  constexpr std::size_t kTasksKept = 256;
  nlohmann::json j = toJson(e);
  j["tasks_total"] = e.tasks.size();
  if (e.tasks.size() > kTasksKept) {
    auto& tasks = j["tasks"];
    std::sort(tasks.begin(), tasks.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
      return a["rss_bytes"].get<std::uint64_t>() > b["rss_bytes"].get<std::uint64_t>();
    });
    tasks.erase(tasks.begin() + static_cast<std::ptrdiff_t>(kTasksKept), tasks.end());
  }
  std::lock_guard lock(mu_);
  ooms_.push_back(dumpJson(j));
  ++ooms_total_;
  while (ooms_.size() > cfg_.recent_ooms) ooms_.pop_front();
}

void Agent::countedOoms(const Snapshot& snap) {
  std::shared_ptr<const Snapshot> previous;
  {
    std::lock_guard lock(mu_);
    previous = snapshot_;
  }
  std::vector<OomEvent> events = counter_watch_.update(previous.get(), snap);  // the baseline moves every sample
  bool kernel_source = false;
  for (const SensorStatus& s : sensors_->status())
    kernel_source = kernel_source || ((s.name == "oom" || s.name == "kmsg") && s.state == SensorState::kActive);
  if (kernel_source) {
    counters_only_said_ = false;
    return;
  }
  if (!counters_only_said_) {
    spdlog::warn("OOM kills: neither BPF (oom:mark_victim) nor /dev/kmsg is available; they are counted from the "
                 "cgroups' OOM-kill counters at each sample, the victim inferred from the processes gone");
    counters_only_said_ = true;
  }
  for (OomEvent& e : events) {
    e.id = ++counted_ids_;
    handleOom(e);
  }
}

std::size_t Agent::consumeEvents() {
  std::size_t n = 0;
  for (OomEvent& e : sensors_->takeOomEvents()) {
    ++n;
    handleOom(e);
  }
  // Exits feed the budget controller; the agent only keeps the rings drained.
  (void)sensors_->takeExitEvents();
  return n;
}

void Agent::reload() {
  spdlog::info("SIGHUP: reloading the config{}", opts_.config_path ? " from " + *opts_.config_path : "");
  notify("RELOADING=1");
  auto cfg = agentConfig(opts_);
  if (!cfg) {
    ++self_.config_reload_failures_total;
    spdlog::error("config reload failed, the running config stays: {}", cfg.error().describe());
    notify("READY=1\nSTATUS=config reload failed; running config kept");
    return;
  }
  if (cfg->listen.text() != cfg_.listen.text())
    spdlog::warn("listen address {} takes effect at the next start (serving on {})", cfg->listen.text(),
                 server_ ? server_->address() : cfg_.listen.text());
  bool sensors_changed = !(cfg->sensors == cfg_.sensors);
  bool journal_changed = !(cfg->journal == cfg_.journal);
  // Another prover cgroup or state file: what was learned is saved, and the next sample opens
  // the new one. Only the policy changed: the learned state carries over.
  const BudgetConfig& nb = cfg->budget;
  if (controller_ && (nb.enabled != cfg_.budget.enabled || nb.cgroup != cfg_.budget.cgroup || nb.state_file != cfg_.budget.state_file)) {
    saveBudgetState("config reload");
    controller_.reset();
    controller_cgroup_.clear();
  } else if (controller_ && !(nb.policy == cfg_.budget.policy)) {
    ControllerState kept = controller_->state();
    controller_.emplace(nb.policy, std::move(kept));
    spdlog::info("budget: new policy applied, learned margin {} kept", formatBytes(controller_->state().learned_margin));
  }
  if (nb.cgroup != cfg_.budget.cgroup) prover_seen_in_.clear();
  ListenAddress listen = cfg_.listen;
  cfg_ = std::move(*cfg);
  cfg_.listen = listen;
  setupLogging(cfg_.log_format, opts_.log_level_given ? opts_.log_level : cfg_.log_level);
  roles_ = RoleMatcher(cfg_.role_rules);
  exporter_.setLimits(limitsOf(cfg_));
  publishProbeSettings();
  self_src_.reset();
  if (!cfg_.self_report.empty()) self_src_ = *parseSelfReportSource(cfg_.self_report);  // validated with the config
  if (journal_changed) startJournal();
  if (sensors_changed) {
    spdlog::info("sensor settings changed: restarting the sensors");
    (void)consumeEvents();  // nothing waiting in the rings is lost
    counter_base_ = counters();
    sensors_.reset();  // detach before attaching again
    startSensors();
  }
  {
    std::lock_guard lock(mu_);
    while (ooms_.size() > cfg_.recent_ooms) ooms_.pop_front();
  }
  ++self_.config_reloads_total;
  spdlog::info("config reloaded: {} role rule(s), {} watched cgroup(s), interval {} ms, sensors {}",
               cfg_.role_rules.size(), cfg_.cgroups.size(), cfg_.interval.count(), sensors_changed ? "restarted" : "kept");
  notify("READY=1\nSTATUS=config reloaded");
}

HttpResponse Agent::metrics() {
  auto t0 = Clock::now();
  double previous = 0;
  {
    std::lock_guard lock(mu_);
    previous = last_scrape_s_;
  }
  HttpResponse r{200, "text/plain; version=0.0.4; charset=utf-8", exporter_.render(previous)};
  std::lock_guard lock(mu_);
  last_scrape_s_ = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

HttpResponse Agent::healthz() const {
  std::lock_guard lock(mu_);
  std::int64_t now = monoNs();
  // Stalled: no sample for three intervals (and a second of slack for a slow one).
  std::int64_t stall_ns = 3 * interval_ns_ + 1'000'000'000;
  nlohmann::json j;
  int status = 200;
  if (last_sample_mono_ns_ == 0) {
    j["status"] = "starting";
    status = 503;
    j["last_sample_age_seconds"] = nullptr;
  } else {
    double age = static_cast<double>(now - last_sample_mono_ns_) / 1e9;
    j["last_sample_age_seconds"] = age;
    if (now - last_sample_mono_ns_ > stall_ns) {
      j["status"] = "stalled";
      status = 503;
    } else {
      j["status"] = "ok";
    }
  }
  j["interval_seconds"] = static_cast<double>(interval_ns_) / 1e9;
  j["uptime_seconds"] = static_cast<double>(now - started_mono_ns_) / 1e9;
  j["samples_total"] = samples_total_;
  j["sample_failures_total"] = sample_failures_total_;
  j["last_error"] = last_error_.empty() ? nlohmann::json(nullptr) : nlohmann::json(last_error_);
  j["version"] = std::string(kVersion);
  j["journal"] = journal_state_;
  j["sensors"] = nlohmann::json::array();
  for (const SensorStatus& s : sensor_status_)
    j["sensors"].push_back({{"name", s.name}, {"state", toString(s.state)}, {"reason", s.reason}});
  return jsonResponse(status, j);
}

HttpResponse Agent::budgetJson() const {
  std::lock_guard lock(mu_);
  return budget_response_;
}

HttpResponse Agent::snapshotJson() const {
  std::shared_ptr<const Snapshot> snap;
  {
    std::lock_guard lock(mu_);
    snap = snapshot_;
  }
  if (!snap) return jsonResponse(503, {{"error", "no sample yet"}});
  return jsonResponse(200, toJson(*snap));
}

HttpResponse Agent::oomsJson(const HttpQuery& q) const {
  std::size_t limit = SIZE_MAX;
  if (auto it = q.find("limit"); it != q.end()) {
    auto n = parseU64(it->second);
    if (!n) return jsonResponse(400, {{"error", fmt::format("limit={}: not a count", it->second)}});
    limit = *n;
  }
  std::lock_guard lock(mu_);
  std::size_t skip = ooms_.size() > limit ? ooms_.size() - limit : 0;
  std::string body = fmt::format(R"({{"total":{},"kept":{},"events":[)", ooms_total_, ooms_.size());
  for (std::size_t i = skip; i < ooms_.size(); ++i) {
    if (i > skip) body += ',';
    body += ooms_[i];
  }
  body += "]}\n";
  return HttpResponse{200, "application/json", std::move(body)};
}

int Agent::run(std::ostream& err) {
  startSensors();
  if (!cfg_.self_report.empty()) self_src_ = *parseSelfReportSource(cfg_.self_report);  // validated with the config
  {
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) == 0) host_.hostname = name;
    utsname u{};
    if (::uname(&u) == 0) host_.kernel = u.release;
    host_.agent_version = std::string(kVersion);
  }
  startJournal();
  std::map<std::string, HttpHandler> routes;
  routes["/metrics"] = [this](const HttpQuery&) { return metrics(); };
  routes["/healthz"] = [this](const HttpQuery&) { return healthz(); };
  routes["/v1/snapshot"] = [this](const HttpQuery&) { return snapshotJson(); };
  routes["/v1/ooms"] = [this](const HttpQuery& q) { return oomsJson(q); };
  routes["/v1/budget"] = [this](const HttpQuery&) { return budgetJson(); };
  routes["/v1/probe"] = [](const HttpQuery&) {
    return jsonResponse(405, {{"error", "POST /v1/probe runs a probe (when probe.enabled)"}});
  };
  std::map<std::string, HttpHandler> post_routes;
  post_routes["/v1/probe"] = [this](const HttpQuery& q) { return probe(q); };
  publishProbeSettings();
  auto server = HttpServer::start(cfg_.listen, routes, post_routes);
  if (!server) {
    err << "headroom agent: --listen: " << server.error().describe() << "\n";
    return kExitFailure;
  }
  server_ = std::move(*server);
  spdlog::info("headroom {} serving on http://{} (/metrics /healthz /v1/snapshot /v1/budget /v1/ooms{}), cgroup v{} memory at {}",
               kVersion, server_->address(), cfg_.probe_enabled ? ", POST /v1/probe" : "", collector_.hierarchy().version(),
               fs_.display(collector_.hierarchy().mount().mount_point));
  if (auto w = collector_.hierarchy().nsWarning()) spdlog::warn("{}", *w);
  else spdlog::info("memory hierarchy at {}: {}", fs_.display(collector_.hierarchy().mount().mount_point),
                    collector_.hierarchy().nsDescription());

  std::uint64_t watchdog_usec = 0;
  bool watchdog = sd_watchdog_enabled(0, &watchdog_usec) > 0 && watchdog_usec > 0;
  auto watchdog_every = std::chrono::microseconds(watchdog_usec / 2);
  auto next_watchdog = Clock::now();

  sample();
  notify(fmt::format("READY=1\nSTATUS=serving on {}\nMAINPID={}", server_->address(), ::getpid()));
  auto next_sample = Clock::now() + cfg_.interval;
  while (!g_stop) {
    if (g_reload.exchange(false)) {
      reload();
      next_sample = Clock::now();  // show the new settings at once
    }
    if (sample_soon_.exchange(false)) next_sample = Clock::now();
    auto now = Clock::now();
    if (now >= next_sample) {
      sample();
      // A sample that took longer than the interval is not made up for: the next is one
      // interval from now, so a slow machine is sampled less often, never in a burst.
      next_sample += cfg_.interval;
      if (next_sample <= Clock::now()) next_sample = Clock::now() + cfg_.interval;
    }
    if (watchdog && now >= next_watchdog) {
      notify("WATCHDOG=1");
      next_watchdog = now + watchdog_every;
    }
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_sample - Clock::now());
    wait = std::clamp(wait, std::chrono::milliseconds(0), std::chrono::milliseconds(100));
    sensors_->poll(static_cast<int>(wait.count()));
    // An OOM kill shows on the next scrape, not an interval later; a storm of them does not
    // make the agent sample without pause (at most one extra sample a second).
    if (consumeEvents() > 0)
      next_sample = std::min(next_sample, last_sample_start_ + std::min<Clock::duration>(cfg_.interval, std::chrono::seconds(1)));
    // The prover was OOM-killed: its grown margin is published now, not an interval later.
    if (std::exchange(budget_now_, false)) next_sample = Clock::now();
  }
  spdlog::info("stopping: detaching the sensors");
  notify("STOPPING=1");
  server_.reset();
  (void)consumeEvents();
  sensors_.reset();
  saveBudgetState("stopping");
  spdlog::info("stopped");
  return kExitOk;
}

}  // namespace

Result<AgentConfig> agentConfig(const AgentOptions& opts) {
  AgentConfig cfg;
  if (opts.config_path) {
    auto loaded = loadAgentConfig(*opts.config_path);
    if (!loaded) return loaded.error();
    cfg = std::move(*loaded);
  }
  for (const auto& [key, values] : opts.flags) {
    if (auto st = applyConfigFlag(cfg, key, values); !st) return st.error();
  }
  return cfg;
}

int runAgent(const AgentOptions& opts, std::ostream& out, std::ostream& err) {
  if (!opts.check_config) installSignalHandlers();  // before anything slow: an early SIGHUP must not kill it
  auto cfg = agentConfig(opts);
  if (!cfg) {
    err << "headroom agent: " << cfg.error().describe() << "\n";
    return kExitBadInput;
  }
  if (opts.check_config) {
    std::string budget = !cfg->budget.enabled              ? "off"
                         : !cfg->budget.cgroup.empty()         ? fmt::format("for {}", cfg->budget.cgroup)
                         : hasProverRule(cfg->role_rules)      ? std::string("for the prover's cgroup")
                                                               : std::string("none (no prover rule, no budget.cgroup)");
    out << fmt::format("config OK{}: listen {}, interval {} ms, {} role rule(s), {} watched cgroup(s), log {} {}, budget {}\n",
                       opts.config_path ? " (" + *opts.config_path + ")" : " (defaults)", cfg->listen.text(),
                       cfg->interval.count(), cfg->role_rules.size(),
                       cfg->cgroups.empty() ? std::string("all") : std::to_string(cfg->cgroups.size()),
                       toString(cfg->log_format), cfg->log_level, budget);
    return kExitOk;
  }
  setupLogging(cfg->log_format, opts.log_level_given ? opts.log_level : cfg->log_level);
  routeLibbpfLogToSpdlog();

  auto host = openHost(opts.root);
  if (!host) {
    err << "headroom agent: " << host.error().describe() << "\n";
    return kExitBadInput;
  }
  auto self_fs = FsRoot::open("/");
  if (!self_fs) {
    err << "headroom agent: " << self_fs.error().describe() << "\n";
    return kExitFailure;
  }
  Agent agent(opts, std::move(*cfg), *host->fs, *self_fs, std::move(*host->collector));
  return agent.run(err);
}

}  // namespace headroom::cli
