#include "headroom/incidents/kill_names.h"

#include "headroom/sources/cgroup.h"

namespace headroom {

OomWorkloads oomWorkloads(const OomEvent& e, std::string_view cgroup, WorkloadResolver& names,
                          std::chrono::milliseconds wait) {
  OomWorkloads out;
  const auto deadline = WorkloadResolver::Clock::now() + wait;  // one wait for them all
  if (!cgroup.empty()) out.cgroup = names.resolveBy(cgroup, deadline);
  for (const OomVictim& v : e.victims)
    out.victims.push_back(v.cgroup.empty() ? Workload{} : names.resolveBy(normaliseCgroupPath(v.cgroup), deadline));
  return out;
}

}  // namespace headroom
