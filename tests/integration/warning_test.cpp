// The warning before an OOM kill, on real cgroups with the agent's default configuration: a
// steady climb toward a limit is warned at least 3 s before its kill with a time to OOM within a
// factor of two of the truth; a workload sitting near its limit and one filling its cgroup with
// page cache are never warned in a minute; a burst from calm to killed in under a second is
// recorded as "no warning possible"; the prover's hook and the events; `headroom run
// --on-warning`: a prover that sheds memory when told lives where the same prover untold is
// OOM-killed. And the kernel's notifications that a cgroup nears its limit.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/statfs.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "headroom/sources/cgroup_events.h"
#include "headroom/sources/collector.h"
#include "testing/cgroup_sandbox.h"
#include "testing/child_process.h"
#include "testing/eventually.h"
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

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The page cache workload: a file larger than the cgroup, over and over. Where /var/tmp is on a
// disk, written a block at a time, each block on disk before the next (clean cache filling the
// cgroup); where it is a tmpfs (a test guest: anything written there is shmem, never taken back),
// big files of the build that nothing else reads there, again and again from the (page-cached,
// read-only) root.
std::string cacheLoop(const std::string& big) {
  struct statfs fs {};
  if (::statfs("/var/tmp", &fs) == 0 && fs.f_type != TMPFS_MAGIC)
    return fmt::format("while :; do dd if=/dev/zero of={} bs=4M count=96 oflag=dsync conv=notrunc status=none; done",
                       big);
  // The unit tests' and the fuzzers' programs: half a GiB that nothing else in a guest reads.
  const std::string tests = std::filesystem::path(HEADROOM_TEST_PROVER).parent_path().string();
  return fmt::format("while :; do cat {0}/unit_tests {0}/fuzz/fuzz_* > /dev/null; done", tests);
}

testing::CommandResult runProver(const CgroupSandbox& sb, std::vector<std::string> hook) {
  std::vector<std::string> a = {HEADROOM_BINARY, "run", "--cgroup",       sb.path(), "--no-state",
                                "--max-retries", "0",   "--margin-floor", "16MiB"};
  a.insert(a.end(), hook.begin(), hook.end());
  for (const char* s :
       {"--", HEADROOM_TEST_PROVER, "--fraction", "0", "--grow-rate", "8MiB", "--shed-on-usr1", "--hold", "2000"})
    a.emplace_back(s);
  a.emplace_back("--grab");
  a.emplace_back(std::to_string(256 * kMiB));
  return runCommand(a);
}

