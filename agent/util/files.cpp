// Durable small files: directories on demand, whole writes, fsyncs, the atomic replace.
#include "headroom/util/files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace headroom {

std::string parentDirectory(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

Status makeDirectories(const std::string& dir) {
  if (dir.empty() || dir == "/" || dir == ".") return ok();
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return ok();
    return unexpected(sysError(ENOTDIR, fmt::format("making directory {}", dir)));
  }
  if (errno != ENOENT) return unexpected(errnoError(fmt::format("making directory {}", dir)));
  std::string parent = parentDirectory(dir);
  if (parent != dir) {
    if (auto s = makeDirectories(parent); !s) return s;
  }
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return unexpected(errnoError(fmt::format("making directory {}", dir)));
  return ok();
}

void syncDirectory(const std::string& dir) {
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

Status writeAll(int fd, std::string_view content, std::string_view display) {
  while (!content.empty()) {
    ssize_t n = ::write(fd, content.data(), content.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return unexpected(errnoError(fmt::format("writing {}", display)));
    }
    if (n == 0) return unexpected(sysError(EIO, fmt::format("writing {}: no progress", display)));
    content.remove_prefix(static_cast<std::size_t>(n));
  }
  return ok();
}

Status writeFileAtomic(const std::string& path, std::string_view content) {
  std::string dir = parentDirectory(path);
  if (auto s = makeDirectories(dir); !s) return unexpected(s.error().wrap(fmt::format("writing {}", path)));
  std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return unexpected(errnoError(fmt::format("creating {}", tmp)));
  Status st = writeAll(fd, content, tmp);
  if (st && ::fsync(fd) != 0) st = unexpected(errnoError(fmt::format("fsync of {}", tmp)));
  if (::close(fd) != 0 && st) st = unexpected(errnoError(fmt::format("closing {}", tmp)));
  if (st && ::rename(tmp.c_str(), path.c_str()) != 0)
    st = unexpected(errnoError(fmt::format("renaming {} to {}", tmp, path)));
  if (!st) {
    ::unlink(tmp.c_str());
    return st;
  }
  // The rename itself must survive a crash.
  syncDirectory(dir);
  return ok();
}

Result<std::optional<std::string>> readSmallFile(const std::string& path, std::size_t max_bytes,
                                                 std::string_view what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<std::string>{};
    return unexpected(errnoError(fmt::format("reading {} {}", what, path)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return unexpected(badData(fmt::format("{} {}: not a regular file", what, path)));
  }
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Error e = errnoError(fmt::format("reading {} {}", what, path));
      ::close(fd);
      return unexpected(e);
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > max_bytes) {
      ::close(fd);
      return unexpected(badData(fmt::format("{} {}: larger than {} MiB", what, path, max_bytes >> 20)));
    }
  }
  ::close(fd);
  return std::optional<std::string>(std::move(text));
}

}  // namespace headroom
