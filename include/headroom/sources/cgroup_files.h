// The memory files of the cgroups a sampler reads every sample, held open from one sample to the
// next and read again from offset 0 (the kernel writes a cgroup file's text anew for each read
// from the start): no path walk, open or close per file per sample.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "headroom/sources/cgroup.h"
#include "headroom/sources/fs_root.h"
#include "headroom/util/result.h"

namespace headroom {

class CgroupFileCache {
 public:
  // At most `max_fds` descriptors held (a directory and its files each count), and never more
  // than a quarter of RLIMIT_NOFILE as it is when a file is first held (the agent raises its
  // limit after it starts); the cgroups past it are read the plain way, each file opened and
  // closed.
  explicit CgroupFileCache(std::size_t max_fds = kDefaultMaxFds);

  // The cgroup's memory files, as CgroupHierarchy::read reads them. A cgroup removed (its held
  // files answer ENODEV) or recreated under the same path is opened anew, and so read as it
  // is now: missing, or the new one.
  // `light`: the usage, the limit and the OOM counters alone read again, the rest from the last
  // whole read of its held files (readCgroupMemoryLight); read whole where there is none.
  Result<CgroupMemory> read(const CgroupHierarchy& h, std::string_view path, bool light = false);
  // Closes the files of the cgroups not read since the last call: call once a sample.
  void sweep();

  std::size_t heldFds() const { return held_fds_; }
  std::size_t cgroups() const { return entries_.size(); }

  // 512 v1 or 409 v2 cgroups held (eight and ten descriptors each), where the limit allows:
  // under the usual soft RLIMIT_NOFILE of 1024, 32 and 25.
  static constexpr std::size_t kDefaultMaxFds = 4096;

 private:
  struct Entry {
    Dir dir;
    std::map<std::string, Fd, std::less<>> files;  // opened on first read; an absent one as -1
    bool used = true;
    std::optional<CgroupMemory> whole;  // the last whole read, for the light ones after it
  };
  using Entries = std::map<std::string, Entry, std::less<>>;
  Result<std::string> readHeld(Entry& e, const char* name, bool& gone);
  void forget(Entries::iterator it);
  bool full() const;  // no descriptor more may be held

  std::size_t max_fds_;
  std::size_t held_fds_ = 0;
  Entries entries_;
};

}  // namespace headroom
