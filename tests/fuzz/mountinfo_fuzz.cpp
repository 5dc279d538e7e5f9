// /proc/self/mountinfo: where the cgroup hierarchies are mounted and which cgroup each shows.
#include "fuzz_support.h"
#include "headroom/sources/cgroup.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace headroom;
  auto m = parseMountinfo(fuzz::text(data, size));
  if (!m) return 0;
  (void)m->mode();
  for (const auto& mount : {m->v1_memory, m->v2}) {
    if (!mount) continue;
    // The mapping the root field gives is what every cgroup path of a process goes through.
    CgroupNsMap map = nsMapFromMountRoot(mount->root);
    fuzz::require(map.ns_root == "/" || map.mount_root == "/", "at most one side of the mapping is not the root");
    (void)mapNsPath(map, "/");
    (void)cgroupDirectory(*mount, "/a");
  }
  return 0;
}
