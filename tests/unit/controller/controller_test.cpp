// The budget controller's state machine, transition by transition, with every expected number
// worked out by hand from the policy (DESIGN.md, "The budget controller"); then the state file:
// its text, its errors, restart from it, and the atomic write.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "headroom/controller/controller.h"
#include "headroom/util/units.h"

namespace headroom {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;

constexpr std::uint64_t kKiB = 1ULL << 10;
constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::uint64_t kGiB = 1ULL << 30;
constexpr std::int64_t kSec = 1'000'000'000;
constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();

BudgetBound bound(std::string name, std::string kind, std::uint64_t limit, std::uint64_t usage,
                  std::uint64_t reclaimable, std::uint64_t neighbours) {
  BudgetBound b;
  b.name = std::move(name);
  b.kind = std::move(kind);
  b.limit = limit;
  b.usage = usage;
  b.reclaimable = reclaimable;
  b.neighbours = neighbours;
  return b;
}

BudgetInputs inputsAt(std::int64_t time_ns, std::uint64_t prover_usage, std::vector<BudgetBound> bounds,
                      std::uint64_t overhead = 0) {
  BudgetInputs in;
  in.time_ns = time_ns;
  in.cgroup = "/prover";
  in.prover_usage = prover_usage;
  in.prover_processes = 1;
  in.bounds = std::move(bounds);
  in.overhead = overhead;
  return in;
}

// The prover alone under a 20 GiB limit: it uses 10 GiB, the cgroup 12 GiB of which 2 GiB is
// clean page cache. room = 20 - 12 + 2 = 10 GiB; with the 1 GiB floor as margin the budget is
// 10 + 10 - 1 = 19 GiB.
BudgetInputs simple(std::int64_t time_ns = 100 * kSec, std::uint64_t overhead = 0) {
  return inputsAt(time_ns, 10 * kGiB, {bound("/prover", "limit", 20 * kGiB, 12 * kGiB, 2 * kGiB, 0)}, overhead);
}

KillEvidence oomKill(std::string what = "mark_victim: pid 123 (cuzk) in /prover") {
  KillEvidence k;
  k.time_ns = 200 * kSec;
  k.what = std::move(what);
  return k;
}

// ---------------------------------------------------------------- first decision, margin

TEST(BudgetController, FirstDecisionUsesTheFloorAsMargin) {
  BudgetController c(BudgetPolicy{});
  BudgetDecision d = c.decide(simple(100 * kSec, 200 * kMiB));
  ASSERT_TRUE(d.valid) << d.reason;
  EXPECT_EQ(d.margin, 1 * kGiB) << "the floor is larger than 200 MiB of overhead";
  EXPECT_EQ(d.room, 10 * kGiB);
  EXPECT_EQ(d.budget, 19 * kGiB);
  EXPECT_EQ(d.tightest, "/prover");
  EXPECT_EQ(d.generation, 1u);
  EXPECT_EQ(d.neighbour_growth, 0u);
  EXPECT_EQ(d.overhead_growth, 0u);
  EXPECT_FALSE(d.probe_cap.has_value());
  EXPECT_FALSE(d.capped_by_probe);
  EXPECT_EQ(d.time_ns, 100 * kSec);
  EXPECT_EQ(d.inputs.prover_usage, 10 * kGiB) << "the decision carries its inputs";
  EXPECT_THAT(d.margin_source, HasSubstr("floor"));
  ASSERT_TRUE(c.last().has_value());
  EXPECT_EQ(c.last()->budget, 19 * kGiB);
  // The reason spells out the computation with its numbers.
  EXPECT_THAT(d.reason, HasSubstr(formatBytes(19 * kGiB)));
  EXPECT_THAT(d.reason, HasSubstr(formatBytes(10 * kGiB)));
  EXPECT_THAT(d.reason, HasSubstr(formatBytes(20 * kGiB))) << "the limit";
  EXPECT_THAT(d.reason, HasSubstr(formatBytes(12 * kGiB))) << "the usage";
  EXPECT_THAT(d.reason, HasSubstr(formatBytes(2 * kGiB))) << "the reclaimable cache";
  EXPECT_THAT(d.reason, HasSubstr(formatBytes(1 * kGiB))) << "the margin";
  EXPECT_THAT(d.reason, HasSubstr("/prover"));
  EXPECT_THAT(d.reason, HasSubstr("floor"));
}

TEST(BudgetController, MarginIsTheInvisibleOverheadWhenLargerThanTheFloor) {
  BudgetController c(BudgetPolicy{});
  BudgetDecision d = c.decide(simple(100 * kSec, 3 * kGiB));
  EXPECT_EQ(d.margin, 3 * kGiB);
  EXPECT_EQ(d.budget, 17 * kGiB) << "10 + 10 - 3";
  EXPECT_THAT(d.margin_source, HasSubstr("invisible overhead"));
  EXPECT_THAT(d.reason, HasSubstr(formatBytes(3 * kGiB)));
  EXPECT_THAT(d.reason, HasSubstr(formatBytes(17 * kGiB)));
}

TEST(BudgetController, MarginForTakesTheLargestOfFloorOverheadAndLearned) {
  BudgetPolicy p;
  p.margin_floor = 2 * kGiB;
  std::string src;
  BudgetController fresh(p);
  EXPECT_EQ(fresh.marginFor(1 * kGiB, &src), 2 * kGiB);
  EXPECT_THAT(src, HasSubstr("floor"));
  EXPECT_EQ(fresh.marginFor(5 * kGiB, &src), 5 * kGiB);
  EXPECT_THAT(src, HasSubstr("overhead"));
  EXPECT_EQ(fresh.marginFor(5 * kGiB), 5 * kGiB) << "the source is optional";

  ControllerState s;
  s.learned_margin = 4 * kGiB;
  BudgetController learned(p, s);
  EXPECT_EQ(learned.marginFor(1 * kGiB, &src), 4 * kGiB);
  EXPECT_THAT(src, HasSubstr("learned"));
  EXPECT_EQ(learned.marginFor(6 * kGiB, &src), 6 * kGiB) << "the overhead now still wins when larger";
  EXPECT_THAT(src, HasSubstr("overhead"));

  s.history.push_back(MarginChange{2 * kGiB, 4 * kGiB, "OOM kill #1 (something specific)"});
  BudgetController with_history(p, s);
  with_history.marginFor(0, &src);
  EXPECT_THAT(src, HasSubstr("something specific")) << "the learned margin says where it was learned";
}

// ---------------------------------------------------------------- bounds and room

TEST(BudgetBound, RoomCountsReclaimableCacheAndIsZeroWhenOver) {
  EXPECT_EQ(bound("a", "limit", 10 * kGiB, 6 * kGiB, 1 * kGiB, 0).room(), 5 * kGiB);
  EXPECT_EQ(bound("a", "limit", 10 * kGiB, 12 * kGiB, 1 * kGiB, 0).room(), 0u) << "over the limit";
  EXPECT_EQ(bound("a", "limit", 10 * kGiB, 12 * kGiB, 3 * kGiB, 0).room(), 1 * kGiB)
      << "over the limit, but enough cache to drop";
  EXPECT_EQ(bound("a", "limit", kMax, 0, kMax, 0).room(), kMax) << "saturates, never wraps";
}

TEST(BudgetController, TheTightestOfSeveralBoundsWinsWithReclaimableCounted) {
  BudgetController c(BudgetPolicy{});
  // own: 64 - 30 + 1 = 35 GiB; ancestor: 48 - 40 + 4 = 12 GiB (8 without the cache); host:
  // MemAvailable 28 GiB.
  std::vector<BudgetBound> bounds = {
      bound("/proving/prover", "limit", 64 * kGiB, 30 * kGiB, 1 * kGiB, 0),
      bound("/proving", "hierarchical_memory_limit", 48 * kGiB, 40 * kGiB, 4 * kGiB, 6 * kGiB),
      bound("host", "MemAvailable", 128 * kGiB, 100 * kGiB, 0, 70 * kGiB),
  };
  BudgetDecision d = c.decide(inputsAt(kSec, 30 * kGiB, bounds));
  ASSERT_TRUE(d.valid) << d.reason;
  EXPECT_EQ(d.tightest, "/proving");
  EXPECT_EQ(d.room, 12 * kGiB);
  EXPECT_EQ(d.budget, 41 * kGiB) << "30 + 12 - 1";
  EXPECT_THAT(d.reason, HasSubstr("/proving"));
  EXPECT_THAT(d.reason, HasSubstr("hierarchical_memory_limit"));
  EXPECT_THAT(d.reason, HasSubstr(formatBytes(48 * kGiB)));
  EXPECT_THAT(d.reason, HasSubstr(formatBytes(4 * kGiB)));

  // The host becomes the tightest: MemAvailable down to 8 GiB.
  bounds[2].usage = 120 * kGiB;
  d = c.decide(inputsAt(2 * kSec, 30 * kGiB, bounds));
  EXPECT_EQ(d.tightest, "host");
  EXPECT_EQ(d.room, 8 * kGiB);
  EXPECT_EQ(d.budget, 37 * kGiB) << "30 + 8 - 1";
  EXPECT_THAT(d.reason, HasSubstr("MemAvailable"));
}

TEST(BudgetController, NeighboursAreInUsageAndNotSubtractedAgain) {
  // A neighbour holding 8 GiB under the shared limit is already in its usage: the room is
  // limit - usage + reclaimable and nothing more comes off for it while it does not grow.
  BudgetController c(BudgetPolicy{});
  BudgetDecision d =
      c.decide(inputsAt(kSec, 30 * kGiB, {bound("/proving", "limit", 48 * kGiB, 40 * kGiB, 2 * kGiB, 8 * kGiB)}));
  EXPECT_EQ(d.room, 10 * kGiB);
  EXPECT_EQ(d.budget, 39 * kGiB) << "30 + 10 - 1";
}

// ---------------------------------------------------------------- growth over the window

TEST(BudgetController, NeighboursGrowthOverTheWindowLowersTheRoomAndIsForgottenAfterIt) {
  BudgetController c(BudgetPolicy{});  // growth_window 5 min
  auto at = [](std::int64_t t, std::uint64_t usage, std::uint64_t neighbours) {
    return inputsAt(t, 30 * kGiB, {bound("/proving", "limit", 48 * kGiB, usage, 2 * kGiB, neighbours)});
  };
  BudgetDecision d0 = c.decide(at(0, 40 * kGiB, 8 * kGiB));
  EXPECT_EQ(d0.room, 10 * kGiB);
  EXPECT_EQ(d0.budget, 39 * kGiB);

  // A minute later the neighbour holds 3 GiB more: room 48 - 43 + 2 = 7 GiB, less the 3 GiB it
  // may grow by again = 4 GiB; budget 30 + 4 - 1 = 33 GiB.
  BudgetDecision d1 = c.decide(at(60 * kSec, 43 * kGiB, 11 * kGiB));
  EXPECT_EQ(d1.neighbour_growth, 3 * kGiB);
  EXPECT_EQ(d1.room, 4 * kGiB);
  EXPECT_EQ(d1.budget, 33 * kGiB);
  EXPECT_THAT(d1.reason, HasSubstr(formatBytes(3 * kGiB)));

  // Past the window (5 min after the last tick too), the growth is history: room 7 GiB.
  BudgetDecision d2 = c.decide(at(361 * kSec, 43 * kGiB, 11 * kGiB));
  EXPECT_EQ(d2.neighbour_growth, 0u);
  EXPECT_EQ(d2.room, 7 * kGiB);
  EXPECT_EQ(d2.budget, 36 * kGiB);
}

TEST(BudgetController, NeighboursShrinkingGivesNoExtraRoom) {
  BudgetController c(BudgetPolicy{});
  auto at = [](std::int64_t t, std::uint64_t usage, std::uint64_t neighbours) {
    return inputsAt(t, 30 * kGiB, {bound("/proving", "limit", 48 * kGiB, usage, 0, neighbours)});
  };
  c.decide(at(0, 41 * kGiB, 11 * kGiB));
  BudgetDecision d = c.decide(at(60 * kSec, 38 * kGiB, 8 * kGiB));
  EXPECT_EQ(d.neighbour_growth, 0u);
  EXPECT_EQ(d.room, 10 * kGiB) << "48 - 38";
}

TEST(BudgetController, NeighboursGrowthCanMakeAnotherBoundTheTightest) {
  BudgetController c(BudgetPolicy{});
  // /a: room 10 GiB, steady. /b: room 14 GiB, then 11 GiB after its neighbours grew by 3 GiB:
  // 11 - 3 = 8 GiB, now tighter than /a although its raw room is larger.
  auto at = [](std::int64_t t, std::uint64_t b_usage, std::uint64_t b_neighbours) {
    return inputsAt(t, 5 * kGiB,
                    {bound("/a", "limit", 30 * kGiB, 20 * kGiB, 0, 15 * kGiB),
                     bound("/b", "limit", 40 * kGiB, b_usage, 0, b_neighbours)});
  };
  BudgetDecision d0 = c.decide(at(0, 26 * kGiB, 21 * kGiB));
  EXPECT_EQ(d0.tightest, "/a");
  EXPECT_EQ(d0.room, 10 * kGiB);
  BudgetDecision d1 = c.decide(at(30 * kSec, 29 * kGiB, 24 * kGiB));
  EXPECT_EQ(d1.tightest, "/b");
  EXPECT_EQ(d1.neighbour_growth, 3 * kGiB);
  EXPECT_EQ(d1.room, 8 * kGiB);
  EXPECT_EQ(d1.budget, 12 * kGiB) << "5 + 8 - 1";
}

TEST(BudgetController, OverheadGrowthIsItsRecentPeakAboveNow) {
  BudgetController c(BudgetPolicy{});
  c.decide(simple(0, 100 * kMiB));
  BudgetDecision d1 = c.decide(simple(30 * kSec, 500 * kMiB));
  EXPECT_EQ(d1.overhead_growth, 0u) << "rising to a new peak: nothing above now";
  BudgetDecision d2 = c.decide(simple(60 * kSec, 200 * kMiB));
  EXPECT_EQ(d2.margin, 1 * kGiB) << "every overhead here is under the floor";
  EXPECT_EQ(d2.overhead_growth, 300 * kMiB) << "the 500 MiB peak is 300 MiB above the 200 MiB now";
  EXPECT_EQ(d2.budget, 19 * kGiB - 300 * kMiB);
  EXPECT_THAT(d2.reason, HasSubstr(formatBytes(300 * kMiB)));
  // 400 s: every earlier tick is more than 5 min old.
  BudgetDecision d3 = c.decide(simple(400 * kSec, 200 * kMiB));
  EXPECT_EQ(d3.overhead_growth, 0u);
  EXPECT_EQ(d3.budget, 19 * kGiB);
}

// ---------------------------------------------------------------- the probe cap

TEST(BudgetController, AFreshProbeCapsTheBudget) {
  BudgetController c(BudgetPolicy{});
  BudgetInputs in = simple(1000 * kSec);
  in.probe = ProbeFinding{6 * kGiB, 9 * kGiB, 990 * kSec};  // 10 s ago: 6 GiB allocatable beside 9 GiB
  BudgetDecision d = c.decide(in);
  ASSERT_TRUE(d.valid);
  ASSERT_TRUE(d.probe_cap.has_value());
  EXPECT_EQ(*d.probe_cap, 15 * kGiB);
  EXPECT_TRUE(d.capped_by_probe);
  EXPECT_EQ(d.budget, 15 * kGiB) << "19 GiB computed, the probe says 6 + 9";
  EXPECT_THAT(d.reason, HasSubstr("capped"));
  EXPECT_THAT(d.reason, HasSubstr(formatBytes(15 * kGiB)));
  EXPECT_THAT(d.reason, HasSubstr(formatBytes(6 * kGiB)));
  EXPECT_THAT(d.reason, HasSubstr(formatBytes(9 * kGiB)));
  EXPECT_THAT(d.reason, HasSubstr("10 s ago"));
}

TEST(BudgetController, AProbeAboveTheComputedBudgetCapsNothing) {
  BudgetController c(BudgetPolicy{});
  BudgetInputs in = simple(1000 * kSec);
  in.probe = ProbeFinding{20 * kGiB, 9 * kGiB, 990 * kSec};
  BudgetDecision d = c.decide(in);
  ASSERT_TRUE(d.probe_cap.has_value());
  EXPECT_EQ(*d.probe_cap, 29 * kGiB);
  EXPECT_FALSE(d.capped_by_probe);
  EXPECT_EQ(d.budget, 19 * kGiB);
}

TEST(BudgetController, AStaleProbeIsIgnoredAndSaysSo) {
  BudgetController c(BudgetPolicy{});  // probe_max_age 1 h
  BudgetInputs in = simple(10'000 * kSec);
  in.probe = ProbeFinding{1 * kGiB, 1 * kGiB, 10'000 * kSec - 7200 * kSec};  // 2 h old
  BudgetDecision d = c.decide(in);
  EXPECT_FALSE(d.probe_cap.has_value());
  EXPECT_FALSE(d.capped_by_probe);
  EXPECT_EQ(d.budget, 19 * kGiB);
  EXPECT_THAT(d.reason, HasSubstr("older than probe_max_age"));
  EXPECT_THAT(d.reason, HasSubstr("7200 s"));

  // Exactly probe_max_age old is not "older than": it still caps.
  BudgetController c2(BudgetPolicy{});
  in.probe->time_ns = 10'000 * kSec - 3600 * kSec;
  BudgetDecision d2 = c2.decide(in);
  EXPECT_TRUE(d2.capped_by_probe);
  EXPECT_EQ(d2.budget, 2 * kGiB);
}

// ---------------------------------------------------------------- no room

TEST(BudgetController, NoRoomIsInvalidWithAZeroBudgetAndAReason) {
  BudgetController c(BudgetPolicy{});
  // 512 MiB used by the prover, the bound 512 MiB over its limit with no cache to drop: the
  // room is 0 and 512 MiB does not cover the 1 GiB margin.
  BudgetDecision d = c.decide(
      inputsAt(kSec, 512 * kMiB, {bound("/prover", "limit", 10 * kGiB, 10 * kGiB + 512 * kMiB, 0, 10 * kGiB)}));
  EXPECT_FALSE(d.valid);
  EXPECT_EQ(d.budget, 0u);
  EXPECT_EQ(d.room, 0u);
  EXPECT_EQ(d.tightest, "/prover");
  EXPECT_EQ(d.generation, 1u) << "the first decision is published, valid or not";
  EXPECT_THAT(d.reason, HasSubstr("no room"));
  EXPECT_THAT(d.reason, HasSubstr(formatBytes(512 * kMiB)));
  EXPECT_THAT(d.reason, HasSubstr(formatBytes(1 * kGiB)));
  EXPECT_THAT(d.reason, HasSubstr("/prover"));
}

TEST(BudgetController, NoBoundAtAllIsInvalid) {
  BudgetController c(BudgetPolicy{});
  BudgetDecision d = c.decide(inputsAt(kSec, 4 * kGiB, {}));
  EXPECT_FALSE(d.valid);
  EXPECT_EQ(d.budget, 0u);
  EXPECT_TRUE(d.tightest.empty());
  EXPECT_THAT(d.reason, HasSubstr("no bound"));
}

TEST(BudgetController, ExactlyTheMarginLeftIsNoRoom) {
  BudgetController c(BudgetPolicy{});
  // usage 0.5 GiB + room 0.5 GiB - margin 1 GiB = 0: nothing for the prover.
  BudgetDecision d =
      c.decide(inputsAt(kSec, 512 * kMiB, {bound("/prover", "limit", 4 * kGiB, 4 * kGiB - 512 * kMiB, 0, 3 * kGiB)}));
  EXPECT_FALSE(d.valid);
  EXPECT_EQ(d.budget, 0u);
}

// ---------------------------------------------------------------- generations

TEST(BudgetController, GenerationKeptWithinTheHysteresisAndTheBudgetWithIt) {
  BudgetController c(BudgetPolicy{});  // band: max(32 MiB, 1% of 19 GiB = 194.6 MiB)
  auto withCache = [](std::int64_t t, std::uint64_t reclaimable) {
    return inputsAt(t, 10 * kGiB, {bound("/prover", "limit", 20 * kGiB, 12 * kGiB, reclaimable, 0)});
  };
  BudgetDecision d1 = c.decide(withCache(1 * kSec, 2 * kGiB));
  ASSERT_EQ(d1.budget, 19 * kGiB);
  ASSERT_EQ(d1.generation, 1u);

  BudgetDecision same = c.decide(withCache(2 * kSec, 2 * kGiB));
  EXPECT_EQ(same.generation, 1u);
  EXPECT_EQ(same.budget, 19 * kGiB);

  // +100 MiB of cache: within the band; the published budget stays.
  BudgetDecision up_small = c.decide(withCache(3 * kSec, 2 * kGiB + 100 * kMiB));
  EXPECT_EQ(up_small.generation, 1u);
  EXPECT_EQ(up_small.budget, 19 * kGiB) << "the published budget, not the one computed now";
  EXPECT_EQ(up_small.room, 10 * kGiB + 100 * kMiB) << "the computation itself is current";
  EXPECT_THAT(up_small.reason, HasSubstr("kept"));
  EXPECT_THAT(up_small.reason, HasSubstr(formatBytes(19 * kGiB)));

  // +200 MiB against the published budget (not +100 against the last computed one): beyond.
  BudgetDecision up_big = c.decide(withCache(4 * kSec, 2 * kGiB + 200 * kMiB));
  EXPECT_EQ(up_big.generation, 2u);
  EXPECT_EQ(up_big.budget, 19 * kGiB + 200 * kMiB);

  // Down by 150 MiB (band now 1% of 19.2 GiB = 196.6 MiB): kept; down by 300 MiB: published.
  BudgetDecision down_small = c.decide(withCache(5 * kSec, 2 * kGiB + 50 * kMiB));
  EXPECT_EQ(down_small.generation, 2u);
  EXPECT_EQ(down_small.budget, 19 * kGiB + 200 * kMiB);
  BudgetDecision down_big = c.decide(withCache(6 * kSec, 2 * kGiB - 100 * kMiB));
  EXPECT_EQ(down_big.generation, 3u);
  EXPECT_EQ(down_big.budget, 19 * kGiB - 100 * kMiB);
  EXPECT_EQ(c.state().generation, 3u) << "the generation lives in the persisted state";
}

TEST(BudgetController, HysteresisIsTheLargerOfBytesAndFraction) {
  BudgetController c(BudgetPolicy{});
  // A 2 GiB budget: 1% is 20.5 MiB, so the 32 MiB floor of the band applies.
  auto at = [](std::int64_t t, std::uint64_t usage) {
    return inputsAt(t, 1 * kGiB, {bound("/prover", "limit", 4 * kGiB, usage, 0, 1 * kGiB)});
  };
  BudgetDecision d1 = c.decide(at(1 * kSec, 2 * kGiB));
  ASSERT_EQ(d1.budget, 2 * kGiB) << "1 + 2 - 1";
  BudgetDecision d2 = c.decide(at(2 * kSec, 2 * kGiB - 30 * kMiB));
  EXPECT_EQ(d2.generation, d1.generation) << "30 MiB is more than 1% but within 32 MiB";
  EXPECT_EQ(d2.budget, 2 * kGiB);
  BudgetDecision d3 = c.decide(at(3 * kSec, 2 * kGiB - 40 * kMiB));
  EXPECT_EQ(d3.generation, d1.generation + 1);
  EXPECT_EQ(d3.budget, 2 * kGiB + 40 * kMiB);

  // A 200 GiB budget: 1% (2 GiB) is the band.
  BudgetPolicy p;
  BudgetController big(p);
  auto at_big = [](std::int64_t t, std::uint64_t usage) {
    return inputsAt(t, 100 * kGiB, {bound("/prover", "limit", 300 * kGiB, usage, 0, 0)});
  };
  BudgetDecision b1 = big.decide(at_big(1 * kSec, 199 * kGiB));
  ASSERT_EQ(b1.budget, 200 * kGiB) << "100 + 101 - 1";
  EXPECT_EQ(big.decide(at_big(2 * kSec, 198 * kGiB)).generation, b1.generation) << "1 GiB < 2 GiB";
  EXPECT_EQ(big.decide(at_big(3 * kSec, 196 * kGiB)).generation, b1.generation + 1) << "3 GiB > 2 GiB";
}

TEST(BudgetController, ValidityFlipsPublishANewGeneration) {
  BudgetController c(BudgetPolicy{});
  BudgetDecision ok1 = c.decide(simple(1 * kSec));
  ASSERT_TRUE(ok1.valid);
  BudgetInputs none = inputsAt(2 * kSec, 0, {bound("/prover", "limit", 20 * kGiB, 20 * kGiB, 0, 20 * kGiB)});
  BudgetDecision bad = c.decide(none);
  EXPECT_FALSE(bad.valid);
  EXPECT_EQ(bad.budget, 0u);
  EXPECT_EQ(bad.generation, ok1.generation + 1);
  none.time_ns = 3 * kSec;
  BudgetDecision still_bad = c.decide(none);
  EXPECT_FALSE(still_bad.valid);
  EXPECT_EQ(still_bad.generation, bad.generation) << "no room twice is no news";
  EXPECT_EQ(still_bad.budget, 0u);
  BudgetDecision ok2 = c.decide(simple(4 * kSec));
  EXPECT_TRUE(ok2.valid);
  EXPECT_EQ(ok2.generation, bad.generation + 1);
  EXPECT_EQ(ok2.budget, 19 * kGiB);
}

TEST(BudgetController, AMarginChangePublishesANewGenerationEvenWhenTheBudgetStays) {
  BudgetController c(BudgetPolicy{});
  // A probe caps the budget at 10 GiB both before (19 computed) and after the kill (18.5): only
  // the margin moves.
  BudgetInputs in = simple(1000 * kSec);
  in.probe = ProbeFinding{4 * kGiB, 6 * kGiB, 999 * kSec};
  BudgetDecision d1 = c.decide(in);
  ASSERT_EQ(d1.budget, 10 * kGiB);
  c.onOomKill(oomKill());
  in.time_ns = 1001 * kSec;
  BudgetDecision d2 = c.decide(in);
  EXPECT_EQ(d2.budget, 10 * kGiB);
  EXPECT_EQ(d2.margin, 1536 * kMiB);
  EXPECT_EQ(d2.generation, d1.generation + 1);
  EXPECT_THAT(d2.margin_source, HasSubstr("OOM kill #1"));
  in.time_ns = 1002 * kSec;
  EXPECT_EQ(c.decide(in).generation, d2.generation) << "one new generation per change, not one per tick";
}

// ---------------------------------------------------------------- OOM kills

TEST(BudgetController, OomKillGrowthWinsWithoutEvidence) {
  BudgetController c(BudgetPolicy{});
  c.decide(simple());
  MarginChange m = c.onOomKill(oomKill());
  // 1 GiB x 1.5 = 1.5 GiB beats 1 GiB + 256 MiB = 1.25 GiB.
  EXPECT_EQ(m.before, 1 * kGiB);
  EXPECT_EQ(m.after, 1536 * kMiB);
  EXPECT_EQ(c.state().learned_margin, 1536 * kMiB);
  EXPECT_EQ(c.state().oom_kills, 1u);
  EXPECT_EQ(c.state().retries, 1u);
  ASSERT_TRUE(c.state().last_kill.has_value());
  EXPECT_EQ(*c.state().last_kill, oomKill());
  ASSERT_EQ(c.state().history.size(), 1u);
  EXPECT_EQ(c.state().history.back(), m);
  EXPECT_THAT(m.reason, HasSubstr("OOM kill #1"));
  EXPECT_THAT(m.reason, HasSubstr("1.5 x"));
  EXPECT_THAT(m.reason, HasSubstr(formatBytes(1 * kGiB)));
  EXPECT_THAT(m.reason, HasSubstr(formatBytes(1536 * kMiB)));
  // The next decision uses it: 10 + 10 - 1.5.
  BudgetDecision d = c.decide(simple(300 * kSec));
  EXPECT_EQ(d.margin, 1536 * kMiB);
  EXPECT_EQ(d.budget, 18 * kGiB + 512 * kMiB);
}

TEST(BudgetController, OomKillStepWinsForASmallMargin) {
  BudgetPolicy p;
  p.margin_floor = 256 * kMiB;
  BudgetController c(p);
  c.decide(simple());
  MarginChange m = c.onOomKill(oomKill());
  // 256 MiB x 1.5 = 384 MiB < 256 MiB + 256 MiB step = 512 MiB.
  EXPECT_EQ(m.before, 256 * kMiB);
  EXPECT_EQ(m.after, 512 * kMiB);
  EXPECT_THAT(m.reason, HasSubstr("step"));
  EXPECT_THAT(m.reason, HasSubstr(formatBytes(512 * kMiB)));
}

TEST(BudgetController, OomKillOverheadBeyondTheBudgetWinsFromPinnedPageTablesAndKernel) {
  BudgetController c(BudgetPolicy{});
  c.decide(simple());
  KillEvidence k = oomKill();
  k.budget = 35 * kGiB;
  k.charge = 30 * kGiB;  // under its budget: that source says nothing
  k.pinned = 2 * kGiB;
  k.page_tables = 512 * kMiB;
  k.kernel = 512 * kMiB;
  MarginChange m = c.onOomKill(k);
  // beyond = 2 + 0.5 + 0.5 = 3 GiB; 1.5 x 3 = 4.5 GiB beats 1.5 and 1.25 GiB.
  EXPECT_EQ(m.after, 4 * kGiB + 512 * kMiB);
  EXPECT_THAT(m.reason, HasSubstr("overhead beyond the budget"));
  EXPECT_THAT(m.reason, HasSubstr("pinned"));
  EXPECT_THAT(m.reason, HasSubstr(formatBytes(3 * kGiB)));
  EXPECT_THAT(m.reason, HasSubstr(formatBytes(2 * kGiB)));
  EXPECT_THAT(m.reason, HasSubstr(formatBytes(4 * kGiB + 512 * kMiB)));
}

TEST(BudgetController, OomKillOverheadFromTheSelfReportedGap) {
  BudgetController c(BudgetPolicy{});
  c.decide(simple());
  KillEvidence k = oomKill();
  k.budget = 41 * kGiB;
  k.charge = 40 * kGiB;
  k.self_reported = 37 * kGiB;  // the kernel charged 3 GiB it did not know of
  MarginChange m = c.onOomKill(k);
  EXPECT_EQ(m.after, 4 * kGiB + 512 * kMiB) << "1.5 x 3 GiB";
  EXPECT_THAT(m.reason, HasSubstr("believed"));
  EXPECT_THAT(m.reason, HasSubstr(formatBytes(37 * kGiB)));
  EXPECT_THAT(m.reason, HasSubstr(formatBytes(40 * kGiB)));
}

TEST(BudgetController, OomKillOverheadFromTheChargeOverTheBudget) {
  BudgetController c(BudgetPolicy{});
  c.decide(simple());
  KillEvidence k = oomKill();
  k.budget = 40 * kGiB;
  k.charge = 42 * kGiB;
  MarginChange m = c.onOomKill(k);
  EXPECT_EQ(m.after, 3 * kGiB) << "1.5 x (42 - 40) GiB";
  EXPECT_THAT(m.reason, HasSubstr("for a budget of"));
  EXPECT_THAT(m.reason, HasSubstr(formatBytes(42 * kGiB)));
  EXPECT_THAT(m.reason, HasSubstr(formatBytes(40 * kGiB)));
}

// A kill at the limit usually follows a tick that found no room: the budget the prover ran
// under is still the last valid one, and the kill's evidence is measured against it.
TEST(BudgetController, TheBudgetInForceOutlivesATickWithoutRoom) {
  BudgetController c(BudgetPolicy{});
  BudgetDecision ok = c.decide(simple());
  ASSERT_TRUE(ok.valid);
  // The cgroup is full (20 GiB used, nothing reclaimable) and the prover's own part of it is
  // less than the 1 GiB margin: no room at all.
  BudgetDecision none =
      c.decide(inputsAt(105 * kSec, 512 * kMiB, {bound("/prover", "limit", 20 * kGiB, 20 * kGiB, 0, 0)}));
  ASSERT_FALSE(none.valid) << none.reason;
  ASSERT_TRUE(c.last().has_value());
  EXPECT_FALSE(c.last()->valid);
  ASSERT_TRUE(c.lastValid().has_value());
  EXPECT_EQ(c.lastValid()->budget, 19 * kGiB);
  EXPECT_EQ(c.lastValid()->generation, ok.generation);
  BudgetDecision again = c.decide(simple(110 * kSec));
  ASSERT_TRUE(again.valid);
  EXPECT_EQ(c.lastValid()->generation, again.generation) << "the newest valid decision";
}

TEST(BudgetController, OomKillTakesTheLargestMeasureOfTheOverhead) {
  BudgetController c(BudgetPolicy{});
  c.decide(simple());
  KillEvidence k = oomKill();
  k.pinned = 1 * kGiB;   // 1 GiB outside RSS
  k.budget = 40 * kGiB;  // 2 GiB over the budget
  k.charge = 42 * kGiB;
  k.self_reported = 39 * kGiB + 512 * kMiB;  // 2.5 GiB the prover did not see
  MarginChange m = c.onOomKill(k);
  EXPECT_EQ(m.after, 3 * kGiB + 768 * kMiB) << "1.5 x 2.5 GiB";
  EXPECT_THAT(m.reason, HasSubstr("believed"));
}

TEST(BudgetController, OomKillOfAProcessBesideTheProverAlsoGrowsTheMargin) {
  BudgetController c(BudgetPolicy{});
  c.decide(simple());
  KillEvidence k = oomKill("mark_victim: pid 124 (helper) in /prover");
  k.prover_victim = false;
  MarginChange m = c.onOomKill(k);
  EXPECT_EQ(m.after, 1536 * kMiB);
  EXPECT_THAT(m.reason, HasSubstr("beside the prover"));
  EXPECT_EQ(c.state().oom_kills, 1u);
}

TEST(BudgetController, OomKillUsesTheMarginInForceIncludingTheOverhead) {
  BudgetController c(BudgetPolicy{});
  c.decide(simple(100 * kSec, 2 * kGiB));  // the overhead (2 GiB) is the margin
  MarginChange m = c.onOomKill(oomKill());
  EXPECT_EQ(m.before, 2 * kGiB);
  EXPECT_EQ(m.after, 3 * kGiB);
}

TEST(BudgetController, ConsecutiveOomKillsCompound) {
  // Two kills with no decision between them (two confirmed kills in one tick, or a kill and
  // a retry that died before its first tick): the second grows the margin the first set.
  BudgetController c(BudgetPolicy{});
  c.decide(simple());
  EXPECT_EQ(c.onOomKill(oomKill()).after, 1536 * kMiB);
  MarginChange second = c.onOomKill(oomKill());
  EXPECT_EQ(second.before, 1536 * kMiB);
  EXPECT_EQ(second.after, 2 * kGiB + 256 * kMiB) << "1.5 GiB x 1.5";
  EXPECT_THAT(second.reason, HasSubstr("OOM kill #2"));
}

TEST(BudgetController, OomKillBeforeAnyDecisionStartsFromTheLearnedMargin) {
  ControllerState s;
  s.learned_margin = 3 * kGiB;
  BudgetController c(BudgetPolicy{}, s);
  MarginChange m = c.onOomKill(oomKill());
  EXPECT_EQ(m.before, 3 * kGiB);
  EXPECT_EQ(m.after, 4 * kGiB + 512 * kMiB);

  BudgetController fresh(BudgetPolicy{});
  EXPECT_EQ(fresh.onOomKill(oomKill()).before, 1 * kGiB) << "nothing learned, no decision: the floor";
}

TEST(BudgetController, OomKillSaturatesInsteadOfWrapping) {
  ControllerState s;
  s.learned_margin = kMax - kGiB;  // x 1.5 is past 2^64
  BudgetController c(BudgetPolicy{}, s);
  EXPECT_EQ(c.onOomKill(oomKill()).after, kMax);
  EXPECT_EQ(c.onOomKill(oomKill()).after, kMax);
  BudgetDecision d = c.decide(simple());
  EXPECT_FALSE(d.valid) << "a margin that large leaves no room";
  EXPECT_EQ(d.budget, 0u);
}

// ---------------------------------------------------------------- retries

TEST(BudgetController, MaxRetriesThreeMeansFourAttemptsInAll) {
  BudgetController c(BudgetPolicy{});
  c.startRun();
  ASSERT_TRUE(c.retryAllowed());
  int attempts = 0;
  for (;;) {
    ++attempts;  // the attempt runs and is OOM-killed
    c.onOomKill(oomKill());
    if (!c.retryAllowed()) break;
    ASSERT_LT(attempts, 100);
  }
  EXPECT_EQ(attempts, 4) << "the first attempt and 3 retries";
  EXPECT_EQ(c.state().retries, 4u);
  c.startRun();
  EXPECT_EQ(c.state().retries, 0u);
  EXPECT_TRUE(c.retryAllowed()) << "a new run counts from zero";
  EXPECT_EQ(c.state().oom_kills, 4u) << "the learned history stays";
}

TEST(BudgetController, MaxRetriesIsConfigurable) {
  BudgetPolicy p;
  p.max_retries = 0;
  BudgetController none(p);
  none.onOomKill(oomKill());
  EXPECT_FALSE(none.retryAllowed()) << "no retries: one attempt in all";

  p.max_retries = 1;
  BudgetController one(p);
  one.onOomKill(oomKill());
  EXPECT_TRUE(one.retryAllowed());
  one.onOomKill(oomKill());
  EXPECT_FALSE(one.retryAllowed());
}

TEST(BudgetController, ACleanRunClearsTheRetries) {
  BudgetController c(BudgetPolicy{});
  for (int i = 0; i < 4; ++i) c.onOomKill(oomKill());
  ASSERT_FALSE(c.retryAllowed());
  c.onCleanRun();
  EXPECT_EQ(c.state().retries, 0u);
  EXPECT_TRUE(c.retryAllowed());
}

// ---------------------------------------------------------------- give-back

TEST(BudgetController, GiveBackOneStepAfterEnoughCleanRunsNeverBelowTheFloor) {
  BudgetController c(BudgetPolicy{});  // floor 1 GiB, step 256 MiB, after 3 clean runs
  c.decide(simple());
  c.onOomKill(oomKill());
  ASSERT_EQ(c.state().learned_margin, 1536 * kMiB);

  EXPECT_FALSE(c.onCleanRun().has_value());
  EXPECT_FALSE(c.onCleanRun().has_value());
  EXPECT_EQ(c.state().clean_runs, 2u);
  auto g1 = c.onCleanRun();
  ASSERT_TRUE(g1.has_value());
  EXPECT_EQ(g1->before, 1536 * kMiB);
  EXPECT_EQ(g1->after, 1280 * kMiB);
  EXPECT_EQ(c.state().learned_margin, 1280 * kMiB);
  EXPECT_EQ(c.state().clean_runs, 0u) << "counting starts again";
  EXPECT_EQ(c.state().history.back(), *g1);
  EXPECT_THAT(g1->reason, HasSubstr("3 clean runs"));
  EXPECT_THAT(g1->reason, HasSubstr(formatBytes(1536 * kMiB)));
  EXPECT_THAT(g1->reason, HasSubstr(formatBytes(1280 * kMiB)));
  EXPECT_THAT(g1->reason, HasSubstr(formatBytes(256 * kMiB)));

  c.onCleanRun();
  c.onCleanRun();
  auto g2 = c.onCleanRun();
  ASSERT_TRUE(g2.has_value());
  EXPECT_EQ(g2->after, 1 * kGiB) << "1.25 GiB - 256 MiB reaches the floor";

  for (int i = 0; i < 6; ++i) EXPECT_FALSE(c.onCleanRun().has_value()) << "nothing above the floor to give";
  EXPECT_EQ(c.state().learned_margin, 1 * kGiB);
}

TEST(BudgetController, GiveBackStopsAtTheFloorRatherThanAFullStep) {
  ControllerState s;
  s.learned_margin = 1 * kGiB + 100 * kMiB;
  BudgetPolicy p;
  p.give_back_after = 1;
  BudgetController c(p, s);
  auto g = c.onCleanRun();
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->after, 1 * kGiB) << "100 MiB given back, not 256";
  EXPECT_THAT(g->reason, HasSubstr("floor"));
}

TEST(BudgetController, NothingLearnedNothingToGiveBack) {
  BudgetPolicy p;
  p.give_back_after = 1;
  BudgetController c(p);
  EXPECT_FALSE(c.onCleanRun().has_value());
  EXPECT_EQ(c.state().learned_margin, 0u);
  EXPECT_TRUE(c.state().history.empty());
}

TEST(BudgetController, AKillResetsTheCleanCount) {
  BudgetController c(BudgetPolicy{});
  c.decide(simple());
  c.onOomKill(oomKill());  // 1.5 GiB
  c.onCleanRun();
  c.onCleanRun();
  c.onOomKill(oomKill());  // 2.25 GiB
  EXPECT_EQ(c.state().clean_runs, 0u);
  EXPECT_FALSE(c.onCleanRun().has_value());
  EXPECT_FALSE(c.onCleanRun().has_value()) << "two clean runs since the kill, not four";
  auto g = c.onCleanRun();
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->before, 2 * kGiB + 256 * kMiB);
  EXPECT_EQ(g->after, 2 * kGiB);
}

TEST(BudgetController, GiveBackPublishesANewGeneration) {
  BudgetPolicy p;
  p.give_back_after = 1;
  ControllerState s;
  s.learned_margin = 2 * kGiB;
  BudgetController c(p, s);
  BudgetDecision d1 = c.decide(simple(1 * kSec));
  EXPECT_EQ(d1.margin, 2 * kGiB);
  EXPECT_EQ(d1.budget, 18 * kGiB);
  ASSERT_TRUE(c.onCleanRun().has_value());
  BudgetDecision d2 = c.decide(simple(2 * kSec));
  EXPECT_EQ(d2.margin, 2 * kGiB - 256 * kMiB);
  EXPECT_EQ(d2.budget, 18 * kGiB + 256 * kMiB);
  EXPECT_EQ(d2.generation, d1.generation + 1);
}

TEST(BudgetController, HistoryKeepsTheNewestKHistory) {
  BudgetPolicy p;
  p.margin_growth = 1.0;  // the step alone: +256 MiB a kill, no overflow in 40 kills
  BudgetController c(p);
  for (int i = 0; i < 40; ++i) c.onOomKill(oomKill());
  const ControllerState& s = c.state();
  EXPECT_EQ(s.oom_kills, 40u);
  ASSERT_EQ(s.history.size(), ControllerState::kHistory);
  EXPECT_THAT(s.history.front().reason, ContainsRegex("kill #9[^0-9]"));
  EXPECT_THAT(s.history.back().reason, ContainsRegex("kill #40[^0-9]"));
  EXPECT_EQ(s.history.back().after, 1 * kGiB + 40 * 256 * kMiB);
  EXPECT_EQ(s.history.front().before, 1 * kGiB + 8 * 256 * kMiB);
}

// ---------------------------------------------------------------- the state file's text

ControllerState sampleState() {
  ControllerState s;
  s.learned_margin = 3 * kGiB + 7;
  s.generation = 42;
  s.oom_kills = 5;
  s.retries = 2;
  s.clean_runs = 1;
  KillEvidence k;
  k.time_ns = 123'456'789'012'345;
  k.what = "mark_victim: pid 77 (cuzk) in /proving/prover \"quoted\"";
  k.prover_victim = false;
  k.budget = 300 * kGiB;
  k.charge = 301 * kGiB;
  k.self_reported = 290 * kGiB;
  k.pinned = 4 * kGiB;
  k.page_tables = 600 * kMiB;
  k.kernel = 900 * kMiB;
  s.last_kill = k;
  s.history = {MarginChange{1 * kGiB, 2 * kGiB, "first"},
               MarginChange{2 * kGiB, 3 * kGiB + 7, "second, with\nnewline"}};
  return s;
}

TEST(ControllerState, RoundTripsThroughItsText) {
  ControllerState s = sampleState();
  auto back = parseState(serialiseState(s), "mem");
  ASSERT_TRUE(back) << back.error().describe();
  EXPECT_EQ(*back, s);

  ControllerState empty;
  auto e = parseState(serialiseState(empty), "mem");
  ASSERT_TRUE(e) << e.error().describe();
  EXPECT_EQ(*e, empty);
  EXPECT_FALSE(e->last_kill.has_value());

  // No self-reported figure stays absent, and extreme values survive.
  ControllerState x = sampleState();
  x.last_kill->self_reported.reset();
  x.learned_margin = kMax;
  x.generation = kMax;
  x.last_kill->time_ns = std::numeric_limits<std::int64_t>::min();
  auto xb = parseState(serialiseState(x), "mem");
  ASSERT_TRUE(xb) << xb.error().describe();
  EXPECT_EQ(*xb, x);
}

TEST(ControllerState, RoundTripsWhatAControllerLearned) {
  BudgetController c(BudgetPolicy{});
  c.decide(simple());
  KillEvidence k = oomKill();
  k.self_reported = 9 * kGiB;
  k.charge = 12 * kGiB;
  c.onOomKill(k);
  c.onOomKill(oomKill());
  c.onCleanRun();
  auto back = parseState(serialiseState(c.state()), "mem");
  ASSERT_TRUE(back) << back.error().describe();
  EXPECT_EQ(*back, c.state());
}

TEST(ControllerState, SerialisesNamesThatAreNotUtf8) {
  // A process name is whatever bytes the process set (prctl PR_SET_NAME); the kill's record
  // must still be saved, never throw on the event path.
  ControllerState s = sampleState();
  s.last_kill->what = "mark_victim: pid 9 (cu\xff\xfezk)";
  s.history.back().reason = "OOM kill #5 (cu\xffzk)";
  std::string text;
  ASSERT_NO_THROW(text = serialiseState(s));
  auto back = parseState(text, "mem");
  ASSERT_TRUE(back) << back.error().describe();
  EXPECT_EQ(back->learned_margin, s.learned_margin);
  EXPECT_THAT(back->last_kill->what, HasSubstr("mark_victim: pid 9 (cu"));
  EXPECT_THAT(back->last_kill->what, HasSubstr("zk)"));
}

// Found with the state_file fuzz target: a field of the wrong type was dumped whole into the
// error; a deeply nested one overflowed the stack. The error names its kind instead.
TEST(ControllerState, ADeeplyNestedFieldIsAnErrorNotAStackOverflow) {
  constexpr std::size_t kDepth = 20000;  // ASan's stack overflowed at 1000
  auto bad = parseState(R"({"version": )" + std::string(kDepth, '[') + std::string(kDepth, ']') + "}", "mem");
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().describe(), HasSubstr("version = an array: not an integer"));
}

