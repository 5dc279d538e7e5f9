// The agent's main thread: the sampling loop and everything it drives. See daemon/agent.h.
#include "headroom/daemon/agent.h"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <malloc.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <iterator>

#include "headroom/controller/prover_budget.h"
#include "headroom/daemon/early_warning.h"
#include "headroom/daemon/gpu_reader.h"
#include "headroom/daemon/http_api.h"
#include "headroom/daemon/walk_pacer.h"
#include "headroom/daemon/warning_outlet.h"
#include "headroom/exporter/exporter.h"
#include "headroom/incidents/kill_path.h"
#include "headroom/model/snapshot.h"
#include "headroom/net/http_server.h"
#include "headroom/sensors/sensors.h"
#include "headroom/sources/cgroup_index.h"
#include "headroom/sources/collector.h"
#include "headroom/sources/procfs.h"
#include "headroom/sources/self_report.h"
#include "headroom/sources/self_report_fetcher.h"
#include "headroom/util/clock.h"
#include "headroom/util/logging.h"
#include "headroom/util/numbers.h"
#include "headroom/util/units.h"
#include "headroom/version.h"

namespace headroom {
namespace {

using Clock = std::chrono::steady_clock;

// Between two walks, at most this many processes are read again from /proc (a few files each);
// more to read: a walk instead.
constexpr std::size_t kRefreshedAtMost = 64;
// While a prover rule has no process to name (its launch script waiting for a budget), walks are
// at most this far apart whatever their budget (process_walk_max_interval may be longer).
constexpr std::chrono::seconds kAwaitingProverWalk{10};

WalkPacing walkPacingOf(const AgentConfig& c) { return WalkPacing{c.process_walk_budget, c.process_walk_max_interval}; }

PssPolicy pssPolicyOf(const AgentConfig& c) {
  return PssPolicy{std::chrono::duration_cast<std::chrono::nanoseconds>(c.pss_max_age), c.pss_step,
                   c.pss_reads_per_second};
}

std::atomic<bool> g_stop{false};
std::atomic<bool> g_reload{false};
// The running agent's wakeup (an eventfd): a signal ends the main loop's wait at once, whichever
// thread the kernel delivers it to.
std::atomic<int> g_wake_fd{-1};

void wake(int fd) {
  if (fd < 0) return;
  const std::uint64_t one = 1;
  const int saved = errno;  // a signal handler must leave errno as it found it
  (void)!::write(fd, &one, sizeof one);
  errno = saved;
}

extern "C" void onAgentSignal(int sig) {
  if (sig == SIGHUP)
    g_reload = true;
  else
    g_stop = true;
  wake(g_wake_fd.load());
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

ApiSettings apiSettingsOf(const AgentConfig& c) {
  return {.probe_enabled = c.probe_enabled, .probe_min_interval = c.probe_min_interval, .probe_cgroup = c.probe_cgroup};
}

KillPathSettings killPathSettingsOf(const AgentConfig& c) {
  return {.journal = c.journal,
          .events = c.events,
          .recent_ooms = c.recent_ooms,
          .top_per_role = c.top_processes,
          .role_rules = c.role_rules};
}

// `self`: the live / (the boot is the agent's own, whatever --root says).
HostIdentity thisHost(const FsRoot& self) {
  HostIdentity h;
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) == 0) h.hostname = name.data();
  utsname u{};
  if (::uname(&u) == 0) h.kernel = u.release;
  h.agent_version = std::string(kVersion);
  if (auto boot = self.readFile("/proc/sys/kernel/random/boot_id")) h.boot_id = std::string(trim(*boot));
  return h;
}

constexpr const char* kSampling = "sampling";
// An oom_score_adj at or below this takes half the machine's memory off the agent's badness: the
// OOM killer picks it only when nothing else is left to pick.
constexpr int kProtectedOomScoreAdj = -500;
constexpr const char* kSelfReport = "self-report";

}  // namespace

void installAgentSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = onAgentSignal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaction(sig, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

struct Agent::Impl {
  Impl(AgentSetup setup, SourceRoot source, FsRoot self_fs, std::vector<std::string> probe_command,
       std::string probe_unavailable)
      : setup_(std::move(setup)),
        cfg_(setup_.config),
        source_(std::move(source)),
        self_fs_(std::move(self_fs)),
        index_(source_.collector->hierarchy()),
        roles_(cfg_.role_rules),
        exporter_(limitsOf(cfg_)),
        budget_(cfg_.budget, cfg_.role_rules, ProverBudget::Options{}),
        kills_(exporter_, budget_, thisHost(self_fs_)),
        api_(exporter_, kills_.board(), std::move(probe_command), std::move(probe_unavailable)),
        names_(std::make_unique<WorkloadResolver>(*source_.fs, cfg_.workloads)),
        early_(*source_.fs, source_.collector->hierarchy(), cfg_.warning),
        outlet_(exporter_, kills_, cfg_.warning.on_warning) {
    self_.start_time_seconds = unixSeconds();
    kills_.setWarningOf([this](const OomEvent& e, const std::string& cgroup) { return warningAtKill(e, cgroup); });
    g_wake_fd = wake_.get();
    api_.setWakeFd(wake_.get());
  }
  ~Impl() {
    g_wake_fd = -1;
    server_.reset();  // no HTTP thread may outlive what it reads
  }

  // Written to end the main loop's wait: a signal, a probe done through the API.
  Fd wake_{::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)};

  Status run();
  void startSensors();
  void sensorsStarted();  // hands the kill path what their start found
  void sample();
  // Whether this sample must walk every process, whatever the walks cost: a warning in force, a
  // counted kill whose victim is still to go.
  bool mustWalk() const;
  // A prover rule and no prover seen yet (a launch script waits for its budget, and only a walk
  // finds a new process outside the cgroups read between walks): walks at least every
  // kAwaitingProverWalk, whatever their budget.
  bool awaitingProver(Clock::time_point now) const;
  // The prover's cgroup is sampled whatever else is watched, and when it holds no process yet
  // (a launch script asks before the prover starts) it is read with its ancestors for the bounds.
  void addBudgetCgroup(RawSample& raw) const;
  std::optional<SamplePublication::Budget> updateBudget(const Snapshot& snap);
  void readSelfReport();
  // The agent's own oom_score_adj, read at each sample: said at start and when it changes.
  void readOomScoreAdj();
  // Hands each OOM incident the sensors joined to the kill path; returns how many there were.
  std::size_t consumeEvents();
  void reload();
  void updateSelf();
  // The early warning: its changes published (true when a warning started or ended: sample at
  // once), its fast readings between samples, and whether a kill was warned of.
  bool warnings(const Snapshot* snap, bool sampled);
  bool fastTick();
  std::optional<nlohmann::json> warningAtKill(const OomEvent& e, const std::string& cgroup);
  SensorCounters counters() const;  // monotonic across sensor restarts

  AgentSetup setup_;
  AgentConfig cfg_;
  SourceRoot source_;
  FsRoot self_fs_;  // the live / for the agent's own footprint, whatever --root says
  CgroupIndex index_;
  RoleMatcher roles_;
  Exporter exporter_;
  ProverBudget budget_;
  KillPath kills_;  // every OOM kill, from the joined incident to what is published
  HttpApi api_;
  std::unique_ptr<HttpServer> server_;  // after api_: destroyed before what it calls
  std::unique_ptr<Sensors> sensors_;
  GpuReader gpu_;  // device memory per GPU and process (NVML)
  // What the sampler remembers of each process between samples: its /proc reads only when due.
  ProcessCache processes_{pssPolicyOf(cfg_)};
  CgroupFileCache cgroup_files_;             // the watched cgroups' files, held open between samples
  WalkPacer walks_{walkPacingOf(cfg_)};      // which samples walk every process
  std::unique_ptr<WorkloadResolver> names_;  // the workloads' names, learnt as cgroups come
  EarlyWarning early_;                       // time to OOM per bound, and the warnings
  WarningOutlet outlet_;                     // what the warnings set off
  std::shared_ptr<const Snapshot> last_snap_;
  AgentSelf self_;
  WarnOnce once_;
  std::optional<SelfReportSource> self_src_;
  std::unique_ptr<SelfReportFetcher> self_fetcher_;  // for a URL: fetched off the sampling thread
  void setSelfReport();
  std::optional<std::uint64_t> self_reported_;  // the prover's word at the last sample
  std::vector<pid_t> cuda_checked_;             // pids whose maps were searched for libcuda, sorted
  std::vector<std::string> last_missing_;       // watched cgroups missing at the last sample
  std::vector<std::uint64_t> tracked_ids_;      // what the BPF cgroup filter holds
  SensorCounters counter_base_;                 // what sensors stopped by a reload had counted
  Clock::time_point last_sample_start_{};
};

