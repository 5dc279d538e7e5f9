// A command run to completion from the threaded agent, its output captured: posix_spawn (safe
// where fork is not), both pipes read as they fill, and a deadline after which it is killed.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace headroom {

struct Captured {
  int status = -1;  // the wait status; -1 when it could not start or ran out of time
  std::string out, err;
  std::string start_error;  // why it could not start ("" when it did)
};

// `argv[0]` is a path (no PATH search).
Captured runCaptured(const std::vector<std::string>& argv, std::chrono::milliseconds timeout);

}  // namespace headroom
