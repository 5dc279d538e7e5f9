#include "headroom/sources/fs_root.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

namespace headroom {
namespace {
// No kernel text file we read is anywhere near this; it bounds a runaway or hostile file.
constexpr std::size_t kMaxFileBytes = 64u << 20;
}  // namespace

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {
// The whole file from the descriptor's offset, or from its start (pread) when `from_start`.
// `path()` names it, in an error only.
template <typename Path>
Result<std::string> readWhole(int fd, const Path& path, bool from_start) {
  std::string out;
  char buf[16384];
  off_t at = 0;
  for (;;) {
    ssize_t n = from_start ? ::pread(fd, buf, sizeof buf, at) : ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errnoError(fmt::format("reading {}", path()));
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    at += n;
    if (out.size() > kMaxFileBytes)
      return sysError(EFBIG, fmt::format("reading {}: larger than {} bytes", path(), kMaxFileBytes));
    // A file the kernel writes anew for each read (seq_file: a cgroup's files) hands all of
    // itself that fits to the first read: less than asked, ending a line, is the whole of it,
    // with no second read to see 0.
    if (from_start && static_cast<std::size_t>(n) < sizeof buf && buf[n - 1] == '\n') break;
  }
  return out;
}
}  // namespace

const char* fileKindText(unsigned mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

Result<Fd> openUserFile(const std::string& path, bool streams) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd.valid()) return errnoError(fmt::format("opening {}", path));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errnoError(fmt::format("stat of {}", path));
  const bool stream = S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode);
  if (!S_ISREG(st.st_mode) && !(streams && stream))
    return badInput(fmt::format("{}, not a regular file", fileKindText(st.st_mode)));
  if (int fl = ::fcntl(fd.get(), F_GETFL); fl >= 0) ::fcntl(fd.get(), F_SETFL, fl & ~O_NONBLOCK);
  return fd;
}

Result<std::string> readAll(int fd, std::string_view display_path) {
  return readWhole(
      fd, [&] { return display_path; }, false);
}

Result<std::string> rereadAll(int fd, std::string_view dir_path, std::string_view name) {
  return readWhole(
      fd, [&] { return fmt::format("{}/{}", dir_path, name); }, true);
}

Result<std::string> Dir::readFile(std::string_view name) const {
  std::string n(name);
  Fd fd(::openat(fd_.get(), n.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return errnoError(fmt::format("opening {}/{}", path_, name));
  return readAll(fd.get(), fmt::format("{}/{}", path_, name));
}

Result<Dir> Dir::openSubdir(std::string_view name) const {
  std::string n(name);
  Fd fd(::openat(fd_.get(), n.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  std::string display = path_ == "/" ? "/" + n : fmt::format("{}/{}", path_, name);
  if (!fd.valid()) return errnoError(fmt::format("opening {}", display));
  return Dir(std::move(fd), display);
}

bool Dir::exists(std::string_view name) const {
  std::string n(name);
  struct stat st {};
  return ::fstatat(fd_.get(), n.c_str(), &st, 0) == 0;
}

Result<std::vector<std::string>> Dir::list(bool dirs_only) const {
  // fdopendir takes ownership of its fd: give it a duplicate so ours stays valid.
  int dup = ::openat(fd_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dup < 0) return errnoError(fmt::format("listing {}", path_));
  DIR* d = ::fdopendir(dup);
  if (d == nullptr) {
    ::close(dup);
    return errnoError(fmt::format("listing {}", path_));
  }
  std::vector<std::string> names;
  errno = 0;
  while (dirent* e = ::readdir(d)) {
    std::string_view n(e->d_name);
    if (n == "." || n == "..") continue;
    if (dirs_only) {
      bool is_dir = e->d_type == DT_DIR;
      if (e->d_type == DT_UNKNOWN) {
        struct stat st {};
        is_dir = ::fstatat(fd_.get(), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
      }
      if (!is_dir) continue;
    }
    names.emplace_back(n);
  }
  int err = errno;
  ::closedir(d);
  if (err != 0) return sysError(err, fmt::format("listing {}", path_));
  return names;
}

Status Dir::writeFile(std::string_view name, std::string_view content) const {
  std::string n(name);
  Fd fd(::openat(fd_.get(), n.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) return errnoError(fmt::format("opening {}/{} for writing", path_, name));
  ssize_t w = ::write(fd.get(), content.data(), content.size());
  if (w < 0) return errnoError(fmt::format("writing \"{}\" to {}/{}", content.substr(0, 64), path_, name));
  if (static_cast<std::size_t>(w) != content.size())
    return sysError(EIO, fmt::format("short write to {}/{}", path_, name));
  return ok();
}

Result<FsRoot> FsRoot::open(const std::string& root) {
  if (root.empty()) return badInput("filesystem root is empty");
  Fd fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return errnoError(fmt::format("opening filesystem root {}", root));
  std::string r = root;
  while (r.size() > 1 && r.back() == '/') r.pop_back();
  return FsRoot(std::move(fd), r);
}

std::string FsRoot::relative(std::string_view abs_path) {
  while (!abs_path.empty() && abs_path.front() == '/') abs_path.remove_prefix(1);
  return abs_path.empty() ? std::string(".") : std::string(abs_path);
}

std::string FsRoot::display(std::string_view abs_path) const {
  if (isLive()) return std::string(abs_path);
  return root_ + "/" + relative(abs_path);
}

Result<Dir> FsRoot::openDir(std::string_view abs_path) const {
  std::string rel = relative(abs_path);
  Fd fd(::openat(fd_.get(), rel.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return errnoError(fmt::format("opening {}", display(abs_path)));
  return Dir(std::move(fd), display(abs_path));
}

Result<std::string> FsRoot::readFile(std::string_view abs_path) const {
  std::string rel = relative(abs_path);
  Fd fd(::openat(fd_.get(), rel.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return errnoError(fmt::format("opening {}", display(abs_path)));
  return readAll(fd.get(), display(abs_path));
}

bool FsRoot::exists(std::string_view abs_path) const {
  std::string rel = relative(abs_path);
  struct stat st {};
  return ::fstatat(fd_.get(), rel.c_str(), &st, 0) == 0;
}

Result<std::string> FsRoot::readLink(std::string_view abs_path) const {
  std::string rel = relative(abs_path);
  char buf[4096];
  ssize_t n = ::readlinkat(fd_.get(), rel.c_str(), buf, sizeof buf);
  if (n < 0) return errnoError(fmt::format("reading link {}", display(abs_path)));
  return std::string(buf, static_cast<std::size_t>(n));
}

}  // namespace headroom
