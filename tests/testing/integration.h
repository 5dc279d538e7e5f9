// Helpers the integration tests share: a temporary directory, the skip macros, a free loopback
// port, plain HTTP GET/POST, the value of one series in a Prometheus exposition, a workload
// started and waited on until it says "ready", and the real `headroom agent` as a child process
// that says where it serves and whose log and HTTP endpoints the tests read.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "testing/cgroup_sandbox.h"
#include "testing/child_process.h"

// Root with cgroups v2 to make sandboxes in, and BTF for the sensors.
#define SKIP_WITHOUT_ROOT()                                                                       \
  do {                                                                                            \
    if (auto why = ::headroom::testing::CgroupSandbox::unavailableReason()) GTEST_SKIP() << *why; \
    if (::access("/sys/kernel/btf/vmlinux", R_OK) != 0) GTEST_SKIP() << "no BTF";                 \
  } while (0)

// Cgroups v2 to make sandboxes in (no BPF needed).
#define SKIP_WITHOUT_CGROUPS()                                                                    \
  do {                                                                                            \
    if (auto why = ::headroom::testing::CgroupSandbox::unavailableReason()) GTEST_SKIP() << *why; \
  } while (0)

namespace headroom::testing {

// A directory made with mkdtemp under `parent` (/dev/shm for shared memory files), removed with
// everything in it.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const char* parent = "/tmp", const char* prefix = "headroom-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // The path of `name` in it.
  std::string file(const std::string& name) const;
  // Writes `content` to `name` in it (replacing it) and returns its path.
  std::string file(const std::string& name, const std::string& content) const;
};

// A loopback port nobody listens on right now.
int freePort();

// An HTTP answer from 127.0.0.1; status 0 when there was none.
struct HttpResponse {
  int status = 0;
  std::string body;
};
using HttpParams = std::multimap<std::string, std::string>;
// GET http://127.0.0.1:port/path[?params]: 2 s to connect, 10 s to read.
HttpResponse httpGet(int port, const std::string& path, const HttpParams& params = {});
// POST http://127.0.0.1:port/path: 2 s to connect, 120 s to read (a probe takes a while).
HttpResponse httpPost(int port, const std::string& path);
// A PromQL instant query to the Prometheus on 127.0.0.1:port: its result, [] when it has none
// (or does not answer yet).
nlohmann::json promQuery(int port, const std::string& query);

// The value of one series in an exposition text: `name{...}` whose labels include `want`.
std::optional<double> metric(const std::string& text, const std::string& name,
                             const std::map<std::string, std::string>& want = {});

// Spawns `args` (in the cgroup whose cgroup.procs is `procs`) and waits for its "ready" line.
ChildProcess spawnReady(const std::vector<std::string>& args, const std::string& procs);

// The real `headroom agent`, its stderr folded into the stdout the test reads. It listens on a
// port the kernel picks (127.0.0.1:0) and says which in its "serving on" log line, which the
// constructor waits for (30 s a line).
class AgentProcess {
 public:
  struct Options {
    std::map<std::string, std::string> env;  // set for the agent alone
    std::vector<std::string> global_args;    // before "agent" (`--log-level info`)
    // What the budget controller learns stays in a file of this instance's under /tmp (removed
    // with it), never /var/lib/headroom, unless the args give --budget.state-file. Off for a
    // test whose --config names its own state file.
    bool own_state_file = true;
    // Its OOM journal in a directory of this instance's under /tmp (removed with it), unless the
    // args give --journal.path, --journal.enabled or --config: agents that shared the default
    // journal caught up on each other's tests' kills by the order the tests ran in.
    bool own_journal = true;
    // The kills of this boot found at start (journal.catch_up): the host's kernel log holds every
    // earlier test's, which a test's fresh journal is not about. "restarts" (only those since
    // this journal's last agent) unless the args say, or "" for the agent's default.
    std::string catch_up = "restarts";
    std::string cgroup_procs;  // a cgroup.procs file: the agent runs in that cgroup from its start
    // Runs the agent's shell through this ({"unshare", "-m", ...}), and these shell commands in
    // it before the agent is exec'd (a mount namespace set up, a journald started).
    std::vector<std::string> launcher;
    std::string prelude;
  };
  explicit AgentProcess(std::vector<std::string> args, std::map<std::string, std::string> env = {});
  AgentProcess(std::vector<std::string> args, Options options);
  ~AgentProcess();
  AgentProcess(const AgentProcess&) = delete;
  AgentProcess& operator=(const AgentProcess&) = delete;

  int port() const { return port_; }
  // The paths the "serving on" line lists ("/metrics, /v1/budget, ..."), when it lists them.
  const std::string& servedPaths() const { return paths_; }
  std::string url() const;
  ChildProcess& child() { return *child_; }

  // Every log line read so far, and the same joined with newlines.
  const std::vector<std::string>& log() const { return log_; }
  std::string logText() const;
  // The first line holding `needle` that no earlier call returned or passed: lines read before
  // (the start-up ones) count too, once; then reads on up to `limit`.
  std::optional<std::string> waitLog(const std::string& needle,
                                     std::chrono::milliseconds limit = std::chrono::seconds(20));

  // Waits until /healthz answers 200 (the first sample is in).
  bool waitHealthy(std::chrono::milliseconds limit = std::chrono::seconds(30));
  // GET /metrics; "" when it does not answer.
  std::string metrics();
  // Scrapes every 200 ms until `pred(text)` holds.
  template <typename Pred>
  bool waitMetrics(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(20)) {
    auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if (pred(metrics())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return false;
  }
  // GET `path` as JSON, whatever the status: null when it does not answer, discarded when the
  // body is not JSON.
  nlohmann::json getJson(const std::string& path);
  // GET `path` until it answers 200 with JSON for which `pred` holds.
  template <typename Pred>
  std::optional<nlohmann::json> waitJson(const std::string& path, Pred pred,
                                         std::chrono::milliseconds limit = std::chrono::seconds(20),
                                         std::chrono::milliseconds every = std::chrono::milliseconds(50)) {
    auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      HttpResponse r = httpGet(port_, path);
      if (r.status == 200) {
        auto j = nlohmann::json::parse(r.body);
        if (pred(j)) return j;
      }
      std::this_thread::sleep_for(every);
    }
    return std::nullopt;
  }
  // /v1/budget once it answers 200 and `pred` holds.
  template <typename Pred>
  std::optional<nlohmann::json> waitBudget(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(20),
                                           std::chrono::milliseconds every = std::chrono::milliseconds(50)) {
    return waitJson("/v1/budget", pred, limit, every);
  }
  std::optional<nlohmann::json> waitBudget() {
    return waitBudget([](const nlohmann::json&) { return true; });
  }

  // Stops it (SIGTERM), reads its log to the end and returns all of it.
  std::string stop();

 private:
  int port_ = 0;
  std::string paths_;
  std::optional<ChildProcess> child_;
  std::vector<std::string> log_;
  std::size_t searched_ = 0;  // waitLog looked at log_ up to here
  std::string state_file_;
  std::string journal_dir_;
};

// The agent at log level info (the journal's lines are what most tests of kills wait for), in
// the cgroup whose cgroup.procs is `cgroup_procs` when one is given.
AgentProcess::Options infoLogOptions(std::string cgroup_procs = "");
struct InfoLogAgent : AgentProcess {
  explicit InfoLogAgent(std::vector<std::string> args, std::string cgroup_procs = "")
      : AgentProcess(std::move(args), infoLogOptions(std::move(cgroup_procs))) {}
};

}  // namespace headroom::testing