Agent::Agent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Agent::~Agent() = default;

Result<std::unique_ptr<Agent>> Agent::create(AgentSetup setup) {
  auto source = openSourceRoot(setup.root);
  if (!source) return source.error();
  auto self_fs = FsRoot::open("/");
  if (!self_fs) return self_fs.error();
  // POST /v1/probe runs this binary's `probe`: found now, said when asked.
  std::vector<std::string> probe_command;
  std::string probe_unavailable;
  if (auto exe = self_fs->readLink("/proc/self/exe"))
    probe_command = {*exe, "--root", setup.root};
  else
    probe_unavailable = exe.error().describe();
  return std::unique_ptr<Agent>(
      new Agent(std::make_unique<Impl>(std::move(setup), std::move(*source), std::move(*self_fs),
                                       std::move(probe_command), std::move(probe_unavailable))));
}

Status Agent::run() { return impl_->run(); }

void Agent::Impl::startSensors() {
  SensorsConfig sc = cfg_.sensors;
  // Watching some cgroups: the per-process programs count only those (filtered in the kernel).
  if (!cfg_.cgroups.empty()) {
    tracked_ids_ = index_.idsOf(cfg_.cgroups);
    sc.tracked_cgroups = tracked_ids_;
  } else {
    tracked_ids_.clear();
  }
  // The kernel log from the start of its ring: the kills of this boot the journal lacks.
  sc.kmsg_from_start = cfg_.journal.enabled && cfg_.journal.catch_up != JournalCatchUp::kOff;
  // The sensors read the live kernel: a fixture root has none.
  if (!source_.fs->isLive()) {
    sc.bpf = false;
    sc.kmsg = false;
  }
  sensors_ = Sensors::start(*source_.fs, sc, source_.collector->mounts());
  gpu_.configure(cfg_.sensors, source_.fs->isLive());  // NVML: the driver's, read where BPF is not too
  cuda_checked_.clear();                               // Sensors::start logged each sensor's state
  api_.publishSensors(sensors_->status());
}

void Agent::Impl::sensorsStarted() {
  const std::optional<KernelLogPosition> log = sensors_->kernelLog();  // before what it read is taken
  kills_.sensorsStarted(sensors_->takeOomEvents(), log, sensors_->status());
}

void Agent::Impl::addBudgetCgroup(RawSample& raw) const {
  std::string path = budget_.cgroup();
  if (path.empty()) return;
  auto has = [&](const std::string& p) {
    return std::any_of(raw.cgroups.begin(), raw.cgroups.end(), [&](const CgroupMemory& c) { return c.path == p; });
  };
  if (has(path)) return;
  const CgroupHierarchy& h = source_.collector->hierarchy();
  auto cg = h.read(path);
  if (!cg) return;  // the budget says it is not there
  for (auto parent = parentCgroup(path); parent; parent = parentCgroup(*parent)) {
    if (raw.ancestors.count(*parent) != 0 || has(*parent)) continue;
    if (auto a = h.read(*parent)) raw.ancestors.emplace(*parent, std::move(*a));
  }
  raw.cgroups.push_back(std::move(*cg));
}

