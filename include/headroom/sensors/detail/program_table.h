// The sensors and their BPF programs, declared once: what the kernel-support check tests before
// load, what the loader switches on and off, which variant fits this kernel, what it attaches,
// and which sensor to blame when the kernel refuses a program.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/sensors/kernel_support.h"
#include "headroom/sensors/readings.h"

namespace headroom::detail {

enum class AttachKind {
  kTpBtf,       // tp_btf/<tracepoint>: BTF-typed, no tracefs; the target set by the loader
  kTracepoint,  // tp/<category>/<name>: needs tracefs (and perf_event_open)
  kUprobe,      // per library, by file offset (the CUDA sensor)
};

// A BPF feature some programs need that not every kernel headroom runs on has (5.10 lacks
// each): probed before load, and the sensors that need it are switched off where it is missing.
enum class KernelFeature {
  kNone,
  kTaskStorage,     // BPF_MAP_TYPE_TASK_STORAGE: the map proc_hot
  kCurrentTaskBtf,  // bpf_get_current_task_btf: a trusted pointer to the current task
  kForEachMapElem,  // bpf_for_each_map_elem
};
struct FeatureSpec {
  KernelFeature feature;
  bool helper;        // a helper (probed as a bpf_func_id), else a map type (a bpf_map_type)
  int id;             // the bpf_func_id or bpf_map_type
  const char* what;   // "BPF task storage maps"
  const char* since;  // the release it came in: "5.11"
  const char* map;    // a map type: the object's map of that type, not created where missing
};
const std::vector<FeatureSpec>& kernelFeatures();
const FeatureSpec* findFeature(KernelFeature feature);

// One program that serves a tp_btf tracepoint whose arguments differ by kernel: the loader loads
// the first variant that fits the kernel's btf_trace_<tracepoint> and has what it needs.
struct ProgramVariant {
  const char* program;
  bool (*fits)(const TracepointSignature& sig);  // nullptr: fits any (the last resort)
  const char* what;                              // for the sensor's note; "" when alone
  KernelFeature needs = KernelFeature::kNone;    // a feature this variant alone needs
};

struct SensorSpec {
  SensorId sensor;  // oom, exits, faults, mmap, rss, cuda: the BPF ones
  AttachKind attach;
  const char* tracepoint;                // kTpBtf: the default tracepoint (a config may point it elsewhere)
  std::vector<ProgramVariant> variants;  // kTpBtf: one is loaded
  std::vector<const char*> programs;     // loaded with the sensor, whatever the kernel
  // (program, tracepoint): loaded with the sensor when the kernel has that tracepoint, silently
  // left out when not (the oom_reaper's, which add timing only).
  std::vector<std::pair<const char*, const char*>> optional;
  const char* note;                  // when active and not kTpBtf: what it attached to
  const char* without;               // when it cannot run: what headroom does instead
  std::vector<KernelFeature> needs;  // what its programs need of the kernel, whatever the variant
  std::vector<const char*> maps;     // the maps its programs use
};

// One uprobe entry program of the CUDA sensor and the symbols it serves: every variant of the
// entry point (_v2, _ptsz, ...), each attached where the library has it, with the shared
// uretprobe `cuda_return`.
struct UprobeTarget {
  const char* program;
  std::vector<const char*> symbols;
  bool runtime;  // the runtime API (libcudart, or a binary with it linked in), else the driver's
};
const std::vector<UprobeTarget>& cudaUprobes();
inline constexpr const char* kCudaReturnProgram = "cuda_return";

// Every BPF sensor, in the order their states are listed.
const std::vector<SensorSpec>& sensorTable();
const SensorSpec* findSensor(SensorId sensor);
// The sensor a program of the object belongs to (nullptr: none).
const SensorSpec* sensorOfProgram(std::string_view program);
// Every program of a sensor: its variants, its fixed programs, its optional ones.
std::vector<const char*> programsOf(const SensorSpec& s);

// The sensors whose programs use `map` (a map that failed to be made takes them down alone).
std::vector<SensorId> sensorsUsingMap(std::string_view map);
// Why a sensor is off where the kernel lacks `missing`: the features with the release each came
// in, then what headroom does instead (`without`).
std::string missingFeaturesReason(const std::vector<KernelFeature>& missing, std::string_view without);

// Which sensor is given up first when the kernel refuses the object without naming a program:
// the least important still on.
inline constexpr std::array<SensorId, 6> kSacrificeOrder = {SensorId::kCuda,   SensorId::kRss,   SensorId::kMmap,
                                                            SensorId::kFaults, SensorId::kExits, SensorId::kOom};

}  // namespace headroom::detail