TEST(ControllerState, ARestartedControllerKeepsTheLearnedMarginAndCounts) {
  BudgetController before(BudgetPolicy{});
  BudgetDecision d = before.decide(simple());
  before.onOomKill(oomKill());
  before.onOomKill(oomKill());  // 1 -> 1.5 -> 2.25 GiB
  BudgetDecision d_before = before.decide(simple(300 * kSec));
  ASSERT_EQ(d_before.margin, 2 * kGiB + 256 * kMiB);
  ASSERT_GT(d_before.generation, d.generation);

  auto parsed = parseState(serialiseState(before.state()), "restart");
  ASSERT_TRUE(parsed) << parsed.error().describe();
  BudgetController after(BudgetPolicy{}, *parsed);
  EXPECT_EQ(after.marginFor(0), before.marginFor(0));
  EXPECT_EQ(after.marginFor(0), 2 * kGiB + 256 * kMiB);
  BudgetDecision d_after = after.decide(simple(400 * kSec));
  EXPECT_EQ(d_after.margin, d_before.margin);
  EXPECT_EQ(d_after.budget, d_before.budget);
  EXPECT_GT(d_after.generation, d_before.generation) << "generations continue, never restart at 1";
  EXPECT_THAT(d_after.margin_source, HasSubstr("OOM kill #2"));
  EXPECT_EQ(after.state().retries, 2u);
  EXPECT_TRUE(after.retryAllowed());
  // It goes on learning from where it was.
  MarginChange third = after.onOomKill(oomKill());
  EXPECT_EQ(third.before, 2 * kGiB + 256 * kMiB);
  EXPECT_EQ(third.after, 3 * kGiB + 384 * kMiB) << "2.25 GiB x 1.5";
  EXPECT_THAT(third.reason, HasSubstr("OOM kill #3"));
  after.onOomKill(oomKill());
  EXPECT_FALSE(after.retryAllowed()) << "the restored retries count: four kills in this run";
}

