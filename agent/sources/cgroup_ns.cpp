// Cgroup namespaces: mapping the paths /proc/<pid>/cgroup shows (relative to this process's
// cgroup namespace root, ".." for cgroups outside it) to paths in the mounted hierarchy.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <mutex>

#include "headroom/sources/cgroup.h"
#include "headroom/sources/procfs.h"

namespace headroom {
namespace {

bool climbs(const std::vector<std::string_view>& parts) {
  return std::any_of(parts.begin(), parts.end(), [](std::string_view c) { return c == ".." || c == "."; });
}

template <typename It>
std::string joinComponents(It begin, It end) {
  std::string out;
  for (It it = begin; it != end; ++it) {
    out.push_back('/');
    out.append(*it);
  }
  return out.empty() ? std::string("/") : out;
}

// Depth-first over the mount through held directory fds, looking for the directory whose
// cgroup.procs lists `pid` and whose path ends with the process's own namespace path.
class ProcsWalker {
 public:
  ProcsWalker(const std::vector<std::string_view>& own, pid_t pid, const CgroupNsSearchLimits& limits)
      : own_(own), pid_(pid), limits_(limits) {}

  // `only_depth`: look at (and descend to) that depth only.
  std::optional<std::string> walk(const Dir& root, std::optional<std::size_t> only_depth) {
    only_depth_ = only_depth;
    found_.reset();
    visit(root);
    return found_;
  }
  std::size_t walked() const { return walked_; }
  bool exhausted() const { return exhausted_; }

 private:
  bool endsWithOwn() const {
    if (own_.size() > path_.size()) return false;
    return std::equal(own_.begin(), own_.end(), path_.end() - static_cast<std::ptrdiff_t>(own_.size()));
  }

  void visit(const Dir& dir) {
    if (walked_ >= limits_.max_dirs) {
      exhausted_ = true;
      return;
    }
    ++walked_;
    const std::size_t depth = path_.size();
    if ((!only_depth_ || depth == *only_depth_) && endsWithOwn()) {
      auto procs = dir.readFile("cgroup.procs");
      if (procs && cgroupProcsLists(*procs, pid_)) {
        found_ = joinComponents(path_.begin(), path_.end());
        return;
      }
    }
    if (depth >= limits_.max_depth || (only_depth_ && depth >= *only_depth_)) return;
    auto names = dir.list(true);
    if (!names) return;  // removed meanwhile, or unreadable: nothing below to find
    std::sort(names->begin(), names->end());
    for (const std::string& name : *names) {
      auto sub = dir.openSubdir(name);
      if (!sub) continue;
      path_.push_back(name);
      visit(*sub);
      path_.pop_back();
      if (found_ || exhausted_) return;
    }
  }

