#include "testing/cgroup_sandbox.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "headroom/procfs.h"

namespace headroom::testing {

std::optional<std::string> CgroupSandbox::unavailableReason() {
  if (::geteuid() != 0) return "needs root to create memory cgroups";
  auto fs = FsRoot::open("/");
  if (!fs) return fs.error().describe();
  auto mounts = discoverCgroupMounts(*fs);
  if (!mounts) return mounts.error().describe();
  if (mounts->memoryMount() == nullptr) return "no memory cgroup controller mounted";
  return std::nullopt;
}

Result<CgroupSandbox> CgroupSandbox::create(std::string_view name) {
  auto fs = FsRoot::open("/");
  if (!fs) return fs.error();
  auto mounts = discoverCgroupMounts(*fs);
  if (!mounts) return mounts.error();
  const CgroupMount* mm = mounts->memoryMount();
  if (mm == nullptr) return makeError(ENOENT, "no memory cgroup controller");
  int version = mounts->memoryVersion();
  auto self = fs->readFile("/proc/self/cgroup");
  if (!self) return self.error();
  auto cg = parseProcCgroup(*self);
  if (!cg) return cg.error();
  auto own = cg->memoryPath(version);
  if (!own) return makeError(ENOENT, "this process is in no memory cgroup");
  CgroupHierarchy h = CgroupHierarchy::create(*fs, version, *mm);
  auto mapped = h.toMountRelative(*own);
  if (!mapped) return mapped.error();
  std::string parent = *mapped;
  std::string path = normaliseCgroupPath(fmt::format("{}/{}-{}", parent, name, ::getpid()));
  std::string dir = h.directoryOf(path);
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return errnoError(fmt::format("mkdir {}", dir));
  if (version == 2) {
    // A v2 child only has memory files when the parent delegates the controller.
    auto pdir = fs->openDir(h.directoryOf(parent));
    if (pdir) (void)pdir->writeFile("cgroup.subtree_control", "+memory");
  }
  return CgroupSandbox(std::move(*fs), version, *mm, path, dir);
}

CgroupSandbox::CgroupSandbox(CgroupSandbox&& o) noexcept
    : fs_(std::move(o.fs_)),
      version_(o.version_),
      mount_(std::move(o.mount_)),
      path_(std::move(o.path_)),
      dir_(std::move(o.dir_)),
      owned_(o.owned_) {
  o.owned_ = false;
}

CgroupSandbox::~CgroupSandbox() {
  if (!owned_) return;
  // Whatever the test started in here and left running is killed (only pids in our own cgroup).
  for (int attempt = 0; attempt < 200; ++attempt) {
    try {
      auto ps = pids();
      if (ps) {
        for (pid_t p : *ps) ::kill(p, SIGKILL);
      }
    } catch (...) {  // a destructor must not throw; rmdir below still tries
    }
    if (::rmdir(dir_.c_str()) == 0 || errno == ENOENT) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::fprintf(stderr, "cgroup sandbox: could not remove %s: %s\n", dir_.c_str(), std::strerror(errno));
}

Status CgroupSandbox::setLimit(std::uint64_t bytes) const {
  auto d = fs_.openDir(dir_);
  if (!d) return d.error();
  return d->writeFile(version_ == 2 ? "memory.max" : "memory.limit_in_bytes", std::to_string(bytes));
}

Status CgroupSandbox::addProcess(pid_t pid) const {
  auto d = fs_.openDir(dir_);
  if (!d) return d.error();
  return d->writeFile("cgroup.procs", std::to_string(pid));
}

Result<CgroupMemory> CgroupSandbox::read() const {
  auto d = fs_.openDir(dir_);
  if (!d) return d.error();
  return readCgroupMemory(*d, version_, path_);
}

Result<std::vector<pid_t>> CgroupSandbox::pids() const {
  auto d = fs_.openDir(dir_);
  if (!d) return d.error();
  auto text = d->readFile("cgroup.procs");
  if (!text) return text.error();
  std::vector<pid_t> out;
  for (auto line : splitLines(*text)) {
    if (auto v = parseU64(line)) out.push_back(static_cast<pid_t>(*v));
  }
  return out;
}

}  // namespace headroom::testing
