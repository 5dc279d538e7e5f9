// FsRoot: every read of /proc and /sys goes through one injectable root ("/" in production,
// a fixture tree in tests, the host's / mounted elsewhere in a container).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "headroom/util/result.h"

namespace headroom {

// Owns one file descriptor; move-only.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  ~Fd();

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }

 private:
  int fd_ = -1;
};

// What a file that is not a regular one is, for errors: "a FIFO", "a character device", ...
const char* fileKindText(unsigned mode);
// Opens a file a user named, to read (a JSON export, a journal): never blocks in open (a FIFO
// with no writer), blocking reads after. A regular file, or, with `streams`, also a FIFO or a
// character device (read then under readAll's bound); anything else is refused at once, naming
// what it is (bad input, without the path: the caller's context names it).
Result<Fd> openUserFile(const std::string& path, bool streams);
// Reads a whole file from an open descriptor (files under /proc and /sys report size 0).
Result<std::string> readAll(int fd, std::string_view display_path);
// The same from the file's start whatever the descriptor's offset (pread from 0): a descriptor
// held between reads of a file the kernel writes anew for each read with seq_file (a cgroup's
// files), whose first read returns all of it that fits. `dir_path`/`name` name it in errors.
Result<std::string> rereadAll(int fd, std::string_view dir_path, std::string_view name);

// A directory held open, so that every file read through it comes from the same directory
// even if the path is removed and recreated meanwhile (openat on the held fd).
class Dir {
 public:
  Dir(Fd fd, std::string display_path) : fd_(std::move(fd)), path_(std::move(display_path)) {}

  Result<std::string> readFile(std::string_view name) const;
  Result<Dir> openSubdir(std::string_view name) const;
  bool exists(std::string_view name) const;
  // Names of the entries (without "." and ".."); `dirs_only` keeps sub-directories only.
  Result<std::vector<std::string>> list(bool dirs_only = false) const;
  // Opens a file for writing (cgroup control files in tests and the probe).
  Status writeFile(std::string_view name, std::string_view content) const;

  const std::string& path() const { return path_; }
  int fd() const { return fd_.get(); }

 private:
  Fd fd_;
  std::string path_;
};

class FsRoot {
 public:
  // Opens `root` (a directory). "/" reads the live system.
  static Result<FsRoot> open(const std::string& root);

  // `abs_path` is an absolute path as seen on the target system ("/proc/meminfo").
  Result<Dir> openDir(std::string_view abs_path) const;
  Result<std::string> readFile(std::string_view abs_path) const;
  bool exists(std::string_view abs_path) const;
  Result<std::string> readLink(std::string_view abs_path) const;

  // How a path is named in messages: the live path, or "<fixture>/proc/..." under a fixture.
  std::string display(std::string_view abs_path) const;
  const std::string& root() const { return root_; }
  bool isLive() const { return root_ == "/"; }

 private:
  FsRoot(Fd fd, std::string root) : fd_(std::move(fd)), root_(std::move(root)) {}
  static std::string relative(std::string_view abs_path);

  Fd fd_;
  std::string root_;
};

}  // namespace headroom
