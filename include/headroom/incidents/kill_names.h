// The names of what an OOM kill hit, the second hop of a kill's path: the workload (unit,
// container, pod) of the cgroup it is about and of each victim's cgroup, asked of the name
// resolver, which may wait a moment for a container engine about a container born and killed
// between two samples. The only place a kill waits for names.
#pragma once

#include <chrono>
#include <string_view>

#include "headroom/model/snapshot.h"
#include "headroom/sensors/oom_event.h"
#include "headroom/sources/workload_names.h"

namespace headroom {

// An OOM kill waits at most this long for a container engine's answer about what died.
inline constexpr std::chrono::milliseconds kKillNamesWait{1000};

// `wait`: how long the names may take all together (one deadline for every cgroup asked).
OomWorkloads oomWorkloads(const OomEvent& e, std::string_view cgroup, WorkloadResolver& names,
                          std::chrono::milliseconds wait = std::chrono::milliseconds(0));

}  // namespace headroom