// One minute, everything at once (each scenario in a cgroup of its own):
// - the agent as shipped: a steady climb warned ahead with a time to OOM within a factor of two
//   of the truth; a burst from calm recorded as "no warning possible"; a workload sitting near its
//   limit and a cgroup full of page cache never warned in the minute;
// - an agent with the prover's hook and the events: the prover told once, with the situation,
//   the warning in the events and the kill's record;
// - `headroom run` with and without --on-warning: the prover that sheds when told lives, the
//   same prover untold is OOM-killed.
TEST(Warning, SeenComingOrSaidWhyNotAndNoCryingWolfInAMinute) {
  SKIP_WITHOUT_ROOT();
  TempDir tmp;
  CgroupSandbox grow = sandbox("warn-grow", 256 * kMiB);
  CgroupSandbox sit = sandbox("warn-sit", 256 * kMiB);
  CgroupSandbox cache = sandbox("warn-cache", 256 * kMiB);
  CgroupSandbox burst = sandbox("warn-burst", 256 * kMiB);
  CgroupSandbox told = sandbox("warn-hook", 256 * kMiB);
  CgroupSandbox run_plain = sandbox("warn-run-plain", 128 * kMiB);
  CgroupSandbox run_hooked = sandbox("warn-run-hook", 128 * kMiB);
  const std::string big = fmt::format("/var/tmp/headroom-warning-cache-{}", ::getpid());

  // The agent as shipped: no interval, no warning settings given.
  testing::InfoLogAgent agent({"--journal", tmp.file("oom.hrj")});
  testing::InfoLogAgent hooked({"--journal", tmp.file("hook.hrj"), "--cgroup", told.path(), "--budget.cgroup",
                                told.path(), "--budget.margin-floor", "16MiB", "--warning.on-warning",
                                "cat > " + tmp.file("told"), "--events.output", tmp.file("events.jsonl")});
  ASSERT_TRUE(agent.waitLog("journal: OOM kills are recorded in")) << agent.logText();
  ASSERT_TRUE(hooked.waitLog("journal: OOM kills are recorded in")) << hooked.logText();
  const auto start = Clock::now();
  ChildProcess sitter = ready({HEADROOM_WORKLOAD, "--anon", std::to_string(200 * kMiB)}, sit);
  auto reader = ChildProcess::spawn({"/bin/sh", "-c", cacheLoop(big)}, cache.procsFile());
  ASSERT_TRUE(reader) << reader.error().describe();
  ChildProcess grower = ready({HEADROOM_WORKLOAD, "--anon", std::to_string(16 * kMiB), "--grow-after-ready",
                               std::to_string(400 * kMiB), "125", "--grow-on-line"},
                              grow);
  ChildProcess burster = ready(
      {HEADROOM_WORKLOAD, "--anon", std::to_string(160 * kMiB), "--touch-per-line", std::to_string(200 * kMiB)}, burst);
  ChildProcess prover = ready({HEADROOM_WORKLOAD, "--anon", std::to_string(16 * kMiB), "--grow-after-ready",
                               std::to_string(400 * kMiB), "62", "--grow-on-line"},
                              told);
  // A sample of everything calm (however slow it comes), then the climbs: 8 and 16 MiB a second.
  auto samples = [&] { return testing::metric(agent.metrics(), "headroom_samples_total").value_or(0); };
  auto sampledTwiceMore = [&] {
    const double from = samples();
    return testing::eventually([&] { return samples() >= from + 2; }, 60s);
  };
  const double seen_from = samples();
  for (auto end = Clock::now() + 60s; samples() < seen_from + 1 && Clock::now() < end;)
    std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(grower.writeLine("grow"));
  ASSERT_TRUE(prover.writeLine("grow"));
  testing::CommandResult without, with;
  std::thread runs([&] {
    std::thread plain([&] { without = runProver(run_plain, {}); });
    with = runProver(run_hooked, {"--on-warning", "signal:USR1"});
    plain.join();
  });

  // The prover told while it climbs; its budget's document has the growth coming.
  nlohmann::json situation;
  EXPECT_TRUE(testing::eventually(
      [&] { return (situation = nlohmann::json::parse(slurp(tmp.file("told")), nullptr, false)).is_object(); }, 30s))
      << hooked.logText();
  // No process of role prover there: all the cgroup holds is the neighbours', climbing steadily,
  // which the budget keeps back before the kill: as the growth their trend brings, or, where the
  // samples came too slowly for a trend before they had climbed that far (a slow guest), as what
  // they have grown by already, the whole of the bound's room.
  nlohmann::json budget;
  EXPECT_TRUE(testing::eventually(
      [&] {
        budget = hooked.getJson("/v1/budget");
        const nlohmann::json& decision = budget.contains("decision") ? budget["decision"] : budget;
        if (decision.value("forecast_growth_bytes", 0.0) > 0.0) return true;
        const double grown = decision.value("neighbour_growth_bytes", 0.0);
        if (grown <= 0.0 || !decision.contains("inputs")) return false;
        for (const auto& b : decision["inputs"].value("bounds", nlohmann::json::array()))
          if (b.value("name", "") == decision.value("tightest_bound", "")) return grown >= b.value("room_bytes", 0.0);
        return false;
      },
      15s))
      << budget.dump();

  // Warned while it climbs: on /v1/warnings and in /metrics.
  bool listed = false;
  for (auto end = Clock::now() + 45s; !listed && Clock::now() < end; std::this_thread::sleep_for(200ms)) {
    nlohmann::json w = agent.getJson("/v1/warnings");
    for (const auto& e : w["warnings"]) listed = listed || e["bound"] == grow.path();
  }
  EXPECT_TRUE(listed) << agent.logText();
  // The warning's start brings a sample at once: /metrics says it as soon as that is done.
  EXPECT_TRUE(testing::eventually(
      [&] {
        return testing::metric(agent.metrics(), "headroom_cgroup_oom_warning", {{"cgroup", grow.path()}}) == 1.0;
      },
      10s));
  const bool grow_killed = agent.waitLog("OOM kill in " + grow.path() + ":", 60s).has_value();
  EXPECT_TRUE(grow_killed) << agent.logText();

  // The burst: calm at 160 MiB for the whole climb (read fast, as near its limit), then 200 MiB
  // more at once in a 256 MiB cgroup, once the agent is done with the climb's kill (two samples
  // after it: its loop reads again).
  EXPECT_TRUE(sampledTwiceMore());
  ASSERT_TRUE(burster.writeLine("touch"));
  const bool burst_killed = agent.waitLog("OOM kill in " + burst.path() + ":", 30s).has_value();
  EXPECT_TRUE(burst_killed) << agent.logText();

  // A minute of the calm workload and the page cache, without a warning.
  std::this_thread::sleep_for(std::max<Clock::duration>(0s, start + 62s - Clock::now()));
  runs.join();
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
  // (No memory.peak before 5.19: there its usage, the cache still charged to it.)
  EXPECT_GT(cg->peak.value_or(cg->usage), 200 * kMiB);
  reader->kill(SIGKILL);
  std::filesystem::remove(big);

  // The records: warned ahead, or no warning possible.
  if (grow_killed && burst_killed) {
    // Every kill of the minute is in the journal (the run's provers' too): each by its OOM domain.
    std::map<std::string, nlohmann::json> by_cgroup;
    EXPECT_TRUE(testing::eventually(
        [&] {
          for (int id = static_cast<int>(by_cgroup.size()) + 1; id <= 8; ++id) {
            auto r = runCommand(
                {HEADROOM_BINARY, "report", "--journal", tmp.file("oom.hrj"), "--json", "--id", std::to_string(id)});
            if (r.exit_code != 0) break;
            auto j = nlohmann::json::parse(r.out);
            by_cgroup[j["event"]["oom_domain"]["cgroup"].get<std::string>()] = j;
          }
          return by_cgroup.count(grow.path()) != 0 && by_cgroup.count(burst.path()) != 0;
        },
        10s));
    ASSERT_TRUE(by_cgroup.count(grow.path())) << log;
    ASSERT_TRUE(by_cgroup.count(burst.path())) << log;
    const nlohmann::json& gw = by_cgroup[grow.path()]["warning"];
    ASSERT_EQ(gw["verdict"], "warned") << gw.dump();
    const double lead = gw["lead_seconds"].get<double>(), eta = gw["eta_seconds"].get<double>();
    std::cout << fmt::format(
        "steady climb: warned {:.1f} s before the kill, time to OOM then {:.1f} s (ratio {:.2f})\n", lead, eta,
        eta / lead);
    EXPECT_GE(lead, 3.0) << gw.dump();
    EXPECT_GE(eta / lead, 0.5) << gw.dump();
    EXPECT_LE(eta / lead, 2.0) << gw.dump();
    // The run-up: the samples and the fast readings between them, each with who grew.
    std::size_t fast = 0, with_processes = 0;
    for (const auto& p : by_cgroup[grow.path()]["flight"]["points"]) {
      if (p.value("fast", false)) ++fast;
      if (!p["processes"].empty()) ++with_processes;
    }
    EXPECT_GE(fast, 1U) << by_cgroup[grow.path()]["flight"].dump();
    EXPECT_GE(with_processes, 4U) << by_cgroup[grow.path()]["flight"].dump();
    const nlohmann::json& bw = by_cgroup[burst.path()]["warning"];
    std::cout << fmt::format("burst: {}\n", bw["text"].get<std::string>());
    EXPECT_EQ(bw["verdict"], "no_warning_possible") << bw.dump();
    // The report says it in words, with who grew.
    auto text = runCommand({HEADROOM_BINARY, "report", "--journal", tmp.file("oom.hrj"), "--id",
                            std::to_string(by_cgroup[grow.path()]["id"].get<int>())});
    EXPECT_NE(text.out.find("WARNING BEFORE THE KILL"), std::string::npos) << text.out;
    EXPECT_NE(text.out.find("headroom-worklo"), std::string::npos) << text.out;
  }

  // The hook: the prover told once, with its situation; the warning among the events.
  ASSERT_TRUE(situation.is_object()) << hooked.logText();
  EXPECT_EQ(situation["cgroup"], told.path());
  // Its own limit, or one above it (in a guest, the pod's, which every scenario here fills).
  EXPECT_TRUE(cgroupIsWithin(told.path(), situation["bound"].get<std::string>())) << situation.dump();
  EXPECT_EQ(situation["state"], "started");
  EXPECT_GT(situation["latest"]["growth_bytes_per_second"].get<double>(), 1.0 * kMiB);
  // Warned for its own limit, the prover is named among who grows (one above it is shared with
  // what this agent does not watch).
  if (situation["bound"] == told.path()) {
    bool grower_named = false;
    for (const auto& g : situation["latest"]["growers"]) grower_named = grower_named || g["pid"] == prover.pid();
    EXPECT_TRUE(grower_named) << situation.dump();
  }
  EXPECT_TRUE(hooked.waitLog("OOM kill in " + told.path() + ": warned", 30s)) << hooked.logText();
  EXPECT_EQ(testing::metric(hooked.metrics(), "headroom_oom_warning_hooks_total", {{"outcome", "ok"}}), 1.0);
  bool warning_line = false, warned_kill = false;
  testing::eventually(
      [&] {
        std::istringstream in(slurp(tmp.file("events.jsonl")));
        for (std::string line; std::getline(in, line);) {
          auto j = nlohmann::json::parse(line, nullptr, false);
          if (!j.is_object()) continue;
          if (j["kind"] == "oom_warning" && j["warning"]["state"] == "started" && j["warning"]["bound"] == told.path())
            warning_line = true;
          if (j["kind"] == "oom_kill" && j["record"]["event"]["oom_domain"]["cgroup"] == told.path() &&
              j["record"]["warning"]["verdict"] == "warned")
            warned_kill = true;
        }
        return warning_line && warned_kill;
      },
      10s);
  EXPECT_TRUE(warning_line) << slurp(tmp.file("events.jsonl"));
  EXPECT_TRUE(warned_kill) << slurp(tmp.file("events.jsonl"));

  // headroom run: the prover that sheds when told lives; untold, it is OOM-killed.
  EXPECT_EQ(without.exit_code, 137) << without.err;
  EXPECT_NE(without.err.find("-> oom_killed"), std::string::npos) << without.err;
  EXPECT_EQ(with.exit_code, 0) << with.err;
  EXPECT_NE(with.err.find("SIGUSR1 sent to pid"), std::string::npos) << with.err;
  EXPECT_NE(with.out.find("shed "), std::string::npos) << with.out;
  EXPECT_EQ(with.err.find("oom_killed"), std::string::npos) << with.err;
}

