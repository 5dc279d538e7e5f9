// A child memory cgroup made under the test process's own memory cgroup (never anywhere else),
// with a limit, for real-kernel tests. Removed on destruction after the pids it started exit.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "headroom/sources/cgroup.h"
#include "headroom/sources/fs_root.h"
#include "headroom/util/result.h"

namespace headroom::testing {

class CgroupSandbox {
 public:
  // On v2, the leaf below our own cgroup that its processes move into so that it can delegate
  // the memory controller to sandboxes (a non-root v2 cgroup with processes cannot).
  static constexpr const char* kLeaf = "headroom-test-leaf";
  // Why a sandbox cannot be made here (not root, no memory controller), or nullopt when it can.
  static std::optional<std::string> unavailableReason();
  static Result<CgroupSandbox> create(std::string_view name);

  CgroupSandbox(CgroupSandbox&& o) noexcept;
  CgroupSandbox& operator=(CgroupSandbox&&) = delete;
  ~CgroupSandbox();

  int version() const { return version_; }
  const std::string& path() const { return path_; }  // inside the hierarchy
  const std::string& directory() const { return dir_; }
  std::string procsFile() const { return dir_ + "/cgroup.procs"; }

  Status setLimit(std::uint64_t bytes) const;
  Status addProcess(pid_t pid) const;
  Result<CgroupMemory> read() const;
  // Pids in the cgroup right now.
  Result<std::vector<pid_t>> pids() const;

 private:
  CgroupSandbox(FsRoot fs, int version, CgroupMount mount, std::string path, std::string dir)
      : fs_(std::move(fs)), version_(version), mount_(std::move(mount)), path_(std::move(path)), dir_(std::move(dir)) {}
  FsRoot fs_;
  int version_ = 0;
  CgroupMount mount_;
  std::string path_;
  std::string dir_;
  bool owned_ = true;
};

}  // namespace headroom::testing
