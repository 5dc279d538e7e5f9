#include "testing/cgroup_sandbox.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "headroom/sources/procfs.h"

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

namespace {

// A v2 child has memory files only when its parent delegates the controller, and a non-root v2
// cgroup that holds processes cannot delegate ("no internal processes", EBUSY): its processes
// (this test's, the runner's) move to a leaf below it first, as systemd does for a delegated
// unit. They stay there; the leaf goes when they have exited.
Status delegateMemory(const FsRoot& fs, const std::string& dir) {
  auto d = fs.openDir(dir);
  if (!d) return d.error();
  auto enabled = [&] {
    auto sc = d->readFile("cgroup.subtree_control");
    if (!sc) return false;
    for (auto c : splitFields(*sc))
      if (c == "memory") return true;
    return false;
  };
  if (enabled()) return ok();
  auto st = d->writeFile("cgroup.subtree_control", "+memory");
  if (st) return ok();
  if (st.error().code != EBUSY) return st.error().wrap(fmt::format("delegating the memory controller below {}", dir));
  std::string leaf = dir + "/" + CgroupSandbox::kLeaf;
  if (::mkdir(leaf.c_str(), 0755) != 0 && errno != EEXIST) return errnoError(fmt::format("mkdir {}", leaf));
  auto ld = fs.openDir(leaf);
  if (!ld) return ld.error();
  for (int round = 0; round < 100; ++round) {
    auto procs = d->readFile("cgroup.procs");
    if (!procs) return procs.error();
    bool moved = false;
    for (auto line : splitLines(*procs)) {
      if (line.empty()) continue;
      moved = true;
      if (auto w = ld->writeFile("cgroup.procs", line); !w && w.error().code != ESRCH)
        return w.error().wrap(fmt::format("moving pid {} from {} into {}", line, dir, leaf));
    }
    if (!moved) break;
  }
  if (auto w = d->writeFile("cgroup.subtree_control", "+memory"); !w)
    return w.error().wrap(
        fmt::format("delegating the memory controller below {} (its processes moved to {})", dir, leaf));
  return ok();
}

}  // namespace

Result<CgroupSandbox> CgroupSandbox::create(std::string_view name) {
  auto fs = FsRoot::open("/");
  if (!fs) return fs.error();
  auto mounts = discoverCgroupMounts(*fs);
  if (!mounts) return mounts.error();
  const CgroupMount* mm = mounts->memoryMount();
  if (mm == nullptr) return sysError(ENOENT, "no memory cgroup controller");
  int version = mounts->memoryVersion();
  auto self = fs->readFile("/proc/self/cgroup");
  if (!self) return self.error();
  auto cg = parseProcCgroup(*self);
  if (!cg) return cg.error();
  auto own = cg->memoryPath(version);
  if (!own) return sysError(ENOENT, "this process is in no memory cgroup");
  CgroupHierarchy h = CgroupHierarchy::create(*fs, version, *mm);
  auto mapped = h.toMountRelative(*own);
  if (!mapped) return mapped.error();
  std::string parent = *mapped;
  if (version == 2) {
    // Our own cgroup, not the leaf an earlier sandbox moved us into.
    if (auto slash = parent.rfind('/'); slash != std::string::npos && parent.substr(slash + 1) == kLeaf)
      parent = normaliseCgroupPath(parent.substr(0, slash));
    if (auto st = delegateMemory(*fs, h.directoryOf(parent)); !st) return st.error();
  }
  std::string path = normaliseCgroupPath(fmt::format("{}/{}-{}", parent, name, ::getpid()));
  std::string dir = h.directoryOf(path);
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return errnoError(fmt::format("mkdir {}", dir));
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
