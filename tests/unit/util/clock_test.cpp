// SplitCpu: the exact CPU total of each piece, divided between user and system as the piece's own
// ticked times divide; the parts are counters (never go back) and add up to the total.
#include "headroom/util/clock.h"

#include <gtest/gtest.h>

namespace headroom {
namespace {

ThreadCpu piece(std::int64_t total_ms, std::int64_t user_ms, std::int64_t system_ms) {
  return ThreadCpu{total_ms * 1'000'000, user_ms * 1'000'000, system_ms * 1'000'000};
}

TEST(SplitCpu, EachPieceIsDividedAsItsOwnTicksDivide) {
  SplitCpu c;
  c += piece(10, 3, 1);  // 3/4 user
  EXPECT_DOUBLE_EQ(c.user_s, 0.0075);
  EXPECT_DOUBLE_EQ(c.system_s, 0.0025);
  c += piece(4, 0, 8);  // all system
  EXPECT_DOUBLE_EQ(c.user_s, 0.0075);
  EXPECT_DOUBLE_EQ(c.system_s, 0.0065);
}

TEST(SplitCpu, APieceTooShortToTellIsDividedAsTheSumSoFar) {
  SplitCpu c;
  c += piece(0, 0, 0);
  EXPECT_DOUBLE_EQ(c.user_s + c.system_s, 0.0);
  c += piece(2, 0, 0);  // nothing so far to go by: system
  EXPECT_DOUBLE_EQ(c.system_s, 0.002);
  c += piece(8, 1, 1);   // half and half
  c += piece(10, 0, 0);  // as the sum so far: 4/10 user
  EXPECT_DOUBLE_EQ(c.user_s, 0.004 + 0.004);
  EXPECT_DOUBLE_EQ(c.user_s + c.system_s, 0.020);
}

TEST(SplitCpu, PartsNeverGoBackWhenTheKernelsTimesStepBack) {
  // The kernel's adjusted user and system times can step back between two reads: a piece with a
  // negative part, or a negative total, adds nothing negative to either counter.
  SplitCpu c;
  c += piece(10, 5, 5);
  const SplitCpu before = c;
  c += piece(6, -2, 4);
  EXPECT_GE(c.user_s, before.user_s);
  EXPECT_GE(c.system_s, before.system_s);
  EXPECT_DOUBLE_EQ(c.user_s + c.system_s, 0.016);
  const SplitCpu before2 = c;
  c += piece(-3, 1, 1);
  EXPECT_DOUBLE_EQ(c.user_s, before2.user_s);
  EXPECT_DOUBLE_EQ(c.system_s, before2.system_s);
}

}  // namespace
}  // namespace headroom
