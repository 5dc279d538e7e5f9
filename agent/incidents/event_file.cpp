// The events file: one JSON line per record, appended whole, rotated by size (docs/events.md).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>

#include "headroom/incidents/event_file.h"
#include "headroom/util/files.h"

namespace headroom {
namespace {

std::string numbered(const std::string& path, std::size_t n) { return fmt::format("{}.{}", path, n); }

}  // namespace

Result<std::unique_ptr<EventFile>> EventFile::open(const EventFileOptions& opts) {
  std::unique_ptr<EventFile> f(new EventFile(opts));
  if (auto st = makeDirectories(parentDirectory(opts.path)); !st)
    return st.error().wrap(fmt::format("opening the events file {}", opts.path));
  if (auto st = f->openPath(); !st) return st.error();
  return f;
}

Status EventFile::openPath() {
  fd_ = Fd(::open(opts_.path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640));
  if (!fd_.valid()) return errnoError(fmt::format("opening the events file {}", opts_.path));
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0) return errnoError(fmt::format("reading the size of {}", opts_.path));
  if (!S_ISREG(st.st_mode)) {
    fd_ = Fd();
    return badInput(fmt::format("the events file {}: not a regular file", opts_.path));
  }
  stats_.bytes = static_cast<std::uint64_t>(st.st_size);
  return ok();
}

Status EventFile::reopen() {
  fd_ = Fd();
  ++stats_.reopens;
  return openPath();
}

Status EventFile::followPath() {
  struct stat open_st {
  }, path_st{};
  if (fd_.valid() && ::fstat(fd_.get(), &open_st) == 0 && ::stat(opts_.path.c_str(), &path_st) == 0 &&
      open_st.st_dev == path_st.st_dev && open_st.st_ino == path_st.st_ino) {
    stats_.bytes = static_cast<std::uint64_t>(open_st.st_size);  // truncated by copytruncate: its size now
    return ok();
  }
  return reopen();
}

Status EventFile::rotate() {
  fd_ = Fd();
  Status moved = ok();
  if (opts_.max_files == 0) {
    if (::unlink(opts_.path.c_str()) != 0 && errno != ENOENT) moved = errnoError("removing " + opts_.path);
  } else {
    // The oldest goes, then each moves one up: <path>.N-1 -> <path>.N ... <path> -> <path>.1.
    (void)::unlink(numbered(opts_.path, opts_.max_files).c_str());
    for (std::size_t i = opts_.max_files; i > 1; --i) {
      if (::rename(numbered(opts_.path, i - 1).c_str(), numbered(opts_.path, i).c_str()) != 0 && errno != ENOENT)
        moved = errnoError(fmt::format("renaming {} to {}", numbered(opts_.path, i - 1), numbered(opts_.path, i)));
    }
    if (::rename(opts_.path.c_str(), numbered(opts_.path, 1).c_str()) != 0)
      moved = errnoError(fmt::format("renaming {} to {}", opts_.path, numbered(opts_.path, 1)));
  }
  ++stats_.rotations;
  // Written on whatever happened: a rotation that failed keeps appending to the file as it is.
  if (auto st = openPath(); !st) return st;
  if (!moved) return moved.error().wrap("rotating the events file");
  return ok();
}

Status EventFile::append(std::string_view line) {
  auto failed = [this](Error e) -> Status {
    ++stats_.failures;
    return e;
  };
  if (auto st = followPath(); !st) return failed(st.error());
  if (stats_.bytes > 0 && stats_.bytes + line.size() > opts_.max_bytes) {
    if (auto st = rotate(); !st && !fd_.valid()) return failed(st.error());
  }
  const std::uint64_t before = stats_.bytes;
  const ssize_t n = ::write(fd_.get(), line.data(), line.size());
  int err = n < 0 ? errno : 0;
  if (n == static_cast<ssize_t>(line.size()) && ::fdatasync(fd_.get()) != 0) err = errno;
  if (n != static_cast<ssize_t>(line.size()) || err != 0) {
    // Never half a line: what was written of it is cut off again.
    if (n > 0) (void)!::ftruncate(fd_.get(), static_cast<off_t>(before));
    return failed(sysError(err != 0 ? err : ENOSPC, fmt::format("writing to the events file {}", opts_.path)));
  }
  stats_.bytes = before + line.size();
  ++stats_.lines;
  return ok();
}

}  // namespace headroom
