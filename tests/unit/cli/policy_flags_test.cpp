// The budget policy's flags (`headroom run` and `headroom budget`): parsed onto a base policy,
// and every bad value refused with the flag and the value the user typed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "headroom/cli/commands.h"

namespace headroom {
namespace {

using cli::PolicyFlags;
using cli::policyFromFlags;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::uint64_t kGiB = 1ULL << 30;

TEST(PolicyFlags, NoFlagsKeepTheBase) {
  auto d = policyFromFlags(PolicyFlags{});
  ASSERT_TRUE(d) << d.error().describe();
  EXPECT_EQ(*d, BudgetPolicy{});

  BudgetPolicy base;  // e.g. from the config file
  base.margin_floor = 3 * kGiB;
  base.max_retries = 7;
  base.hysteresis_bytes = 64 * kMiB;
  auto p = policyFromFlags(PolicyFlags{}, base);
  ASSERT_TRUE(p) << p.error().describe();
  EXPECT_EQ(*p, base);
}

TEST(PolicyFlags, EveryFlagIsParsedOntoTheBase) {
  PolicyFlags f;
  f.margin_floor = "2GiB";
  f.margin_step = "512MiB";
  f.margin_growth = "2";
  f.overhead_factor = "1.25";
  f.max_retries = 5;
  f.give_back_after = 7;
  BudgetPolicy base;
  base.hysteresis_fraction = 0.02;
  base.growth_window = std::chrono::minutes(10);
  auto p = policyFromFlags(f, base);
  ASSERT_TRUE(p) << p.error().describe();
  EXPECT_EQ(p->margin_floor, 2 * kGiB);
  EXPECT_EQ(p->margin_step, 512 * kMiB);
  EXPECT_EQ(p->margin_growth, 2.0);
  EXPECT_EQ(p->overhead_factor, 1.25);
  EXPECT_EQ(p->max_retries, 5u);
  EXPECT_EQ(p->give_back_after, 7u);
  // What no flag names stays as the base had it.
  EXPECT_EQ(p->hysteresis_fraction, 0.02);
  EXPECT_EQ(p->growth_window, std::chrono::minutes(10));
  EXPECT_EQ(p->hysteresis_bytes, BudgetPolicy{}.hysteresis_bytes);
}

TEST(PolicyFlags, SizesInEverySpellingTheUnitsAccept) {
  auto floorOf = [](const std::string& text) {
    PolicyFlags f;
    f.margin_floor = text;
    auto p = policyFromFlags(f);
    EXPECT_TRUE(p) << text << ": " << p.error().describe();
    return p ? p->margin_floor : 0;
  };
  EXPECT_EQ(floorOf("1073741824"), 1 * kGiB);
  EXPECT_EQ(floorOf("1.5G"), 1 * kGiB + 512 * kMiB);
  EXPECT_EQ(floorOf("768MiB"), 768 * kMiB);
}

TEST(PolicyFlags, ZeroIsAValueNotAnAbsence) {
  PolicyFlags f;
  f.max_retries = 0;
  BudgetPolicy base;
  base.max_retries = 9;
  auto p = policyFromFlags(f, base);
  ASSERT_TRUE(p) << p.error().describe();
  EXPECT_EQ(p->max_retries, 0u) << "--max-retries 0: no retries at all";
}

struct BadCase {
  PolicyFlags flags;
  std::vector<std::string> must_name;
};

PolicyFlags with(const std::function<void(PolicyFlags&)>& f) {
  PolicyFlags p;
  f(p);
  return p;
}

TEST(PolicyFlags, BadValuesNameTheFlagAndTheValue) {
  std::vector<BadCase> cases = {
      // Not parseable at all.
      {with([](PolicyFlags& f) { f.margin_floor = "lots"; }), {"--margin-floor", "lots"}},
      {with([](PolicyFlags& f) { f.margin_step = "12XB"; }), {"--margin-step", "12XB"}},
      {with([](PolicyFlags& f) { f.margin_step = "-1GiB"; }), {"--margin-step", "-1GiB"}},
      {with([](PolicyFlags& f) { f.margin_growth = "1.5x"; }), {"--margin-growth", "1.5x"}},
      {with([](PolicyFlags& f) { f.margin_growth = "fast"; }), {"--margin-growth", "fast"}},
      {with([](PolicyFlags& f) { f.overhead_factor = " 1.5"; }), {"--overhead-factor", " 1.5"}},
      // Parseable, refused by the policy: still the flag, not the setting's inner name.
      {with([](PolicyFlags& f) { f.margin_growth = "0.5"; }), {"--margin-growth", "0.5"}},
      {with([](PolicyFlags& f) { f.margin_growth = "nan"; }), {"--margin-growth", "nan"}},
      {with([](PolicyFlags& f) { f.overhead_factor = "200"; }), {"--overhead-factor", "200"}},
      {with([](PolicyFlags& f) { f.max_retries = 101; }), {"--max-retries", "101"}},
      {with([](PolicyFlags& f) { f.give_back_after = 0; }), {"--give-back-after", "0"}},
  };
  for (const BadCase& c : cases) {
    auto p = policyFromFlags(c.flags);
    ASSERT_FALSE(p) << "accepted; expected an error naming " << c.must_name.front();
    const std::string msg = p.error().describe();
    for (const auto& part : c.must_name) EXPECT_THAT(msg, HasSubstr(part)) << c.must_name.front();
    EXPECT_THAT(msg, Not(HasSubstr("margin_growth"))) << "the user typed a flag, not a setting";
    EXPECT_THAT(msg, Not(HasSubstr("max_retries")));
  }
}

TEST(PolicyFlags, TheFirstBadFlagIsTheOneReported) {
  PolicyFlags f;
  f.margin_floor = "2GiB";
  f.margin_growth = "x";
  f.max_retries = 3;
  auto p = policyFromFlags(f);
  ASSERT_FALSE(p);
  EXPECT_THAT(p.error().describe(), HasSubstr("--margin-growth"));
  EXPECT_THAT(p.error().describe(), Not(HasSubstr("--margin-floor"))) << "a good flag is not blamed";
}

TEST(PolicyFlags, ABadBaseSettingIsStillNamed) {
  // Not a flag's fault (a config file's): the setting keeps its own name.
  BudgetPolicy base;
  base.hysteresis_fraction = 0.9;
  auto p = policyFromFlags(PolicyFlags{}, base);
  ASSERT_FALSE(p);
  EXPECT_THAT(p.error().describe(), HasSubstr("hysteresis_fraction = 0.9"));
}

}  // namespace
}  // namespace headroom
