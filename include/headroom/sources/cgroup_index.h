// Memory cgroups by id. A cgroup's id is its directory's inode number, which is what the BPF
// programs see (the cgroup's kn->id) in the cgroup filter and in their events: the agent and
// `headroom run` fill the filter by path, the sensors name an event's cgroup by id.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "headroom/sources/cgroup.h"

namespace headroom {

class CgroupIndex {
 public:
  // The hierarchy outlives the index.
  explicit CgroupIndex(const CgroupHierarchy& h) : h_(&h) {}

  // The id of one cgroup (a path inside the hierarchy), when it exists.
  std::optional<std::uint64_t> idOf(const std::string& path) const;
  // The ids of those that exist, sorted, each once.
  std::vector<std::uint64_t> idsOf(const std::vector<std::string>& paths) const;

  // The path of an id, from a map of the whole hierarchy that is walked again on a miss (at
  // most every 100 ms, and at most 100,000 directories, so a huge tree cannot stall a tick);
  // "cgroup-id:N" for an id it cannot find, "" for 0.
  std::string pathOf(std::uint64_t id);
  // Walks the hierarchy now.
  void rebuild();

 private:
  const CgroupHierarchy* h_;
  std::map<std::uint64_t, std::string> paths_;
  std::int64_t built_ns_ = 0;
};

}  // namespace headroom
