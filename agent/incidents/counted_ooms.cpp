// The kills the cgroups' counters show. See incidents/counted_ooms.h.
#include "headroom/incidents/counted_ooms.h"

#include <utility>

namespace headroom {
namespace {

constexpr const char* kCountersOnly = "counters only";

}  // namespace

void CountedOoms::prime(std::map<std::string, std::uint64_t> counts, bool tell,
                        std::map<std::string, std::uint64_t> found) {
  watch_.prime(std::move(counts));
  catching_up_ = true;
  tell_ = tell;
  found_ = std::move(found);
}

std::vector<OomEvent> CountedOoms::update(const Snapshot* previous, const Snapshot& now, bool kernel_source) {
  std::vector<OomEvent> events = watch_.update(previous, now);  // the baseline moves every sample
  if (std::exchange(catching_up_, false)) {
    // The rises since the earlier agent's last sample: kills while no agent ran.
    std::vector<OomEvent> found;
    if (!kernel_source || tell_) {
      for (OomEvent& e : events) {
        const std::uint64_t told = found_[e.counter_cgroup];
        if (e.counted_kills <= told) continue;  // each one is in the kernel's log
        e.counted_kills -= told;
        e.found_after = "counters";
        e.id = ++ids_;
        found.push_back(std::move(e));
      }
    }
    found_.clear();
    return found;
  }
  if (kernel_source) {
    once_.clear(kCountersOnly);
    return {};
  }
  once_.say(kCountersOnly,
            "OOM kills: neither BPF (oom:mark_victim) nor /dev/kmsg is available; they are counted from "
            "the cgroups' OOM-kill counters at each sample, the victim inferred from the processes gone");
  for (OomEvent& e : events) e.id = ++ids_;
  return events;
}

}  // namespace headroom
