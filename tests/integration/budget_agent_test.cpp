// The agent's budget on a real kernel: the real binary beside a prover in a real memory cgroup.
// A neighbour that grows its shared memory lowers /v1/budget on the next tick; an OOM kill of
// the prover raises the generation and the margin at once and is kept in the state file;
// `headroom budget` prints the agent's budget while it runs, and one computed locally that
// agrees with it when it does not.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "headroom/controller/controller.h"
#include "headroom/sources/parse.h"
#include "testing/cgroup_sandbox.h"
#include "testing/child_process.h"
#include "testing/integration.h"

namespace headroom {
namespace {

using testing::CgroupSandbox;
using testing::ChildProcess;
using testing::httpGet;
using testing::metric;
using testing::runCommand;
using testing::spawnReady;
using testing::TempDir;
using Agent = testing::AgentProcess;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::uint64_t kMiB = 1ULL << 20;

double unixNow() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

std::uint64_t u64(const nlohmann::json& j, const char* key) { return j.at(key).get<std::uint64_t>(); }
double mib(std::uint64_t b) { return static_cast<double>(b) / static_cast<double>(kMiB); }

// The workload's comm as the kernel keeps it (15 bytes): the prover, unless the colocated rule
// (its command line creates shared memory) matched first.
const std::vector<std::string> kRoleRules = {"--role-rule", "colocated=cmdline:--shm-create", "--role-rule",
                                             "prover=comm:headroom-worklo"};

TEST(BudgetAgent, NeighbourGrowingSharedMemoryLowersTheBudgetOnTheNextTick) {
  SKIP_WITHOUT_ROOT();
  auto sb = CgroupSandbox::create("budget-neighbour");
  ASSERT_TRUE(sb) << sb.error().describe();
  ASSERT_TRUE(sb->setLimit(512 * kMiB));
  TempDir tmp;
  TempDir shm("/dev/shm");
  auto prover = spawnReady({HEADROOM_WORKLOAD, "--anon", std::to_string(64 * kMiB)}, sb->procsFile());

  // budget.cgroup unset: the agent finds the prover's cgroup from the role rule.
  std::vector<std::string> args = {"--interval",
                                   "200ms",
                                   "--cgroup",
                                   sb->path(),
                                   "--budget.margin-floor",
                                   "16MiB",
                                   "--budget.hysteresis",
                                   "1MiB",
                                   "--budget.state-file",
                                   tmp.file("state.json"),
                                   "--budget.file",
                                   tmp.file("budget")};
  args.insert(args.end(), kRoleRules.begin(), kRoleRules.end());
  Agent agent(args);
  EXPECT_NE(agent.servedPaths().find("/v1/budget"), std::string::npos) << agent.servedPaths();
  auto before = agent.waitBudget([](const nlohmann::json& j) { return j["inputs"]["prover_processes"] == 1; });
  ASSERT_TRUE(before) << httpGet(agent.port(), "/v1/budget").body;
  EXPECT_EQ((*before)["cgroup"], sb->path());
  const std::uint64_t b0 = u64(*before, "budget_bytes");
  const std::uint64_t gen0 = u64(*before, "generation");
  EXPECT_EQ(u64(*before, "margin_bytes"), 16 * kMiB) << before->dump();
  EXPECT_EQ((*before)["tightest_bound"], sb->path());
  // Nothing else in the cgroup: the budget is the limit less the margin, give or take the
  // kernel's own charge.
  EXPECT_GT(b0, 512 * kMiB - 16 * kMiB - 24 * kMiB) << before->dump();
  EXPECT_LE(b0, 512 * kMiB - 16 * kMiB + 8 * kMiB) << before->dump();
  // The budget file for launch scripts holds the published budget.
  auto fileHolds = [&](std::uint64_t want) {
    for (auto end = Clock::now() + 5s; Clock::now() < end; std::this_thread::sleep_for(50ms)) {
      std::ifstream f(tmp.file("budget"));
      std::stringstream text;
      text << f.rdbuf();
      if (text.str() == fmt::format("{}\n", want)) return true;
    }
    return false;
  };
  auto published = agent.waitBudget([&](const nlohmann::json& j) { return u64(j, "generation") >= gen0; });
  ASSERT_TRUE(published);
  EXPECT_TRUE(fileHolds(u64(*published, "budget_bytes")));

  // A Curio-like neighbour in the same cgroup takes 128 MiB of shared memory.
  auto neighbour = spawnReady({HEADROOM_WORKLOAD, "--shm-create", shm.file("curio-shm"), std::to_string(128 * kMiB)},
                              sb->procsFile());
  const double ready_at = unixNow();
  const auto ready_mono = Clock::now();
  // Every decision from a sample taken after the neighbour was ready shows it: the next tick.
  auto after = agent.waitBudget([&](const nlohmann::json& j) { return j["time"].get<double>() > ready_at; }, 60s, 20ms);
  ASSERT_TRUE(after) << "no sample after the neighbour grew";
  const double waited_ms = std::chrono::duration<double, std::milli>(Clock::now() - ready_mono).count();
  const std::uint64_t b1 = u64(*after, "budget_bytes");
  const std::uint64_t growth = u64(*after, "neighbour_growth_bytes");
  std::cout << fmt::format(
      "budget {:.1f} MiB (generation {}) -> {:.1f} MiB (generation {}) on the first sample after "
      "the neighbour's 128 MiB of shmem, {:.0f} ms later; neighbours' growth {:.1f} MiB\n",
      mib(b0), gen0, mib(b1), u64(*after, "generation"), waited_ms, mib(growth));
  EXPECT_GT(u64(*after, "generation"), gen0);
  // The shmem is charged under the bound (its usage), and its growth is expected again. Where
  // filling it spanned several samples (a slow or emulated machine), the climb reads as a steady
  // trend and the forecast keeps back more: what that trend takes over the horizon, never more
  // than the room left under the limit.
  const nlohmann::json& own = (*after)["inputs"]["bounds"][0];
  ASSERT_EQ(own["name"], sb->path()) << after->dump();
  const std::uint64_t room = u64(own, "limit_bytes") + u64(own, "reclaimable_bytes") - u64(own, "usage_bytes");
  const std::uint64_t forecast = u64(*after, "forecast_growth_bytes");
  EXPECT_LE(forecast, room) << after->dump();
  EXPECT_LE(growth, room) << after->dump();
  if (forecast >= growth && forecast > 0) {
    std::cout << fmt::format("the fill read as a steady climb: {:.1f} MiB forecast, the room {:.1f} MiB\n",
                             mib(forecast), mib(room));
    EXPECT_EQ(growth, forecast) << after->dump();
    EXPECT_GT(mib(growth), 128.0 - 16.0) << after->dump();
  } else {
    EXPECT_NEAR(mib(growth), 128.0, 16.0) << after->dump();
  }
  EXPECT_NEAR(mib(b0 - b1), 128.0 + mib(growth), 16.0) << after->dump();
  EXPECT_EQ(u64(*after, "margin_bytes"), 16 * kMiB);
  EXPECT_TRUE(fileHolds(b1)) << "the budget file follows the new generation";
  // The metrics say the same.
  auto text = httpGet(agent.port(), "/metrics").body;
  auto now = agent.waitBudget();
  ASSERT_TRUE(now);
  EXPECT_EQ(metric(text, "headroom_budget_bytes", {{"cgroup", sb->path()}}),
            static_cast<double>(u64(*now, "budget_bytes")));
  EXPECT_EQ(metric(text, "headroom_margin_bytes", {{"cgroup", sb->path()}}), 16.0 * kMiB);
  EXPECT_GE(metric(text, "headroom_budget_generation", {{"cgroup", sb->path()}}).value_or(0),
            static_cast<double>(gen0 + 1));
  neighbour.closeStdin();
  prover.closeStdin();
  (void)neighbour.wait();
  (void)prover.wait();
  agent.stop();
}

TEST(BudgetAgent, OomKillOfTheProverRaisesGenerationAndMarginAtOnce) {
  SKIP_WITHOUT_ROOT();
  auto sb = CgroupSandbox::create("budget-oom");
  ASSERT_TRUE(sb) << sb.error().describe();
  ASSERT_TRUE(sb->setLimit(128 * kMiB));
  TempDir tmp;
  const std::string state = tmp.file("state.json");
  // A long interval: a new generation within a second or two of the kill came from the kill,
  // not from the next sample. budget.cgroup set: a budget before the prover starts.
  std::vector<std::string> args = {"--interval",
                                   "10s",
                                   "--cgroup",
                                   sb->path(),
                                   "--budget.cgroup",
                                   sb->path(),
                                   "--budget.margin-floor",
                                   "16MiB",
                                   "--budget.margin-step",
                                   "8MiB",
                                   "--budget.hysteresis",
                                   "1MiB",
                                   "--budget.state-file",
                                   state};
  args.insert(args.end(), kRoleRules.begin(), kRoleRules.end());
  Agent agent(args);
  auto before = agent.waitBudget();
  ASSERT_TRUE(before) << httpGet(agent.port(), "/v1/budget").body;
  EXPECT_EQ((*before)["inputs"]["prover_processes"], 0) << "no prover yet, and a budget already";
  const std::uint64_t gen0 = u64(*before, "generation");
  const std::uint64_t m0 = u64(*before, "margin_bytes");
  EXPECT_EQ(m0, 16 * kMiB);
  EXPECT_EQ((*before)["learned"]["oom_kills"], 0);

  auto prover = ChildProcess::spawn({HEADROOM_WORKLOAD, "--anon-slow", std::to_string(512 * kMiB)}, sb->procsFile());
  ASSERT_TRUE(prover);
  auto st = prover->wait(60s);
  ASSERT_TRUE(st);
  ASSERT_TRUE(WIFSIGNALED(*st) && WTERMSIG(*st) == SIGKILL) << "the prover was not OOM-killed: " << *st;
  const auto killed_at = Clock::now();
  auto after = agent.waitBudget([](const nlohmann::json& j) { return j["learned"]["oom_kills"] == 1; }, 15s, 20ms);
  ASSERT_TRUE(after) << httpGet(agent.port(), "/v1/budget").body;
  const double published_ms = std::chrono::duration<double, std::milli>(Clock::now() - killed_at).count();
  const std::uint64_t m1 = u64(*after, "margin_bytes");
  const std::uint64_t gen1 = u64(*after, "generation");
  const auto& kill = (*after)["learned"]["last_kill"];
  std::cout << fmt::format(
      "OOM kill: margin {:.1f} -> {:.1f} MiB, generation {} -> {}, budget {:.1f} -> {:.1f} MiB, "
      "published {:.0f} ms after the kill (interval 10 s); evidence: charge {:.1f} MiB for a budget "
      "of {:.1f} MiB, page tables {:.2f} MiB\n",
      mib(m0), mib(m1), gen0, gen1, mib(u64(*before, "budget_bytes")), mib(u64(*after, "budget_bytes")), published_ms,
      mib(u64(kill, "charge_bytes")), mib(u64(kill, "budget_bytes")), mib(u64(kill, "page_tables_bytes")));
  EXPECT_GT(gen1, gen0);
  EXPECT_LT(published_ms, 5000.0) << "published at once, not at the next 10 s sample";
  // At least margin x 1.5 and margin + step; from the evidence when that says more.
  EXPECT_GE(m1, m0 * 3 / 2);
  EXPECT_GE(m1, m0 + 8 * kMiB);
  EXPECT_EQ(u64((*after)["learned"], "learned_margin_bytes"), m1);
  EXPECT_EQ(kill["prover_victim"], true);
  EXPECT_NE(kill["what"].get<std::string>().find(std::to_string(prover->pid())), std::string::npos) << kill.dump();
  EXPECT_GT(u64(kill, "charge_bytes"), 64 * kMiB) << "the victim's memory at the kill";
  EXPECT_LT(u64(*after, "budget_bytes"), u64(*before, "budget_bytes")) << "a larger margin, a smaller budget";
  EXPECT_NE((*after)["margin_source"].get<std::string>().find("OOM kill"), std::string::npos) << after->dump();

  // The state file holds what was learned, for the next start and for `headroom run`.
  std::ifstream f(state);
  ASSERT_TRUE(f) << state;
  auto saved = nlohmann::json::parse(f);
  EXPECT_EQ(u64(saved, "learned_margin_bytes"), m1);
  EXPECT_EQ(saved["oom_kills"], 1);
  EXPECT_EQ(saved["last_kill"]["prover_victim"], true);

  auto text = httpGet(agent.port(), "/metrics").body;
  std::map<std::string, std::string> cg = {{"cgroup", sb->path()}};
  EXPECT_EQ(metric(text, "headroom_budget_margin_changes_total", {{"cgroup", sb->path()}, {"reason", "oom_kill"}}),
            1.0);
  EXPECT_EQ(metric(text, "headroom_margin_bytes", cg), static_cast<double>(m1));

  // `headroom budget` while the agent runs: the agent's budget, whatever it would compute here.
  // Compared with /v1/budget read before and after it, the same generation both times.
  auto besideAgent = [&](const std::string& format) -> std::pair<testing::CommandResult, nlohmann::json> {
    for (int i = 0;; ++i) {
      auto first = agent.waitBudget();
      auto r = runCommand({HEADROOM_BINARY, "budget", "--agent", agent.url(), "--format", format});
      auto second = agent.waitBudget();
      if (!first || !second) throw std::runtime_error("/v1/budget stopped answering");
      if ((*first)["generation"] == (*second)["generation"] || i == 4) return {r, *second};
    }
  };
  auto [bytes, now] = besideAgent("bytes");
  ASSERT_EQ(bytes.exit_code, 0) << bytes.err;
  EXPECT_EQ(bytes.out, fmt::format("{}\n", u64(now, "budget_bytes")));
  auto [env, then] = besideAgent("env");
  EXPECT_EQ(env.out, fmt::format("HEADROOM_BUDGET_BYTES={} HEADROOM_MARGIN_BYTES={} HEADROOM_BUDGET_GENERATION={} "
                                 "HEADROOM_BUDGET_SOURCE=agent\n",
                                 u64(then, "budget_bytes"), m1, u64(then, "generation")));

  // Restarted, the agent starts from the learned margin.
  std::string log = agent.stop();
  EXPECT_NE(log.find("OOM kill #1"), std::string::npos) << log;
  Agent again(args);
  auto resumed = again.waitBudget();
  ASSERT_TRUE(resumed);
  EXPECT_EQ(u64(*resumed, "margin_bytes"), m1);
  EXPECT_EQ((*resumed)["learned"]["oom_kills"], 1);
  again.stop();
}

TEST(BudgetAgent, LocalBudgetAgreesWithTheAgentsWithinTheHysteresis) {
  SKIP_WITHOUT_ROOT();
  auto sb = CgroupSandbox::create("budget-local");
  ASSERT_TRUE(sb) << sb.error().describe();
  ASSERT_TRUE(sb->setLimit(256 * kMiB));
  TempDir tmp;
  TempDir shm("/dev/shm");
  const std::string state = tmp.file("state.json");
  auto prover = spawnReady({HEADROOM_WORKLOAD, "--anon", std::to_string(48 * kMiB)}, sb->procsFile());
  auto neighbour =
      spawnReady({HEADROOM_WORKLOAD, "--shm-create", shm.file("shm"), std::to_string(32 * kMiB)}, sb->procsFile());
  std::vector<std::string> policy = {"--budget.margin-floor", "16MiB", "--budget.hysteresis", "1MiB",
                                     "--budget.state-file",   state};
  std::vector<std::string> args = {"--interval", "200ms", "--cgroup", sb->path()};
  args.insert(args.end(), policy.begin(), policy.end());
  args.insert(args.end(), kRoleRules.begin(), kRoleRules.end());
  Agent agent(args);
  // A few samples in, so that the agent's window holds a steady state.
  auto first = agent.waitBudget([](const nlohmann::json& j) { return j["inputs"]["prover_processes"] == 1; });
  ASSERT_TRUE(first);
  // Five samples (at 200 ms) after the first that saw the prover, however long they take to come.
  const double first_at = (*first)["time"].get<double>();
  auto theirs =
      agent.waitBudget([&](const nlohmann::json& j) { return j["time"].get<double>() >= first_at + 1.0; }, 60s);
  ASSERT_TRUE(theirs);
  const std::uint64_t agent_budget = u64(*theirs, "budget_bytes");
  const std::string port = std::to_string(agent.port());
  agent.stop();

  std::vector<std::string> local = {
      HEADROOM_BINARY, "--log-level", "info",           "budget", "--agent",      "http://127.0.0.1:" + port,
      "--cgroup",      sb->path(),    "--margin-floor", "16MiB",  "--state-file", state,
      "--format",      "json"};
  local.insert(local.end(), kRoleRules.begin(), kRoleRules.end());
  auto r = runCommand(local);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["source"], "local") << "no agent any more";
  EXPECT_NE(r.err.find("computing it here"), std::string::npos) << r.err;
  const std::uint64_t mine = u64(j, "budget_bytes");
  // The agent moves its published budget only beyond the larger of 1 MiB and 1% of it.
  const double band = std::max(1.0, mib(agent_budget) / 100.0);
  std::cout << fmt::format("agent {:.2f} MiB, local {:.2f} MiB: {:+.2f} MiB (hysteresis {:.2f} MiB)\n",
                           mib(agent_budget), mib(mine), mib(mine) - mib(agent_budget), band);
  EXPECT_NEAR(mib(mine), mib(agent_budget), band) << r.out;
  EXPECT_EQ(j["inputs"]["prover_processes"], 1);
  EXPECT_EQ(u64(j, "margin_bytes"), 16 * kMiB);
  std::vector<std::string> plain = {HEADROOM_BINARY,  "budget", "--local",      "--cgroup", sb->path(),
                                    "--margin-floor", "16MiB",  "--state-file", state};
  plain.insert(plain.end(), kRoleRules.begin(), kRoleRules.end());
  auto b = runCommand(plain);
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_NEAR(mib(std::stoull(b.out)), mib(agent_budget), band);
  EXPECT_TRUE(b.err.empty()) << b.err;
  neighbour.closeStdin();
  prover.closeStdin();
}

TEST(BudgetAgent, SighupAppliesANewPolicyAndKeepsWhatWasLearned) {
  SKIP_WITHOUT_ROOT();
  auto sb = CgroupSandbox::create("budget-reload");
  ASSERT_TRUE(sb) << sb.error().describe();
  ASSERT_TRUE(sb->setLimit(128 * kMiB));
  TempDir tmp;
  // What an earlier OOM kill taught: a 24 MiB margin.
  ControllerState learned;
  learned.learned_margin = 24 * kMiB;
  learned.oom_kills = 1;
  ASSERT_TRUE(saveState(tmp.file("state.json"), learned));
  auto config = [&](const std::string& floor) {
    std::ofstream(tmp.file("agent.toml")) << fmt::format(
        "interval = \"200ms\"\ncgroups = [\"{0}\"]\n[budget]\ncgroup = \"{0}\"\nmargin_floor = \"{1}\"\nhysteresis = "
        "\"1MiB\"\n"
        "state_file = \"{2}\"\nfile = \"{3}\"\n",
        sb->path(), floor, tmp.file("state.json"), tmp.file("budget"));
  };
  config("16MiB");
  Agent::Options own_config;  // the config names the state file
  own_config.own_state_file = false;
  Agent agent({"--config", tmp.file("agent.toml")}, own_config);
  auto first = agent.waitBudget();
  ASSERT_TRUE(first) << httpGet(agent.port(), "/v1/budget").body;
  EXPECT_EQ(u64(*first, "margin_bytes"), 24 * kMiB) << "the learned margin, above the floor";
  EXPECT_EQ((*first)["learned"]["oom_kills"], 1);
  auto fileText = [&] {
    std::ifstream f(tmp.file("budget"));
    std::stringstream text;
    text << f.rdbuf();
    return text.str();
  };
  EXPECT_EQ(fileText(), fmt::format("{}\n", u64(*first, "budget_bytes")));

  // A floor above the limit: no room, said on /v1/budget; the budget file goes, the gauge too.
  config("1GiB");
  agent.child().kill(SIGHUP);
  testing::HttpResponse none;
  for (auto end = Clock::now() + 10s; Clock::now() < end; std::this_thread::sleep_for(50ms)) {
    none = httpGet(agent.port(), "/v1/budget");
    if (none.status == 503) break;
  }
  ASSERT_EQ(none.status, 503) << none.body;
  auto j = nlohmann::json::parse(none.body);
  EXPECT_NE(j["error"].get<std::string>().find("no room"), std::string::npos) << none.body;
  EXPECT_EQ(j["cgroup"], sb->path());
  EXPECT_EQ(j["decision"]["valid"], false);
  EXPECT_EQ(u64(j["decision"], "margin_bytes"), 1ULL << 30);
  EXPECT_FALSE(std::filesystem::exists(tmp.file("budget"))) << "no stale budget for a launch script";
  auto text = httpGet(agent.port(), "/metrics").body;
  EXPECT_FALSE(metric(text, "headroom_budget_bytes", {{"cgroup", sb->path()}}));
  EXPECT_EQ(metric(text, "headroom_margin_bytes", {{"cgroup", sb->path()}}), static_cast<double>(1ULL << 30));

  // A low floor again: the learned 24 MiB is still there.
  config("8MiB");
  agent.child().kill(SIGHUP);
  auto back = agent.waitBudget();
  ASSERT_TRUE(back);
  EXPECT_EQ(u64(*back, "margin_bytes"), 24 * kMiB);
  EXPECT_GT(u64(*back, "generation"), u64(*first, "generation"));
  EXPECT_EQ(fileText(), fmt::format("{}\n", u64(*back, "budget_bytes")));
  agent.stop();
}

}  // namespace
}  // namespace headroom
