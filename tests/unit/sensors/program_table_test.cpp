// The program table's account of what each sensor needs of the kernel: which sensors a missing
// map takes down, the reason a sensor gives when the kernel lacks a feature, and libbpf's log
// read for the map it could not make.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "headroom/sensors/detail/program_table.h"
#include "headroom/sensors/libbpf_log.h"

namespace headroom::detail {
namespace {

bool needs(const SensorSpec& s, KernelFeature f) {
  return std::find(s.needs.begin(), s.needs.end(), f) != s.needs.end();
}

TEST(ProgramTable, AMissingMapTakesDownOnlyTheSensorsThatUseIt) {
  EXPECT_EQ(sensorsUsingMap("proc_hot"), std::vector<SensorId>{SensorId::kRss});
  EXPECT_EQ(sensorsUsingMap("oom_ring"), std::vector<SensorId>{SensorId::kOom});
  EXPECT_EQ(sensorsUsingMap("mmap_pending"), std::vector<SensorId>{SensorId::kMmap});
  EXPECT_EQ(sensorsUsingMap("gpu_allocs"), (std::vector<SensorId>{SensorId::kExits, SensorId::kCuda}));
  EXPECT_TRUE(sensorsUsingMap("no_such_map").empty());
}

TEST(ProgramTable, AMapLeftOutForAMissingFeatureIsUsedOnlyBySensorsThatNeedIt) {
  // A map not made where its type is missing must not be used by a sensor that stays on there.
  for (const FeatureSpec& f : kernelFeatures()) {
    if (f.map == nullptr) continue;
    std::vector<SensorId> users = sensorsUsingMap(f.map);
    EXPECT_FALSE(users.empty()) << f.map;
    for (SensorId id : users) EXPECT_TRUE(needs(*findSensor(id), f.feature)) << toString(id) << " uses " << f.map;
  }
}

TEST(ProgramTable, EveryFeatureASensorOrVariantNeedsIsProbedAndDated) {
  for (const SensorSpec& s : sensorTable()) {
    std::vector<KernelFeature> all = s.needs;
    for (const ProgramVariant& v : s.variants) {
      if (v.needs != KernelFeature::kNone) all.push_back(v.needs);
    }
    for (KernelFeature f : all) {
      const FeatureSpec* spec = findFeature(f);
      ASSERT_NE(spec, nullptr) << toString(s.sensor);
      EXPECT_GT(spec->id, 0);
      EXPECT_STRNE(spec->since, "");
    }
  }
}

TEST(ProgramTable, OomAndExitsLoadWithoutAnyOptionalFeature) {
  // What 5.10 has: the OOM marks and the exits' classification need none of the probed features
  // (the exits' last variant goes without the CUDA sweep).
  for (SensorId id : {SensorId::kOom, SensorId::kExits}) {
    const SensorSpec* s = findSensor(id);
    ASSERT_NE(s, nullptr);
    EXPECT_TRUE(s->needs.empty()) << toString(id);
    EXPECT_TRUE(std::any_of(s->variants.begin(), s->variants.end(), [](const ProgramVariant& v) {
      return v.needs == KernelFeature::kNone;
    })) << toString(id);
  }
  EXPECT_TRUE(needs(*findSensor(SensorId::kRss), KernelFeature::kTaskStorage));
  EXPECT_TRUE(needs(*findSensor(SensorId::kCuda), KernelFeature::kForEachMapElem));
}

TEST(ProgramTable, TheReasonNamesEachMissingFeatureItsReleaseAndWhatIsLost) {
  EXPECT_EQ(missingFeaturesReason({KernelFeature::kTaskStorage}, "RSS comes from /proc"),
            "BPF task storage maps (Linux 5.11) not in this kernel: RSS comes from /proc");
  EXPECT_EQ(
      missingFeaturesReason({KernelFeature::kTaskStorage, KernelFeature::kCurrentTaskBtf}, "RSS comes from /proc"),
      "BPF task storage maps (Linux 5.11) and bpf_get_current_task_btf (Linux 5.11) not in this kernel: "
      "RSS comes from /proc");
  EXPECT_EQ(missingFeaturesReason(
                {KernelFeature::kTaskStorage, KernelFeature::kCurrentTaskBtf, KernelFeature::kForEachMapElem}, "x"),
            "BPF task storage maps (Linux 5.11), bpf_get_current_task_btf (Linux 5.11) and bpf_for_each_map_elem "
            "(Linux 5.13) not in this kernel: x");
}

TEST(ProgramTable, LibbpfsLogNamesTheMapItCouldNotMake) {
  EXPECT_EQ(failedMap("libbpf: map 'proc_hot': failed to create: Invalid argument(-22)\n"), "proc_hot");
  EXPECT_EQ(failedMap("libbpf: map 'oom_ring': created\nlibbpf: map 'proc_hot': failed to create: -22\n"), "proc_hot");
  // A program's failure, even one worded "failed to create", names no map.
  EXPECT_EQ(failedMap("libbpf: map 'oom_ring': sized\nlibbpf: prog 'x': failed to create BPF link: -1\n"), "");
  EXPECT_EQ(failedMap("libbpf: prog 'handle_exit': failed to load: -22\n"), "");
  EXPECT_EQ(failedProgram("libbpf: prog 'handle_exit': failed to load: -22\n"), "handle_exit");
}

}  // namespace
}  // namespace headroom::detail