void Agent::Impl::setSelfReport() {
  std::optional<SelfReportSource> src;
  if (!cfg_.self_report.empty()) src = *parseSelfReportSource(cfg_.self_report);  // validated with the config
  const bool same = src && self_src_ && src->text() == self_src_->text() && self_fetcher_ &&
                    self_fetcher_->period() == cfg_.interval;  // the same URL asked as often
  self_src_ = std::move(src);
  if (same) return;
  self_fetcher_.reset();
  if (self_src_ && self_src_->kind == SelfReportSource::Kind::kUrl)
    self_fetcher_ = std::make_unique<SelfReportFetcher>(
        *self_src_, std::chrono::duration_cast<std::chrono::milliseconds>(cfg_.interval));
}

void Agent::Impl::readSelfReport() {
  self_reported_.reset();
  if (!self_src_) return;
  // A file is read here (never blocks: a regular file only); a URL's answer comes from its
  // fetcher, fresh within three samples and a second.
  std::optional<Result<std::uint64_t>> answer =
      self_fetcher_ ? self_fetcher_->latest(*self_src_, 3 * cfg_.interval + std::chrono::seconds(1))
                    : headroom::readSelfReport(*self_src_);
  if (!answer) return;  // the first fetch is still under way
  const Result<std::uint64_t>& v = *answer;
  if (!v) {
    ++self_.self_report_failures_total;
    once_.say(kSelfReport, fmt::format("prover.self_report: {}", v.error().describe()));
    return;
  }
  once_.clear(kSelfReport, "prover.self_report reads again");
  self_reported_ = *v;
}

std::optional<SamplePublication::Budget> Agent::Impl::updateBudget(const Snapshot& snap) {
  auto probe_of = [this](const std::string& cgroup) { return api_.probeFinding(cgroup); };
  auto u = budget_.update(snap, self_reported_, probe_of, api_.probeActive());
  if (!u) return std::nullopt;
  if (u->decision)
    exporter_.recordBudget(*u->decision);
  else
    exporter_.clearBudget();
  if (u->gave_back) exporter_.countMarginChange(u->cgroup, "give_back");
  return SamplePublication::Budget{jsonResponse(u->http_status, u->document), u->cgroup, u->prover_usage};
}

void Agent::Impl::readOomScoreAdj() {
  auto text = self_fs_.readFile("/proc/self/oom_score_adj");
  if (!text) return;
  auto v = parseI64(trim(*text));
  if (!v || (self_.oom_score_adj && *self_.oom_score_adj == *v)) return;
  self_.oom_score_adj = static_cast<int>(*v);
  if (*v <= kProtectedOomScoreAdj)
    spdlog::info("oom_score_adj {}: the OOM killer passes over the agent while anything else can be killed", *v);
  else
    spdlog::warn(
        "oom_score_adj {}: the agent is not protected from the OOM killer and may be the victim where it shares a "
        "limit (the systemd unit sets OOMScoreAdjust=-900; lowering it needs CAP_SYS_RESOURCE or the service "
        "manager)",
        *v);
}

std::size_t Agent::Impl::consumeEvents() {
  std::size_t n = 0;
  // How far the kernel log is handed over, read before what it handed over is taken.
  const std::optional<KernelLogPosition> log = sensors_->kernelLog();
  // Durable at first sight; completed once the sources are joined and the names known.
  for (const OomEvent& e : sensors_->takeStartedOoms()) kills_.begin(e, sensors_->status());
  for (const OomEvent& e : sensors_->takeOomEvents()) {
    ++n;
    kills_.take(e, sensors_->status());
  }
  if (log) kills_.kernelLogSettled(log->settled);
  // Exits feed `headroom run`'s verdicts; the agent only keeps the rings drained.
  (void)sensors_->takeExitEvents();
  return n;
}

