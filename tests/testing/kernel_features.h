// Which BPF sensors this kernel can run, asked of the kernel the way the loader asks it (the
// program table's features, each probed): for tests that hold a sensor to its work where the
// kernel has what it needs, and to a reason naming what is missing where it does not (5.10).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "headroom/sensors/detail/program_table.h"
#include "headroom/sensors/kernel_support.h"
#include "headroom/sensors/readings.h"

namespace headroom::testing {

// The features `sensor` needs that this kernel lacks; empty where it can run. A probe that
// cannot tell counts as present (as the loader counts it).
inline std::vector<detail::KernelFeature> kernelLacksFor(SensorId sensor) {
  std::vector<detail::KernelFeature> out;
  const detail::SensorSpec* s = detail::findSensor(sensor);
  if (s == nullptr) return out;
  for (detail::KernelFeature f : s->needs) {
    const detail::FeatureSpec* spec = detail::findFeature(f);
    if (spec == nullptr) continue;
    auto has = spec->helper ? kernelHasHelper(spec->id) : kernelHasMapType(spec->id);
    if (has.has_value() && !*has) out.push_back(f);
  }
  return out;
}

inline bool kernelCanRun(SensorId sensor) { return kernelLacksFor(sensor).empty(); }

// Active where the kernel has what the sensor needs; else degraded, its reason naming each
// missing feature with the release it came in.
inline void expectActiveOrSaysWhy(const std::vector<SensorStatus>& statuses, SensorId sensor) {
  const SensorStatus* st = nullptr;
  for (const SensorStatus& s : statuses) {
    if (s.id == sensor) st = &s;
  }
  ASSERT_NE(st, nullptr) << toString(sensor);
  std::vector<detail::KernelFeature> lacks = kernelLacksFor(sensor);
  if (lacks.empty()) {
    EXPECT_EQ(st->state, SensorState::kActive) << toString(sensor) << ": " << st->reason;
    return;
  }
  EXPECT_EQ(st->state, SensorState::kDegraded) << toString(sensor);
  EXPECT_NE(st->reason.find("not in this kernel"), std::string::npos) << st->reason;
  for (detail::KernelFeature f : lacks) {
    const detail::FeatureSpec* spec = detail::findFeature(f);
    EXPECT_NE(st->reason.find(std::string(spec->what) + " (Linux " + spec->since + ")"), std::string::npos)
        << toString(sensor) << ": " << st->reason;
  }
}

}  // namespace headroom::testing
