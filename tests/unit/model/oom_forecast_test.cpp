// Time to OOM and its warnings: readings built in code (hand-made series, named for what they
// stand for), the robust trend, the episodes and the verdict at a kill.
#include <gtest/gtest.h>

#include <cmath>

#include "headroom/model/oom_forecast.h"

namespace headroom {
namespace {

constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::int64_t kMs = 1'000'000;
constexpr std::int64_t kS = 1'000'000'000;

BoundReading reading(std::int64_t t, std::uint64_t usage, std::uint64_t reclaimable = 0,
                     std::uint64_t limit = 256 * kMiB) {
  BoundReading r;
  r.bound = "/job";
  r.time_ns = t;
  r.wall_ns = 1'700'000'000 * kS + t;
  r.limit = limit;
  r.usage = usage;
  r.reclaimable = reclaimable;
  return r;
}

TEST(RobustTrend, SteadyLineWithOneWildPoint) {
  std::vector<std::pair<std::int64_t, double>> pts;
  for (int i = 0; i < 20; ++i) pts.emplace_back(i * 500 * kMs, 10.0 * i * 0.5);  // 10 a second
  pts[7].second = 1e6;                                                           // one reading far off the line
  Trend t = robustTrend(pts);
  EXPECT_NEAR(t.slope, 10.0, 0.5);
  EXPECT_GT(t.agreement, 0.8);
}

TEST(RobustTrend, FlatNoiseHasNoAgreement) {
  std::vector<std::pair<std::int64_t, double>> pts;
  for (int i = 0; i < 40; ++i) pts.emplace_back(i * 500 * kMs, (i % 2 == 0) ? 100.0 : 108.0);
  Trend t = robustTrend(pts);
  EXPECT_LT(std::abs(t.agreement), 0.2);
  EXPECT_NEAR(t.slope, 0.0, 1.0);
}

TEST(OomForecaster, SteadyGrowthIsWarnedWithTheRightEta) {
  OomForecaster f;
  // 8 MiB a second from 100 MiB toward 256 MiB: the truth is (256 - held) / 8 seconds away.
  std::optional<WarningEpisode> started;
  for (int i = 0; i <= 20; ++i) {
    const std::int64_t t = i * 500 * kMs;
    f.observe(reading(t, 100 * kMiB + static_cast<std::uint64_t>(i) * 4 * kMiB));
    for (auto& c : f.takeChanges())
      if (!c.ended_ns) started = c;
  }
  auto e = f.eta("/job");
  ASSERT_TRUE(e && e->eta_seconds);
  const double truth = (256.0 - 180.0) / 8.0;
  EXPECT_NEAR(*e->eta_seconds, truth, 0.5);
  EXPECT_NEAR(e->growth_bytes_per_second / kMiB, 8.0, 0.1);
  EXPECT_EQ(e->confidence, Confidence::kHigh);
  ASSERT_TRUE(started);  // under 30 s: one episode, told once
  EXPECT_EQ(started->bound, "/job");
  EXPECT_EQ(f.active().size(), 1U);
  f.observe(reading(21 * 500 * kMs, 184 * kMiB));
  EXPECT_TRUE(f.takeChanges().empty());
}

TEST(OomForecaster, SittingNearTheLimitIsNeverWarned) {
  OomForecaster f;
  // 230 of 256 MiB, churning 8 MiB up and down, for two minutes.
  for (int i = 0; i < 240; ++i) {
    f.observe(reading(i * 500 * kMs, (230 + (i % 3 == 0 ? 8 : 0)) * kMiB));
    EXPECT_TRUE(f.active().empty()) << "at " << i;
  }
  auto e = f.eta("/job");
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->near);
  EXPECT_FALSE(e->warns(f.policy()));
}

TEST(OomForecaster, PageCacheThatReclaimTakesBackIsNotHeld) {
  OomForecaster f;
  // Usage climbs to the limit and stays, all of the rise clean page cache.
  for (int i = 0; i < 120; ++i) {
    std::uint64_t cache = std::min<std::uint64_t>(240, static_cast<std::uint64_t>(i) * 4) * kMiB;
    f.observe(reading(i * 500 * kMs, 16 * kMiB + cache, cache));
    EXPECT_TRUE(f.active().empty());
  }
  EXPECT_FALSE(f.eta("/job")->eta_seconds && f.eta("/job")->confidence >= Confidence::kMedium);
}

TEST(OomForecaster, EpisodeClearsOnlyAfterStayingWellAbove) {
  ForecastPolicy p;
  p.clear_after_ns = 5 * kS;
  OomForecaster f(p);
  for (int i = 0; i <= 12; ++i) f.observe(reading(i * 500 * kMs, (150 + 6 * i) * kMiB));
  ASSERT_EQ(f.active().size(), 1U);
  (void)f.takeChanges();
  // The prover shed memory: flat at 120 MiB.
  std::int64_t t = 13 * 500 * kMs;
  for (; f.active().size() == 1 && t < 60 * kS; t += 500 * kMs) f.observe(reading(t, 120 * kMiB));
  auto changes = f.takeChanges();
  ASSERT_EQ(changes.size(), 1U);
  EXPECT_EQ(changes[0].end_reason, "cleared");
  EXPECT_GE(*changes[0].ended_ns - 13 * 500 * kMs, 5 * kS);
}

TEST(OomForecaster, VerdictWarnedGivesTheLead) {
  OomForecaster f;
  for (int i = 0; i <= 30; ++i) f.observe(reading(i * 500 * kMs, (100 + 4 * i) * kMiB));
  ASSERT_EQ(f.active().size(), 1U);
  const std::int64_t start = f.active()[0]->started_ns;
  const std::int64_t kill = 20 * kS;
  WarningVerdict v = f.verdict("/job", kill);
  f.killed("/job", kill);
  EXPECT_EQ(v.kind, WarningVerdictKind::kWarned);
  EXPECT_NEAR(*v.lead_seconds, static_cast<double>(kill - start) / kS, 1e-9);
  EXPECT_TRUE(f.active().empty());
  // Asked again after the kill ended the episode: the same answer.
  EXPECT_EQ(f.verdict("/job", kill).kind, WarningVerdictKind::kWarned);
}

TEST(OomForecaster, BurstFromCalmIsNoWarningPossible) {
  OomForecaster f;
  for (int i = 0; i < 20; ++i) f.observe(reading(i * 500 * kMs, 20 * kMiB));
  const std::int64_t last_calm = 19 * 500 * kMs;
  // A light reading 300 ms later still calm; the kill 600 ms after that.
  BoundReading light = reading(last_calm + 300 * kMs, 24 * kMiB);
  light.reclaimable.reset();
  f.observe(light);
  WarningVerdict v = f.verdict("/job", last_calm + 900 * kMs);
  EXPECT_EQ(v.kind, WarningVerdictKind::kNoWarningPossible) << v.text;
  EXPECT_NEAR(*v.calm_seconds, 0.6, 1e-6);
}

TEST(OomForecaster, AWarningAsItDiesIsNoWarning) {
  OomForecaster f;
  for (int i = 0; i < 6; ++i) f.observe(reading(i * kS, 20 * kMiB));  // calm, the last at 5 s
  // The burst, read every 100 ms as the kernel notifies: trusted (the calm readings give it its
  // span), warned, and killed 0.5 s after the last calm reading.
  for (int i = 1; i <= 4; ++i) f.observe(reading(5 * kS + i * 100 * kMs, (20 + 50 * i) * kMiB));
  ASSERT_EQ(f.active().size(), 1U) << "a warning came";
  WarningVerdict v = f.verdict("/job", 5 * kS + 500 * kMs);
  EXPECT_EQ(v.kind, WarningVerdictKind::kNoWarningPossible) << v.text;
  EXPECT_NE(v.text.find("too late to act on"), std::string::npos) << v.text;
}

// A steady climb warned in time, read calm once just before the kill (a reading that caught the
// kernel reclaiming, or a slow sample): the warning in force since before that reading was given.
TEST(OomForecaster, AWarningInForceBeforeACalmReadingAtTheEndWasGiven) {
  OomForecaster f;
  for (int i = 0; i <= 30; ++i) f.observe(reading(i * 500 * kMs, (100 + 4 * i) * kMiB));
  ASSERT_EQ(f.active().size(), 1U);
  const std::int64_t start = f.active()[0]->started_ns;
  BoundReading flat = reading(15 * kS + 600 * kMs, 120 * kMiB);
  flat.reclaimable.reset();  // a light reading below the near fraction: calm
  f.observe(flat);
  const std::int64_t kill = 15 * kS + 900 * kMs;
  WarningVerdict v = f.verdict("/job", kill);
  EXPECT_EQ(v.kind, WarningVerdictKind::kWarned) << v.text;
  EXPECT_NEAR(*v.lead_seconds, static_cast<double>(kill - start) / kS, 1e-9);
}

TEST(OomForecaster, ThresholdCrossingCountsAsCalmUntilThen) {
  OomForecaster f;
  f.observe(reading(0, 20 * kMiB));
  f.calmUntil("/job", 4 * kS);
  f.observe(reading(4 * kS + 100 * kMs, 250 * kMiB));
  EXPECT_EQ(f.verdict("/job", 4 * kS + 400 * kMs).kind, WarningVerdictKind::kNoWarningPossible);
  EXPECT_EQ(f.verdict("/job", 9 * kS).kind, WarningVerdictKind::kUnobserved);
}

TEST(OomForecaster, SeenRisingWithoutWarningIsMissed) {
  ForecastPolicy p;
  p.warn_eta_ns = 1 * kS;  // a threshold too short for this climb
  OomForecaster f(p);
  // 40 MiB a second: the last two readings say 1.9 and 1.4 s to go, never under 1 s.
  for (int i = 0; i <= 9; ++i) f.observe(reading(i * 500 * kMs, (20 + 20 * i) * kMiB));
  EXPECT_TRUE(f.active().empty());
  WarningVerdict v = f.verdict("/job", 5 * kS);
  EXPECT_EQ(v.kind, WarningVerdictKind::kMissed) << v.text;
  EXPECT_EQ(f.verdict("/other", 5 * kS).kind, WarningVerdictKind::kUnwatched);
}

TEST(OomForecaster, GrowersAndSignals) {
  OomForecaster f;
  for (int i = 0; i <= 10; ++i) {
    BoundReading r = reading(i * 500 * kMs, (100 + 8 * i) * kMiB);
    r.failcnt = static_cast<std::uint64_t>(3 * i);
    r.processes = {{10, "prover", "/job/a", static_cast<std::uint64_t>(80 + 8 * i) * kMiB},
                   {11, "idle", "/job/b", 20 * kMiB}};
    f.observe(r);
  }
  auto e = f.eta("/job");
  ASSERT_TRUE(e);
  ASSERT_EQ(e->growers.size(), 1U);
  EXPECT_EQ(e->growers[0].pid, 10);
  EXPECT_NEAR(e->growers[0].growth_bytes_per_second / kMiB, 16.0, 0.01);
  ASSERT_FALSE(e->signals.empty());
  EXPECT_EQ(e->signals[0], "failcnt +30");
}

TEST(OomForecaster, ForgottenBoundEndsItsEpisode) {
  OomForecaster f;
  for (int i = 0; i <= 12; ++i) f.observe(reading(i * 500 * kMs, (150 + 6 * i) * kMiB));
  ASSERT_EQ(f.active().size(), 1U);
  (void)f.takeChanges();
  f.forgetUnseen(100 * kS);
  auto c = f.takeChanges();
  ASSERT_EQ(c.size(), 1U);
  EXPECT_EQ(c[0].end_reason, "gone");
  EXPECT_FALSE(f.eta("/job"));
}

}  // namespace
}  // namespace headroom
