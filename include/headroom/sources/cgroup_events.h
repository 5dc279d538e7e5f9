// The kernel's notifications that a memory cgroup nears or hits its limit, where it offers them:
// v1 a usage threshold and memory pressure (cgroup.event_control with an eventfd on
// memory.usage_in_bytes and memory.pressure_level), v2 every change of memory.events (inotify:
// the kernel notifies the file on each high, max, oom and oom_kill event) and a PSI trigger on
// memory.pressure. One descriptor to wait on; which cgroups spoke, after.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "headroom/sources/cgroup.h"
#include "headroom/sources/fs_root.h"
#include "headroom/util/result.h"

namespace headroom {

class CgroupEvents {
 public:
  // Error: no epoll or inotify instance could be made (the caller polls instead).
  static Result<CgroupEvents> create();
  CgroupEvents(CgroupEvents&&) noexcept = default;
  CgroupEvents& operator=(CgroupEvents&&) noexcept = default;
  CgroupEvents(const CgroupEvents&) = delete;
  CgroupEvents& operator=(const CgroupEvents&) = delete;
  ~CgroupEvents() = default;

  // Readable (EPOLLIN) when some watched cgroup spoke.
  int fd() const { return epoll_.get(); }

  // Watches the cgroup at `path` of `h`. v1: an eventfd on the usage crossing `threshold` bytes
  // (either way; armed anew when the threshold changes) and one on memory pressure "medium";
  // v2: memory.events and a PSI trigger (some 200 ms in 2 s, which unprivileged writers may set
  // on every kernel that has them). What the kernel refuses is left out (none of them: an error).
  Status watch(const CgroupHierarchy& h, const std::string& path, std::uint64_t threshold);
  // Stops watching every cgroup not in `paths`.
  void keepOnly(const std::set<std::string>& paths);

  // The cgroups that spoke since the last call (each once), their notifications drained.
  std::vector<std::string> take();

  std::size_t watched() const { return watches_.size(); }

 private:
  CgroupEvents(Fd epoll, Fd inotify) : epoll_(std::move(epoll)), inotify_(std::move(inotify)) {}
  struct Watch {
    std::uint64_t threshold = 0;
    std::vector<Fd> fds;  // eventfds (v1), the PSI trigger (v2)
    int inotify_wd = -1;  // v2 memory.events
    std::vector<std::string> has;
  };
  Status add(int fd, std::uint32_t events, const std::string& path);
  void drop(Watch& w);

  Fd epoll_;
  Fd inotify_;
  std::map<std::string, Watch> watches_;
  std::map<int, std::string> by_fd_;  // eventfds and triggers -> cgroup
  std::map<int, std::string> by_wd_;  // inotify watches -> cgroup
};

}  // namespace headroom
