// `headroom top`: a live view of the machine, its cgroups and processes, the last OOM kills and
// the budget, refreshed every --interval. From a running agent (--agent: /v1/snapshot, /v1/ooms,
// /v1/budget), or sampled here as `headroom snapshot` does, with the kills from the journal and
// from the sensors while it runs.
#include <sys/stat.h>

#include <fmt/format.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <ostream>

#include "headroom/cli/commands.h"
#include "headroom/cli/top_terminal.h"
#include "headroom/config/config.h"
#include "headroom/journal/journal.h"
#include "headroom/model/oom_forecast.h"
#include "headroom/model/snapshot_json.h"
#include "headroom/net/http_client.h"
#include "headroom/report/live_screen.h"
#include "headroom/sensors/sensors.h"
#include "headroom/sources/collector.h"
#include "headroom/util/exit_codes.h"

namespace headroom::cli {
namespace {

using Clock = std::chrono::steady_clock;

// The kills kept on screen, at most.
constexpr std::size_t kOomsShown = 50;
constexpr auto kMinInterval = std::chrono::milliseconds(100);
constexpr auto kMaxInterval = std::chrono::hours(1);

std::atomic<bool> g_stop{false};
void onStopSignal(int) { g_stop = true; }

// Where the figures come from: each refresh fills a whole TopData or fails, keeping the last.
class TopSource {
 public:
  virtual ~TopSource() = default;
  virtual std::string describe() const = 0;
  virtual Status refresh(TopData& data) = 0;
};

class AgentSource final : public TopSource {
 public:
  AgentSource(std::string base, HttpClientAuth auth, std::chrono::milliseconds timeout)
      : base_(std::move(base)), auth_(std::move(auth)), timeout_(timeout) {}
  std::string describe() const override { return "agent " + base_; }

  Status refresh(TopData& data) override {
    TopData next = data;
    auto snap = get("/v1/snapshot");
    if (!snap) return snap.error();
    // Credentials the agent refuses are the caller's to fix.
    if (snap->first == 401)
      return badInput(fmt::format("{} answered 401: {} (--agent-user, --agent-password-file)", base_,
                                  auth_.user.empty() ? "it asks for basic auth" : "the user or password is wrong"));
    if (snap->first != 200) return badData(fmt::format("{}/v1/snapshot answered {}", base_, snap->first));
    if (auto st = readSnapshotDocument(snap->second, next); !st) return st.error().wrap(base_ + "/v1/snapshot");

    auto ooms = get(fmt::format("/v1/ooms?limit={}", kOomsShown));
    next.ooms_note.clear();
    if (!ooms) {
      next.ooms_note = ooms.error().describe();
    } else if (ooms->first != 200) {
      next.ooms_note = fmt::format("/v1/ooms answered {}", ooms->first);
    } else if (auto st = readOomsDocument(ooms->second, next); !st) {
      next.ooms_note = "/v1/ooms: " + st.error().describe();
    }

    auto warnings = get("/v1/warnings");
    next.warnings_note.clear();
    if (!warnings) {
      next.warnings_note = warnings.error().describe();
    } else if (warnings->first != 200) {
      next.warnings_note = fmt::format("/v1/warnings answered {}", warnings->first);
    } else if (auto st = readWarningsDocument(warnings->second, next); !st) {
      next.warnings_note = "/v1/warnings: " + st.error().describe();
    }

    auto budget = get("/v1/budget");
    if (!budget) {
      next.budget.reset();
      next.budget_note = budget.error().describe();
    } else {
      readBudgetDocument(budget->first, budget->second, next);
    }
    data = std::move(next);
    return ok();
  }

 private:
  Result<std::pair<int, nlohmann::json>> get(const std::string& path) const {
    auto r = httpGet(base_ + path, timeout_, auth_);
    if (!r) return r.error();
    auto j = nlohmann::json::parse(r->body, nullptr, false);
    if (j.is_discarded()) return badData(fmt::format("{}{}: the answer is not JSON (HTTP {})", base_, path, r->status));
    return std::pair<int, nlohmann::json>{r->status, std::move(j)};
  }

  std::string base_;
  HttpClientAuth auth_;
  std::chrono::milliseconds timeout_;
};

class LocalSource final : public TopSource {
 public:
  static Result<std::unique_ptr<LocalSource>> open(const TopOptions& opts) {
    auto rules = roleRulesFromFlags(opts.role_rules);
    if (!rules) return rules.error();
    auto root = openSourceRoot(opts.root);
    if (!root) return root.error();
    std::unique_ptr<LocalSource> s(new LocalSource(opts, std::move(*root), RoleMatcher(std::move(*rules))));
    SensorsConfig sc;
    sc.bpf = opts.bpf;
    // The sensors read the live kernel: a fixture root has none.
    if (!s->root_.fs->isLive()) sc.bpf = sc.kmsg = false;
    s->sensors_ = Sensors::start(*s->root_.fs, sc, s->root_.collector->mounts());
    return s;
  }