void Agent::Impl::reload() {
  spdlog::info("SIGHUP: reloading the config{}", setup_.config_source.empty() ? "" : " from " + setup_.config_source);
  notify("RELOADING=1");
  Result<AgentConfig> cfg = setup_.reload ? setup_.reload() : Result<AgentConfig>(cfg_);
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
  if (cfg->pss_max_age != cfg_.pss_max_age || cfg->pss_step != cfg_.pss_step)
    processes_ = ProcessCache(pssPolicyOf(*cfg));
  walks_.setPacing(walkPacingOf(*cfg));
  walks_.forceNext();  // the new settings over every process at once
  budget_.reconfigure(cfg->budget, cfg->role_rules);
  early_.configure(cfg->warning);
  outlet_.configure(cfg->warning.on_warning);
  if (server_ && cfg->web != cfg_.web) {
    // The file was read and checked with the config; its certificates are loaded here.
    if (auto st = server_->setWebConfig(cfg->web); !st) {
      ++self_.config_reload_failures_total;
      spdlog::error("config reload: {}; the endpoint keeps its previous TLS and auth", st.error().describe());
      cfg->web = cfg_.web;
      cfg->web_config_file = cfg_.web_config_file;
    } else {
      spdlog::info("web config {}: new connections use it", cfg->web ? cfg->web->path : "(none)");
      for (const auto& note : cfg->web ? cfg->web->notes : std::vector<std::string>{}) spdlog::warn("{}", note);
    }
  }
  ListenAddress listen = cfg_.listen;
  cfg_ = std::move(*cfg);
  cfg_.listen = listen;
  setupLogging(cfg_.log_format, setup_.log_level.value_or(cfg_.log_level));
  roles_ = RoleMatcher(cfg_.role_rules);
  exporter_.setLimits(limitsOf(cfg_));
  if (!(cfg_.workloads == names_->lookup())) names_ = std::make_unique<WorkloadResolver>(*source_.fs, cfg_.workloads);
  api_.configure(apiSettingsOf(cfg_));
  setSelfReport();
  (void)kills_.configure(killPathSettingsOf(cfg_), *names_, false);  // what cannot open is said there
  if (sensors_changed) {
    spdlog::info("sensor settings changed: restarting the sensors");
    (void)consumeEvents();  // nothing waiting in the rings is lost
    counter_base_ = counters();
    sensors_.reset();  // detach before attaching again
    startSensors();
    sensorsStarted();  // what the log holds that the journal lacks (a kill between the two sensors)
    ::malloc_trim(0);  // the BTF parsed to load them
  }
  ++self_.config_reloads_total;
  spdlog::info("config reloaded: {} role rule(s), {} watched cgroup(s), interval {} ms, sensors {}",
               cfg_.role_rules.size(), cfg_.cgroups.size(), cfg_.interval.count(),
               sensors_changed ? "restarted" : "kept");
  notify("READY=1\nSTATUS=config reloaded");
}

void Agent::Impl::updateSelf() {
  if (server_) self_.http = server_->stats();
  if (auto st = self_fs_.readFile("/proc/self/statm")) {
    static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    if (auto rss = parseStatmResidentBytes(*st, page)) self_.rss_bytes = *rss;
  }
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) == 0) {
    self_.cpu_seconds = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                        static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  }
  readOomScoreAdj();
  kills_.addFigures(self_);
}

