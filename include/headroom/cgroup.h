// cgroup v1 and v2 memory sources: where the hierarchies are mounted, which cgroup a process
// is in, and one cgroup's memory files read together through a held directory fd.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/fs_root.h"
#include "headroom/parse.h"
#include "headroom/result.h"

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

// Normalises a cgroup path: leading '/', no trailing '/', no empty components.
std::string normaliseCgroupPath(std::string_view path);
// "/a/b" -> "/a"; "/" -> nullopt.
std::optional<std::string> parentCgroup(std::string_view path);
// True when `path` is `ancestor` or below it.
bool cgroupIsWithin(std::string_view path, std::string_view ancestor);

// One cgroup's memory files, read at one moment.
struct CgroupMemory {
  int version = 0;   // 1 or 2
  std::string path;  // path inside the hierarchy, "/" for its root

  std::optional<std::uint64_t> limit;  // own hard limit; nullopt = unlimited (max)
  std::uint64_t usage = 0;             // memory.current / memory.usage_in_bytes (hierarchical)
  std::optional<std::uint64_t> peak;   // memory.peak / memory.max_usage_in_bytes
  std::optional<std::uint64_t> high;  // v2 memory.high (nullopt: max or absent)
  std::optional<std::uint64_t> swap_current;  // v2 memory.swap.current

  // v1 only
  std::optional<std::uint64_t> hierarchical_limit;  // memory.stat hierarchical_memory_limit
  std::optional<std::uint64_t> kmem_usage;          // memory.kmem.usage_in_bytes
  std::optional<std::uint64_t> failcnt;             // memory.failcnt
  bool under_oom = false;                           // memory.oom_control under_oom
  StatMap oom_control;                              // all of memory.oom_control

  StatMap stat;          // memory.stat, every key (v1: local and total_*)
  StatMap events;        // v2 memory.events (hierarchical)
  StatMap events_local;  // v2 memory.events.local
  std::optional<Psi> pressure;  // v2 memory.pressure

  // Read straight from the kernel's counters: OOMs (limit hits) and OOM kills.
  std::optional<std::uint64_t> oom_events;  // v2 memory.events oom
  std::optional<std::uint64_t> oom_kills;   // v2 memory.events oom_kill, v1 oom_control oom_kill

  // Optional files that were present but unreadable or malformed; never silently dropped.
  std::vector<std::string> warnings;

  // The limit in force counting ancestors, where the kernel says it (v1); v2 callers walk up.
  std::optional<std::uint64_t> effectiveLimitHint() const;
};

// Reads the memory files of the cgroup held open as `dir`. Errors when the files that every
// memory cgroup has (usage, limit on a non-root cgroup, memory.stat) are missing or garbage.
Result<CgroupMemory> readCgroupMemory(const Dir& dir, int version, const std::string& path);

// Pure parts of the reader, exposed for tests: one file's text applied to a CgroupMemory.
namespace detail {
Status applyCgroupFile(CgroupMemory& cg, std::string_view file, std::string_view text);
}

// The memory hierarchy: opens cgroups by their path.
class CgroupHierarchy {
 public:
  CgroupHierarchy(const FsRoot& fs, int version, CgroupMount mount)
      : fs_(&fs), version_(version), mount_(std::move(mount)) {}

  int version() const { return version_; }
  const CgroupMount& mount() const { return mount_; }

  // A path as /proc/<pid>/cgroup shows it, made relative to what this mount shows.
  std::string toMountRelative(std::string_view proc_path) const;
  // The directory of a cgroup (path relative to the mount's root).
  std::string directoryOf(std::string_view path) const;
  Result<Dir> open(std::string_view path) const;
  Result<CgroupMemory> read(std::string_view path) const;

 private:
  const FsRoot* fs_;
  int version_;
  CgroupMount mount_;
};

// The caller's own memory cgroup (from /proc/self/cgroup), relative to the hierarchy's mount.
Result<std::string> callersMemoryCgroup(const FsRoot& fs, const CgroupHierarchy& h);

}  // namespace headroom
