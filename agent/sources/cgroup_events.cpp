// The kernel's notifications of memory cgroups nearing their limits. See sources/cgroup_events.h.
#include "headroom/sources/cgroup_events.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <array>
#include <cstring>

#include "headroom/util/units.h"

namespace headroom {
namespace {

// Opens `name` in the held directory (O_CLOEXEC).
Fd openIn(const Dir& dir, const char* name, int flags) { return Fd(::openat(dir.fd(), name, flags | O_CLOEXEC)); }

}  // namespace

Result<CgroupEvents> CgroupEvents::create() {
  Fd ep(::epoll_create1(EPOLL_CLOEXEC));
  if (!ep.valid()) return errnoError("epoll_create1");
  Fd in(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!in.valid()) return errnoError("inotify_init1");
  CgroupEvents ev(std::move(ep), std::move(in));
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.fd = ev.inotify_.get();
  if (::epoll_ctl(ev.epoll_.get(), EPOLL_CTL_ADD, ev.inotify_.get(), &e) != 0) return errnoError("epoll_ctl(inotify)");
  return ev;
}

Status CgroupEvents::add(int fd, std::uint32_t events, const std::string& path) {
  epoll_event e{};
  e.events = events;
  e.data.fd = fd;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &e) != 0) return errnoError("epoll_ctl");
  by_fd_[fd] = path;
  return ok();
}

void CgroupEvents::drop(Watch& w) {
  for (const Fd& f : w.fds) {
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, f.get(), nullptr);
    by_fd_.erase(f.get());
  }
  w.fds.clear();
  if (w.inotify_wd >= 0) {
    ::inotify_rm_watch(inotify_.get(), w.inotify_wd);
    by_wd_.erase(w.inotify_wd);
    w.inotify_wd = -1;
  }
  w.has.clear();
}

Status CgroupEvents::watch(const CgroupHierarchy& h, const std::string& path, std::uint64_t threshold) {
  auto it = watches_.find(path);
  if (it != watches_.end()) {
    // v2's notifications do not depend on the threshold; v1's eventfd is armed at one.
    if (h.version() == 2 || it->second.threshold == threshold) return ok();
    drop(it->second);
    watches_.erase(it);
  }
  auto dir = h.open(path);
  if (!dir) return dir.error();
  Watch w;
  w.threshold = threshold;
  if (h.version() == 1) {
    // "<eventfd> <fd of the file> <args>" into cgroup.event_control: the eventfd is signalled
    // until it (or the cgroup) is closed; closing it unregisters.
    Fd control = openIn(*dir, "cgroup.event_control", O_WRONLY);
    if (!control.valid()) return errnoError(fmt::format("opening cgroup.event_control of {}", dir->path()));
    auto arm = [&](const char* file, const std::string& args, const std::string& what) {
      Fd target = openIn(*dir, file, O_RDONLY);
      Fd efd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
      if (!target.valid() || !efd.valid()) return;
      const std::string line = fmt::format("{} {} {}", efd.get(), target.get(), args);
      if (::write(control.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) return;
      if (!add(efd.get(), EPOLLIN, path)) return;
      w.fds.push_back(std::move(efd));
      w.has.push_back(what);
    };
    if (threshold > 0)
      arm("memory.usage_in_bytes", std::to_string(threshold), "usage threshold " + formatBytes(threshold));
    arm("memory.pressure_level", "medium", "pressure medium");
  } else {
    const std::string events = fmt::format("/proc/self/fd/{}/memory.events", dir->fd());
    const int wd = ::inotify_add_watch(inotify_.get(), events.c_str(), IN_MODIFY);
    if (wd >= 0) {
      w.inotify_wd = wd;
      by_wd_[wd] = path;
      w.has.emplace_back("memory.events");
    }
    Fd psi = openIn(*dir, "memory.pressure", O_RDWR | O_NONBLOCK);
    constexpr std::string_view kTrigger = "some 200000 2000000";
    if (psi.valid() && ::write(psi.get(), kTrigger.data(), kTrigger.size() + 1) > 0 && add(psi.get(), EPOLLPRI, path)) {
      w.fds.push_back(std::move(psi));
      w.has.emplace_back("PSI some 200ms/2s");
    }
  }
  if (w.has.empty()) return unsupported(fmt::format("{}: the kernel offers no memory notification here", dir->path()));
  watches_.emplace(path, std::move(w));
  return ok();
}

void CgroupEvents::keepOnly(const std::set<std::string>& paths) {
  for (auto it = watches_.begin(); it != watches_.end();) {
    if (paths.count(it->first) == 0) {
      drop(it->second);
      it = watches_.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<std::string> CgroupEvents::take() {
  std::set<std::string> spoke;
  std::array<epoll_event, 32> evs{};
  for (;;) {
    const int n = ::epoll_wait(epoll_.get(), evs.data(), static_cast<int>(evs.size()), 0);
    if (n <= 0) break;
    for (int i = 0; i < n; ++i) {
      const int fd = evs[static_cast<std::size_t>(i)].data.fd;
      if (fd == inotify_.get()) {
        alignas(inotify_event) std::array<char, 4096> buf{};
        for (;;) {
          const ssize_t got = ::read(fd, buf.data(), buf.size());
          if (got <= 0) break;
          for (ssize_t off = 0; off + static_cast<ssize_t>(sizeof(inotify_event)) <= got;) {
            inotify_event ie{};
            std::memcpy(&ie, buf.data() + off, sizeof ie);
            if (auto w = by_wd_.find(ie.wd); w != by_wd_.end()) spoke.insert(w->second);
            off += static_cast<ssize_t>(sizeof(inotify_event) + ie.len);
          }
        }
        continue;
      }
      auto it = by_fd_.find(fd);
      if (it == by_fd_.end()) continue;
      spoke.insert(it->second);
      // An eventfd is read to reset it; a PSI trigger is reset by the wait that reported it.
      if ((evs[static_cast<std::size_t>(i)].events & EPOLLIN) != 0) {
        std::uint64_t count = 0;
        (void)!::read(fd, &count, sizeof count);
      }
    }
    if (n < static_cast<int>(evs.size())) break;
  }
  return {spoke.begin(), spoke.end()};
}

}  // namespace headroom
