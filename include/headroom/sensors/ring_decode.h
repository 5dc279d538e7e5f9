// The BPF rings' records as headroom's types: bytes in, events out, nothing else (the layouts
// are bpf/events.h's). Cgroups stay ids here; the sensors name them (sources/cgroup_index.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <variant>

#include "headroom/sensors/oom_event.h"
#include "headroom/sensors/oom_joiner.h"

namespace headroom {

// oom:mark_victim. `mark` has no cgroup paths yet; on kernels whose tracepoint carries only a
// pid, `victim_is_task` is false and the victim has its thread id alone.
struct DecodedOomMark {
  OomMark mark;
  std::uint64_t trigger_cgroup_id = 0, victim_cgroup_id = 0;
  bool victim_is_task = false;
};
// The oom_reaper starting or finishing on a victim.
struct DecodedReap {
  pid_t pid = 0;
  bool finished = false;
  std::int64_t ts_ns = 0;
};
// A record of the OOM ring: empty when too short for its type, or of a type it does not know.
using OomRingRecord = std::variant<std::monostate, DecodedOomMark, DecodedReap>;
OomRingRecord decodeOomRecord(std::span<const std::byte> bytes);

// A process's exit (its whole thread group), classified on the kernel's evidence.
struct DecodedExit {
  ExitEvent exit;  // cgroup empty: see cgroup_id
  std::uint64_t cgroup_id = 0;
};
std::optional<DecodedExit> decodeExitRecord(std::span<const std::byte> bytes);

}  // namespace headroom