// The sample state's JSON, changed by `f`, as text.
std::string mutated(const std::function<void(nlohmann::json&)>& f) {
  nlohmann::json j = nlohmann::json::parse(serialiseState(sampleState()));
  f(j);
  return j.dump();
}

void expectError(const std::string& text, const std::vector<std::string>& parts) {
  auto r = parseState(text, "/var/lib/headroom/budget_x.json");
  ASSERT_FALSE(r) << "accepted: " << text;
  EXPECT_THAT(r.error().describe(), HasSubstr("/var/lib/headroom/budget_x.json"));
  for (const auto& p : parts) EXPECT_THAT(r.error().describe(), HasSubstr(p)) << text;
}

TEST(ControllerState, CorruptOrTruncatedTextIsAnError) {
  std::string good = serialiseState(sampleState());
  expectError("", {"corrupt or truncated"});
  expectError(good.substr(0, good.size() / 2), {"corrupt or truncated"});
  expectError("{\"version\": 1,", {"corrupt or truncated"});
  expectError("[1, 2, 3]", {"not a JSON object"});
  expectError("\"just a string\"", {"not a JSON object"});
  expectError("garbage", {"corrupt or truncated"});
}

TEST(ControllerState, AnotherVersionIsAnError) {
  expectError(mutated([](nlohmann::json& j) { j["version"] = 2; }), {"version 2", "version 1"});
  expectError(mutated([](nlohmann::json& j) { j["version"] = "1"; }), {"version"});
  expectError(mutated([](nlohmann::json& j) { j.erase("version"); }), {"version", "missing"});
}

