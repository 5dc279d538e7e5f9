// cgroup v1 and v2 memory sources: where the hierarchies are mounted, which cgroup a process
// is in, and one cgroup's memory files read together through a held directory fd.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/sources/fs_root.h"
#include "headroom/sources/parse.h"
#include "headroom/util/result.h"

namespace headroom {

enum class CgroupMode {
  kNone,    // no memory controller found
  kV1,      // only v1 hierarchies mounted
  kV2,      // unified hierarchy only
  kHybrid,  // both mounted; the memory controller lives on one of them
};
const char* toString(CgroupMode m);

// A mounted hierarchy: where it is mounted, and which cgroup its root shows (a container with
// a cgroup namespace or a bind mount sees a subtree; that root is "/" on a plain host).
struct CgroupMount {
  std::string mount_point;  // "/sys/fs/cgroup/memory"
  std::string root = "/";   // mountinfo's root field
};

struct CgroupMounts {
  std::optional<CgroupMount> v1_memory;
  std::optional<CgroupMount> v2;
  bool v2_has_memory = false;  // the v2 root's cgroup.controllers lists "memory"

  CgroupMode mode() const;
  // The version that carries the memory controller: 1, 2, or 0 when there is none.
  int memoryVersion() const;
  const CgroupMount* memoryMount() const;
};

// Parses /proc/<pid>/mountinfo; v2_has_memory is left false (it needs a file read).
Result<CgroupMounts> parseMountinfo(std::string_view text);
// Reads /proc/self/mountinfo and the v2 root's cgroup.controllers under `fs`.
Result<CgroupMounts> discoverCgroupMounts(const FsRoot& fs);

// The memory cgroup of a process, from /proc/<pid>/cgroup.
struct ProcCgroups {
  std::optional<std::string> v1_memory;  // path in the v1 memory hierarchy
  std::optional<std::string> v2;         // path in the unified hierarchy ("0::/path")
  // The path in the hierarchy that carries memory (1 or 2), if the process has one.
  std::optional<std::string> memoryPath(int version) const;
};
Result<ProcCgroups> parseProcCgroup(std::string_view text);

// Normalises a cgroup path: leading '/', no trailing '/', no empty components. ".." is kept: inside
// a cgroup namespace it climbs from the namespace's root, which only the mapping below resolves.
std::string normaliseCgroupPath(std::string_view path);
// The non-empty components of a cgroup path, "." and ".." included ("//a/../b/" -> a, .., b).
std::vector<std::string_view> cgroupPathComponents(std::string_view path);
// The directory of a cgroup (a normalised path relative to the mount's root) under the mount.
std::string cgroupDirectory(const CgroupMount& mount, std::string_view path);
// "/a/b" -> "/a"; "/" -> nullopt.
std::optional<std::string> parentCgroup(std::string_view path);
// True when `path` is `ancestor` or below it.
bool cgroupIsWithin(std::string_view path, std::string_view ancestor);

// --- Cgroup namespaces ---
// Inside a cgroup namespace, /proc/<pid>/cgroup and mountinfo's root field name cgroups from the
// namespace's root, climbing with ".." to those outside it ("0::/../pod-b/x.scope"). The mounted
// hierarchy may show more than the namespace (a hostPath mount of the host's tree) or less (the
// namespace's own mount), so such paths are mapped before anything is opened.

// `rel` joined onto `base` with "." and ".." resolved lexically. ".." never climbs above "/":
// `clamped` says one tried to.
struct JoinedCgroupPath {
  std::string path;
  bool clamped = false;
};
JoinedCgroupPath joinCgroupPath(std::string_view base, std::string_view rel);

// How a namespace path P becomes a path in the mount: joinCgroupPath(ns_root, P), then made
// relative to mount_root. At most one of the two is not "/"; neither holds "..".
struct CgroupNsMap {
  std::string ns_root = "/";     // the namespace's root, as a path in the mount
  std::string mount_root = "/";  // the mount's root, as a path from the namespace's root
  bool operator==(const CgroupNsMap&) const = default;
};
// The mapping mountinfo's root field alone gives (a namespace path of the mount's root). Right
// outside namespaces and for the namespace's own mount; a root that climbs ("/../..", a mount of
// more than the namespace) says nothing about where the namespace's root lies, and gives identity.
CgroupNsMap nsMapFromMountRoot(std::string_view mount_root);
// The mapping that puts this process's own cgroup, `own_ns_path` as /proc/self/cgroup shows it,
// at `own_mount_path` in the mount; nullopt when one is not a suffix of the other, or the own path
// climbs (the process was moved out of its namespace's subtree: nothing anchors the root then).
std::optional<CgroupNsMap> nsMapFromAnchor(std::string_view own_ns_path, std::string_view own_mount_path);
// The path in the mount of namespace path `proc_path`; nullopt when it lies outside what the mount
// shows (above its root, or beside it).
std::optional<std::string> mapNsPath(const CgroupNsMap& map, std::string_view proc_path);
// Whether a cgroup.procs text lists `pid` (one decimal pid a line).
bool cgroupProcsLists(std::string_view text, pid_t pid);
// The pids a cgroup.procs text lists, in its order; a line that is no pid (a truncated read's
// last) is passed over.
std::vector<pid_t> cgroupProcsPids(std::string_view text);

struct CgroupNsSearchLimits {
  std::size_t max_dirs = 100000;  // directories walked, all passes together
  std::size_t max_depth = 64;
};
enum class CgroupNsSource {
  kMountinfo,  // mountinfo's root field, confirmed: our own cgroup's directory lists our pid
  kSearch,     // a walk of the mount found the directory that lists our pid
  kUnchecked,  // mountinfo's root field, which nothing contradicts but nothing could confirm
};
struct CgroupNsLocation {
  CgroupNsMap map;
  CgroupNsSource source = CgroupNsSource::kMountinfo;
  std::size_t dirs_walked = 0;
  std::string unchecked_why;  // kUnchecked: what was missing (no pid, no cgroup.procs in a capture)
};
// Finds where this process's cgroup namespace root lies in the mounted hierarchy. First the
// mapping mountinfo gives, checked with one read of our own cgroup's cgroup.procs (all a plain host
// costs); else a bounded walk of the mount for the directory whose cgroup.procs lists our pid (as
// `self_pid`, in the pid namespace that reads cgroup.procs) - only at the depth mountinfo's root
// implies first, then anywhere. Fails, saying why, when no directory lists it, or when the check
// cannot be made although mountinfo's root climbs (a namespace is certain then).
Result<CgroupNsLocation> locateCgroupNamespace(const FsRoot& fs, int version, const CgroupMount& mount, pid_t self_pid,
                                               const CgroupNsSearchLimits& limits = {});

// One cgroup's memory files, read at one moment.
struct CgroupMemory {
  int version = 0;   // 1 or 2
  std::string path;  // path inside the hierarchy, "/" for its root

