// The parts of the kernel log's OOM parser (sources/kmsg.h) that its files share: figures in kB,
// and the lines of a global OOM's Mem-Info and unreclaimable slab blocks. Private to
// agent/sources.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "headroom/sources/oom_report.h"

namespace headroom::kmsg_detail {

inline constexpr std::uint64_t kPage = 4096;

// "65536kB" in bytes; without the unit the value was cut short and is not a number to trust.
std::optional<std::uint64_t> kbValue(std::string_view v);
// One line of Mem-Info and what follows it: the machine's counters (pages), a node's summary,
// its hugepages, swap, RAM, reserved; zone and free-list lines are not kept.
void parseMachineLine(std::string_view line, OomMachineState& m);
// One line of "Unreclaimable slab info:" ("kmalloc-4k  123KB  456KB").
void parseSlabLine(std::string_view line, std::vector<OomSlabCache>& out);

}  // namespace headroom::kmsg_detail