TEST(ControllerState, WrongTypesAndMissingFieldsNameTheField) {
  expectError(mutated([](nlohmann::json& j) { j["learned_margin_bytes"] = -5; }),
              {"learned_margin_bytes", "-5", "non-negative"});
  expectError(mutated([](nlohmann::json& j) { j["learned_margin_bytes"] = 1.5; }), {"learned_margin_bytes"});
  expectError(mutated([](nlohmann::json& j) { j["generation"] = "7"; }), {"generation"});
  expectError(mutated([](nlohmann::json& j) { j.erase("oom_kills"); }), {"oom_kills", "missing"});
  expectError(mutated([](nlohmann::json& j) { j["retries"] = 5'000'000'000ULL; }), {"retries", "too large"});
  expectError(mutated([](nlohmann::json& j) { j["clean_runs"] = true; }), {"clean_runs"});
  expectError(mutated([](nlohmann::json& j) { j.erase("last_kill"); }), {"last_kill", "missing"});
  expectError(mutated([](nlohmann::json& j) { j["last_kill"] = 5; }), {"last_kill", "not an object"});
  expectError(mutated([](nlohmann::json& j) { j["last_kill"]["what"] = 5; }), {"last_kill.what", "not a string"});
  expectError(mutated([](nlohmann::json& j) { j["last_kill"]["prover_victim"] = "yes"; }), {"last_kill.prover_victim"});
  expectError(mutated([](nlohmann::json& j) { j["last_kill"]["time_ns"] = "soon"; }), {"last_kill.time_ns"});
  expectError(mutated([](nlohmann::json& j) { j["last_kill"].erase("charge_bytes"); }),
              {"last_kill.charge_bytes", "missing"});
  expectError(mutated([](nlohmann::json& j) { j["last_kill"]["self_reported_bytes"] = "lots"; }),
              {"last_kill.self_reported_bytes"});
  expectError(mutated([](nlohmann::json& j) { j["last_kill"]["kernel_bytes"] = -1; }), {"last_kill.kernel_bytes"});
  expectError(mutated([](nlohmann::json& j) { j["history"] = "none"; }), {"history"});
  expectError(mutated([](nlohmann::json& j) { j.erase("history"); }), {"history"});
  expectError(mutated([](nlohmann::json& j) { j["history"][1] = 3; }), {"history[1]", "not an object"});
  expectError(mutated([](nlohmann::json& j) { j["history"][1].erase("reason"); }), {"history[1].reason", "missing"});
  expectError(mutated([](nlohmann::json& j) { j["history"][0]["after_bytes"] = -3; }), {"history[0].after_bytes"});
}

TEST(ControllerState, AnAbsentSelfReportedFigureIsAccepted) {
  auto r = parseState(mutated([](nlohmann::json& j) { j["last_kill"].erase("self_reported_bytes"); }), "mem");
  ASSERT_TRUE(r) << r.error().describe();
  ASSERT_TRUE(r->last_kill.has_value());
  EXPECT_FALSE(r->last_kill->self_reported.has_value());
}

TEST(ControllerState, ALongHistoryInAFileKeepsTheNewest) {
  auto r = parseState(
      mutated([](nlohmann::json& j) {
        j["history"] = nlohmann::json::array();
        for (int i = 0; i < 40; ++i)
          j["history"].push_back({{"before_bytes", i}, {"after_bytes", i + 1}, {"reason", std::to_string(i)}});
      }),
      "mem");
  ASSERT_TRUE(r) << r.error().describe();
  ASSERT_EQ(r->history.size(), ControllerState::kHistory);
  EXPECT_EQ(r->history.front().reason, "8");
  EXPECT_EQ(r->history.back().reason, "39");
}

// ---------------------------------------------------------------- the state file on disk

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "headroom-ctl-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::vector<std::string> list(const std::string& sub = "") const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(sub.empty() ? path_ : path_ + "/" + sub))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::string path_;
};

std::string readAll(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(StateFile, DefaultPathIsPerProverCgroup) {
  EXPECT_EQ(defaultStatePath("/proving/prover"), "/var/lib/headroom/budget_proving_prover.json");
  EXPECT_EQ(defaultStatePath("proving/prover/"), "/var/lib/headroom/budget_proving_prover.json")
      << "the same cgroup however it is spelled";
  EXPECT_EQ(defaultStatePath("/"), "/var/lib/headroom/budget.json");
  EXPECT_EQ(defaultStatePath("/system.slice/cuzk.service", "/tmp/state"),
            "/tmp/state/budget_system.slice_cuzk.service.json");
  EXPECT_NE(defaultStatePath("/a/b"), defaultStatePath("/a"));
}

TEST(StateFile, AMissingFileIsAFreshState) {
  TempDir d;
  auto r = loadState(d.path() + "/budget_nothing.json");
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_FALSE(r->has_value());
}

TEST(StateFile, SaveThenLoadIntoADirectoryThatDoesNotExistYet) {
  TempDir d;
  std::string path = d.path() + "/var/lib/headroom/budget_proving.json";
  ASSERT_TRUE(saveState(path, sampleState()));
  auto r = loadState(path);
  ASSERT_TRUE(r) << r.error().describe();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ(**r, sampleState());
  EXPECT_EQ(d.list("var/lib/headroom"), std::vector<std::string>{"budget_proving.json"})
      << "no temporary file left beside it";
}

TEST(StateFile, OverwritingReplacesTheWholeFileAndLeavesNoTemporary) {
  TempDir d;
  std::string path = d.path() + "/budget.json";
  ASSERT_TRUE(saveState(path, sampleState()));
  ControllerState small;
  small.learned_margin = 5;
  ASSERT_TRUE(saveState(path, small));
  auto r = loadState(path);
  ASSERT_TRUE(r) << r.error().describe();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ(**r, small) << "nothing of the longer old file remains";
  EXPECT_EQ(d.list(), std::vector<std::string>{"budget.json"});
}

TEST(StateFile, AFailedWriteLeavesTheOldFileAndNoTemporary) {
  TempDir d;
  // The target is a directory with something in it: the rename must fail.
  std::filesystem::create_directories(d.path() + "/budget.json/x");
  auto s = saveState(d.path() + "/budget.json", sampleState());
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().describe(), HasSubstr("budget.json"));
  EXPECT_EQ(d.list(), std::vector<std::string>{"budget.json"}) << "the temporary file was removed";

  // A parent that is a file.
  std::ofstream(d.path() + "/plain") << "x";
  auto s2 = saveState(d.path() + "/plain/budget.json", sampleState());
  ASSERT_FALSE(s2);
  EXPECT_THAT(s2.error().describe(), HasSubstr("plain"));
}

TEST(StateFile, ACorruptFileIsAnErrorNamingIt) {
  TempDir d;
  std::string path = d.path() + "/budget.json";
  std::string good = serialiseState(sampleState());
  std::ofstream(path) << good.substr(0, good.size() - 10);  // a torn write
  auto r = loadState(path);
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().describe(), HasSubstr(path));
  EXPECT_THAT(r.error().describe(), HasSubstr("truncated"));

  std::ofstream(path, std::ios::trunc) << std::string(2 << 20, ' ');
  auto big = loadState(path);
  ASSERT_FALSE(big);
  EXPECT_THAT(big.error().describe(), HasSubstr("1 MiB"));

  auto dir = loadState(d.path());
  ASSERT_FALSE(dir) << "a directory is not a state file";
  EXPECT_THAT(dir.error().describe(), HasSubstr(d.path()));
}

TEST(StateFile, WriteFileAtomicWritesExactlyTheContent) {
  TempDir d;
  std::string path = d.path() + "/sub/budget.env";
  ASSERT_TRUE(writeFileAtomic(path, "BUDGET=123\n"));
  EXPECT_EQ(readAll(path), "BUDGET=123\n");
  ASSERT_TRUE(writeFileAtomic(path, ""));
  EXPECT_EQ(readAll(path), "");
  EXPECT_EQ(d.list("sub"), std::vector<std::string>{"budget.env"});
}

// ---------------------------------------------------------------- formatBudget

TEST(FormatBudget, EveryPlaceholderRoundsDown) {
  const std::uint64_t b = 3 * kGiB + 768 * kMiB + 123;  // 3.75 GiB and 123 bytes
  auto r = formatBudget("{bytes} {kib} {mib} {gib} {gib_float}", b);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(*r, "4026531963 3932160 3840 3 3.75");

  const std::uint64_t just_under = 2 * kGiB - 1;
  auto u = formatBudget("--mem={gib}G ({gib_float} GiB, {mib} MiB, {kib} KiB)", just_under);
  ASSERT_TRUE(u) << u.error().describe();
  EXPECT_EQ(*u, "--mem=1G (1.99 GiB, 2047 MiB, 2097151 KiB)") << "never rounded up past the budget";

  EXPECT_EQ(formatBudget("{gib_float}", 0).value(), "0.00");
  EXPECT_EQ(formatBudget("{kib}", kKiB - 1).value(), "0");
  EXPECT_EQ(formatBudget("{bytes}{bytes}", 7).value(), "77");
  EXPECT_EQ(formatBudget("plain text", 7).value(), "plain text");
  EXPECT_EQ(formatBudget("a } alone", 7).value(), "a } alone");
  EXPECT_EQ(formatBudget("{bytes}", kMax).value(), "18446744073709551615");
}

TEST(FormatBudget, UnknownOrUnclosedPlaceholdersAreErrors) {
  auto unknown = formatBudget("--mem={tib}T", kGiB);
  ASSERT_FALSE(unknown);
  EXPECT_THAT(unknown.error().describe(), HasSubstr("{tib}"));
  EXPECT_THAT(unknown.error().describe(), HasSubstr("{gib_float}")) << "it lists what is allowed";
  auto empty = formatBudget("{}", kGiB);
  ASSERT_FALSE(empty);
  EXPECT_THAT(empty.error().describe(), HasSubstr("unknown placeholder"));
  auto unclosed = formatBudget("--mem={gib", kGiB);
  ASSERT_FALSE(unclosed);
  EXPECT_THAT(unclosed.error().describe(), HasSubstr("--mem={gib"));
  EXPECT_FALSE(formatBudget("{GIB}", kGiB)) << "placeholders are exact";
}

// ---------------------------------------------------------------- validate

TEST(BudgetPolicy, DefaultsAreValidAndAsDesigned) {
  BudgetPolicy p;
  EXPECT_TRUE(validate(p));
  EXPECT_EQ(p.margin_growth, 1.5);
  EXPECT_EQ(p.overhead_factor, 1.5);
  EXPECT_EQ(p.max_retries, 3u);
  // The edges that are allowed.
  p.margin_growth = 1.0;
  p.overhead_factor = 1.0;
  p.max_retries = 100;
  p.give_back_after = 1;
  p.growth_window = std::chrono::milliseconds(0);
  p.hysteresis_fraction = 0.0;
  EXPECT_TRUE(validate(p));
  p.hysteresis_fraction = 0.5;
  EXPECT_TRUE(validate(p));
}

void expectInvalid(const std::function<void(BudgetPolicy&)>& f, const std::vector<std::string>& parts) {
  BudgetPolicy p;
  f(p);
  auto s = validate(p);
  ASSERT_FALSE(s) << "accepted; expected an error with " << parts.front();
  for (const auto& part : parts) EXPECT_THAT(s.error().describe(), HasSubstr(part));
}

TEST(BudgetPolicy, EachBadSettingIsNamedWithItsValue) {
  expectInvalid([](BudgetPolicy& p) { p.margin_growth = 0.9; }, {"margin_growth = 0.9"});
  expectInvalid([](BudgetPolicy& p) { p.margin_growth = 101; }, {"margin_growth = 101"});
  expectInvalid([](BudgetPolicy& p) { p.margin_growth = std::nan(""); }, {"margin_growth"});
  expectInvalid([](BudgetPolicy& p) { p.overhead_factor = 0.5; }, {"overhead_factor = 0.5"});
  expectInvalid([](BudgetPolicy& p) { p.overhead_factor = std::numeric_limits<double>::infinity(); },
                {"overhead_factor"});
  expectInvalid([](BudgetPolicy& p) { p.max_retries = 101; }, {"max_retries = 101"});
  expectInvalid([](BudgetPolicy& p) { p.give_back_after = 0; }, {"give_back_after = 0"});
  expectInvalid([](BudgetPolicy& p) { p.clean_period = std::chrono::milliseconds(0); }, {"clean_period = 0"});
  expectInvalid([](BudgetPolicy& p) { p.growth_window = std::chrono::milliseconds(-1); }, {"growth_window = -1"});
  expectInvalid([](BudgetPolicy& p) { p.probe_max_age = std::chrono::milliseconds(0); }, {"probe_max_age = 0"});
  expectInvalid([](BudgetPolicy& p) { p.hysteresis_fraction = -0.1; }, {"hysteresis_fraction = -0.1"});
  expectInvalid([](BudgetPolicy& p) { p.hysteresis_fraction = 0.6; }, {"hysteresis_fraction = 0.6"});
}

}  // namespace
}  // namespace headroom

