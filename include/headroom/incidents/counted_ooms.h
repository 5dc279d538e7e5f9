// The kills only the cgroups' own counters show, where no kernel source (BPF, /dev/kmsg) is there
// to name them: a signal of their own. And, at start, the kills they show since an earlier
// agent's last sample.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "headroom/model/oom_counter.h"
#include "headroom/model/snapshot.h"
#include "headroom/sensors/oom_event.h"
#include "headroom/util/logging.h"

namespace headroom {

// OOM kills from the cgroups' counters, where no kernel source names them: each rise of a
// cgroup's oom_kill between two samples is an incident (from_counter), its victims inferred from
// the processes gone. Said once that this is all there is.
class CountedOoms {
 public:
  // `kernel_source`: BPF's mark_victim or /dev/kmsg is active; then the counters only move their
  // baseline and nothing is returned.
  std::vector<OomEvent> update(const Snapshot* previous, const Snapshot& now, bool kernel_source);
  // Starts from the counts an earlier agent saw in this boot: the first update's rises are kills
  // found after the fact ("counters"). With a kernel source they are told only when its log lost
  // records (`tell`), less the kills its reports showed in each cgroup (`found`).
  void prime(std::map<std::string, std::uint64_t> counts, bool tell, std::map<std::string, std::uint64_t> found);
  // Each sampled cgroup's count at the last update.
  const std::map<std::string, std::uint64_t>& counts() const { return watch_.counts(); }
  bool waiting() const { return watch_.waiting(); }

 private:
  OomCounterWatch watch_;
  bool catching_up_ = false, tell_ = false;
  std::map<std::string, std::uint64_t> found_;
  WarnOnce once_;
  std::uint64_t ids_ = 0;
};

}  // namespace headroom
