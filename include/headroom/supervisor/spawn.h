// One attempt of `headroom run` started: fork, the child moves itself into the prover's cgroup
// and execs the command with the budget in its environment. Everything the child needs is made
// before the fork; after it, the child makes async-signal-safe calls only.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "headroom/util/result.h"

namespace headroom {

struct SpawnSpec {
  std::vector<std::string> argv;           // argv[0] is looked up in PATH
  std::map<std::string, std::string> env;  // the whole environment
  std::string procs_file;                  // the cgroup.procs the child moves itself into first ("" stays where it is)
  std::string cgroup;                      // that cgroup, for messages
};

// The child's pid. Errors: kNotPlaced (the move into the cgroup failed), kNotStarted (the exec
// failed), or the pipe's or fork's.
Result<pid_t> spawnProver(const SpawnSpec& s);

}  // namespace headroom