TEST(Warning, TheKernelSaysWhenACgroupNearsItsLimit) {
  SKIP_WITHOUT_ROOT();
  CgroupSandbox sb = sandbox("warn-events", 256 * kMiB);
  auto root = openSourceRoot("/");
  ASSERT_TRUE(root) << root.error().describe();
  const CgroupHierarchy& h = root->collector->hierarchy();
  // v1: a usage threshold at half the limit; v2: memory.events, which a memory.high breach changes.
  if (h.version() == 2) {
    std::ofstream(sb.directory() + "/memory.high") << 96 * kMiB << "\n";
  }
  auto events = CgroupEvents::create();
  ASSERT_TRUE(events) << events.error().describe();
  ASSERT_TRUE(events->watch(h, sb.path(), 128 * kMiB));
  EXPECT_EQ(events->watched(), 1U);
  ChildProcess w = ready(
      {HEADROOM_WORKLOAD, "--anon", std::to_string(16 * kMiB), "--touch-per-line", std::to_string(160 * kMiB)}, sb);
  EXPECT_TRUE(events->take().empty()) << "calm: nothing said";
  ASSERT_TRUE(w.writeLine("touch"));
  std::vector<std::string> spoke;
  testing::eventually([&] { return !(spoke = events->take()).empty(); }, 10s);
  ASSERT_EQ(spoke, std::vector<std::string>{sb.path()});
  events->keepOnly({});
  EXPECT_EQ(events->watched(), 0U);
}

}  // namespace
}  // namespace headroom
