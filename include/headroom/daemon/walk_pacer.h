// When the sampler walks every process of the machine. A walk costs about a microsecond a task
// in the kernel and as much again in the model: at 1,000 processes a few milliseconds, at 10,000
// tens. Every sample walks while the walks fit a CPU budget (`process_walk_budget` a second);
// beyond it the walks are spread out so that they fit (at most `process_walk_max_interval`
// apart), and the samples between them read the cgroups' files and the processes that matter
// now (the prover's, those of cgroups near a bound). A sample that must see every process walks
// whatever the budget (forceNext: a kill, new settings; the agent also walks while a warning is
// in force).
#pragma once

#include <chrono>
#include <optional>

namespace headroom {

struct WalkPacing {
  // The walks' CPU a second of wall time; zero: every sample walks.
  std::chrono::nanoseconds budget{std::chrono::milliseconds(5)};
  std::chrono::milliseconds max_interval{30000};  // the longest time between two walks
};

class WalkPacer {
 public:
  using Clock = std::chrono::steady_clock;

  explicit WalkPacer(WalkPacing pacing = {}) : pacing_(pacing) {}
  void setPacing(WalkPacing pacing) { pacing_ = pacing; }

  // Whether the sample at `now` walks every process.
  bool due(Clock::time_point now) const { return forced_ || !last_ || now >= *last_ + interval_; }
  // The next sample walks.
  void forceNext() { forced_ = true; }
  // A walk at `now` that cost `cpu` (the sampling thread's, for the processes and the model):
  // the next is due when that cost spread over the time since fits the budget.
  void walked(Clock::time_point now, std::chrono::nanoseconds cpu);
  // The time between two walks now (zero: every sample).
  std::chrono::nanoseconds interval() const { return interval_; }
  std::optional<Clock::time_point> last() const { return last_; }

 private:
  WalkPacing pacing_;
  std::optional<Clock::time_point> last_;
  std::chrono::nanoseconds cost_{0};  // a walk's, smoothed
  std::chrono::nanoseconds interval_{0};
  bool forced_ = false;
};

}  // namespace headroom
