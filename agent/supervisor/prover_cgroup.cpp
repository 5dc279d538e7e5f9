#include "headroom/supervisor/prover_cgroup.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

namespace headroom {
namespace {

// The prover's last processes may take a moment to leave after they died.
constexpr int kRemoveTries = 50;
constexpr auto kRemoveWait = std::chrono::milliseconds(100);

}  // namespace

Result<ProverCgroup> ProverCgroup::open(const FsRoot& fs, const CgroupHierarchy& h, const std::string& wanted) {
  auto own = callersMemoryCgroup(fs, h);
  if (!own) return own.error().wrap("finding headroom run's own memory cgroup");
  std::string path = wanted.empty() ? *own : normaliseCgroupPath(wanted);
  std::string dir = fs.display(h.directoryOf(path));
  if (h.open(path)) return ProverCgroup(path, dir, path != *own, false);
  auto parent = parentCgroup(path);
  if (!parent || !h.open(*parent))
    return badInput(fmt::format("--cgroup {}: neither it nor its parent exists in the v{} memory hierarchy at {}", path,
                                h.version(), fs.display(h.mount().mount_point)));
  if (::mkdir(dir.c_str(), 0755) != 0) return errnoError(fmt::format("--cgroup {}: making {}", path, dir));
  return ProverCgroup(path, dir, path != *own, true);
}

ProverCgroup::ProverCgroup(ProverCgroup&& o) noexcept
    : path_(std::move(o.path_)),
      dir_(std::move(o.dir_)),
      elsewhere_(o.elsewhere_),
      made_(std::exchange(o.made_, false)) {}

ProverCgroup::~ProverCgroup() {
  if (!made_) return;
  for (int i = 0; i < kRemoveTries && ::rmdir(dir_.c_str()) != 0 && errno == EBUSY; ++i)
    std::this_thread::sleep_for(kRemoveWait);
}

}  // namespace headroom
