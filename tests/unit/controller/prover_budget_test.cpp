// The agent's budget for its prover, on the proving fixture (/proving: 8 GiB limit; cuzk, pid
// 100, in /proving/prover; curio beside it): where the prover is found, what is decided and
// served, how a confirmed OOM kill grows the margin (once per published budget), what is
// written (state file, budget file) and what is left alone, and margin given back after clean
// periods. The samples' clock is set by hand, so no test waits.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "headroom/controller/prover_budget.h"
#include "headroom/sources/collector.h"
#include "testing/fixture_tree.h"
#include "testing/kernel_report.h"

namespace headroom {
namespace {

using testing::FixtureTree;
using ::testing::HasSubstr;

constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::uint64_t kGiB = 1ULL << 30;
constexpr std::int64_t kSecond = 1'000'000'000;

std::vector<RoleRule> rules(const std::vector<std::string>& specs) {
  std::vector<RoleRule> out;
  for (const auto& s : specs) out.push_back(*parseRoleRule(s));
  return out;
}

// The proving host sampled at `mono_ns` on the monotonic clock.
std::shared_ptr<const Snapshot> sampleAt(const FixtureTree& t, std::int64_t mono_ns,
                                         const std::vector<std::string>& specs = {"prover=comm:cuzk"}) {
  auto fs = t.fs();
  auto c = Collector::create(fs);
  if (!c) throw std::runtime_error(c.error().describe());
  auto raw = c->collect({});
  if (!raw) throw std::runtime_error(raw.error().describe());
  raw->monotonic_time_ns = mono_ns;
  return buildSnapshot(std::move(*raw), RoleMatcher(rules(specs)));
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// A kill of the prover as mark_victim tells it, with the victim's figures.
OomEvent proverKilled(std::int64_t at_ns) {
  OomEvent e = testing::proverKill(at_ns, 4 * kGiB, 9 * kMiB);
  e.domain_cgroup = "/proving";
  return e;
}

struct ProvingHost {
  FixtureTree t;
  BudgetConfig cfg;
  ProvingHost() {
    testing::provingHostV1(t);
    cfg.state_file = t.root() + "/state/budget.json";
  }
};

TEST(ProverBudget, WithoutAProverToBudgetForItSaysWhy) {
  ProvingHost s;
  ProverBudget none(s.cfg, {}, {});
  auto u = none.update(*sampleAt(s.t, kSecond, {}), std::nullopt);
  ASSERT_TRUE(u);
  EXPECT_FALSE(u->decision);
  EXPECT_EQ(u->http_status, 503);
  EXPECT_THAT(u->document.value("error", ""), HasSubstr("no prover to budget for"));
  EXPECT_EQ(none.cgroup(), "");

  ProverBudget not_seen(s.cfg, rules({"prover=comm:nobody"}), {});
  u = not_seen.update(*sampleAt(s.t, kSecond, {"prover=comm:nobody"}), std::nullopt);
  ASSERT_TRUE(u);
  EXPECT_THAT(u->document.value("error", ""), HasSubstr("prover=comm:nobody has been seen yet"));

  s.cfg.enabled = false;
  ProverBudget off(s.cfg, rules({"prover=comm:cuzk"}), {});
  u = off.update(*sampleAt(s.t, kSecond), std::nullopt);
  ASSERT_TRUE(u);
  EXPECT_THAT(u->document.value("error", ""), HasSubstr("the budget is off"));
  EXPECT_EQ(off.cgroup(), "");
}

TEST(ProverBudget, FindsTheProversCgroupAndServesItsDecision) {
  ProvingHost s;
  ProverBudget b(s.cfg, rules({"prover=comm:cuzk"}), {});
  auto u = b.update(*sampleAt(s.t, kSecond), 3 * kGiB);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->cgroup, "/proving/prover");
  EXPECT_EQ(b.cgroup(), "/proving/prover");
  ASSERT_TRUE(u->decision);
  ASSERT_TRUE(u->decision->valid) << u->decision->reason;
  EXPECT_EQ(u->http_status, 200);
  EXPECT_EQ(u->document["budget_bytes"], u->decision->budget);
  EXPECT_EQ(u->document["cgroup"], "/proving/prover");
  EXPECT_EQ(u->document["inputs"]["self_reported_bytes"], 3 * kGiB);
  EXPECT_EQ(u->prover_usage, 3950 * kMiB);
  EXPECT_FALSE(exists(s.cfg.state_file)) << "nothing learned, nothing written";
  // A probe of the prover's cgroup caps the budget.
  auto probed = b.update(*sampleAt(s.t, 2 * kSecond), std::nullopt, [](const std::string& cgroup) {
    return cgroup == "/proving/prover" ? std::optional<ProbeFinding>(ProbeFinding{512 * kMiB, 3950 * kMiB, kSecond})
                                       : std::nullopt;
  });
  ASSERT_TRUE(probed && probed->decision);
  EXPECT_TRUE(probed->decision->capped_by_probe) << probed->decision->reason;
  // While a probe allocates, nothing is decided.
  EXPECT_FALSE(b.update(*sampleAt(s.t, 3 * kSecond), std::nullopt, {}, /*hold=*/true));
}

TEST(ProverBudget, AConfirmedKillGrowsTheMarginOncePerPublishedBudget) {
  ProvingHost s;
  ProverBudget b(s.cfg, rules({"prover=comm:cuzk"}), {});
  RoleMatcher roles(rules({"prover=comm:cuzk"}));
  auto first = sampleAt(s.t, kSecond);
  auto u = b.update(*first, std::nullopt);
  ASSERT_TRUE(u && u->decision && u->decision->valid);
  const BudgetDecision before = *u->decision;
  EXPECT_FALSE(b.takeGrown());

  auto grown = b.onOomKill(proverKilled(2 * kSecond), first.get(), roles);
  ASSERT_TRUE(grown);
  EXPECT_GT(grown->after, grown->before);
  EXPECT_TRUE(b.takeGrown()) << "the grown budget is to be published at once";
  EXPECT_FALSE(b.takeGrown());
  auto state = loadState(s.cfg.state_file);
  ASSERT_TRUE(state && *state) << "learned, and written";
  EXPECT_EQ((*state)->oom_kills, 1u);
  ASSERT_TRUE((*state)->last_kill);
  EXPECT_EQ((*state)->last_kill->charge, 4 * kGiB + 9 * kMiB) << "the kernel's figures at the kill";
  EXPECT_EQ((*state)->last_kill->budget, before.budget) << "the budget it ran under";

  // Killed again before the grown margin was published: one shortfall is not counted twice.
  EXPECT_FALSE(b.onOomKill(proverKilled(3 * kSecond), first.get(), roles));
  // The budget in force is still the one the prover was handed, for a kill in or around its cgroup.
  ASSERT_NE(b.inForce(), nullptr);
  EXPECT_EQ(b.inForce()->budget, before.budget);
  EXPECT_TRUE(b.concerns("/proving"));
  EXPECT_TRUE(b.concerns("/proving/prover/worker"));
  EXPECT_FALSE(b.concerns("/proving/curio"));

  auto after = b.update(*sampleAt(s.t, 4 * kSecond), std::nullopt);
  ASSERT_TRUE(after && after->decision);
  EXPECT_GT(after->decision->margin, before.margin);
  EXPECT_GT(after->decision->generation, before.generation);
  EXPECT_TRUE(b.onOomKill(proverKilled(5 * kSecond), first.get(), roles)) << "published: a new kill counts";
}

// The kernel's report of the prover's own cgroup came with the kill: the evidence is its charge
// and overhead at the moment, not the last sample's.
TEST(ProverBudget, TheKillsOwnBreakdownIsTheEvidenceWhenTheDomainIsTheProvers) {
  ProvingHost s;
  ProverBudget b(s.cfg, rules({"prover=comm:cuzk"}), {});
  RoleMatcher roles(rules({"prover=comm:cuzk"}));
  auto first = sampleAt(s.t, kSecond);
  ASSERT_TRUE(b.update(*first, std::nullopt));
  OomEvent e = proverKilled(2 * kSecond);
  e.domain_cgroup = "/proving/prover";
  e.kernel_memcg = testing::memcgReport(5 * kGiB, {{"anon", 4 * kGiB},
                                                   {"file", 0},
                                                   {"kernel", 1 * kGiB},
                                                   {"pagetables", 700 * kMiB},
                                                   {"slab_unreclaimable", 300 * kMiB}});
  ASSERT_TRUE(b.onOomKill(e, first.get(), roles));
  auto state = loadState(s.cfg.state_file);
  ASSERT_TRUE(state && *state && (*state)->last_kill);
  EXPECT_EQ((*state)->last_kill->charge, 5 * kGiB) << "the domain's charge at the kill";
  EXPECT_EQ((*state)->last_kill->page_tables, 700 * kMiB);
  EXPECT_EQ((*state)->last_kill->kernel, 324 * kMiB) << "slab, and the 24 MiB rest of the kernel's charge";
  EXPECT_THAT((*state)->last_kill->what, HasSubstr("overhead at the kill from the kernel's OOM report"));
}

TEST(ProverBudget, AKillBesideTheProverCountsOnlyWhenTheProverWasNotKilled) {
  ProvingHost s;
  ProverBudget b(s.cfg, rules({"prover=comm:cuzk"}), {});
  RoleMatcher roles(rules({"prover=comm:cuzk"}));
  auto snap = sampleAt(s.t, kSecond);
  ASSERT_TRUE(b.update(*snap, std::nullopt));
  OomEvent curio = proverKilled(2 * kSecond);
  curio.victims[0].pid = curio.victims[0].tgid = 101;
  curio.victims[0].comm = "curio";
  curio.victims[0].cgroup = "/proving/curio";
  EXPECT_FALSE(b.onOomKill(curio, snap.get(), roles)) << "another cgroup: not the prover's shortfall";
  EXPECT_FALSE(exists(s.cfg.state_file));
}

TEST(ProverBudget, AProverKilledBeforeAnySampleSawItTellsWhereItRuns) {
  ProvingHost s;
  ProverBudget b(s.cfg, rules({"prover=comm:cuzk"}), {});
  EXPECT_EQ(b.cgroup(), "");
  auto grown = b.onOomKill(proverKilled(kSecond), nullptr, RoleMatcher(rules({"prover=comm:cuzk"})));
  EXPECT_TRUE(grown);
  EXPECT_EQ(b.cgroup(), "/proving/prover");
}

TEST(ProverBudget, AKillFoundAfterTheFactDoesNotSayWhereTheProverRunsNow) {
  ProvingHost s;
  ProverBudget b(s.cfg, rules({"prover=comm:cuzk"}), {});
  OomEvent old = proverKilled(kSecond);
  old.found_after = "kernel_log";  // of long ago, found in the kernel's log at the agent's start
  EXPECT_FALSE(b.onOomKill(old, nullptr, RoleMatcher(rules({"prover=comm:cuzk"}))));
  EXPECT_EQ(b.cgroup(), "") << "no cgroup adopted from it";
}

TEST(ProverBudget, ReadOnlyItLearnsInMemoryAndWritesNothing) {
  ProvingHost s;
  ProverBudget::Options ro;
  ro.save_state = false;
  ProverBudget b(s.cfg, rules({"prover=comm:cuzk"}), ro);
  auto snap = sampleAt(s.t, kSecond);
  ASSERT_TRUE(b.update(*snap, std::nullopt));
  EXPECT_TRUE(b.onOomKill(proverKilled(2 * kSecond), snap.get(), RoleMatcher(rules({"prover=comm:cuzk"}))));
  b.save("stopping");
  EXPECT_FALSE(exists(s.cfg.state_file));
}

TEST(ProverBudget, AnUnreadableStateFileIsLeftAsItIs) {
  ProvingHost s;
  s.t.write(s.cfg.state_file.substr(s.t.root().size()), "not json\n");
  ProverBudget b(s.cfg, rules({"prover=comm:cuzk"}), {});
  auto snap = sampleAt(s.t, kSecond);
  auto u = b.update(*snap, std::nullopt);
  ASSERT_TRUE(u && u->decision && u->decision->valid) << "decided from a fresh state";
  EXPECT_TRUE(b.onOomKill(proverKilled(2 * kSecond), snap.get(), RoleMatcher(rules({"prover=comm:cuzk"}))));
  b.save("stopping");
  EXPECT_EQ(testing::fileText(s.cfg.state_file), "not json\n")
      << "what an operator may want to repair is not overwritten";
}

TEST(ProverBudget, TheBudgetFileHoldsEachNewGenerationAndGoesWithTheBudget) {
  ProvingHost s;
  s.cfg.file = s.t.root() + "/run/headroom/budget";
  ProverBudget b(s.cfg, rules({"prover=comm:cuzk"}), {});
  auto u = b.update(*sampleAt(s.t, kSecond), std::nullopt);
  ASSERT_TRUE(u && u->decision && u->decision->valid);
  EXPECT_EQ(testing::fileText(s.cfg.file), std::to_string(u->decision->budget) + "\n");
  // No room any more (a floor larger than the limit): no file, rather than a stale number.
  BudgetConfig tight = s.cfg;
  tight.policy.margin_floor = 100 * kGiB;
  b.reconfigure(tight, rules({"prover=comm:cuzk"}));
  u = b.update(*sampleAt(s.t, 2 * kSecond), std::nullopt);
  ASSERT_TRUE(u && u->decision);
  EXPECT_FALSE(u->decision->valid);
  EXPECT_EQ(u->http_status, 503);
  EXPECT_THAT(u->document.value("error", ""), HasSubstr("no budget for /proving/prover"));
  EXPECT_TRUE(u->document.contains("decision"));
  EXPECT_FALSE(exists(s.cfg.file));
}

TEST(ProverBudget, CleanPeriodsGiveMarginBack) {
  ProvingHost s;
  s.cfg.policy.clean_period = std::chrono::seconds(60);
  s.cfg.policy.give_back_after = 1;
  ProverBudget b(s.cfg, rules({"prover=comm:cuzk"}), {});
  RoleMatcher roles(rules({"prover=comm:cuzk"}));
  auto snap = sampleAt(s.t, kSecond);
  ASSERT_TRUE(b.update(*snap, std::nullopt));
  ASSERT_TRUE(b.onOomKill(proverKilled(2 * kSecond), snap.get(), roles));
  std::uint64_t learned = b.controller()->state().learned_margin;
  auto u = b.update(*sampleAt(s.t, 3 * kSecond), std::nullopt);  // the clean period starts
  ASSERT_TRUE(u);
  EXPECT_FALSE(u->gave_back);
  u = b.update(*sampleAt(s.t, 3 * kSecond + 59 * kSecond), std::nullopt);
  ASSERT_TRUE(u);
  EXPECT_FALSE(u->gave_back) << "not a whole period yet";
  u = b.update(*sampleAt(s.t, 3 * kSecond + 60 * kSecond), std::nullopt);
  ASSERT_TRUE(u);
  EXPECT_TRUE(u->gave_back);
  EXPECT_EQ(b.controller()->state().learned_margin, learned - s.cfg.policy.margin_step);
  auto saved = loadState(s.cfg.state_file);
  ASSERT_TRUE(saved && *saved);
  EXPECT_EQ((*saved)->learned_margin, learned - s.cfg.policy.margin_step);
}

}  // namespace
}  // namespace headroom