  const std::vector<std::string_view>& own_;
  pid_t pid_;
  CgroupNsSearchLimits limits_;
  std::optional<std::size_t> only_depth_;
  std::vector<std::string> path_;
  std::optional<std::string> found_;
  std::size_t walked_ = 0;
  bool exhausted_ = false;
};

}  // namespace

JoinedCgroupPath joinCgroupPath(std::string_view base, std::string_view rel) {
  JoinedCgroupPath out;
  std::vector<std::string_view> parts;
  for (std::string_view path : {base, rel}) {
    for (std::string_view c : cgroupPathComponents(path)) {
      if (c == ".") continue;
      if (c != "..") {
        parts.push_back(c);
      } else if (parts.empty()) {
        out.clamped = true;
      } else {
        parts.pop_back();
      }
    }
  }
  out.path = joinComponents(parts.begin(), parts.end());
  return out;
}

CgroupNsMap nsMapFromMountRoot(std::string_view mount_root) {
  auto parts = cgroupPathComponents(mount_root);
  if (climbs(parts)) return {};
  return CgroupNsMap{"/", joinComponents(parts.begin(), parts.end())};
}

std::optional<CgroupNsMap> nsMapFromAnchor(std::string_view own_ns_path, std::string_view own_mount_path) {
  auto ns = cgroupPathComponents(own_ns_path);
  auto in_mount = cgroupPathComponents(own_mount_path);
  if (climbs(ns) || climbs(in_mount)) return std::nullopt;
  if (ns.size() <= in_mount.size() && std::equal(ns.rbegin(), ns.rend(), in_mount.rbegin())) {
    auto cut = in_mount.begin() + static_cast<std::ptrdiff_t>(in_mount.size() - ns.size());
    return CgroupNsMap{joinComponents(in_mount.begin(), cut), "/"};
  }
  if (in_mount.size() < ns.size() && std::equal(in_mount.rbegin(), in_mount.rend(), ns.rbegin())) {
    auto cut = ns.begin() + static_cast<std::ptrdiff_t>(ns.size() - in_mount.size());
    return CgroupNsMap{"/", joinComponents(ns.begin(), cut)};
  }
  return std::nullopt;
}

std::optional<std::string> mapNsPath(const CgroupNsMap& map, std::string_view proc_path) {
  JoinedCgroupPath j = joinCgroupPath(map.ns_root, proc_path);
  // Above the mount's root: the kernel never names a cgroup above a hierarchy's real root, so
  // this is a cgroup the mount does not show, not one to guess at by clamping.
  if (j.clamped) return std::nullopt;
  if (map.mount_root == "/") return std::move(j.path);
  if (!cgroupIsWithin(j.path, map.mount_root)) return std::nullopt;
  std::string rest = j.path.substr(map.mount_root.size());
  return rest.empty() ? std::string("/") : rest;
}

std::vector<pid_t> cgroupProcsPids(std::string_view text) {
  std::vector<pid_t> pids;
  for (std::string_view line : splitLines(text)) {
    auto p = parseU64(trim(line));
    if (p && *p > 0 && *p <= static_cast<std::uint64_t>(std::numeric_limits<pid_t>::max()))
      pids.push_back(static_cast<pid_t>(*p));
  }
  return pids;
}

bool cgroupProcsLists(std::string_view text, pid_t pid) {
  for (std::string_view line : splitLines(text)) {
    auto p = parseU64(trim(line));
    if (p && *p == static_cast<std::uint64_t>(pid)) return true;
  }
  return false;
}

Result<CgroupNsLocation> locateCgroupNamespace(const FsRoot& fs, int version, const CgroupMount& mount, pid_t self_pid,
                                               const CgroupNsSearchLimits& limits) {
  CgroupNsMap from_mountinfo = nsMapFromMountRoot(mount.root);
  // Without the means to check, mountinfo's word stands, unless its root climbs: then a namespace
  // is certain and mountinfo cannot say where it lies.
  auto unchecked = [&](ErrorKind kind, const std::string& why) -> Result<CgroupNsLocation> {
    if (climbs(cgroupPathComponents(mount.root))) {
      return makeError(kind, fmt::format("{}, and mountinfo's root field \"{}\" says the mount shows more than this "
                                         "process's cgroup namespace",
                                         why, mount.root));
    }
    return CgroupNsLocation{from_mountinfo, CgroupNsSource::kUnchecked, 0, why};
  };
  if (self_pid <= 0)
    return unchecked(ErrorKind::kNotFound, fmt::format("this process's pid is unknown ({})", fs.display("/proc/self")));
  auto text = fs.readFile("/proc/self/cgroup");
  if (!text) return unchecked(text.error().kind, text.error().describe());
  auto cg = parseProcCgroup(*text);
  if (!cg)
    return unchecked(ErrorKind::kBadData,
                     cg.error().wrap(fmt::format("parsing {}", fs.display("/proc/self/cgroup"))).describe());
  auto own = cg->memoryPath(version);
  if (!own)
    return unchecked(ErrorKind::kNotFound,
                     fmt::format("{} names no v{} memory cgroup", fs.display("/proc/self/cgroup"), version));
  auto own_parts = cgroupPathComponents(*own);
  if (climbs(own_parts))
    return notFound(
        fmt::format("this process's own cgroup {} lies outside its cgroup namespace (moved after "
                    "the namespace was made): nothing anchors the namespace's root",
                    *own));

  // The mapping mountinfo gives, checked: a plain host stops here.
  if (auto d = mapNsPath(from_mountinfo, *own)) {
    if (auto dir = fs.openDir(cgroupDirectory(mount, *d))) {
      auto procs = dir->readFile("cgroup.procs");
      if (procs && cgroupProcsLists(*procs, self_pid))
        return CgroupNsLocation{from_mountinfo, CgroupNsSource::kMountinfo, 0, {}};
      // Every real cgroup directory has one: this is a capture of the memory files only.
      if (!procs && procs.error().code == ENOENT) return unchecked(ErrorKind::kNotFound, procs.error().describe());
    }
  }

  auto root = fs.openDir(mount.mount_point);
  if (!root) return root.error();
  ProcsWalker walker(own_parts, self_pid, limits);
  std::optional<std::string> found;
  // A mount root of k ".." (the host's tree seen from inside a namespace) puts the namespace's
  // root k levels down: look there first.
  auto root_parts = cgroupPathComponents(mount.root);
  bool only_ups = !root_parts.empty() &&
                  std::all_of(root_parts.begin(), root_parts.end(), [](std::string_view c) { return c == ".."; });
  if (only_ups) found = walker.walk(*root, root_parts.size() + own_parts.size());
  if (!found && !walker.exhausted()) found = walker.walk(*root, std::nullopt);
  if (!found) {
    return notFound(
        fmt::format("no cgroup.procs in the v{} hierarchy at {} lists this process (pid {}, in "
                    "cgroup {} of its namespace) after walking {} directories{}",
                    version, fs.display(mount.mount_point), self_pid, *own, walker.walked(),
                    walker.exhausted() ? " (the limit)" : ""));
  }
  auto map = nsMapFromAnchor(*own, *found);
  if (!map)
    return notFound(
        fmt::format("pid {} is listed in {}, which cannot be cgroup {} of its namespace", self_pid, *found, *own));
  return CgroupNsLocation{std::move(*map), CgroupNsSource::kSearch, walker.walked(), {}};
}

// --- CgroupHierarchy's namespace mapping ---

struct CgroupHierarchy::NsState {
  enum class Phase { kUnchecked, kLocated, kNotFound };