  std::string describe() const override { return "local"; }

  Status refresh(TopData& data) override {
    sensors_->poll(0);
    for (const OomEvent& e : sensors_->takeOomEvents()) {
      if (auto o = readOomEvent(toJson(e))) seen_.push_back(std::move(*o));
    }
    (void)sensors_->takeExitEvents();

    CollectOptions co;
    co.read_smaps = opts_.smaps;
    co.cache = &processes_;
    co.cgroup_files = &cgroup_files_;
    auto raw = root_.collector->collect(co);
    if (!raw) return raw.error();
    auto readings = sensors_->readings(raw->processes);
    auto snap = buildSnapshot(std::move(*raw), roles_, std::move(readings));
    TopData next = data;
    if (auto st = readSnapshotDocument(toJson(*snap), next); !st) return st;
    // The time to OOM from this view's own samples (one each refresh).
    for (const BoundReading& r : boundReadings(*snap)) forecaster_.observe(r);
    forecaster_.forgetUnseen(snap->monotonic_time_ns - 4 * forecaster_.policy().window_ns);
    (void)forecaster_.takeChanges();
    (void)readWarningsDocument(warningsDocument(forecaster_, snap.get()), next);
    readJournalIfChanged();
    mergeOoms(next);
    next.budget.reset();
    next.budget_note = "the agent computes it (headroom top --agent URL shows it)";
    data = std::move(next);
    return ok();
  }

 private:
  LocalSource(const TopOptions& opts, SourceRoot root, RoleMatcher roles)
      : opts_(opts), root_(std::move(root)), roles_(std::move(roles)) {}

  // The journal is read again only when it changed: it may hold many records.
  void readJournalIfChanged() {
    const std::string path = journalFileOf(opts_.journal);
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      journal_note_ = fmt::format("no journal at {}", path);
      journal_.clear();
      return;
    }
    if (st.st_size == journal_size_ && st.st_mtim.tv_sec == journal_mtime_.tv_sec &&
        st.st_mtim.tv_nsec == journal_mtime_.tv_nsec)
      return;
    journal_size_ = st.st_size;
    journal_mtime_ = st.st_mtim;
    auto contents = readJournal(path);
    journal_.clear();
    if (!contents) {
      journal_note_ = contents.error().wrap("reading the journal " + path).describe();
      return;
    }
    for (const nlohmann::json& rec : contents->records) {
      if (!rec.is_object() || !rec.contains("event")) continue;
      if (auto o = readOomEvent(rec["event"])) journal_.push_back(std::move(*o));
    }
    journal_note_ = fmt::format("journal {}", path);
  }

  // The journal's kills and those the sensors saw since start, newest first; a kill in both
  // (an agent here writes the journal) is shown once.
  void mergeOoms(TopData& data) const {
    std::vector<TopOom> all = journal_;
    for (const TopOom& o : seen_) {
      bool dup = std::any_of(all.begin(), all.end(), [&](const TopOom& j) {
        return j.victim_pid == o.victim_pid && std::llabs(j.wall_time_ns - o.wall_time_ns) < 5'000'000'000LL;
      });
      if (!dup) all.push_back(o);
    }
    std::stable_sort(all.begin(), all.end(),
                     [](const TopOom& a, const TopOom& b) { return a.wall_time_ns > b.wall_time_ns; });
    data.ooms_total = all.size();
    if (all.size() > kOomsShown) all.resize(kOomsShown);
    data.ooms = std::move(all);
    bool sensing = std::any_of(sensors_->status().begin(), sensors_->status().end(),
                               [](const SensorStatus& s) { return s.state == SensorState::kActive; });
    data.ooms_note = journal_note_ + (sensing ? " and the sensors since start" : "; no sensor active");
  }

