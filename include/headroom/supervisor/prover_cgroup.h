// The memory cgroup `headroom run` runs the prover in: the one named (made when missing, and then
// removed again at the end, once the prover's last processes have left it), or the caller's own.
// Move-only; the removal is its destructor's.
#pragma once

#include <string>

#include "headroom/sources/cgroup.h"
#include "headroom/sources/fs_root.h"
#include "headroom/util/result.h"

namespace headroom {

class ProverCgroup {
 public:
  // `wanted`: a path inside the memory hierarchy; "" for the caller's own. A wanted cgroup whose
  // parent does not exist either is bad input.
  static Result<ProverCgroup> open(const FsRoot& fs, const CgroupHierarchy& h, const std::string& wanted);
  ~ProverCgroup();
  ProverCgroup(ProverCgroup&& o) noexcept;
  ProverCgroup& operator=(ProverCgroup&&) = delete;
  ProverCgroup(const ProverCgroup&) = delete;
  ProverCgroup& operator=(const ProverCgroup&) = delete;

  const std::string& path() const { return path_; }
  // The prover runs elsewhere than `headroom run` itself: each attempt moves itself here first.
  bool elsewhere() const { return elsewhere_; }
  // This made the cgroup (and will remove it).
  bool made() const { return made_; }
  // Its directory and its cgroup.procs, as the live system names them.
  const std::string& directory() const { return dir_; }
  std::string procsFile() const { return dir_ + "/cgroup.procs"; }

 private:
  ProverCgroup(std::string path, std::string dir, bool elsewhere, bool made)
      : path_(std::move(path)), dir_(std::move(dir)), elsewhere_(elsewhere), made_(made) {}
  std::string path_;
  std::string dir_;
  bool elsewhere_ = false;
  bool made_ = false;
};

}  // namespace headroom
