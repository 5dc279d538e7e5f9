// The warning before an OOM kill, on real cgroups with the agent's default configuration: a
// steady climb toward a limit is warned at least 3 s before its kill with a time to OOM within a
// factor of two of the truth; a workload sitting near its limit and one filling its cgroup with
// page cache are never warned in a minute; a burst from calm to killed in under a second is
// recorded as "no warning possible". And `headroom run --on-warning`: a prover that sheds memory
// when told lives where the same prover without the hook is OOM-killed.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "testing/cgroup_sandbox.h"
#include "testing/child_process.h"
#include "testing/integration.h"

namespace headroom {
namespace {

using testing::CgroupSandbox;
using testing::ChildProcess;
using testing::runCommand;
using testing::TempDir;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::uint64_t kMiB = 1ULL << 20;

CgroupSandbox sandbox(const std::string& name, std::uint64_t limit) {
  auto sb = CgroupSandbox::create(name);
  if (!sb) throw std::runtime_error(sb.error().describe());
  if (auto st = sb->setLimit(limit); !st) throw std::runtime_error(st.error().describe());
  return std::move(*sb);
}

ChildProcess ready(const std::vector<std::string>& args, const CgroupSandbox& sb) {
  auto w = ChildProcess::spawn(args, sb.procsFile());
  if (!w) throw std::runtime_error(w.error().describe());
  for (;;) {
    auto line = w->readLine();
    if (!line) throw std::runtime_error("the workload did not get ready: " + line.error().describe());
    if (line->rfind("ready", 0) == 0) return std::move(*w);
  }
}

nlohmann::json record(const std::string& journal, int id) {
  auto r = runCommand({HEADROOM_BINARY, "report", "--journal", journal, "--json", "--id", std::to_string(id)});
  if (r.exit_code != 0) throw std::runtime_error(r.err);
  return nlohmann::json::parse(r.out);
}

TEST(Warning, ASteadyClimbIsWarnedABurstCannotBeAndCalmOrCacheAreNot) {
  SKIP_WITHOUT_ROOT();
  TempDir tmp;
  CgroupSandbox grow = sandbox("warn-grow", 256 * kMiB);
  CgroupSandbox sit = sandbox("warn-sit", 256 * kMiB);
  CgroupSandbox cache = sandbox("warn-cache", 256 * kMiB);
  CgroupSandbox burst = sandbox("warn-burst", 256 * kMiB);
  // A file larger than the cgroup, written again and again a block at a time, each block on disk
  // before the next: clean page cache that fills the cgroup and that reclaim takes back.
  const std::string big = fmt::format("/var/tmp/headroom-warning-cache-{}", ::getpid());

  // The agent as shipped: no interval, no warning settings given.
  testing::InfoLogAgent agent({"--journal", tmp.file("oom.hrj")});
  ASSERT_TRUE(agent.waitLog("journal: OOM kills are recorded in")) << agent.logText();
  const auto start = Clock::now();
  ChildProcess sitter = ready({HEADROOM_WORKLOAD, "--anon", std::to_string(200 * kMiB)}, sit);
  auto reader = ChildProcess::spawn(
      {"/bin/sh", "-c",
       fmt::format("while :; do dd if=/dev/zero of={} bs=4M count=96 oflag=dsync status=none; done", big)},
      cache.procsFile());
  ASSERT_TRUE(reader) << reader.error().describe();
  ChildProcess grower = ready({HEADROOM_WORKLOAD, "--anon", std::to_string(16 * kMiB), "--grow-after-ready",
                               std::to_string(400 * kMiB), "125", "--grow-on-line"},
                              grow);
  ChildProcess burster = ready(
      {HEADROOM_WORKLOAD, "--anon", std::to_string(16 * kMiB), "--touch-per-line", std::to_string(300 * kMiB)}, burst);
  // Two samples of everything calm (however slow they come), then the climb: 8 MiB a second.
  auto samples = [&] { return testing::metric(agent.metrics(), "headroom_samples_total").value_or(0); };
  const double seen_from = samples();
  for (auto end = Clock::now() + 60s; samples() < seen_from + 2 && Clock::now() < end;)
    std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(grower.writeLine("grow"));

  // Warned while it climbs: on /v1/warnings and in /metrics.
  bool listed = false;
  for (auto end = Clock::now() + 45s; !listed && Clock::now() < end; std::this_thread::sleep_for(200ms)) {
    nlohmann::json w = agent.getJson("/v1/warnings");
    for (const auto& e : w["warnings"]) listed = listed || e["bound"] == grow.path();
  }
  ASSERT_TRUE(listed) << agent.logText();
  EXPECT_EQ(testing::metric(agent.metrics(), "headroom_cgroup_oom_warning", {{"cgroup", grow.path()}}), 1.0);
  ASSERT_TRUE(agent.waitLog("OOM kill recorded as record 1", 60s)) << agent.logText();

  // The burst: calm for the whole climb, then 300 MiB at once in a 256 MiB cgroup.
  ASSERT_TRUE(burster.writeLine("touch"));
  ASSERT_TRUE(agent.waitLog("OOM kill recorded as record 2", 30s)) << agent.logText();

  // A minute of the calm workload and the page cache, without a warning.
  std::this_thread::sleep_for(std::max<Clock::duration>(0s, start + 62s - Clock::now()));
  const std::string metrics = agent.metrics();
  EXPECT_FALSE(testing::metric(metrics, "headroom_oom_warnings_total", {{"cgroup", sit.path()}}));
  EXPECT_FALSE(testing::metric(metrics, "headroom_oom_warnings_total", {{"cgroup", cache.path()}}));
  EXPECT_EQ(testing::metric(metrics, "headroom_oom_warnings_total", {{"cgroup", grow.path()}}), 1.0);
  const std::string log = agent.logText();
  EXPECT_EQ(log.find("OOM warning: " + sit.path() + " "), std::string::npos) << log;
  EXPECT_EQ(log.find("OOM warning: " + cache.path() + " "), std::string::npos) << log;
  // The cache did fill its cgroup: what the kernel could take back was there to be mistaken.
  auto cg = cache.read();
  ASSERT_TRUE(cg);
  EXPECT_GT(cg->usage, 200 * kMiB);
  reader->kill(SIGKILL);
  std::filesystem::remove(big);

  std::map<std::string, nlohmann::json> by_cgroup;
  for (int id : {1, 2}) {
    nlohmann::json r = record(tmp.file("oom.hrj"), id);
    by_cgroup[r["event"]["oom_domain"]["cgroup"].get<std::string>()] = r;
  }
  ASSERT_TRUE(by_cgroup.count(grow.path())) << log;
  ASSERT_TRUE(by_cgroup.count(burst.path())) << log;
  const nlohmann::json& gw = by_cgroup[grow.path()]["warning"];
  ASSERT_EQ(gw["verdict"], "warned") << gw.dump();
  const double lead = gw["lead_seconds"].get<double>(), eta = gw["eta_seconds"].get<double>();
  std::cout << fmt::format("steady climb: warned {:.1f} s before the kill, time to OOM then {:.1f} s (ratio {:.2f})\n",
                           lead, eta, eta / lead);
  EXPECT_GE(lead, 3.0) << gw.dump();
  EXPECT_GE(eta / lead, 0.5) << gw.dump();
  EXPECT_LE(eta / lead, 2.0) << gw.dump();
  // The run-up: the fast readings of the warned cgroup, with who grew.
  std::size_t fast = 0;
  for (const auto& p : by_cgroup[grow.path()]["flight"]["points"])
    if (p.value("fast", false) && !p["processes"].empty()) ++fast;
  EXPECT_GE(fast, 5U) << by_cgroup[grow.path()]["flight"].dump();
  const nlohmann::json& bw = by_cgroup[burst.path()]["warning"];
  std::cout << fmt::format("burst: {}\n", bw["text"].get<std::string>());
  EXPECT_EQ(bw["verdict"], "no_warning_possible") << bw.dump();
  // The report says it in words.
  auto text = runCommand({HEADROOM_BINARY, "report", "--journal", tmp.file("oom.hrj"), "--id", "1"});
  EXPECT_NE(text.out.find("warned"), std::string::npos) << text.out;
}

TEST(Warning, RunOnWarningKeepsAProverThatShedsAliveWhereWithoutItItIsKilled) {
  SKIP_WITHOUT_ROOT();
  TempDir tmp;
  auto run = [&](const CgroupSandbox& sb, std::vector<std::string> hook) {
    std::vector<std::string> a = {HEADROOM_BINARY, "run", "--cgroup",       sb.path(), "--no-state",
                                  "--max-retries", "0",   "--margin-floor", "16MiB"};
    a.insert(a.end(), hook.begin(), hook.end());
    for (const char* s :
         {"--", HEADROOM_TEST_PROVER, "--fraction", "0", "--grow-rate", "8MiB", "--shed-on-usr1", "--hold", "2000"})
      a.emplace_back(s);
    a.emplace_back("--grab");
    a.emplace_back(std::to_string(256 * kMiB));
    return runCommand(a);
  };
  CgroupSandbox plain = sandbox("warn-run-plain", 128 * kMiB);
  CgroupSandbox hooked = sandbox("warn-run-hook", 128 * kMiB);
  testing::CommandResult without;
  std::thread t([&] { without = run(plain, {}); });
  testing::CommandResult with = run(hooked, {"--on-warning", "signal:USR1"});
  t.join();
  EXPECT_EQ(without.exit_code, 137) << without.err;
  EXPECT_NE(without.err.find("-> oom_killed"), std::string::npos) << without.err;
  EXPECT_EQ(with.exit_code, 0) << with.err;
  EXPECT_NE(with.err.find("SIGUSR1 sent to pid"), std::string::npos) << with.err;
  EXPECT_NE(with.out.find("shed "), std::string::npos) << with.out;
  EXPECT_EQ(with.err.find("oom_killed"), std::string::npos) << with.err;
}

}  // namespace
}  // namespace headroom