  const TopOptions& opts_;
  SourceRoot root_;
  RoleMatcher roles_;
  OomForecaster forecaster_;  // the time to OOM of what this view samples
  std::unique_ptr<Sensors> sensors_;
  ProcessCache processes_;
  CgroupFileCache cgroup_files_;
  std::vector<TopOom> seen_;     // the sensors' kills since start
  std::vector<TopOom> journal_;  // the journal's, as last read
  std::string journal_note_;
  off_t journal_size_ = -1;
  timespec journal_mtime_{};
};

// While the screen is up, log lines would be drawn over it: they are kept instead, the latest
// shown on the screen and all of them said on stderr once the terminal is given back.
class LogCapture {
 public:
  static constexpr std::size_t kKept = 100;
  LogCapture()
      : previous_(spdlog::default_logger()), sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(kKept)) {
    sink_->set_pattern("%H:%M:%S %l: %v");
    auto logger = std::make_shared<spdlog::logger>("top", sink_);
    logger->set_level(previous_->level());
    spdlog::set_default_logger(std::move(logger));
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  std::string latest() const {
    auto last = sink_->last_formatted(1);
    if (last.empty()) return "";
    std::string s = last.front();
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    return s;
  }
  std::vector<std::string> all() const { return sink_->last_formatted(); }

 private:
  std::shared_ptr<spdlog::logger> previous_;
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
};

Result<std::unique_ptr<TopSource>> openSource(const TopOptions& opts, std::chrono::milliseconds interval) {
  if (opts.agent.url.empty()) {
    auto s = LocalSource::open(opts);
    if (!s) return s.error();
    return std::unique_ptr<TopSource>(std::move(*s));
  }
  auto auth = agentClientAuth(opts.agent);
  if (!auth) return auth.error();
  std::string base = opts.agent.url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  // A refresh waits for the agent at most about one interval (never less than a second).
  auto timeout = std::max<std::chrono::milliseconds>(interval, std::chrono::seconds(1));
  return std::unique_ptr<TopSource>(std::make_unique<AgentSource>(base, std::move(*auth), timeout));
}

}  // namespace

int runTop(const TopOptions& opts, std::ostream& err) {
  auto fail = [&](const Error& e) { return cli::fail(err, "top", e); };
  auto interval = parseDuration(opts.interval);
  if (!interval) return fail(badInput(fmt::format("--interval {}: {}", opts.interval, interval.error().describe())));
  if (*interval < kMinInterval || *interval > kMaxInterval)
    return fail(badInput(fmt::format("--interval {}: between 100ms and 1h", opts.interval)));

  if (auto st = TopTerminal::available(); !st) return fail(st.error());

  auto source = openSource(opts, *interval);
  if (!source) return fail(source.error());

  TopViewState state;
  state.source = (*source)->describe();
  state.interval_s = std::chrono::duration<double>(*interval).count();
  TopData data;
  // The first sample before the screen is taken: a source that cannot give one is said plainly.
  if (auto st = (*source)->refresh(data); !st) return fail(st.error());

  // Our handlers before ncurses starts, so that it installs none of its own: SIGINT and SIGTERM
  // end the loop, and the terminal is given back by the destructor like on q.
  g_stop = false;
  struct sigaction sa {};
  sa.sa_handler = onStopSignal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {
  }, old_term{};
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);
  std::vector<std::string> logged;
  {
    LogCapture log;
    auto term = TopTerminal::open();
    if (!term) {
      ::sigaction(SIGINT, &old_int, nullptr);
      ::sigaction(SIGTERM, &old_term, nullptr);
      return fail(term.error());
    }
    auto next_refresh = Clock::now() + *interval;
    bool dirty = true;
    while (!g_stop) {
      if (dirty) {
        state.log = log.latest();
        state.rows = (*term)->rows();
        state.cols = (*term)->cols();
        (*term)->draw(renderTop(data, state));
        dirty = false;
      }
      auto now = Clock::now();
      if (!state.paused && now >= next_refresh) {
        auto st = (*source)->refresh(data);
        state.error = st ? "" : st.error().describe();
        next_refresh = Clock::now() + *interval;
        dirty = true;
        continue;
      }
      // Keys are read in short slices so that a signal is seen soon.
      auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_refresh - now).count();
      int key = (*term)->readKey(static_cast<int>(std::clamp<long>(state.paused ? 100 : wait, 0, 100)));
      if (key == -1) continue;
      TopKeyResult r = applyTopKey(key, state);
      if (r == TopKeyResult::kQuit) break;
      if (r == TopKeyResult::kRefresh) next_refresh = Clock::now();
      if (r != TopKeyResult::kNone) dirty = true;
    }
    term->reset();  // the terminal back before the log is said
    logged = log.all();
  }
  for (std::string& line : logged) {
    while (!line.empty() && line.back() == '\n') line.pop_back();
    err << "headroom top: " << line << "\n";
  }
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  return kExitOk;
}

}  // namespace headroom::cli