namespace headroom {
namespace {

// Neighbours that climb 100 MiB every 5 s tick (20 MiB/s): the budget keeps back what that steady
// climb takes over the 30 s horizon (600 MiB), more than what they grew so far; without a horizon
// only their growth so far.
TEST(BudgetController, ASteadyClimbOfTheNeighboursIsKeptBackAheadOfTheKill) {
  auto run = [](std::chrono::milliseconds horizon) {
    BudgetPolicy p;
    p.margin_floor = 1 * kGiB;
    p.forecast_horizon = horizon;
    BudgetController c(p);
    BudgetDecision d;
    for (int i = 0; i <= 5; ++i) {
      const std::uint64_t n = 2 * kGiB + static_cast<std::uint64_t>(i) * 100 * kMiB;
      d = c.decide(
          inputsAt(100 * kSec + i * 5 * kSec, 10 * kGiB, {bound("/", "limit", 30 * kGiB, 10 * kGiB + n, 0, n)}));
    }
    return d;
  };
  BudgetDecision ahead = run(std::chrono::seconds(30));
  EXPECT_EQ(ahead.forecast_growth, 600 * kMiB);
  EXPECT_EQ(ahead.neighbour_growth, 600 * kMiB);
  // room = 30 - 12.5 GiB, less the 600 MiB coming (the budget is prover usage + room - margin, as
  // published within the hysteresis).
  EXPECT_EQ(ahead.room, 30 * kGiB - (10 * kGiB + 2 * kGiB + 500 * kMiB) - 600 * kMiB);
  EXPECT_THAT(ahead.reason, HasSubstr("the growth coming in the next 30 s"));
  BudgetDecision behind = run(std::chrono::milliseconds(0));
  EXPECT_EQ(behind.forecast_growth, 0U);
  EXPECT_EQ(behind.neighbour_growth, 500 * kMiB);
  EXPECT_EQ(ahead.room + 100 * kMiB, behind.room);
}

// A climb sampled a few times only (128 MiB of shared memory filled over four 1 s ticks on a
// slow machine) reads as 32 MiB/s: 960 MiB over the 30 s horizon, in a 512 MiB cgroup with
// 320 MiB of room. Neither the forecast nor the growth kept back is more than that room: the
// neighbours cannot be charged past the limit. The prover keeps what it holds, less the margin.
TEST(BudgetController, TheNeighboursForecastIsNeverMoreThanTheRoomUnderTheBound) {
  BudgetPolicy p;
  p.margin_floor = 16 * kMiB;
  BudgetController c(p);
  BudgetDecision d;
  for (int i = 0; i <= 4; ++i) {
    const std::uint64_t n = static_cast<std::uint64_t>(i) * 32 * kMiB;
    d = c.decide(inputsAt(100 * kSec + i * kSec, 64 * kMiB, {bound("/job", "limit", 512 * kMiB, 64 * kMiB + n, 0, n)}));
  }
  EXPECT_EQ(d.forecast_growth, 320 * kMiB) << d.reason;
  EXPECT_EQ(d.neighbour_growth, 320 * kMiB) << d.reason;
  EXPECT_EQ(d.room, 0U);
  EXPECT_TRUE(d.valid) << d.reason;
  EXPECT_EQ(d.budget, 48 * kMiB) << "64 MiB + room 0 - margin 16 MiB: " << d.reason;
  EXPECT_THAT(d.reason, HasSubstr("the growth coming in the next 30 s at their steady trend (960 MiB at that trend, "
                                  "at most the room they can take)"));
}

// Without a forecast too: neighbours that grew by 300 MiB may grow again by no more than the
// 148 MiB left under the 512 MiB limit (the prover holds 64 MiB).
TEST(BudgetController, TheNeighboursRegrowthIsNeverMoreThanTheRoomUnderTheBound) {
  BudgetPolicy p;
  p.margin_floor = 16 * kMiB;
  p.forecast_horizon = std::chrono::milliseconds(0);
  BudgetController c(p);
  c.decide(inputsAt(100 * kSec, 64 * kMiB, {bound("/job", "limit", 512 * kMiB, 64 * kMiB, 0, 0)}));
  BudgetDecision d =
      c.decide(inputsAt(160 * kSec, 64 * kMiB, {bound("/job", "limit", 512 * kMiB, 364 * kMiB, 0, 300 * kMiB)}));
  EXPECT_EQ(d.neighbour_growth, 148 * kMiB) << d.reason;
  EXPECT_EQ(d.forecast_growth, 0U);
  EXPECT_EQ(d.room, 0U);
  EXPECT_EQ(d.budget, 48 * kMiB) << d.reason;
}

// A climb that began after a minute of calm: over the whole minute (13 samples, 9 of them flat)
// its agreement is 0.54, under the 0.6 a trend needs; over the last 20 s (the last third) it is
// all climb, and that trend is kept back: 100 MiB a 5 s tick, 600 MiB over the 30 s horizon.
TEST(BudgetController, AClimbThatBeganAfterACalmIsKeptBackFromItsRecentTrend) {
  BudgetController c(BudgetPolicy{});
  BudgetDecision d;
  for (int i = 0; i <= 12; ++i) {
    const std::uint64_t n = 2 * kGiB + static_cast<std::uint64_t>(std::max(0, i - 8)) * 100 * kMiB;
    d = c.decide(inputsAt(100 * kSec + i * 5 * kSec, 10 * kGiB, {bound("/", "limit", 30 * kGiB, 10 * kGiB + n, 0, n)}));
  }
  EXPECT_EQ(d.forecast_growth, 600 * kMiB) << d.reason;
  EXPECT_EQ(d.neighbour_growth, 600 * kMiB) << d.reason;
  EXPECT_THAT(d.reason, HasSubstr("the growth coming in the next 30 s at their steady trend"));
}

// A fill sampled five times within a second (200 ms samples) is no trend: less than the 2 s the
// time to OOM asks of one. Only what it grew by is kept back.
TEST(BudgetController, AFillWithinASecondIsNotProjected) {
  BudgetController c(BudgetPolicy{});
  BudgetDecision d;
  for (int i = 0; i <= 4; ++i) {
    const std::uint64_t n = static_cast<std::uint64_t>(i) * 32 * kMiB;
    d = c.decide(
        inputsAt(100 * kSec + i * kSec / 5, 64 * kMiB, {bound("/job", "limit", 2 * kGiB, 64 * kMiB + n, 0, n)}));
  }
  EXPECT_EQ(d.forecast_growth, 0U) << d.reason;
  EXPECT_EQ(d.neighbour_growth, 128 * kMiB) << d.reason;
}

// Neighbours that go up and down (a churn, no trend) are not projected.
TEST(BudgetController, NeighboursWithoutATrendAreNotProjected) {
  BudgetController c(BudgetPolicy{});
  BudgetDecision d;
  for (int i = 0; i <= 11; ++i) {
    const std::uint64_t n = 2 * kGiB + (i % 2 == 0 ? 0 : 300 * kMiB);
    d = c.decide(inputsAt(100 * kSec + i * 5 * kSec, 10 * kGiB, {bound("/", "limit", 30 * kGiB, 10 * kGiB + n, 0, n)}));
  }
  EXPECT_EQ(d.forecast_growth, 0U);
}

}  // namespace
}  // namespace headroom
