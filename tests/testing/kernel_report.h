// A memory cgroup's state as the kernel prints it in an OOM report, made by hand for the tests
// of what is built on it (the breakdown at the kill, the record, the budget's evidence).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <utility>

#include "headroom/sources/oom_report.h"

namespace headroom::testing {

inline OomMemcgState memcgReport(std::uint64_t usage,
                                 std::initializer_list<std::pair<const char*, std::uint64_t>> stats,
                                 std::optional<std::uint64_t> limit = std::nullopt) {
  OomMemcgState k;
  k.memory.usage = usage;
  k.memory.limit = limit;
  for (const auto& [key, value] : stats) k.stats.set(key, value);
  return k;
}

}  // namespace headroom::testing
