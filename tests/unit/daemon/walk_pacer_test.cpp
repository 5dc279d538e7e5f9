#include <gtest/gtest.h>

#include "headroom/daemon/walk_pacer.h"

namespace headroom {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Cheap walks: every sample. Dear ones: spread so that their CPU fits the budget a second, never
// further apart than the longest interval; a forced one whatever the budget.
TEST(WalkPacer, WalksAsOftenAsTheBudgetAllows) {
  WalkPacer pacer(WalkPacing{milliseconds(5), milliseconds(10000)});
  const auto t0 = WalkPacer::Clock::time_point{} + seconds(100);
  EXPECT_TRUE(pacer.due(t0)) << "the first sample walks";
  pacer.walked(t0, milliseconds(2));
  EXPECT_LT(pacer.interval(), milliseconds(500)) << "2 ms a walk fits 5 ms a second: every sample";
  EXPECT_TRUE(pacer.due(t0 + seconds(1)));

  pacer.walked(t0 + seconds(1), milliseconds(38));  // smoothed: (2 + 38) / 2 = 20 ms
  EXPECT_EQ(pacer.interval(), milliseconds(4000));
  EXPECT_FALSE(pacer.due(t0 + seconds(2)));
  EXPECT_FALSE(pacer.due(t0 + milliseconds(4999)));
  EXPECT_TRUE(pacer.due(t0 + seconds(5)));
  pacer.forceNext();
  EXPECT_TRUE(pacer.due(t0 + seconds(2))) << "forced";
  pacer.walked(t0 + seconds(2), milliseconds(20));
  EXPECT_FALSE(pacer.due(t0 + seconds(3))) << "the force lasts one walk";

  pacer.walked(t0 + seconds(3), seconds(1));
  EXPECT_EQ(pacer.interval(), milliseconds(10000)) << "never further apart than the longest interval";

  pacer.setPacing(WalkPacing{milliseconds(0), milliseconds(10000)});
  pacer.walked(t0 + seconds(4), seconds(1));
  EXPECT_EQ(pacer.interval().count(), 0) << "no budget: every sample walks";
  EXPECT_TRUE(pacer.due(t0 + seconds(5)));
}

}  // namespace
}  // namespace headroom
