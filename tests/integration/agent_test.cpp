// The agent as operators run it: the real binary, real cgroups and OOM kills, its HTTP
// endpoint scraped by a real Prometheus and checked by promtool, SIGHUP reloads, sd_notify
// against a socket the test owns, and label cardinality under 2,000 short-lived processes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "headroom/sources/parse.h"
#include "testing/cgroup_sandbox.h"
#include "testing/child_process.h"
#include "testing/integration.h"

namespace headroom {
namespace {

using testing::CgroupSandbox;
using testing::ChildProcess;
using testing::freePort;
using testing::httpGet;
using testing::httpPost;
using testing::metric;
using testing::spawnReady;
using testing::TempDir;
using Agent = testing::AgentProcess;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::uint64_t kMiB = 1ULL << 20;

std::size_t seriesCount(const std::string& text) {
  std::size_t n = 0;
  for (auto line : splitLines(text)) n += !line.empty() && line[0] != '#';
  return n;
}

TEST(Agent, ServesTheTestCgroupAndPromtoolAcceptsTheMetrics) {
  SKIP_WITHOUT_ROOT();
  auto sb = CgroupSandbox::create("agent-metrics");
  ASSERT_TRUE(sb) << sb.error().describe();
  ASSERT_TRUE(sb->setLimit(512 * kMiB));
  auto w = spawnReady({HEADROOM_WORKLOAD, "--anon", std::to_string(64 * kMiB)}, sb->procsFile());

  // A watched cgroup that does not exist (a stopped unit's) is counted, never fatal.
  Agent agent({"--interval", "200ms", "--cgroup", sb->path(), "--cgroup", "/headroom-test-no-such-cgroup",
               "--log-format", "json", "--role-rule", "prover=comm:headroom-worklo"});
  ASSERT_TRUE(agent.waitHealthy());
  std::string text = agent.metrics();
  auto cg = sb->read();
  ASSERT_TRUE(cg);
  auto usage = metric(text, "headroom_cgroup_usage_bytes", {{"cgroup", sb->path()}});
  ASSERT_TRUE(usage) << text.substr(0, 3000);
  EXPECT_NEAR(*usage, static_cast<double>(cg->usage), 8.0 * kMiB);
  EXPECT_EQ(metric(text, "headroom_cgroup_limit_bytes", {{"cgroup", sb->path()}}), 512.0 * kMiB);
  auto anon = metric(text, "headroom_cgroup_memory_bytes", {{"cgroup", sb->path()}, {"kind", "anon"}});
  ASSERT_TRUE(anon);
  EXPECT_NEAR(*anon, 64.0 * kMiB, 6.0 * kMiB);
  auto rss = metric(text, "headroom_process_rss_bytes",
                    {{"cgroup", sb->path()}, {"role", "prover"}, {"process", "headroom-worklo"}, {"kind", "anon"}});
  ASSERT_TRUE(rss) << "the workload's series";
  EXPECT_NEAR(*rss, 64.0 * kMiB, 4.0 * kMiB);
  EXPECT_EQ(metric(text, "headroom_sensor_state", {{"sensor", "oom"}, {"state", "active"}}), 1.0);
  EXPECT_GT(metric(text, "process_resident_memory_bytes").value_or(0), 1.0 * kMiB);
  EXPECT_EQ(metric(text, "headroom_watched_cgroups_missing"), 1.0);

  // promtool reads the exposition exactly as Prometheus would, and lints its conventions.
  TempDir tmp;
  std::string file = tmp.file("metrics.txt", text);
  auto lint = testing::runCommand({"/bin/sh", "-c", "promtool check metrics < " + file});
  EXPECT_EQ(lint.exit_code, 0) << lint.out << lint.err;

  // The JSON API: the snapshot has the same schema as `headroom snapshot --json`.
  auto snap = httpGet(agent.port(), "/v1/snapshot");
  ASSERT_EQ(snap.status, 200);
  auto j = nlohmann::json::parse(snap.body);
  bool found = false;
  for (const auto& c : j["cgroups"]) found = found || c["memory"]["path"] == sb->path();
  EXPECT_TRUE(found) << snap.body.substr(0, 2000);
  auto health = nlohmann::json::parse(httpGet(agent.port(), "/healthz").body);
  EXPECT_EQ(health["status"], "ok");
  EXPECT_FALSE(health["sensors"].empty());
  EXPECT_EQ(httpGet(agent.port(), "/nope").status, 404);

  // SIGTERM: a clean stop, exit 0; every log line was one JSON object.
  agent.child().kill(SIGTERM);
  auto st = agent.child().wait(20s);
  ASSERT_TRUE(st);
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << *st;
  (void)agent.waitLog("\"stopped\"", 10s);
  std::size_t lines = 0;
  bool said_stopped = false, said_missing = false;
  for (const std::string& line : agent.log()) {
    auto log = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(log.is_discarded()) << "not JSON: " << line;
    EXPECT_TRUE(log.contains("time") && log.contains("level") && log.contains("msg")) << line;
    said_stopped = said_stopped || log["msg"] == "stopped";
    said_missing =
        said_missing || log["msg"].get<std::string>().find("/headroom-test-no-such-cgroup") != std::string::npos;
    ++lines;
  }
  EXPECT_GT(lines, 2u);
  EXPECT_TRUE(said_stopped);
  EXPECT_TRUE(said_missing) << "the missing cgroup is named in a warning";
}

TEST(Agent, RealPrometheusScrapesItAndPromqlReturnsTheCgroup) {
  SKIP_WITHOUT_ROOT();
  if (::access("/usr/bin/prometheus", X_OK) != 0) GTEST_SKIP() << "prometheus is not installed";
  auto sb = CgroupSandbox::create("agent-prom");
  ASSERT_TRUE(sb) << sb.error().describe();
  ASSERT_TRUE(sb->setLimit(384 * kMiB));
  auto w = spawnReady({HEADROOM_WORKLOAD, "--anon", std::to_string(96 * kMiB)}, sb->procsFile());
  Agent agent({"--interval", "500ms", "--cgroup", sb->path()});
  ASSERT_TRUE(agent.waitHealthy());

  TempDir tmp;
  int prom_port = freePort();
  std::string cfg = tmp.file("prometheus.yml", fmt::format(R"(global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: headroom
    static_configs:
      - targets: ["127.0.0.1:{}"]
)",
                                                           agent.port()));
  auto prom = ChildProcess::spawn({"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", "/usr/bin/prometheus",
                                   "--config.file=" + cfg, "--storage.tsdb.path=" + (tmp.path / "data").string(),
                                   "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)});
  ASSERT_TRUE(prom) << prom.error().describe();

  auto query = [&](const std::string& q) { return headroom::testing::promQuery(prom_port, q); };
  std::string sel = fmt::format(R"({{cgroup="{}"}})", sb->path());
  nlohmann::json result;
  auto end = Clock::now() + 60s;
  while (Clock::now() < end) {
    result = query("headroom_cgroup_usage_bytes" + sel);
    if (!result.empty()) break;
    std::this_thread::sleep_for(500ms);
  }
  ASSERT_EQ(result.size(), 1u) << "Prometheus never returned the series";
  EXPECT_EQ(result[0]["metric"]["job"], "headroom");
  double usage = std::stod(result[0]["value"][1].get<std::string>());
  auto cg = sb->read();
  ASSERT_TRUE(cg);
  EXPECT_NEAR(usage, static_cast<double>(cg->usage), 8.0 * kMiB);
  auto limit = query("headroom_cgroup_limit_bytes" + sel);
  ASSERT_EQ(limit.size(), 1u);
  EXPECT_EQ(std::stod(limit[0]["value"][1].get<std::string>()), 384.0 * kMiB);
  // PromQL over the breakdown: visible anon is about what the workload touched.
  auto anon = query(fmt::format(R"(sum(headroom_cgroup_memory_bytes{{cgroup="{}",kind="anon"}}))", sb->path()));
  ASSERT_EQ(anon.size(), 1u);
  EXPECT_NEAR(std::stod(anon[0]["value"][1].get<std::string>()), 96.0 * kMiB, 6.0 * kMiB);
  auto headroom = query("headroom_cgroup_headroom_bytes" + sel);
  ASSERT_EQ(headroom.size(), 1u);
  EXPECT_NEAR(std::stod(headroom[0]["value"][1].get<std::string>()), 384.0 * kMiB - usage, 8.0 * kMiB);
  // Prometheus itself says the target is up and its scrapes succeed.
  auto up = query(R"(up{job="headroom"})");
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0]["value"][1], "1");
  prom->kill(SIGTERM);
  (void)prom->wait(20s);
}

TEST(Agent, RealOomKillIsCountedAndListed) {
  SKIP_WITHOUT_ROOT();
  auto sb = CgroupSandbox::create("agent-oom");
  ASSERT_TRUE(sb) << sb.error().describe();
  ASSERT_TRUE(sb->setLimit(64 * kMiB));
  Agent agent({"--interval", "300ms", "--cgroup", sb->path(), "--role-rule", "prover=cgroup:" + sb->path()});
  ASSERT_TRUE(agent.waitHealthy());

  auto w = ChildProcess::spawn({HEADROOM_WORKLOAD, "--anon-slow", std::to_string(256 * kMiB)}, sb->procsFile());
  ASSERT_TRUE(w);
  auto st = w->wait(60s);
  ASSERT_TRUE(st);
  ASSERT_TRUE(WIFSIGNALED(*st) && WTERMSIG(*st) == SIGKILL) << "the workload was not OOM-killed: " << *st;

  std::map<std::string, std::string> labels = {
      {"cgroup", sb->path()}, {"role", "prover"}, {"process", "headroom-worklo"}};
  ASSERT_TRUE(agent.waitMetrics([&](const std::string& t) { return metric(t, "headroom_oom_kills_total", labels); }))
      << agent.metrics().substr(0, 3000);
  std::string text = agent.metrics();
  EXPECT_EQ(metric(text, "headroom_oom_kills_total", labels), 1.0);
  auto last = metric(text, "headroom_oom_kill_last_timestamp_seconds", labels);
  ASSERT_TRUE(last);
  EXPECT_NEAR(*last, static_cast<double>(std::time(nullptr)), 120.0);
  // The kernel's own counter for the cgroup agrees.
  EXPECT_GE(metric(text, "headroom_cgroup_oom_kills_total", {{"cgroup", sb->path()}}).value_or(0), 1.0);

  auto ooms = httpGet(agent.port(), "/v1/ooms");
  ASSERT_EQ(ooms.status, 200);
  auto j = nlohmann::json::parse(ooms.body);
  EXPECT_EQ(j["total"], 1);
  ASSERT_EQ(j["events"].size(), 1u) << ooms.body;
  const auto& e = j["events"][0];
  ASSERT_FALSE(e["victims"].empty());
  EXPECT_EQ(e["victims"][0]["tgid"], w->pid());
  EXPECT_EQ(e["victims"][0]["cgroup"], sb->path());
  EXPECT_EQ(e["oom_domain"]["cgroup"], sb->path());
  EXPECT_EQ(e["oom_domain"]["limit_bytes"], 64 * kMiB);
  EXPECT_EQ(httpGet(agent.port(), "/v1/ooms", {{"limit", "0"}}).body.find("\"events\":[]") != std::string::npos, true);
}

TEST(Agent, SighupReloadsRoleRulesLive) {
  SKIP_WITHOUT_ROOT();
  auto sb = CgroupSandbox::create("agent-reload");
  ASSERT_TRUE(sb) << sb.error().describe();
  auto w = spawnReady({HEADROOM_WORKLOAD, "--anon", std::to_string(16 * kMiB)}, sb->procsFile());
  TempDir tmp;
  std::string config = tmp.file("agent.toml", fmt::format("interval = \"200ms\"\ncgroups = [\"{}\"]\n", sb->path()));
  Agent agent({"--config", config});
  ASSERT_TRUE(agent.waitHealthy());
  std::map<std::string, std::string> as_system = {
      {"cgroup", sb->path()}, {"role", "system"}, {"process", "headroom-worklo"}};
  std::map<std::string, std::string> as_prover = {
      {"cgroup", sb->path()}, {"role", "prover"}, {"process", "headroom-worklo"}};
  ASSERT_TRUE(
      agent.waitMetrics([&](const std::string& t) { return metric(t, "headroom_process_group_size", as_system); }));

  // A bad config on reload keeps the running one (and says so in a counter).
  tmp.file("agent.toml", "interval = \"fast\"\n");
  agent.child().kill(SIGHUP);
  ASSERT_TRUE(agent.waitMetrics(
      [&](const std::string& t) { return metric(t, "headroom_config_reload_failures_total").value_or(0) == 1.0; }));
  EXPECT_TRUE(metric(agent.metrics(), "headroom_process_group_size", as_system));

  tmp.file("agent.toml",
           fmt::format("interval = \"200ms\"\ncgroups = [\"{}\"]\n[roles]\nrules = [\"prover=comm:headroom-worklo\"]\n",
                       sb->path()));
  agent.child().kill(SIGHUP);
  ASSERT_TRUE(agent.waitMetrics([&](const std::string& t) {
    return metric(t, "headroom_process_group_size", as_prover);
  })) << agent.metrics().substr(0, 3000);
  std::string text = agent.metrics();
  EXPECT_FALSE(metric(text, "headroom_process_group_size", as_system)) << "the old role's series is gone";
  EXPECT_EQ(metric(text, "headroom_config_reloads_total"), 1.0);
  // The sensors were kept: still attached, not restarted.
  EXPECT_EQ(metric(text, "headroom_sensor_state", {{"sensor", "oom"}, {"state", "active"}}), 1.0);
  auto reloaded = agent.waitLog("config reloaded", 10s);
  ASSERT_TRUE(reloaded);
  EXPECT_NE(reloaded->find("sensors kept"), std::string::npos) << *reloaded;
  // A [sensors] change restarts them, and their counters do not go back.
  double events = metric(text, "headroom_sensor_events_total").value_or(0);
  tmp.file("agent.toml",
           fmt::format("interval = \"200ms\"\ncgroups = [\"{}\"]\n[roles]\nrules = [\"prover=comm:headroom-worklo\"]\n"
                       "[sensors]\nexit_ring_bytes = \"512KiB\"\n",
                       sb->path()));
  agent.child().kill(SIGHUP);
  reloaded = agent.waitLog("config reloaded", 10s);
  ASSERT_TRUE(reloaded);
  EXPECT_NE(reloaded->find("sensors restarted"), std::string::npos) << *reloaded;
  ASSERT_TRUE(
      agent.waitMetrics([&](const std::string& t) { return metric(t, "headroom_config_reloads_total") == 2.0; }));
  text = agent.metrics();
  EXPECT_GE(metric(text, "headroom_sensor_events_total").value_or(0), events);
  EXPECT_EQ(metric(text, "headroom_sensor_state", {{"sensor", "oom"}, {"state", "active"}}), 1.0);
}

// With walks dearer than their budget (here any walk: 1 ms of CPU a second), the samples between
// two walks read the prover's processes again (and every process of its cgroup) and carry the
// others from the last walk: the prover's growth shows at the next sample, that of a process in
// another cgroup at the next walk.
TEST(Agent, BetweenWalksTheProverIsReadEverySampleAndItsNeighbourAtTheNextWalk) {
  SKIP_WITHOUT_ROOT();
  auto sb = CgroupSandbox::create("agent-walks");
  ASSERT_TRUE(sb) << sb.error().describe();
  auto other = CgroupSandbox::create("agent-walks-other");
  ASSERT_TRUE(other) << other.error().describe();
  constexpr std::uint64_t kTouch = 32 * kMiB;
  auto prover =
      spawnReady({HEADROOM_WORKLOAD, "--anon", std::to_string(4 * kMiB), "--touch-per-line", std::to_string(kTouch)},
                 sb->procsFile());
  auto neighbour =
      spawnReady({HEADROOM_WORKLOAD, "--anon", std::to_string(6 * kMiB), "--touch-per-line", std::to_string(kTouch)},
                 other->procsFile());
  Agent agent({"--interval", "200ms", "--cgroup", sb->path(), "--cgroup", other->path(), "--process-walk-budget", "1ms",
               "--process-walk-max-interval", "1h", "--role-rule", fmt::format("prover=cmdline:--anon {} ", 4 * kMiB)});
  ASSERT_TRUE(agent.waitHealthy());
  struct Seen {
    bool carried = false;
    std::uint64_t prover = 0, neighbour = 0;
    std::string prover_role;
  };
  auto look = [&]() -> std::optional<Seen> {
    auto r = httpGet(agent.port(), "/v1/snapshot");
    if (r.status != 200) return std::nullopt;
    auto j = nlohmann::json::parse(r.body);
    Seen s;
    s.carried = j["stats"]["processes_carried"].get<bool>();
    for (const auto& p : j["processes"]) {
      if (p["pid"] == prover.pid()) {
        s.prover = p["rss_anon_bytes"].get<std::uint64_t>();
        s.prover_role = p["role"].get<std::string>();
      }
      if (p["pid"] == neighbour.pid()) s.neighbour = p["rss_anon_bytes"].get<std::uint64_t>();
    }
    if (s.prover == 0 || s.neighbour == 0) return std::nullopt;
    return s;
  };
  // The first snapshot that `done` accepts, within `limit`.
  auto lookUntil = [&](const std::function<bool(const Seen&)>& done, Clock::duration limit) {
    std::optional<Seen> s;
    const auto until = Clock::now() + limit;
    while (Clock::now() < until) {
      s = look();
      if (s && done(*s)) break;
      std::this_thread::sleep_for(20ms);
    }
    return s && done(*s) ? s : std::nullopt;
  };
  std::optional<Seen> before = lookUntil([](const Seen&) { return true; }, 60s);
  ASSERT_TRUE(before) << "both processes in a walk";
  EXPECT_EQ(before->prover_role, "prover");

  // Both grow at once; a sample between two walks shows the prover's growth and not yet the
  // neighbour's. (A walk can fall between the touch and the next sample: then both show, and
  // the test grows them again.)
  bool seen_between = false;
  for (int round = 0; round < 5 && !seen_between; ++round) {
    ASSERT_TRUE(prover.writeLine(""));
    ASSERT_TRUE(neighbour.writeLine(""));
    ASSERT_EQ(prover.readLine().value_or(""), "touched");
    ASSERT_EQ(neighbour.readLine().value_or(""), "touched");
    const std::uint64_t grown = before->prover + kTouch - 2 * kMiB;
    auto now = lookUntil([&](const Seen& s) { return s.prover >= grown; }, 30s);
    ASSERT_TRUE(now) << "the prover's growth, read between walks or at one";
    if (now->carried) {
      seen_between = true;
      EXPECT_EQ(now->neighbour, before->neighbour) << "the neighbour as the last walk saw it";
    }
    before = now;
  }
  ASSERT_TRUE(seen_between) << "five rounds, each with a walk between the touch and the next sample";
  auto age = metric(agent.metrics(), "headroom_process_walk_age_seconds");
  ASSERT_TRUE(age);
  EXPECT_GE(*age, 0.0);

  // An asked-for walk (SIGHUP's reload walks at once) shows the neighbour as it is.
  const std::uint64_t neighbour_grown = before->neighbour + kTouch - 2 * kMiB;
  agent.child().kill(SIGHUP);
  EXPECT_TRUE(lookUntil([&](const Seen& s) { return s.neighbour >= neighbour_grown; }, 30s))
      << "the neighbour's growth at the next walk";
}

TEST(Agent, TellsSystemdReadyWatchdogAndStopping) {
  SKIP_WITHOUT_ROOT();
  TempDir tmp;
  std::string sock_path = (tmp.path / "notify.sock").string();
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock_path.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  timeval tv{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);

  Agent agent({"--interval", "1s"}, {{"NOTIFY_SOCKET", sock_path}, {"WATCHDOG_USEC", "400000"}});
  std::vector<std::string> messages;
  auto waitFor = [&](const std::string& needle, std::chrono::milliseconds limit) {
    auto end = Clock::now() + limit;
    while (Clock::now() < end) {
      char buf[4096];
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0) {
        messages.emplace_back(buf, static_cast<std::size_t>(n));
        if (messages.back().find(needle) != std::string::npos) return true;
      }
    }
    return false;
  };
  ASSERT_TRUE(waitFor("READY=1", 30s));
  EXPECT_NE(messages.back().find("MAINPID=" + std::to_string(agent.child().pid())), std::string::npos)
      << messages.back();
  EXPECT_EQ(httpGet(agent.port(), "/healthz").status, 200) << "READY comes after the first sample";
  // Watchdog pings every half period (200 ms here), between samples too (every 1 s): four
  // come while the agent has sampled at most twice more (a bound generous for a slow build).
  auto samples = [&] { return metric(agent.metrics(), "headroom_samples_total").value_or(0); };
  const double samples_before = samples();
  int pings = 0;
  for (auto end = Clock::now() + 30s; pings < 4 && Clock::now() < end;) {
    if (waitFor("WATCHDOG=1", 1s)) ++pings;
  }
  EXPECT_EQ(pings, 4);
  EXPECT_LE(samples() - samples_before, 3.0) << "pings only with samples: the watchdog is not pinged every half period";
  agent.child().kill(SIGTERM);
  EXPECT_TRUE(waitFor("STOPPING=1", 10s));
  auto st = agent.child().wait(20s);
  ASSERT_TRUE(st);
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0);
  ::close(fd);
}

