// The probe's decisions from readings alone: chunk sizes that never step past the margin,
// stops near the bound, aborts when the kernel struggles.
#include <gtest/gtest.h>

#include "headroom/probe/probe.h"
#include "testing/fixture_tree.h"

namespace headroom {
namespace {

constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::uint64_t kGiB = 1ULL << 30;

ProbeReading reading(std::uint64_t limit, std::uint64_t usage) {
  ProbeReading r;
  r.bounds.push_back(ProbeBound{"/prover", "limit", limit, usage});
  r.bounds.push_back(ProbeBound{"host", "MemAvailable", 512 * kGiB, 100 * kGiB});
  r.time_ns = 1'000'000'000;
  return r;
}

TEST(ProbePlan, DefaultMarginIsTwoGibScaledDownForSmallBounds) {
  EXPECT_EQ(defaultStopMargin(342 * kGiB), 2 * kGiB);
  EXPECT_EQ(defaultStopMargin(512 * kMiB), 32 * kMiB);
  EXPECT_EQ(defaultStopMargin(64 * kMiB), 16 * kMiB);
}

TEST(ProbePlan, StepsCloseInOnTheMarginAndNeverPastIt) {
  ProbeOptions o;  // 1 GiB chunks
  std::uint64_t limit = 10 * kGiB, usage = 3 * kGiB, margin = 2 * kGiB, allocated = 0;
  ProbeReading first = reading(limit, usage);
  int steps = 0;
  for (;;) {
    ProbeDecision d = decideProbeStep(first, reading(limit, usage), allocated, o, margin);
    if (d.step != ProbeStep::kContinue) {
      EXPECT_EQ(d.step, ProbeStep::kStopNearBound) << d.reason;
      break;
    }
    EXPECT_LE(d.next_chunk, 1 * kGiB);
    EXPECT_EQ(d.next_chunk % (2 * kMiB), 0u);
    usage += d.next_chunk + d.next_chunk / 512;  // plus page tables
    allocated += d.next_chunk;
    ASSERT_LT(usage, limit - margin) << "a step went past the margin";
    ASSERT_LT(++steps, 100);
  }
  // It got within a few MiB of the margin.
  EXPECT_GT(usage, limit - margin - 16 * kMiB);
}

TEST(ProbePlan, AChunkLargerThanTheRoomShrinks) {
  ProbeOptions o;
  o.chunk = 4 * kGiB;
  ProbeDecision d = decideProbeStep(reading(kGiB, 700 * kMiB), reading(kGiB, 700 * kMiB), 0, o, 64 * kMiB);
  ASSERT_EQ(d.step, ProbeStep::kContinue);
  EXPECT_LE(d.next_chunk, 260 * kMiB - 260 * kMiB / 16);
}

TEST(ProbePlan, TheTightestBoundWinsWhicheverItIs) {
  ProbeOptions o;
  ProbeReading r = reading(100 * kGiB, 10 * kGiB);
  r.bounds.push_back(ProbeBound{"/", "limit", 50 * kGiB, 49 * kGiB});  // an ancestor with 1 GiB left
  ProbeDecision d = decideProbeStep(r, r, 0, o, 512 * kMiB);
  ASSERT_EQ(d.step, ProbeStep::kContinue);
  EXPECT_EQ(d.room, 1 * kGiB);
  EXPECT_NE(d.bound.find("/ limit"), std::string::npos) << d.bound;
  EXPECT_LE(d.next_chunk, 512 * kMiB);
}

TEST(ProbePlan, StopsAtOnceWhenAlreadyWithinTheMargin) {
  ProbeOptions o;
  ProbeDecision d = decideProbeStep(reading(kGiB, 1000 * kMiB), reading(kGiB, 1000 * kMiB), 0, o, 32 * kMiB);
  EXPECT_EQ(d.step, ProbeStep::kStopNearBound);
  EXPECT_NE(d.reason.find("within the stop margin"), std::string::npos) << d.reason;
}

TEST(ProbePlan, MaxBytesCapsTheSteps) {
  ProbeOptions o;
  o.max_bytes = 100 * kMiB;
  ProbeDecision d = decideProbeStep(reading(10 * kGiB, 0), reading(10 * kGiB, 0), 0, o, kGiB);
  ASSERT_EQ(d.step, ProbeStep::kContinue);
  EXPECT_EQ(d.next_chunk, 100 * kMiB);
  d = decideProbeStep(reading(10 * kGiB, 0), reading(10 * kGiB, 100 * kMiB), 100 * kMiB, o, kGiB);
  EXPECT_EQ(d.step, ProbeStep::kStopMaxBytes);
}

TEST(ProbePlan, KernelStruggleAbortsButPageCacheReclaimDoesNot) {
  ProbeOptions o;
  ProbeReading first = reading(10 * kGiB, kGiB);
  ProbeReading now = reading(10 * kGiB, 2 * kGiB);
  now.time_ns = first.time_ns + 2'000'000'000;  // two seconds of probing
  // v1 failcnt (page-cache reclaim at the limit) is not a reading at all: no abort.
  EXPECT_EQ(decideProbeStep(first, now, kGiB, o, kGiB).step, ProbeStep::kContinue);

  ProbeReading high = now;
  high.events_high = 3;
  EXPECT_EQ(decideProbeStep(first, high, kGiB, o, kGiB).step, ProbeStep::kAbortPressure);
  ProbeReading max = now;
  max.events_max = 1;
  EXPECT_EQ(decideProbeStep(first, max, kGiB, o, kGiB).step, ProbeStep::kAbortPressure);
  ProbeReading oom = now;
  oom.under_oom = true;
  EXPECT_EQ(decideProbeStep(first, oom, kGiB, o, kGiB).step, ProbeStep::kAbortPressure);

  // PSI: a short stall is noise; stalls for most of the probe's time are struggle.
  first.pressure_some_us = 1'000'000;
  ProbeReading calm = now;
  calm.pressure_some_us = 1'000'000 + 50'000;
  EXPECT_EQ(decideProbeStep(first, calm, kGiB, o, kGiB).step, ProbeStep::kContinue);
  ProbeReading stalled = now;
  stalled.pressure_some_us = 1'000'000 + 1'500'000;
  ProbeDecision d = decideProbeStep(first, stalled, kGiB, o, kGiB);
  EXPECT_EQ(d.step, ProbeStep::kAbortPressure);
  EXPECT_NE(d.reason.find("pressure"), std::string::npos) << d.reason;
}

TEST(ProbePlan, TouchModesByName) {
  EXPECT_EQ(*touchModeFromString("populate"), TouchMode::kPopulate);
  EXPECT_EQ(*touchModeFromString("memset"), TouchMode::kMemset);
  EXPECT_EQ(*touchModeFromString("threads"), TouchMode::kThreads);
  auto bad = touchModeFromString("fast");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("fast"), std::string::npos);
}

// The live readings on a v2 fixture tree: every bound (limit, memory.high, the ancestors, the
// host), and the counters that say the kernel struggles.
TEST(ProbeReadings, V2BoundsHighAndEventsFromTheFiles) {
  testing::FixtureTree t;
  t.mountV2();
  t.meminfo(64ULL << 30, 40ULL << 30);
  t.write("/sys/fs/cgroup/memory.stat", "anon 1\n");
  t.cgroupV2("/fleet", 20ULL << 30, "34359738368", "anon 1\n");
  t.cgroupV2("/fleet/prover", 12ULL << 30, "17179869184", "anon 1\n");
  t.write("/sys/fs/cgroup/fleet/prover/memory.high", "15032385536\n");
  t.write("/sys/fs/cgroup/fleet/prover/memory.events", "low 0\nhigh 2\nmax 1\noom 0\noom_kill 0\n");
  t.write("/sys/fs/cgroup/fleet/prover/memory.pressure",
          "some avg10=0.00 avg60=0.00 avg300=0.00 total=1500\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=700\n");
  auto fs = t.fs();
  auto c = Collector::create(fs);
  ASSERT_TRUE(c) << c.error().describe();
  auto r = detail::readProbeBounds(fs, c->hierarchy(), "/fleet/prover");
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->usage, 12ULL << 30);
  EXPECT_EQ(r->events_high, 2u);
  EXPECT_EQ(r->events_max, 1u);
  EXPECT_EQ(r->pressure_some_us, 1500u);
  std::vector<std::string> seen;
  for (const ProbeBound& b : r->bounds) seen.push_back(b.name + " " + b.kind);
  EXPECT_EQ(seen, (std::vector<std::string>{"/fleet/prover limit", "/fleet/prover memory.high", "/fleet limit",
                                            "host MemAvailable"}));
  // memory.high, 2 GiB under its 16 GiB limit, is the tightest at 2 GiB of room.
  ProbeOptions o;
  ProbeDecision d = decideProbeStep(*r, *r, 0, o, 512ULL << 20);
  EXPECT_EQ(d.room, 2ULL << 30);
  EXPECT_NE(d.bound.find("memory.high"), std::string::npos) << d.bound;
}