  std::mutex mu;
  CgroupNsMap map;
  Phase phase = Phase::kUnchecked;
  std::string description;
  std::string warning;
  std::chrono::steady_clock::time_point last_try{};
};

CgroupHierarchy::CgroupHierarchy(const FsRoot& fs, int version, CgroupMount mount)
    : fs_(&fs), version_(version), mount_(std::move(mount)), ns_(std::make_shared<NsState>()) {
  ns_->map = nsMapFromMountRoot(mount_.root);
  ns_->description = fmt::format("paths mapped by mountinfo's root field \"{}\" alone", mount_.root);
}

CgroupHierarchy CgroupHierarchy::create(const FsRoot& fs, int version, CgroupMount mount) {
  CgroupHierarchy h(fs, version, std::move(mount));
  h.locate();
  return h;
}

void CgroupHierarchy::locate() const {
  {
    std::lock_guard lock(ns_->mu);
    ns_->last_try = std::chrono::steady_clock::now();
  }
  // The walk runs unlocked: a second caller meanwhile reads the old mapping, or walks too.
  auto loc = locateCgroupNamespace(*fs_, version_, mount_, selfPid(*fs_));
  std::lock_guard lock(ns_->mu);
  if (!loc) {
    ns_->map = nsMapFromMountRoot(mount_.root);
    ns_->phase = NsState::Phase::kNotFound;
    ns_->warning = fmt::format(
        "cgroup namespace root not located, so cgroup paths are mapped by mountinfo's root "
        "field \"{}\" alone (wrong for processes in other cgroup namespaces): {}",
        mount_.root, loc.error().describe());
    ns_->description = fmt::format(
        "this process's cgroup namespace root was not located in it; paths mapped by mountinfo's root "
        "field \"{}\" alone",
        mount_.root);
    return;
  }
  const CgroupNsMap& m = loc->map;
  std::string how;
  switch (loc->source) {
    case CgroupNsSource::kMountinfo: how = "from mountinfo, confirmed"; break;
    case CgroupNsSource::kSearch: how = fmt::format("found by walking {} directories", loc->dirs_walked); break;
    case CgroupNsSource::kUnchecked: how = fmt::format("from mountinfo, unchecked: {}", loc->unchecked_why); break;
  }
  if (m.ns_root != "/") {
    ns_->description = fmt::format("this process's cgroup namespace root is its {}, {}", m.ns_root, how);
  } else if (m.mount_root != "/") {
    ns_->description =
        fmt::format("it shows cgroup {} of this process's cgroup namespace and below, {}", m.mount_root, how);
  } else {
    ns_->description = fmt::format("its root is this process's cgroup namespace root, {}", how);
  }
  ns_->map = m;
  ns_->phase = NsState::Phase::kLocated;
  ns_->warning.clear();
}

CgroupNsMap CgroupHierarchy::nsMap() const {
  std::lock_guard lock(ns_->mu);
  return ns_->map;
}

std::string CgroupHierarchy::nsDescription() const {
  std::lock_guard lock(ns_->mu);
  return ns_->description;
}

std::optional<std::string> CgroupHierarchy::nsWarning() const {
  std::lock_guard lock(ns_->mu);
  if (ns_->phase != NsState::Phase::kNotFound) return std::nullopt;
  return ns_->warning;
}

bool CgroupHierarchy::retryLocate(std::chrono::steady_clock::duration min_interval) const {
  {
    std::lock_guard lock(ns_->mu);
    if (ns_->phase != NsState::Phase::kNotFound) return ns_->phase == NsState::Phase::kLocated;
    if (std::chrono::steady_clock::now() - ns_->last_try < min_interval) return false;
  }
  locate();
  std::lock_guard lock(ns_->mu);
  return ns_->phase == NsState::Phase::kLocated;
}

Result<std::string> CgroupHierarchy::toMountRelative(std::string_view proc_path) const {
  auto p = mapNsPath(nsMap(), proc_path);
  if (!p) {
    return notFound(fmt::format("cgroup {} lies outside what the v{} hierarchy mounted at {} shows; {}", proc_path,
                                version_, fs_->display(mount_.mount_point), nsDescription()));
  }
  return std::move(*p);
}

}  // namespace headroom
