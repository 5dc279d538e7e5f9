// The controller's state file: read whole, written atomically (temporary file, fsync, rename,
// fsync of the directory), so a crash leaves the old state or the new one, never half.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fmt/format.h>

#include "headroom/controller.h"

namespace headroom {
namespace {

Status makeDirs(const std::string& dir) {
  if (dir.empty() || dir == "/") return ok();
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return ok();
    return unexpected(makeError(ENOTDIR, fmt::format("making directory {}", dir)));
  }
  auto slash = dir.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    if (auto s = makeDirs(dir.substr(0, slash)); !s) return s;
  }
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return unexpected(errnoError(fmt::format("making directory {}", dir)));
  return ok();
}

Status writeAll(int fd, std::string_view content, const std::string& path) {
  while (!content.empty()) {
    ssize_t n = ::write(fd, content.data(), content.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return unexpected(errnoError(fmt::format("writing {}", path)));
    }
    content.remove_prefix(static_cast<std::size_t>(n));
  }
  return ok();
}

}  // namespace

std::string defaultStatePath(std::string_view cgroup, std::string_view dir) {
  std::string name = normaliseCgroupPath(cgroup);
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  if (name == "_") name.clear();  // the root cgroup: "budget.json"
  return fmt::format("{}/budget{}.json", dir, name);
}

Status writeFileAtomic(const std::string& path, std::string_view content) {
  auto slash = path.find_last_of('/');
  std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  if (auto s = makeDirs(dir); !s) return unexpected(s.error().wrap(fmt::format("writing {}", path)));
  std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return unexpected(errnoError(fmt::format("creating {}", tmp)));
  Status st = writeAll(fd, content, tmp);
  if (st && ::fsync(fd) != 0) st = unexpected(errnoError(fmt::format("fsync of {}", tmp)));
  if (::close(fd) != 0 && st) st = unexpected(errnoError(fmt::format("closing {}", tmp)));
  if (st && ::rename(tmp.c_str(), path.c_str()) != 0) st = unexpected(errnoError(fmt::format("renaming {} to {}", tmp, path)));
  if (!st) {
    ::unlink(tmp.c_str());
    return st;
  }
  // The rename itself must survive a crash: sync the directory entry.
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return ok();
}

Result<std::optional<ControllerState>> loadState(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<ControllerState>{};
    return unexpected(errnoError(fmt::format("reading state file {}", path)));
  }
  std::string text;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Error e = errnoError(fmt::format("reading state file {}", path));
      ::close(fd);
      return unexpected(e);
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > (1U << 20)) {
      ::close(fd);
      return unexpected(makeError(0, fmt::format("state file {}: larger than 1 MiB, not a state file", path)));
    }
  }
  ::close(fd);
  auto s = parseState(text, path);
  if (!s) return unexpected(s.error());
  return std::optional<ControllerState>(std::move(*s));
}

Status saveState(const std::string& path, const ControllerState& s) { return writeFileAtomic(path, serialiseState(s)); }

}  // namespace headroom
