#include "headroom/sources/cgroup_files.h"

#include <fcntl.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include <fmt/format.h>

namespace headroom {

CgroupFileCache::CgroupFileCache(std::size_t max_fds) : max_fds_(max_fds) {}

bool CgroupFileCache::full() const {
  if (held_fds_ >= max_fds_) return true;
  // Never more than a quarter of what this process may open now: asked only when a descriptor
  // is to be held, once per file of a cgroup seen anew.
  rlimit rl{};
  return ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && held_fds_ >= rl.rlim_cur / 4;
}

Result<std::string> CgroupFileCache::readHeld(Entry& e, const char* name, bool& gone) {
  auto f = e.files.find(std::string_view(name));
  if (f == e.files.end()) {
    Fd fd(::openat(e.dir.fd(), name, O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) {
      const int err = errno;
      if (err == ENOENT) {
        e.files.emplace(name, Fd());  // not there (an optional file): not asked again
      } else {
        gone = true;
      }
      return sysError(err, fmt::format("opening {}/{}", e.dir.path(), name));
    }
    if (full()) return readAll(fd.get(), fmt::format("{}/{}", e.dir.path(), name));
    f = e.files.emplace(name, std::move(fd)).first;
    ++held_fds_;
  }
  // Absent at the first open: answered as that open was (an optional file that is ENOENT is no
  // warning; memory.peak before 5.19).
  if (!f->second.valid()) return sysError(ENOENT, fmt::format("opening {}/{}", e.dir.path(), name));
  auto text = rereadAll(f->second.get(), e.dir.path(), name);
  if (!text) gone = true;  // ENODEV: the cgroup was removed since the file was opened
  return text;
}

Result<CgroupMemory> CgroupFileCache::read(const CgroupHierarchy& h, std::string_view path, bool light) {
  const std::string p = normaliseCgroupPath(path);
  // Held by directory: should the hierarchy's mapping of paths change (its cgroup namespace root
  // located late), a path names another directory, opened anew.
  const std::string where = h.directoryOf(p);
  auto it = entries_.find(where);
  if (it == entries_.end()) {
    if (full()) return h.read(p);  // past the budget: the plain way
    auto dir = h.open(p);
    if (!dir) return dir.error();
    it = entries_.emplace(where, Entry{std::move(*dir), {}, true, std::nullopt}).first;
    ++held_fds_;
  }
  Entry& e = it->second;
  e.used = true;
  bool gone = false;
  auto reader = [&](const char* name) { return readHeld(e, name, gone); };
  if (light && e.whole && e.whole->path == p) {
    auto cg = readCgroupMemoryLight(reader, e.dir.path(), *e.whole);
    if (!gone && cg) return cg;
  } else {
    auto cg = readCgroupMemory(reader, e.dir.path(), h.version(), p);
    if (!gone && cg) {
      e.whole = *cg;
      return cg;
    }
  }
  // Removed, or removed and made again, since its files were opened (or a file that must be
  // there is not): forgotten, and read as it is now.
  forget(it);
  return h.read(p);
}

void CgroupFileCache::forget(Entries::iterator it) {
  held_fds_ -= 1 + static_cast<std::size_t>(std::count_if(it->second.files.begin(), it->second.files.end(),
                                                          [](const auto& f) { return f.second.valid(); }));
  entries_.erase(it);
}

void CgroupFileCache::sweep() {
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    if (!it->second.used) {
      forget(it);
    } else {
      it->second.used = false;
    }
    it = next;
  }
}

}  // namespace headroom
