// headroom's exit codes, the contract every subcommand keeps (the agent relies on `headroom
// probe`'s), and the one place where an error's kind becomes one.
#pragma once

#include "headroom/util/result.h"

namespace headroom {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitAborted = 3;       // probe: pressure rose, partial results
inline constexpr int kExitNotPlaced = 126;   // run: the prover could not be placed in its cgroup
inline constexpr int kExitNotStarted = 127;  // run: the prover could not be executed

// Usage and bad input 2; a command not placed 126, not started 127 (as a shell says them); anything else 1.
inline int exitCodeFor(const Error& e) {
  switch (e.kind) {
    case ErrorKind::kUsage:
    case ErrorKind::kBadInput: return kExitBadInput;
    case ErrorKind::kNotPlaced: return kExitNotPlaced;
    case ErrorKind::kNotStarted: return kExitNotStarted;
    default: return kExitFailure;
  }
}

}  // namespace headroom
