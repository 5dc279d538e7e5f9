// The loader: check what the kernel supports, open the object, set its rodata and map sizes, switch each
// sensor's programs on or off (and pick the variant this kernel fits), load, and attach each
// sensor's programs; what the kernel lacks or refuses degrades that sensor alone, and says so.
// Driven by the program table (sensors/detail/program_table.h).
#include <bpf/bpf.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstring>

#include "headroom/sensors/detail/program_table.h"
#include "sensors_impl.h"

namespace headroom {
namespace {

using detail::AttachKind;
using detail::KernelFeature;
using detail::ProgramVariant;
using detail::SensorSpec;

// The kernel's own BTF. Given to libbpf as the CO-RE target so that it never searches the kernel
// modules' BTF: libbpf 1.1 (Debian 12) walks them with BPF_BTF_GET_NEXT_ID, which needs
// CAP_SYS_ADMIN, and fails the whole load without it whenever a type flavour is absent from
// vmlinux (struct mm_rss_stat___old on 6.2+). Every type headroom relocates is in vmlinux.
constexpr const char* kVmlinuxBtf = "/sys/kernel/btf/vmlinux";

// The variant of a tp_btf sensor that fits the kernel's signature of its tracepoint and has
// what it needs.
const ProgramVariant* fittingVariant(const SensorSpec& s, const TracepointSignature& sig,
                                     const std::set<KernelFeature>& missing) {
  for (const ProgramVariant& v : s.variants) {
    if (missing.count(v.needs) != 0) continue;
    if (v.fits == nullptr || v.fits(sig)) return &v;
  }
  return nullptr;
}

// The features of detail::kernelFeatures() this kernel lacks, each probed once. A probe that
// cannot tell counts the feature as there: the load then decides, and a refusal names the program
// or the map.
std::set<KernelFeature> missingKernelFeatures() {
  std::set<KernelFeature> out;
  for (const detail::FeatureSpec& f : detail::kernelFeatures()) {
    std::optional<bool> has = f.helper ? kernelHasHelper(f.id) : kernelHasMapType(f.id);
    if (!has) {
      spdlog::debug("could not probe the kernel for {}; assuming it is there", f.what);
      continue;
    }
    if (!*has) out.insert(f.feature);
  }
  return out;
}

}  // namespace

Status Sensors::Impl::openAndLoad(const std::set<SensorId>& enabled, const std::set<KernelFeature>& missing,
                                  const std::set<std::string>& uncreated, std::map<SensorId, std::string>& notes) {
  // Filled by hand: LIBBPF_OPTS is a GNU statement expression, not C++.
  bpf_object_open_opts opts{};
  opts.sz = sizeof(opts);
  opts.btf_custom_path = canAccess(kVmlinuxBtf, R_OK) ? kVmlinuxBtf : nullptr;
  skel.reset(headroom_bpf__open_opts(&opts));
  if (!skel) return errnoError("opening the headroom BPF object");
  skel->rodata->cfg_filter_cgroups = cfg.tracked_cgroups.has_value();
  skel->rodata->cfg_cgroup_v1 = mounts.memoryVersion() == 1;
  struct Size {
    bpf_map* map;
    std::uint32_t n;
  };
  for (auto [map, n] :
       {Size{skel->maps.oom_ring, cfg.oom_ring_bytes}, Size{skel->maps.exit_ring, cfg.exit_ring_bytes},
        Size{skel->maps.proc_activity, cfg.max_processes}, Size{skel->maps.fault_totals, cfg.max_processes},
        Size{skel->maps.gpu_mem, cfg.max_processes}, Size{skel->maps.gpu_allocs, cfg.max_cuda_allocations},
        Size{skel->maps.tracked_cgroups, cfg.max_tracked_cgroups}}) {
    if (int err = bpf_map__set_max_entries(map, n); err != 0)
      return sysError(-err, fmt::format("sizing map {} to {}", bpf_map__name(map), n));
  }
  // Maps this kernel cannot make: no program left on uses them.
  for (const std::string& name : uncreated) {
    bpf_map* map = bpf_object__find_map_by_name(skel->obj, name.c_str());
    if (map == nullptr) continue;
    if (int err = bpf_map__set_autocreate(map, false); err != 0)
      return sysError(-err, fmt::format("leaving map {} out", name));
  }
  for (const SensorSpec& s : detail::sensorTable()) {
    bool on = enabled.count(s.sensor) != 0;
    for (const char* p : detail::programsOf(s)) {
      if (bpf_program* prog = program(p)) bpf_program__set_autoload(prog, on);
    }
    if (!on) continue;
    if (s.attach != AttachKind::kTpBtf) {
      notes[s.sensor] = s.note;
      continue;
    }
    // One variant, the one this kernel's tracepoint fits, attached where the config says.
    std::string tp = tracepoint(s.sensor, s.tracepoint);
    const ProgramVariant* chosen = fittingVariant(s, signature(tp), missing);
    for (const ProgramVariant& v : s.variants) {
      if (bpf_program* prog = program(v.program)) bpf_program__set_autoload(prog, &v == chosen);
    }
    if (chosen != nullptr) {
      if (bpf_program* prog = program(chosen->program)) bpf_program__set_attach_target(prog, 0, tp.c_str());
    }
    notes[s.sensor] = chosen != nullptr && *chosen->what != '\0' ? fmt::format("tp_btf/{} ({})", tp, chosen->what)
                                                                 : fmt::format("tp_btf/{}", tp);
    for (const auto& [prog_name, tp_name] : s.optional) {
      if (bpf_program* prog = program(prog_name); prog != nullptr && !signature(tp_name).exists)
        bpf_program__set_autoload(prog, false);
    }
  }
  if (int err = headroom_bpf__load(skel.get()); err != 0) {
    skel.reset();
    return sysError(-err, "loading the BPF programs");
  }
  return ok();
}

void Sensors::Impl::startBpf() {
  routeLibbpfLogToSpdlog();
  vmlinux.reset(btf__load_vmlinux_btf());
  std::map<SensorId, std::string> notes;
  std::set<SensorId> enabled = {SensorId::kOom, SensorId::kExits};
  if (cfg.faults) enabled.insert(SensorId::kFaults);
  if (cfg.mmap) enabled.insert(SensorId::kMmap);
  if (cfg.rss) enabled.insert(SensorId::kRss);
  if (cfg.cuda) enabled.insert(SensorId::kCuda);

  // Before load: switch off what this kernel lacks, and say so. A map whose type the kernel
  // lacks is not made at all (libbpf would fail the whole object on it).
  const std::set<KernelFeature> missing = missingKernelFeatures();
  std::set<std::string> uncreated;
  for (KernelFeature f : missing) {
    if (const detail::FeatureSpec* spec = detail::findFeature(f); spec != nullptr && spec->map != nullptr)
      uncreated.insert(spec->map);
  }
  for (const SensorSpec& s : detail::sensorTable()) {
    if (!enabled.count(s.sensor)) continue;
    std::vector<KernelFeature> lacks;
    for (KernelFeature f : s.needs) {
      if (missing.count(f)) lacks.push_back(f);
    }
    if (s.attach == AttachKind::kTpBtf) {
      std::string tp = tracepoint(s.sensor, s.tracepoint);
      if (!signature(tp).exists) {
        enabled.erase(s.sensor);
        set(s.sensor, SensorState::kDegraded, fmt::format("tracepoint {} not in this kernel ({})", tp, s.without));
        continue;
      }
    } else if (s.attach == AttachKind::kTracepoint && !(ensureTracefs() && syscallTracepointsExist())) {
      enabled.erase(s.sensor);
      set(s.sensor, SensorState::kDegraded, s.without);
      continue;
    }
    if (!lacks.empty()) {
      enabled.erase(s.sensor);
      set(s.sensor, SensorState::kDegraded, detail::missingFeaturesReason(lacks, s.without));
    }
  }
  for (SensorId s : {SensorId::kFaults, SensorId::kMmap, SensorId::kRss, SensorId::kCuda}) {
    if (!enabled.count(s) && status(s).state == SensorState::kOff && status(s).reason.empty())
      set(s, SensorState::kOff, "switched off in the configuration");
  }

  // Load; if the kernel refuses a program, switch off the sensor it belongs to and retry; if it
  // refuses a map, the sensors that use it (or, when libbpf says neither, the least important
  // sensor still on).
  for (;;) {
    detail::LibbpfLogCapture capture;
    auto st = openAndLoad(enabled, missing, uncreated, notes);
    if (st) break;
    std::string failed = detail::failedProgram(capture.text());
    int code = st.error().code;
    if (std::string map = detail::failedMap(capture.text()); failed.empty() && !map.empty() && !uncreated.count(map)) {
      uncreated.insert(map);
      for (SensorId sensor : detail::sensorsUsingMap(map)) {
        if (!enabled.erase(sensor)) continue;
        set(sensor, SensorState::kDegraded, fmt::format("the kernel refused map {}: {}", map, st.error().describe()));
      }
      continue;
    }
    if (failed.empty() && (code == EPERM || code == EACCES)) {
      // Not one program's fault: this process may not load BPF at all.
      for (const auto& sensor : enabled)
        set(sensor, SensorState::kDegraded,
            fmt::format("BPF not permitted ({}): needs CAP_BPF and CAP_PERFMON, or root", std::strerror(code)));
      return;
    }
    std::optional<SensorId> victim;
    if (const SensorSpec* s = detail::sensorOfProgram(failed); s != nullptr && enabled.count(s->sensor))
      victim = s->sensor;
    for (SensorId s : detail::kSacrificeOrder) {
      if (!victim && enabled.count(s)) victim = s;
    }
    if (!victim) return;
    set(*victim, SensorState::kDegraded,
        failed.empty() ? fmt::format("{} (switched off so the rest could load)", st.error().describe())
                       : fmt::format("the kernel refused program {}: {}", failed, st.error().describe()));
    enabled.erase(*victim);
  }

  if (cfg.tracked_cgroups) {
    if (auto st = trackCgroupsNow(*cfg.tracked_cgroups); !st)
      spdlog::warn("tracking cgroups: {}", st.error().describe());
  }

  for (const SensorSpec& s : detail::sensorTable()) {
    if (!enabled.count(s.sensor) || s.attach == AttachKind::kUprobe) continue;  // uprobes: per library
    std::string failure;
    for (const char* p : detail::programsOf(s)) {
      bpf_program* prog = program(p);
      if (prog == nullptr || !bpf_program__autoload(prog)) continue;
      bpf_link* l = bpf_program__attach(prog);
      if (l == nullptr) {
        int err = errno;
        failure = fmt::format("attaching {}: {}{}", p, std::strerror(err),
                              bpf_program__type(prog) == BPF_PROG_TYPE_TRACEPOINT ? perfEventHint(err) : "");
        break;
      }
      links.emplace_back(l);
    }
    if (failure.empty())
      set(s.sensor, SensorState::kActive, notes[s.sensor]);
    else
      set(s.sensor, SensorState::kDegraded, failure);
  }

  // The rings that were made (a ring the kernel refused took its sensor with it).
  auto onOom = [](void* ctx, void* data, std::size_t size) {
    static_cast<Impl*>(ctx)->onOomRecord(data, size);
    return 0;
  };
  auto onExit = [](void* ctx, void* data, std::size_t size) {
    static_cast<Impl*>(ctx)->onExitRecord(data, size);
    return 0;
  };
  for (auto [map, fn] : {std::pair<bpf_map*, ring_buffer_sample_fn>{skel->maps.oom_ring, onOom},
                         std::pair<bpf_map*, ring_buffer_sample_fn>{skel->maps.exit_ring, onExit}}) {
    int fd = bpf_map__fd(map);
    if (fd < 0) continue;
    bool made = false;
    if (rings) {
      made = ring_buffer__add(rings.get(), fd, fn, this) == 0;
    } else {
      rings.reset(ring_buffer__new(fd, fn, this, nullptr));
      made = rings != nullptr;
    }
    if (!made) {
      set(SensorId::kOom, SensorState::kDegraded, fmt::format("ring buffer: {}", std::strerror(errno)));
      rings.reset();
      break;
    }
  }
  if (enabled.count(SensorId::kCuda)) attachConfiguredCuda();
}

Status Sensors::Impl::trackCgroupsNow(const std::vector<std::uint64_t>& ids) {
  if (!skel) return unsupported("BPF is not loaded");
  if (!cfg.tracked_cgroups) return badInput("tracking every cgroup: no filter was configured at start");
  int fd = bpf_map__fd(skel->maps.tracked_cgroups);
  std::set<std::uint64_t> want(ids.begin(), ids.end());
  // Remove what is no longer wanted, then add the rest.
  std::uint64_t key = 0, next = 0;
  std::vector<std::uint64_t> stale;
  bool first = true;
  while (bpf_map_get_next_key(fd, first ? nullptr : &key, &next) == 0) {
    first = false;
    if (!want.count(next)) stale.push_back(next);
    key = next;
  }
  for (auto k : stale) bpf_map_delete_elem(fd, &k);
  std::uint8_t one = 1;
  Status st = ok();
  for (auto id : want) {
    if (bpf_map_update_elem(fd, &id, &one, BPF_ANY) != 0) {
      st = errnoError(fmt::format("adding cgroup id {} to the tracked set (max {})", id, cfg.max_tracked_cgroups));
      break;
    }
  }
  // The fault program judges each process once per run: make it judge them all again.
  __atomic_add_fetch(&skel->bss->filter_gen, 1, __ATOMIC_RELEASE);
  return st;
}

}  // namespace headroom
