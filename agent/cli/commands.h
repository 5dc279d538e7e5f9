// The subcommands, each a plain options struct and a run function; main.cpp turns flags into
// these structs. Run functions return the process exit code.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "headroom/snapshot.h"

namespace headroom::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;

struct SnapshotOptions {
  std::string root = "/";
  bool json = false;
  std::optional<std::string> cgroup;
  std::optional<pid_t> pid;
  std::vector<std::string> role_rules;
  std::size_t top = 5;  // processes shown per role in the table
  bool smaps = true;
  bool bpf = true;  // false: /dev/kmsg and cgroup files only
  std::vector<std::string> cuda_libraries;
  std::vector<std::string> tracepoints;  // SENSOR=NAME overrides
  bool watch_ooms = false;               // print OOM kills as they happen
  std::size_t max_ooms = 0;              // stop after this many (0: never)
  double watch_seconds = 0;              // stop after this long (0: never)
};

int runSnapshot(const SnapshotOptions& opts, std::ostream& out, std::ostream& err);

// The human table of `headroom snapshot`.
std::string renderSnapshotTable(const Snapshot& snap, std::size_t top_per_role);

}  // namespace headroom::cli