TEST(ProbeReadings, SubCgroupOnlyWhereTheHierarchyAllowsIt) {
  testing::FixtureTree v2;
  v2.mountV2();
  v2.meminfo();
  v2.write("/sys/fs/cgroup/memory.stat", "anon 1\n");
  v2.cgroupV2("/leaf", 1ULL << 30, "max", "anon 1\n");
  v2.write("/sys/fs/cgroup/leaf/cgroup.subtree_control", "cpu io\n");
  v2.cgroupV2("/delegated", 1ULL << 30, "max", "anon 1\n");
  v2.write("/sys/fs/cgroup/delegated/cgroup.subtree_control", "cpu memory pids\n");
  auto fs2 = v2.fs();
  auto c2 = Collector::create(fs2);
  ASSERT_TRUE(c2) << c2.error().describe();
  // A v2 leaf that holds processes cannot give children the memory controller: the probe
  // then runs in the target itself, as the OOM killer's first choice.
  EXPECT_FALSE(detail::probeSubCgroupPossible(c2->hierarchy(), "/leaf"));
  EXPECT_TRUE(detail::probeSubCgroupPossible(c2->hierarchy(), "/delegated"));

  testing::FixtureTree v1;
  testing::provingHostV1(v1);
  auto fs1 = v1.fs();
  auto c1 = Collector::create(fs1);
  ASSERT_TRUE(c1) << c1.error().describe();
  EXPECT_TRUE(detail::probeSubCgroupPossible(c1->hierarchy(), "/proving/prover"));
}

}  // namespace
}  // namespace headroom