SensorCounters Agent::Impl::counters() const {
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

std::optional<nlohmann::json> Agent::Impl::warningAtKill(const OomEvent& e, const std::string& cgroup) {
  if (!early_.enabled()) return std::nullopt;
  const std::string bound = e.global ? "host" : cgroup;
  WarningVerdict v = early_.killed(bound, e.monotonic_time_ns);
  spdlog::info("OOM kill in {}: {}", bound, v.text);
  return toJson(v);
}

bool Agent::Impl::warnings(const Snapshot* snap, bool sampled) {
  const bool changed = outlet_.publish(early_.takeChanges(), early_.forecaster(), snap, budget_.cgroup());
  // /v1/warnings anew at each sample and at each change, not at each fast reading.
  if (sampled || changed) api_.publishWarnings(early_.document(snap));
  return changed;
}

bool Agent::Impl::fastTick() {
  if (!early_.tick(cgroup_files_)) return false;
  for (auto& [cgroup, point] : early_.takeFastPoints()) kills_.flyFast(cgroup, std::move(point));
  return warnings(last_snap_.get(), false);
}

bool Agent::Impl::mustWalk() const {
  return !last_snap_ || kills_.awaitingVictims() || !early_.forecaster().active().empty();
}

bool Agent::Impl::awaitingProver(Clock::time_point now) const {
  const auto last = walks_.last();
  return budget_.awaitsProver() && (!last || now - *last >= kAwaitingProverWalk);
}

void Agent::Impl::sample() {
  auto t0 = Clock::now();
  last_sample_start_ = t0;
  CollectOptions co;
  co.cgroups = cfg_.cgroups;
  if (std::string bc = budget_.cgroup();
      !bc.empty() && !co.cgroups.empty() &&
      std::none_of(co.cgroups.begin(), co.cgroups.end(), [&](const std::string& w) { return cgroupIsWithin(bc, w); }))
    co.cgroups.push_back(bc);
  co.missing_cgroups_ok = true;
  co.read_smaps = cfg_.smaps;
  co.max_processes = cfg_.max_processes;
  co.cache = &processes_;
  co.cgroup_files = &cgroup_files_;
  co.source = sensors_->processSource();  // the task iterator (live roots only: see startSensors)
  // Exact RSS where it matters (the prover, cgroups near a limit); the rest at a cost per
  // process that does not grow with the CPUs.
  if (last_snap_)
    co.exact = processesToSumExactly(
        *last_snap_, [&](const Bound& b) { return early_.near(b); }, ProcessSource::kMaxExact);
  // Every process while the walks fit their budget (walk_pacer.h). Between two walks the same
  // processes as the exact sums (the prover's, those of cgroups near a bound) are read again
  // from /proc, and the last walk's cgroups; more of them than a walk would cost: a walk (the
  // collector's call, once it has counted them).
  co.walk = walks_.due(t0) || mustWalk() || awaitingProver(t0) || co.exact.size() > kRefreshedAtMost;
  if (!co.walk) {
    co.refresh = co.exact;
    co.refresh_at_most = kRefreshedAtMost;
    // Processes started since the walk count too where they matter now: each process of the
    // prover's cgroup and of the cgroups near a bound (their cgroup.procs).
    if (std::string bc = budget_.cgroup(); !bc.empty()) co.refresh_cgroups.push_back(std::move(bc));
    for (const CgroupSnapshot& c : last_snap_->cgroups) {
      co.carried_cgroups.push_back(c.memory.path);
      if (std::any_of(c.bounds.begin(), c.bounds.end(),
                      [&](const Bound& b) { return b.name != "host" && early_.near(b); }))
        co.refresh_cgroups.push_back(c.memory.path);
    }
  }
  auto raw = source_.collector->collect(co);
  if (!raw) {
    ++self_.sample_failures_total;
    once_.say(kSampling, fmt::format("sampling failed: {}", raw.error().describe()), spdlog::level::err);
    api_.publishSampleFailure(self_.sample_failures_total, raw.error().describe());
    return;
  }
  if (raw->stats.cgroups_missing != last_missing_) {
    for (const std::string& c : raw->stats.cgroups_missing)
      spdlog::warn("watched cgroup {} does not exist (yet, or any more): sampling the rest, and it when it appears", c);
    last_missing_ = raw->stats.cgroups_missing;
  }
  once_.clear(kSampling, "sampling works again");
  const bool walked = !raw->stats.processes_carried;
  // CUDA libraries: look in the maps of processes not seen before (bounded by the live set), at
  // each walk.
  if (walked) {
    std::vector<pid_t> fresh;
    std::vector<pid_t> live;
    live.reserve(raw->processes.size());
    for (const ProcessSample& p : raw->processes) live.push_back(p.pid);
    if (!std::is_sorted(live.begin(), live.end())) std::sort(live.begin(), live.end());  // by pid, as read
    std::set_difference(live.begin(), live.end(), cuda_checked_.begin(), cuda_checked_.end(),
                        std::back_inserter(fresh));
    cuda_checked_ = std::move(live);
    if (!fresh.empty()) sensors_->discoverCuda(fresh);
  }
  if (!cfg_.cgroups.empty()) {
    // Descendants that hold processes appear and go: the filter follows them.
    std::vector<std::string> paths = cfg_.cgroups;
    for (const CgroupMemory& c : raw->cgroups) paths.push_back(c.path);
    auto ids = index_.idsOf(paths);
    if (ids != tracked_ids_) {
      if (auto st = sensors_->trackCgroups(ids); st)
        tracked_ids_ = std::move(ids);
      else
        spdlog::warn("updating the BPF cgroup filter: {}", st.error().describe());
    }
  }
  self_.sample_cpu.processes += raw->stats.processes_cpu;
  self_.sample_cpu.cgroups += raw->stats.cgroups_cpu;
  const ThreadCpu model_start = threadCpu();
  SensorReadings readings = sensors_->readings(raw->processes);
  raw->gpu = gpu_.read();
  addBudgetCgroup(*raw);
  names_->name(*raw);
  const ThreadCpu processes_cpu = raw->stats.processes_cpu;
  std::shared_ptr<const Snapshot> snap = buildSnapshot(std::move(*raw), roles_, std::move(readings), last_snap_.get());
  // The walk's cost: the processes read, the snapshot made of them.
  if (walked) walks_.walked(t0, std::chrono::nanoseconds((processes_cpu + (threadCpu() - model_start)).total_ns));
  readSelfReport();
  kills_.sample(snap, self_reported_, sensors_->status());
  early_.sample(*snap);
  std::vector<Exporter::Forecast> forecasts;
  if (early_.enabled()) {
    for (const CgroupSnapshot& c : snap->cgroups) {
      auto e = nearestEta(early_.forecaster(), c.bounds);
      if (!e) continue;
      const bool trusted = e->confidence >= Confidence::kMedium;
      forecasts.push_back(Exporter::Forecast{c.memory.path, trusted ? e->eta_seconds : std::nullopt,
                                             e->growth_bytes_per_second, confidenceRatio(e->confidence),
                                             warningFor(early_.forecaster(), c.bounds) != nullptr});
    }
  }
  exporter_.recordForecasts(std::move(forecasts));
  (void)warnings(snap.get(), true);
  last_snap_ = snap;
  auto budget = updateBudget(*snap);

  ++self_.samples_total;
  self_.last_sample_duration_s = std::chrono::duration<double>(Clock::now() - t0).count();
  self_.last_sample_timestamp_s = unixSeconds();
  updateSelf();
  const ThreadCpu exporter_start = threadCpu();
  self_.sample_cpu.model += exporter_start - model_start;
  exporter_.update(*snap, counters(), self_);
  self_.sample_cpu.exporter += threadCpu() - exporter_start;

  names_->forgetIdle();
  api_.publish(SamplePublication{std::move(snap), sensors_->status(),
                                 std::chrono::duration_cast<std::chrono::nanoseconds>(cfg_.interval).count(),
                                 self_.samples_total, std::move(budget)});
}

Status Agent::Impl::run() {
  // Sockets count against the descriptor limit: up to its hard limit, as Go's runtime does (the
  // soft 1024 a unit or shell gives is a relic of select(2), which the agent never uses).
  if (rlimit rl{}; ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, 65536);
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  startSensors();
  // Loading the sensors parsed the kernel's BTF (megabytes, freed now): handed back at once.
  // Each sample then frees and takes again a few MiB (the processes, the snapshot): kept in the
  // heap instead of being handed back and faulted in again, page by page, every sample.
  ::malloc_trim(0);
  ::mallopt(M_MMAP_THRESHOLD, 32 << 20);  // the most glibc takes (a snapshot of 5,000 processes is ~8 MiB)
  ::mallopt(M_TRIM_THRESHOLD, 64 << 20);
  // One heap for every thread: the HTTP threads' scrapes and API answers would each keep an
  // arena of their own (a MiB or two in all) for no gain at a few requests a second.
  ::mallopt(M_ARENA_MAX, 1);
  setSelfReport();
  if (auto st = kills_.configure(killPathSettingsOf(cfg_), *names_, true); !st) return st.error();
  sensorsStarted();  // the kills of this boot the journal lacks, before any new one
  api_.configure(apiSettingsOf(cfg_));
  auto server = HttpServer::start(cfg_.listen, api_.getRoutes(), api_.postRoutes(), cfg_.web);
  // A port in use (or not this machine's address), or certificates that cannot be used, are
  // the operator's to change: exit 2.
  if (!server)
    return server.error()
        .wrap(cfg_.web && server.error().message.starts_with("web config") ? "--web.config.file" : "--listen")
        .as(ErrorKind::kBadInput);
  server_ = std::move(*server);
  if (cfg_.web)
    for (const auto& note : cfg_.web->notes) spdlog::warn("{}", note);
  bool guarded = cfg_.web && (cfg_.web->tls || !cfg_.web->basic_auth_users.empty());
  if (!guarded && !cfg_.listen.loopback())
    spdlog::warn(
        "listening on {} without TLS or basic auth: whoever reaches this port reads every cgroup's and "
        "process's memory{}; give --web.config.file, or listen on 127.0.0.1 (docs/operations.md)",
        server_->address(), cfg_.probe_enabled ? " and can run probes" : "");
  const CgroupHierarchy& h = source_.collector->hierarchy();
  spdlog::info(
      "headroom {} serving on {}://{} (/metrics /healthz /v1/snapshot /v1/budget /v1/ooms /v1/warnings{}), cgroup v{} "
      "memory at {}",
      kVersion, server_->tls() ? "https" : "http", server_->address(), cfg_.probe_enabled ? ", POST /v1/probe" : "",
      h.version(), source_.fs->display(h.mount().mount_point));
  if (auto w = h.nsWarning())
    spdlog::warn("{}", *w);
  else
    spdlog::info("memory hierarchy at {}: {}", source_.fs->display(h.mount().mount_point), h.nsDescription());

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
    if (api_.takeSampleSoon()) {
      next_sample = Clock::now();
      walks_.forceNext();
    }
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
    // Asleep until the next sample (or watchdog ping), unless a record, a signal or the API
    // (a probe done) wakes it: one wakeup a sample when nothing happens.
    auto until = std::min(next_sample, early_.nextDue());
    if (watchdog) until = std::min(until, next_watchdog);
    if (outlet_.hooksRunning()) until = std::min(until, Clock::now() + std::chrono::milliseconds(100));
    auto wait = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now());
    wait = std::clamp(wait, std::chrono::milliseconds(0), std::chrono::milliseconds(60'000));
    sensors_->poll(static_cast<int>(wait.count()), wake_.get(), early_.fd());
    // An OOM kill shows on the next scrape, not an interval later; a storm of them does not
    // make the agent sample without pause (at most one extra sample a second).
    // That sample walks every process: the victim's neighbours as they are after it.
    if (consumeEvents() > 0) {
      next_sample =
          std::min(next_sample, last_sample_start_ + std::min<Clock::duration>(cfg_.interval, std::chrono::seconds(1)));
      walks_.forceNext();
    }
    // The prover was OOM-killed: its grown margin is published now, not an interval later.
    if (budget_.takeGrown()) {
      next_sample = Clock::now();
      walks_.forceNext();
    }
    // A warning that starts or ends is published (metrics, budget) at once; between, the warned
    // bounds are read fast and the rest waits for the regular sample.
    if (fastTick()) next_sample = Clock::now();
    outlet_.collectOutcomes();
  }
  spdlog::info("stopping: detaching the sensors");
  notify("STOPPING=1");
  server_.reset();
  (void)consumeEvents();
  sensors_.reset();
  kills_.stop();
  budget_.save("stopping");
  if (!kills_.drain(std::chrono::seconds(2)))
    spdlog::warn("events: records still waiting for their sinks at exit are lost to them (the journal has them)");
  spdlog::info("stopped");
  return ok();
}

}  // namespace headroom
