#include "headroom/daemon/walk_pacer.h"

#include <algorithm>

namespace headroom {

void WalkPacer::walked(Clock::time_point now, std::chrono::nanoseconds cpu) {
  forced_ = false;
  last_ = now;
  // Smoothed over a few walks (half the last, half those before): one walk slowed by the rest
  // of the machine does not set the pace alone.
  cost_ = cost_.count() == 0 ? cpu : (cost_ + cpu) / 2;
  if (pacing_.budget.count() <= 0) {
    interval_ = {};
    return;
  }
  // cost / (budget a second) seconds between walks.
  const double seconds = static_cast<double>(cost_.count()) / static_cast<double>(pacing_.budget.count());
  const auto spread = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(seconds));
  interval_ = std::min<std::chrono::nanoseconds>(spread, pacing_.max_interval);
}

}  // namespace headroom
