// OOM kills from the cgroups' own counters, for where no kernel source is there to name them
// (an unprivileged container: no BPF, no /dev/kmsg). Pure logic over two snapshots.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "headroom/model/snapshot.h"
#include "headroom/sensors/oom_event.h"

namespace headroom {

// A cgroup's own OOM kills (its descendants' not counted): v2 memory.events.local oom_kill
// (memory.events' oom_kill where the kernel has no .local file), v1 memory.oom_control oom_kill.
std::optional<std::uint64_t> localOomKills(const CgroupMemory& cg);

// Compares each sample's counters with the previous sample's. A rise in a cgroup is that many
// OOM kills there, between the two samples: one event for the cgroup, from_counter set, its
// victims inferred (OomVictim::inferred) from the processes of that cgroup in the previous
// sample that are gone now, the largest first, one per kill. When none is gone yet (the counter
// was read while the victim was still exiting), the event waits for up to two more samples for
// one of them to go, then is told with what there is (a sample whose processes were carried from
// the last walk, Snapshot::stats.processes_carried, is not counted). The first sample only sets the baseline;
// a cgroup seen for the first time starts from its count.
class OomCounterWatch {
 public:
  std::vector<OomEvent> update(const Snapshot* previous, const Snapshot& now);
  // Starts from counts an earlier agent saw (JournalState::oom_kill_counts, of this boot) instead
  // of the first sample's: the next update tells the rises since; a cgroup it did not list (not
  // sampled then) starts from its count. Before the first update only.
  void prime(std::map<std::string, std::uint64_t> counts);
  // Each sampled cgroup's count at the last update (0s included).
  const std::map<std::string, std::uint64_t>& counts() const { return last_; }
  // Kills whose victims are still to go (they wait for a sample that walked every process).
  bool waiting() const { return !deferred_.empty(); }

 private:
  struct Deferred {
    OomEvent event;
    std::vector<ProcessSnapshot> candidates;  // the cgroup's processes still there at the rise
    int samples_left = 0;
  };
  std::map<std::string, std::uint64_t> last_;
  bool primed_ = false;
  std::vector<Deferred> deferred_;
};

}  // namespace headroom