  std::optional<std::uint64_t> limit;  // own hard limit; nullopt = unlimited (max)
  std::uint64_t usage = 0;             // memory.current / memory.usage_in_bytes (hierarchical)
  // The v2 root has no memory.current (nor memory.max): its usage is the sum of its memory.stat
  // (anon, file, kernel, sock, zswap), which holds the whole machine's pages.
  bool usage_from_stat = false;
  std::optional<std::uint64_t> peak;          // memory.peak / memory.max_usage_in_bytes
  std::optional<std::uint64_t> high;          // v2 memory.high (nullopt: max or absent)
  std::optional<std::uint64_t> swap_current;  // v2 memory.swap.current

  // v1 only
  std::optional<std::uint64_t> hierarchical_limit;  // memory.stat hierarchical_memory_limit
  std::optional<std::uint64_t> kmem_usage;          // memory.kmem.usage_in_bytes
  std::optional<std::uint64_t> failcnt;             // memory.failcnt
  bool under_oom = false;                           // memory.oom_control under_oom
  StatMap oom_control;                              // all of memory.oom_control

  StatMap stat;                 // memory.stat, every key (v1: local and total_*)
  StatMap events;               // v2 memory.events (hierarchical)
  StatMap events_local;         // v2 memory.events.local
  StatMap swap_events;          // v2 memory.swap.events (max, fail; high where the kernel has it)
  std::optional<Psi> pressure;  // v2 memory.pressure

