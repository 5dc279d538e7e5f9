// The verdict on one attempt of `headroom run`, on the kernel's evidence alone: an OOM kill of
// the prover (or of a process of its tree), an OOM kill beside it in its cgroup, or neither,
// whatever the exit status says (137 is any SIGKILL). Pure: evidence in, verdict out.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "headroom/controller/controller.h"
#include "headroom/controller/kill_evidence.h"
#include "headroom/sensors/oom_event.h"

namespace headroom {

// The prover's process tree: the child started and its descendants, found in samples (ppid) and
// in exit events (the parent at exit), so that a wrapper's child that was forked and killed
// between two samples still counts as the prover.
struct ProverTree {
  std::set<pid_t> members;
  std::map<pid_t, pid_t> parents;  // pid -> parent, from exits

  bool contains(pid_t pid) const;
  void noteExit(const ExitEvent& x);
};

struct AttemptEvidence {
  pid_t child = 0;
  int wait_status = 0;
  std::string cgroup;  // the prover's cgroup
  ProverTree tree;
  std::vector<OomEvent> ooms;                                      // the OOM incidents seen while it ran and after
  std::optional<ExitEvent> exit;                                   // the exit sensor's word on the child
  std::optional<std::uint64_t> oom_kills_before, oom_kills_after;  // the cgroup's own counter
  bool oom_source_active = false;              // mark_victim (BPF) or /dev/kmsg could have named a victim
  std::uint64_t budget = 0;                    // what the attempt was given
  ChargedFigures last_tree;                    // the prover's tree's figures at the last sample
  std::optional<std::uint64_t> self_reported;  // what the prover said it used, at the end
  std::int64_t now_ns = 0;                     // CLOCK_MONOTONIC of the verdict
};

// How much the cgroup's counter rose (0 unless both readings are there).
std::uint64_t counterRise(const AttemptEvidence& ev);
// Victims in the prover's cgroup or tree that the incidents name so far.
std::size_t victimsNamed(const AttemptEvidence& ev);
// Whether a kill is there to explain, so the kernel's report is worth waiting for: the counter
// rose, or a SIGKILL without a counter to ask; never for a clean exit.
bool awaitsOomReport(const AttemptEvidence& ev);

struct Verdict {
  bool prover_oom = false;           // the prover (or a process of its tree) was OOM-killed: confirmed
  bool other_oom = false;            // another process in its cgroup was, while it ran
  std::string evidence;              // in words; empty for an exit no kill explains
  std::optional<KillEvidence> kill;  // for the controller, when there was an OOM kill
};
Verdict classifyAttempt(const AttemptEvidence& ev);

}  // namespace headroom
