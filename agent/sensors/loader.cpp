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
using detail::ProgramVariant;
using detail::SensorSpec;

// The kernel's own BTF. Given to libbpf as the CO-RE target so that it never searches the kernel
// modules' BTF: libbpf 1.1 (Debian 12) walks them with BPF_BTF_GET_NEXT_ID, which needs
// CAP_SYS_ADMIN, and fails the whole load without it whenever a type flavour is absent from
// vmlinux (struct mm_rss_stat___old on 6.2+). Every type headroom relocates is in vmlinux.
constexpr const char* kVmlinuxBtf = "/sys/kernel/btf/vmlinux";

// The variant of a tp_btf sensor that fits the kernel's signature of its tracepoint.
const ProgramVariant* fittingVariant(const SensorSpec& s, const TracepointSignature& sig) {
  for (const ProgramVariant& v : s.variants) {
    if (v.fits == nullptr || v.fits(sig)) return &v;
  }
  return nullptr;
}

}  // namespace

Status Sensors::Impl::openAndLoad(const std::set<SensorId>& enabled, std::map<SensorId, std::string>& notes) {
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
    const ProgramVariant* chosen = fittingVariant(s, signature(tp));
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

  // Before load: switch off what this kernel lacks, and say so.
  for (const SensorSpec& s : detail::sensorTable()) {
    if (!enabled.count(s.sensor)) continue;
    if (s.attach == AttachKind::kTpBtf) {
      std::string tp = tracepoint(s.sensor, s.tracepoint);
      if (!signature(tp).exists) {
        enabled.erase(s.sensor);
        set(s.sensor, SensorState::kDegraded, fmt::format("tracepoint {} not in this kernel ({})", tp, s.without));
      }
    } else if (s.attach == AttachKind::kTracepoint && !(ensureTracefs() && syscallTracepointsExist())) {
      enabled.erase(s.sensor);
      set(s.sensor, SensorState::kDegraded, s.without);
    }
  }
  for (SensorId s : {SensorId::kFaults, SensorId::kMmap, SensorId::kRss, SensorId::kCuda}) {
    if (!enabled.count(s) && status(s).state == SensorState::kOff && status(s).reason.empty())
      set(s, SensorState::kOff, "switched off in the configuration");
  }

  // Load; if the kernel refuses a program, switch off the sensor it belongs to and retry (or,
  // when libbpf does not say which, the least important sensor still on).
  for (;;) {
    detail::LibbpfLogCapture capture;
    auto st = openAndLoad(enabled, notes);
    if (st) break;
    std::string failed = detail::failedProgram(capture.text());
    int code = st.error().code;
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

  rings.reset(ring_buffer__new(
      bpf_map__fd(skel->maps.oom_ring),
      [](void* ctx, void* data, std::size_t size) {
        static_cast<Impl*>(ctx)->onOomRecord(data, size);
        return 0;
      },
      this, nullptr));
  auto onExit = [](void* ctx, void* data, std::size_t size) {
    static_cast<Impl*>(ctx)->onExitRecord(data, size);
    return 0;
  };
  if (!rings || ring_buffer__add(rings.get(), bpf_map__fd(skel->maps.exit_ring), onExit, this) != 0) {
    set(SensorId::kOom, SensorState::kDegraded, fmt::format("ring buffer: {}", std::strerror(errno)));
    rings.reset();
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