  // Read straight from the kernel's counters: OOMs (limit hits) and OOM kills.
  std::optional<std::uint64_t> oom_events;  // v2 memory.events oom
  std::optional<std::uint64_t> oom_kills;   // v2 memory.events oom_kill, v1 oom_control oom_kill

  // Optional files that were present but unreadable or malformed; never silently dropped.
  std::vector<std::string> warnings;

  // A light read (readCgroupMemoryLight): the usage, the limit and the OOM counters read now,
  // the rest as the last whole read found it.
  bool light = false;

  // The limit in force counting ancestors, where the kernel says it (v1); v2 callers walk up.
  std::optional<std::uint64_t> effectiveLimitHint() const;
};

// The v2 root's usage from its memory.stat: anon + file + kernel (or, before 5.18, its listed
// parts) + sock + zswap.
std::uint64_t v2RootUsage(const StatMap& stat);

// Reads the memory files of the cgroup held open as `dir`. Errors when the files that every
// memory cgroup has (usage, limit on a non-root cgroup, memory.stat) are missing or garbage.
Result<CgroupMemory> readCgroupMemory(const Dir& dir, int version, const std::string& path);
// The same through `read` (a file of the cgroup by name: its text, or why not, ENOENT for a file
// that is not there); `dir_path` names the directory in messages.
using CgroupFileReader = std::function<Result<std::string>(const char* name)>;
Result<CgroupMemory> readCgroupMemory(const CgroupFileReader& read, std::string_view dir_path, int version,
                                      const std::string& path);
// A cgroup read lightly, from its last whole read: the usage, the limit and the OOM counters
// again (v1 memory.usage_in_bytes, memory.limit_in_bytes and memory.oom_control; v2
// memory.current, memory.max and memory.events), the rest (memory.stat, the peak, the pressure,
// ...) as `last` has them, `light` set. A v2 root, whose usage is its memory.stat's sum, is read
// whole.
Result<CgroupMemory> readCgroupMemoryLight(const CgroupFileReader& read, std::string_view dir_path,
                                           const CgroupMemory& last);

// Pure parts of the reader, exposed for tests: one file's text applied to a CgroupMemory.
namespace detail {
Status applyCgroupFile(CgroupMemory& cg, std::string_view file, std::string_view text);
}

// The memory hierarchy: opens cgroups by their path, and maps the paths processes show into it.
class CgroupHierarchy {
 public:
  // Maps paths with mountinfo's root field alone (no I/O); create() also locates the namespace.
  CgroupHierarchy(const FsRoot& fs, int version, CgroupMount mount);
  // Locates this process's cgroup namespace root in the mount (locateCgroupNamespace). When that
  // fails the mountinfo mapping stays, nsWarning() says why, and retryLocate() tries again.
  static CgroupHierarchy create(const FsRoot& fs, int version, CgroupMount mount);

  int version() const { return version_; }
  const CgroupMount& mount() const { return mount_; }

  // The mapping in force (copies share it: a retry that succeeds serves them all).
  CgroupNsMap nsMap() const;
  // What the mount shows, and how that was found: "this process's cgroup namespace root is its
  // /a/b, found by walking 12 directories".
  std::string nsDescription() const;
  // Set while a create()d hierarchy has failed to locate its namespace root.
  std::optional<std::string> nsWarning() const;
  // Locates again after a failure, at most once per `min_interval`; true when now located.
  bool retryLocate(std::chrono::steady_clock::duration min_interval) const;

  // A path as /proc/<pid>/cgroup shows it, as a path in this mount; an error names a path
  // outside what the mount shows.
  Result<std::string> toMountRelative(std::string_view proc_path) const;
  // The directory of a cgroup (path relative to the mount's root).
  std::string directoryOf(std::string_view path) const;
  // Refuses a path with ".." (it would leave the hierarchy through the directory tree).
  Result<Dir> open(std::string_view path) const;
  Result<CgroupMemory> read(std::string_view path) const;

 private:
  struct NsState;
  void locate() const;

  const FsRoot* fs_;
  int version_;
  CgroupMount mount_;
  std::shared_ptr<NsState> ns_;
};

// The caller's own memory cgroup (from /proc/self/cgroup), relative to the hierarchy's mount.
Result<std::string> callersMemoryCgroup(const FsRoot& fs, const CgroupHierarchy& h);

}  // namespace headroom
