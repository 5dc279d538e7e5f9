// /proc/<pid>/cgroup ("ID:CONTROLLERS:PATH" lines, v1 and v2): the memory cgroup's path, normalised,
// and the workload identity read from it.
#include "fuzz_support.h"
#include "headroom/sources/cgroup.h"
#include "headroom/sources/workload.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace headroom;
  auto cg = parseProcCgroup(fuzz::text(data, size));
  if (!cg) return 0;
  for (const auto& p : {cg->v1_memory, cg->v2}) {
    if (!p) continue;
    fuzz::require(!p->empty() && p->front() == '/', "a cgroup path is absolute");
    fuzz::require(normaliseCgroupPath(*p) == *p, "a cgroup path comes normalised");
    auto parent = parentCgroup(*p);
    fuzz::require(parent.has_value() == (*p != "/"), "every cgroup but the root has a parent");
    if (parent) fuzz::require(cgroupIsWithin(*p, *parent), "a cgroup is within its parent");
    // Inside a cgroup namespace the path is mapped into the mount before anything is opened.
    auto joined = joinCgroupPath("/", *p);
    fuzz::require(!joined.path.empty() && joined.path.front() == '/', "a joined path is absolute");
    (void)mapNsPath(nsMapFromMountRoot(*p), *p);
    const WorkloadIdentity w = identifyCgroup(*p);
    fuzz::require(w.container_id.empty() || w.container_id.size() == 64, "a container id is 64 hex digits");
    fuzz::require(w.pod_uid.empty() || w.pod_uid.size() == 36, "a pod UID is 36 characters");
    fuzz::require(w.qos.empty() || !w.pod_uid.empty(), "a QoS class comes with a pod");
    fuzz::require(w.unit.empty() || p->find(w.unit) != std::string::npos, "the unit is a component of the path");
  }
  return 0;
}