TEST(Agent, TwoThousandShortLivedProcessesStayUnderTheSeriesCap) {
  SKIP_WITHOUT_ROOT();
  auto sb = CgroupSandbox::create("agent-cardinality");
  ASSERT_TRUE(sb) << sb.error().describe();
  // Two agents watch the same burst: one whose series cap binds, one whose per-role top-N
  // binds (its series cap far away), so that each bound is shown to hold on its own.
  constexpr std::size_t kCap = 300;
  std::string rule = "colocated=cgroup:" + sb->path();
  Agent capped({"--interval", "100ms", "--cgroup", sb->path(), "--metrics.top-processes", "50", "--metrics.max-series",
                std::to_string(kCap), "--role-rule", rule, "--sensors.bpf", "false"});
  Agent topn({"--interval", "100ms", "--cgroup", sb->path(), "--metrics.top-processes", "5", "--metrics.max-series",
              "100000", "--role-rule", rule, "--sensors.bpf", "false"});
  ASSERT_TRUE(capped.waitHealthy());
  ASSERT_TRUE(topn.waitHealthy());
  std::size_t baseline = seriesCount(capped.metrics());

  // 2,000 children with distinct comms: first 300 alive at once and held until both agents
  // have shown their bound (however slow the machine), then the rest, 300 alive at a time for
  // 300 ms each. Uncapped, 50 groups of about ten series each would pass the cap.
  auto spawner =
      ChildProcess::spawn({HEADROOM_WORKLOAD, "--spawn-hold", "300", "--spawn", "2000", "300", "300"}, sb->procsFile());
  ASSERT_TRUE(spawner);
  auto holding = spawner->readLine(120s);
  ASSERT_TRUE(holding && holding->rfind("holding 300", 0) == 0) << (holding ? *holding : holding.error().describe());
  std::size_t most = 0, scrapes = 0, most_groups = 0;
  double dropped = 0;
  std::set<std::string> names;
  auto scrape = [&] {
    std::string text = capped.metrics();
    ++scrapes;
    most = std::max(most, seriesCount(text));
    dropped = std::max(dropped, metric(text, "headroom_series_dropped").value_or(0));
    std::size_t groups = 0;
    std::string top_text = topn.metrics();
    for (auto line : splitLines(top_text)) {
      if (line.rfind("headroom_process_group_size{", 0) != 0) continue;
      ++groups;
      auto p = line.find("process=\"");
      if (p != std::string_view::npos) names.emplace(line.substr(p + 9, line.find('"', p + 9) - p - 9));
    }
    most_groups = std::max(most_groups, groups);
  };
  // The held burst: until both bounds have bound (or 60 s).
  for (auto end = Clock::now() + 60s; Clock::now() < end;) {
    scrape();
    if (dropped > 0 && most_groups >= 5 && names.count("other")) break;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(spawner->writeLine("go"));
  // The churn: scraped throughout, the cap must hold.
  for (;;) {
    scrape();
    if (auto line = spawner->readLine(50ms); line && line->rfind("spawned", 0) == 0) break;
  }
  spawner->closeStdin();
  ASSERT_TRUE(spawner->wait(60s));
  std::cout << "cardinality: " << scrapes << " scrapes; capped agent: most series " << most << " (cap " << kCap
            << ", baseline " << baseline << "), dropped up to " << dropped << "; top-5 agent: most process groups "
            << most_groups << ", names seen " << names.size() << "\n";
  EXPECT_GT(scrapes, 5u);
  EXPECT_LE(most, kCap) << "series past the cap";
  EXPECT_GT(dropped, 0) << "the cap never bound: the test proves nothing";
  // Top 5 per role, plus "other" for the sandbox (the spawner is one of the processes).
  EXPECT_LE(most_groups, 5u + 1u);
  EXPECT_GE(most_groups, 5u) << "the burst never filled the top 5";
  EXPECT_TRUE(names.count("other")) << "the rest is summed, not dropped";
  // After the burst the series count falls back: nothing grows with what came and went. The
  // processes gone leave at the next walk, at most process_walk_max_interval (30 s) away.
  ASSERT_TRUE(capped.waitMetrics([&](const std::string& t) { return seriesCount(t) <= baseline + 20; }, 45s))
      << seriesCount(capped.metrics()) << " vs " << baseline;
}

TEST(Agent, ProbeOnDemandIsOffByDefaultRateLimitedAndExported) {
  SKIP_WITHOUT_ROOT();
  auto sb = CgroupSandbox::create("agent-probe");
  ASSERT_TRUE(sb) << sb.error().describe();
  ASSERT_TRUE(sb->setLimit(256 * kMiB));
  auto w = spawnReady({HEADROOM_WORKLOAD, "--anon", std::to_string(64 * kMiB)}, sb->procsFile());
  {
    Agent off({"--interval", "500ms", "--cgroup", sb->path(), "--sensors.bpf", "false"});
    auto r = httpPost(off.port(), "/v1/probe?cgroup=" + sb->path());
    EXPECT_EQ(r.status, 403) << r.body;
    EXPECT_NE(r.body.find("probe.enabled"), std::string::npos) << r.body;
  }
  Agent agent({"--interval", "500ms", "--cgroup", sb->path(), "--sensors.bpf", "false", "--probe.enabled",
               "--probe.min-interval", "1h", "--probe.cgroup", sb->path()});
  ASSERT_TRUE(agent.waitHealthy());
  auto before = sb->read();
  ASSERT_TRUE(before);
  auto r = httpPost(agent.port(), "/v1/probe");
  ASSERT_EQ(r.status, 200) << r.body;
  auto j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["cgroup"], sb->path());
  double allocatable = j["allocatable_bytes"].get<double>();
  EXPECT_NEAR(allocatable, 256.0 * kMiB - static_cast<double>(before->usage), 16.0 * kMiB) << r.body;
  // Exported, and the next scrape already has it.
  ASSERT_TRUE(agent.waitMetrics([&](const std::string& t) {
    return metric(t, "headroom_probe_allocatable_bytes", {{"cgroup", sb->path()}});
  }));
  std::string text = agent.metrics();
  EXPECT_EQ(metric(text, "headroom_probe_allocatable_bytes", {{"cgroup", sb->path()}}), allocatable);
  EXPECT_EQ(metric(text, "headroom_probes_total", {{"outcome", "done"}}), 1.0);
  EXPECT_EQ(metric(text, "headroom_probe_aborted", {{"cgroup", sb->path()}}), 0.0);
  // Rate-limited: a second request within probe.min_interval is refused, not run.
  auto again = httpPost(agent.port(), "/v1/probe");
  EXPECT_EQ(again.status, 429) << again.body;
  EXPECT_NE(again.body.find("retry_after_seconds"), std::string::npos);
  // GET is not how a probe is asked for.
  EXPECT_EQ(httpGet(agent.port(), "/v1/probe").status, 405);
  auto after = sb->read();
  ASSERT_TRUE(after);
  EXPECT_EQ(after->oom_kills.value_or(0), before->oom_kills.value_or(0));
}

}  // namespace
}  // namespace headroom
