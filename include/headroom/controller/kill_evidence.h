// The evidence of one OOM kill for the budget controller, assembled the same way for the agent
// and for `headroom run`: each victim's charge at the kill (the kernel's figures, else the last
// sample's), the prover's own victims before any beside it, and the kill's own overhead when its
// OOM domain is the prover's cgroup. Pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "headroom/controller/controller.h"
#include "headroom/model/snapshot.h"
#include "headroom/sensors/oom_event.h"

namespace headroom {

// What the last sample says one or more processes were charged (summed over a process tree).
struct ChargedFigures {
  std::uint64_t charge = 0;       // RSS + page tables (+ pinned memory the driver keeps outside RSS)
  std::uint64_t pinned = 0;       // per process the larger of VmLck and the live pinned (CUDA) bytes
  std::uint64_t page_tables = 0;  // VmPTE
  std::uint64_t kernel = 0;       // the share of its cgroup's other kernel memory (stacks, slab, ...)
  std::size_t processes = 0;

  ChargedFigures& operator+=(const ChargedFigures& o);
  bool operator==(const ChargedFigures&) const = default;
};
ChargedFigures chargedFigures(const ProcessSnapshot& p);

// One victim as the controller judges it.
struct KillVictim {
  const OomVictim* kernel = nullptr;  // the kernel's word on it, with its figures at the kill (may be null)
  bool prover = false;                // one of the prover's processes (its role, or its process tree)
  ChargedFigures sampled;             // the last sample's figures: the charge where the kernel gave none
};

// The prover's victims when there are any, else every victim beside it; `what` says the evidence
// in words, and gains where the kill's own overhead came from when it was used.
KillEvidence killEvidence(std::span<const KillVictim> victims, const OomEvent* event, std::string_view prover_cgroup,
                          std::int64_t time_ns, std::string what);

}  // namespace headroom
