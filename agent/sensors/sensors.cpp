#include "headroom/sensors/sensors.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <set>

#include "events.h"
#include "headroom.skel.h"
#include "headroom/sources/kmsg.h"
#include "headroom/sources/parse.h"
#include "headroom/sources/procfs.h"

namespace headroom {

TracepointSignature tracepointSignature(const std::string& name, const ::btf* vmlinux) {
  TracepointSignature sig;
  ::btf* owned = nullptr;
  if (vmlinux == nullptr) {
    owned = btf__load_vmlinux_btf();
    if (owned == nullptr) return sig;
    vmlinux = owned;
  }
  int id = btf__find_by_name_kind(vmlinux, ("btf_trace_" + name).c_str(), BTF_KIND_TYPEDEF);
  if (id > 0) {
    // typedef -> pointer -> func_proto(void *, args...)
    const btf_type* t = btf__type_by_id(vmlinux, btf__resolve_type(vmlinux, id));
    if (t != nullptr && btf_is_ptr(t)) t = btf__type_by_id(vmlinux, t->type);
    if (t != nullptr && btf_is_func_proto(t)) {
      sig.exists = true;
      sig.args = std::max(0, btf_vlen(t) - 1);
      if (sig.args > 0) {
        const btf_param* params = btf_params(t);
        int first = btf__resolve_type(vmlinux, params[1].type);
        const btf_type* ft = first > 0 ? btf__type_by_id(vmlinux, first) : nullptr;
        sig.first_is_pointer = ft != nullptr && btf_is_ptr(ft);
      }
    }
  }
  btf__free(owned);
  return sig;
}

namespace {

std::int64_t nowNs(clockid_t c) {
  timespec ts{};
  ::clock_gettime(c, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::string commOf(const char (&c)[HR_COMM_LEN]) { return std::string(c, strnlen(c, HR_COMM_LEN)); }

// access() with the effective ids and capabilities. Plain access() checks the real uid and, for
// a non-root one, drops every capability: an agent running as its own user with
// CAP_DAC_READ_SEARCH (systemd User= + AmbientCapabilities=) would be told that /sys/kernel/tracing
// (mode 0700) or a prover's binary does not exist although it can open them.
bool canAccess(const char* path, int mode) { return ::faccessat(AT_FDCWD, path, mode, AT_EACCESS) == 0; }

// A tracepoint program attaches through perf_event_open. Debian's kernels (and Android's) add a
// level 3 to kernel.perf_event_paranoid, their default, at which the kernel opens perf events
// for CAP_SYS_ADMIN only: CAP_PERFMON is refused (seen on Debian 12's 6.1 and 13's 6.12).
std::string perfEventHint(int err) {
  if (err != EACCES && err != EPERM) return "";
  std::ifstream f("/proc/sys/kernel/perf_event_paranoid");
  int level = 0;
  if (!(f >> level) || level < 3) return "";
  return fmt::format(" (kernel.perf_event_paranoid is {}: this kernel opens tracepoint events for CAP_SYS_ADMIN only; "
                     "set it to 2, or grant CAP_SYS_ADMIN)",
                     level);
}

// The kernel's own BTF. Given to libbpf as the CO-RE target so that it never searches the kernel
// modules' BTF: libbpf 1.1 (Debian 12) walks them with BPF_BTF_GET_NEXT_ID, which needs
// CAP_SYS_ADMIN, and fails the whole load without it whenever a type flavour is absent from
// vmlinux (struct mm_rss_stat___old on 6.2+). Every type headroom relocates is in vmlinux.
constexpr const char* kVmlinuxBtf = "/sys/kernel/btf/vmlinux";

struct LinkDeleter {
  void operator()(bpf_link* l) const { bpf_link__destroy(l); }
};
using Link = std::unique_ptr<bpf_link, LinkDeleter>;
struct SkelDeleter {
  void operator()(headroom_bpf* s) const { headroom_bpf__destroy(s); }
};
struct RingDeleter {
  void operator()(ring_buffer* r) const { ring_buffer__free(r); }
};

// One CUDA handler and the symbols (every variant) it serves.
struct CudaProbe {
  const char* program;
  std::vector<const char*> symbols;
  bool runtime;
};

const std::vector<CudaProbe>& cudaProbes() {
  static const std::vector<CudaProbe> probes = {
      {"host_alloc", {"cuMemHostAlloc", "cuMemAllocHost_v2", "cuMemAllocHost"}, false},
      {"host_register", {"cuMemHostRegister_v2", "cuMemHostRegister"}, false},
      {"host_free", {"cuMemFreeHost", "cuMemHostUnregister"}, false},
      {"dev_alloc",
       {"cuMemAlloc_v2", "cuMemAlloc", "cuMemAllocManaged", "cuMemAllocAsync", "cuMemAllocAsync_ptsz",
        "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz"},
       false},
      {"dev_alloc_pitch", {"cuMemAllocPitch_v2", "cuMemAllocPitch"}, false},
      {"dev_free", {"cuMemFree_v2", "cuMemFree", "cuMemFreeAsync", "cuMemFreeAsync_ptsz"}, false},
      {"vmm_create", {"cuMemCreate"}, false},
      {"vmm_release", {"cuMemRelease"}, false},
      {"ctx_destroy", {"cuCtxDestroy_v2", "cuCtxDestroy", "cuDevicePrimaryCtxReset_v2", "cuDevicePrimaryCtxReset"}, false},
      {"rt_host_alloc", {"cudaHostAlloc", "cudaMallocHost"}, true},
      {"rt_host_register", {"cudaHostRegister"}, true},
      {"rt_host_free", {"cudaFreeHost", "cudaHostUnregister"}, true},
      {"rt_dev_alloc", {"cudaMalloc", "cudaMallocManaged", "cudaMallocAsync", "cudaMallocAsync_ptsz"}, true},
      {"rt_dev_free", {"cudaFree", "cudaFreeAsync", "cudaFreeAsync_ptsz"}, true},
  };
  return probes;
}

// Function symbols of an ELF file (dynamic and static tables) with their file offsets, read
// once per file: uprobes attach by offset, so a missing variant costs nothing and logs nothing.
Result<std::map<std::string, std::size_t>> elfFunctionOffsets(const std::string& path) {
  std::map<std::string, std::size_t> out;
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return errnoError(fmt::format("opening {}", path));
  if (elf_version(EV_CURRENT) == EV_NONE) return makeError(EINVAL, "libelf version mismatch");
  Elf* elf = elf_begin(fd.get(), ELF_C_READ, nullptr);
  if (elf == nullptr) return makeError(EINVAL, fmt::format("{} is not an ELF file", path));
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == nullptr || (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM)) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (data == nullptr || sh.sh_entsize == 0) continue;
    std::size_t n = sh.sh_size / sh.sh_entsize;
    for (std::size_t i = 0; i < n; ++i) {
      GElf_Sym sym;
      if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr) continue;
      if (GELF_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_shndx == SHN_UNDEF || sym.st_value == 0) continue;
      const char* name = elf_strptr(elf, sh.sh_link, sym.st_name);
      if (name == nullptr) continue;
      // The symbol's address made a file offset through its section.
      GElf_Shdr target;
      Elf_Scn* tscn = elf_getscn(elf, sym.st_shndx);
      if (tscn == nullptr || gelf_getshdr(tscn, &target) == nullptr) continue;
      out.emplace(name, sym.st_value - target.sh_addr + target.sh_offset);
    }
  }
  elf_end(elf);
  return out;
}

}  // namespace

struct Sensors::Impl {
  const FsRoot* fs = nullptr;
  SensorsConfig cfg;
  CgroupMounts mounts;
  std::optional<CgroupHierarchy> hierarchy;
  std::unique_ptr<headroom_bpf, SkelDeleter> skel;
  std::vector<Link> links;
  std::unique_ptr<ring_buffer, RingDeleter> rings;
  std::optional<KmsgReader> kmsg;
  KmsgOomParser kmsg_parser;
  OomJoiner joiner;
  std::vector<SensorStatus> statuses;
  std::vector<ExitEvent> exits;
  std::vector<OomEvent> ooms;
  std::set<std::string> cuda_attached;
  std::map<std::uint64_t, std::string> cgroup_paths;  // inode -> path, rebuilt on a miss
  std::int64_t cgroup_paths_built_ns = 0;
  std::uint64_t events = 0;
  std::optional<std::int64_t> last_mark_latency_ns;
  std::unique_ptr<btf, void (*)(btf*)> vmlinux{nullptr, btf__free};  // loaded once at start
  TracepointSignature signature(const std::string& name) const { return tracepointSignature(name, vmlinux.get()); }
  // Per process, the fault count last answered (with the mm it was for): a count read while a
  // CPU's run was being ended can briefly miss that run, and a counter must never go back.
  std::map<pid_t, std::pair<std::uint64_t, std::uint64_t>> answered_faults;
  int cpus = std::max(1, libbpf_num_possible_cpus());  // the per-CPU map's value count

  // A process's page faults: its total of ended runs plus the runs still open on each CPU.
  // The per-CPU slots are copied before and after the total; a slot whose sequence moved in
  // between was ended meanwhile, and its faults are in the total or in the next answer.
  std::optional<std::uint64_t> faultsOf(pid_t tgid) {
    int runs = bpf_map__fd(skel->maps.fault_runs);
    int totals = bpf_map__fd(skel->maps.fault_totals);
    __u32 zero = 0;
    __u32 key = static_cast<__u32>(tgid);
    std::vector<fault_run> before(static_cast<std::size_t>(cpus)), after(static_cast<std::size_t>(cpus));
    fault_total total{};
    if (bpf_map_lookup_elem(runs, &zero, before.data()) != 0 || bpf_map_lookup_elem(totals, &key, &total) != 0 ||
        bpf_map_lookup_elem(runs, &zero, after.data()) != 0) {
      answered_faults.erase(tgid);
      return std::nullopt;
    }
    std::uint64_t sum = total.faults;
    for (std::size_t i = 0; i < after.size(); ++i) {
      const fault_run& r = after[i];
      if (r.seq == before[i].seq && r.seq % 2 == 0 && r.tgid == key && r.mm == total.mm && r.tracked) sum += r.count;
    }
    if (answered_faults.size() > 2 * static_cast<std::size_t>(cfg.max_processes)) answered_faults.clear();
    auto [it, fresh] = answered_faults.try_emplace(tgid, total.mm, sum);
    if (!fresh) {
      if (it->second.first == total.mm) sum = std::max(sum, it->second.second);
      it->second = {total.mm, sum};
    }
    return sum;
  }

  SensorStatus& status(const std::string& name) {
    for (auto& s : statuses) {
      if (s.name == name) return s;
    }
    statuses.push_back(SensorStatus{name, SensorState::kOff, ""});
    return statuses.back();
  }
  void set(const std::string& name, SensorState st, std::string reason) {
    SensorStatus& s = status(name);
    s.state = st;
    s.reason = std::move(reason);
    if (st == SensorState::kDegraded) spdlog::warn("sensor {} degraded: {}", name, s.reason);
    else spdlog::info("sensor {} {}: {}", name, toString(st), s.reason);
  }
  std::string tracepoint(const std::string& sensor, const std::string& dflt) const {
    auto it = cfg.tracepoints.find(sensor);
    return it == cfg.tracepoints.end() ? dflt : it->second;
  }

  void buildCgroupPaths() {
    cgroup_paths.clear();
    if (!hierarchy) return;
    // Breadth-first over the memory hierarchy, bounded so a huge tree cannot stall a tick.
    std::vector<std::string> queue = {"/"};
    for (std::size_t i = 0; i < queue.size() && i < 100000; ++i) {
      auto dir = hierarchy->open(queue[i]);
      if (!dir) continue;
      struct stat st {};
      if (::fstat(dir->fd(), &st) == 0) cgroup_paths[st.st_ino] = queue[i];
      auto subs = dir->list(true);
      if (!subs) continue;
      for (const auto& s : *subs) queue.push_back(queue[i] == "/" ? "/" + s : queue[i] + "/" + s);
    }
    cgroup_paths_built_ns = nowNs(CLOCK_MONOTONIC);
  }
  std::string cgroupPath(std::uint64_t id) {
    if (id == 0) return "";
    auto it = cgroup_paths.find(id);
    if (it == cgroup_paths.end() && nowNs(CLOCK_MONOTONIC) - cgroup_paths_built_ns > 100'000'000) {
      buildCgroupPaths();
      it = cgroup_paths.find(id);
    }
    return it == cgroup_paths.end() ? fmt::format("cgroup-id:{}", id) : it->second;
  }

  void onOomRecord(const void* data, std::size_t size) {
    ++events;
    if (size < sizeof(std::uint32_t)) return;
    std::uint32_t type = 0;
    std::memcpy(&type, data, sizeof type);
    std::int64_t now = nowNs(CLOCK_MONOTONIC);
    if (type == HR_EV_OOM_VICTIM && size >= sizeof(oom_victim_event)) {
      oom_victim_event e{};
      std::memcpy(&e, data, sizeof e);
      OomMark m;
      m.ts_ns = static_cast<std::int64_t>(e.ts_ns);
      last_mark_latency_ns = now - m.ts_ns;
      m.trigger_pid = static_cast<pid_t>(e.trigger.pid);
      m.trigger_tgid = static_cast<pid_t>(e.trigger.tgid);
      m.trigger_comm = commOf(e.trigger.comm);
      m.trigger_cgroup = cgroupPath(e.trigger_cgroup_id);
      OomVictim& v = m.victim;
      v.pid = static_cast<pid_t>(e.victim.pid);
      if (e.flags & HR_OOM_VICTIM_TASK) {
        constexpr std::uint64_t kPage = 4096;
        v.tgid = static_cast<pid_t>(e.victim.tgid);
        v.comm = commOf(e.victim.comm);
        v.uid = e.victim_uid;
        v.oom_score_adj = e.victim_oom_score_adj;
        v.cgroup = cgroupPath(e.victim_cgroup_id);
        v.total_vm = e.victim_total_vm_pages * kPage;
        v.anon_rss = e.victim_rss_anon_pages * kPage;
        v.file_rss = e.victim_rss_file_pages * kPage;
        v.shmem_rss = e.victim_rss_shmem_pages * kPage;
        v.swap = e.victim_swapents * kPage;
        v.pgtables = e.victim_pgtables_bytes;
        v.kill_skipped = (e.flags & HR_OOM_VICTIM_EXITING) != 0;
      } else {
        // Only a thread id: the process is dying but usually still readable.
        auto r = readProcess(*fs, v.pid, false);
        if (r.outcome == ReadOutcome::kOk) {
          v.tgid = r.sample.status.tgid;
          v.comm = r.sample.comm;
        }
      }
      joiner.addMark(m, now);
    } else if ((type == HR_EV_REAP_START || type == HR_EV_REAP_FINISH) && size >= sizeof(reap_event)) {
      reap_event e{};
      std::memcpy(&e, data, sizeof e);
      joiner.addReap(static_cast<pid_t>(e.pid), type == HR_EV_REAP_FINISH, static_cast<std::int64_t>(e.ts_ns));
    }
  }

  void onExitRecord(const void* data, std::size_t size) {
    ++events;
    if (size < sizeof(exit_event)) return;
    exit_event e{};
    std::memcpy(&e, data, sizeof e);
    ExitEvent x = classifyExit(static_cast<pid_t>(e.task.tgid), e.exit_code, (e.flags & HR_EXIT_OOM_MARKED) != 0,
                               (e.flags & HR_EXIT_SHARES_OOM_MM) != 0);
    x.comm = commOf(e.task.comm);
    x.parent_pid = static_cast<pid_t>(e.parent_tgid);
    x.cgroup = cgroupPath(e.cgroup_id);
    x.monotonic_time_ns = static_cast<std::int64_t>(e.ts_ns);
    answered_faults.erase(x.pid);
    exits.push_back(std::move(x));
    // Bound the queue: a consumer that never takes exits must not grow us without limit.
    if (exits.size() > 65536) exits.erase(exits.begin(), exits.begin() + 32768);
  }

  static int oomCallback(void* ctx, void* data, std::size_t size) {
    static_cast<Impl*>(ctx)->onOomRecord(data, size);
    return 0;
  }
  static int exitCallback(void* ctx, void* data, std::size_t size) {
    static_cast<Impl*>(ctx)->onExitRecord(data, size);
    return 0;
  }

  bpf_program* program(const char* name) const {
    return skel ? bpf_object__find_program_by_name(skel->obj, name) : nullptr;
  }

  bool ensureTracefs() const {
    if (canAccess("/sys/kernel/tracing/events", F_OK) || canAccess("/sys/kernel/debug/tracing/events", F_OK))
      return true;
    // tracefs is not mounted on a fresh machine; tp/ programs need it (raw_tp/tp_btf do not).
    if (::mount("tracefs", "/sys/kernel/tracing", "tracefs", 0, nullptr) == 0) {
      spdlog::info("mounted tracefs at /sys/kernel/tracing for the syscall tracepoints");
      return true;
    }
    return false;
  }

  bool syscallTracepointsExist() const {
    for (const char* base : {"/sys/kernel/tracing/events/syscalls", "/sys/kernel/debug/tracing/events/syscalls"}) {
      if (canAccess(fmt::format("{}/sys_enter_mmap", base).c_str(), F_OK)) return true;
    }
    return false;
  }

  // Opens the skeleton with the given sensors' programs on; returns why a load failed.
  Result<Ok> openAndLoad(const std::set<std::string>& enabled, std::map<std::string, std::string>& notes);
  void startBpf();
  void startKmsg();
  Status trackCgroupsNow(const std::vector<std::uint64_t>& ids);
  Status attachCudaNow(const std::string& path, bool runtime);
  // A CUDA target found (or configured) but not attached: said in the sensor's state unless
  // another target is already attached.
  void cudaFailed(const Error& e) {
    if (status("cuda").state != SensorState::kActive) set("cuda", SensorState::kDegraded, e.describe());
    else spdlog::warn("cuda: {}", e.describe());
  }
};

namespace {
// Which programs belong to which sensor (for autoload and for degrading a sensor as a whole).
const std::map<std::string, std::vector<const char*>>& sensorPrograms() {
  static const std::map<std::string, std::vector<const char*>> m = {
      {"oom", {"mark_victim_task", "mark_victim_pid", "start_task_reaping", "finish_task_reaping"}},
      {"exits", {"handle_exit"}},
      {"faults", {"count_fault"}},
      {"mmap",
       {"enter_mmap", "exit_mmap", "enter_munmap", "exit_munmap", "enter_mremap", "exit_mremap", "enter_mlock",
        "exit_mlock", "enter_mlock2", "exit_mlock2", "enter_munlock", "exit_munlock"}},
      {"rss", {"rss_stat_new", "rss_stat_old"}},
      {"cuda",
       {"host_alloc", "host_register", "host_free", "dev_alloc", "dev_alloc_pitch", "dev_free", "vmm_create",
        "vmm_release", "ctx_destroy", "rt_host_alloc", "rt_host_register", "rt_host_free", "rt_dev_alloc",
        "rt_dev_free", "cuda_return"}},
  };
  return m;
}
}  // namespace

Result<Ok> Sensors::Impl::openAndLoad(const std::set<std::string>& enabled, std::map<std::string, std::string>& notes) {
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
  for (auto [map, n] : {Size{skel->maps.oom_ring, cfg.oom_ring_bytes}, Size{skel->maps.exit_ring, cfg.exit_ring_bytes},
                        Size{skel->maps.proc_activity, cfg.max_processes}, Size{skel->maps.fault_totals, cfg.max_processes},
                        Size{skel->maps.gpu_mem, cfg.max_processes},
                        Size{skel->maps.gpu_allocs, cfg.max_cuda_allocations},
                        Size{skel->maps.tracked_cgroups, cfg.max_tracked_cgroups}}) {
    if (int err = bpf_map__set_max_entries(map, n); err != 0)
      return makeError(-err, fmt::format("sizing map {} to {}", bpf_map__name(map), n));
  }
  // Switch off every program whose sensor is not enabled, and the variant that does not fit
  // this kernel's tracepoint signature.
  for (const auto& [sensor, progs] : sensorPrograms()) {
    for (const char* p : progs) {
      if (bpf_program* prog = program(p)) bpf_program__set_autoload(prog, enabled.count(sensor) != 0);
    }
  }
  if (enabled.count("oom")) {
    std::string tp = tracepoint("oom", "mark_victim");
    TracepointSignature sig = signature(tp);
    bool task = sig.args >= 2 && sig.first_is_pointer;
    bpf_program__set_autoload(skel->progs.mark_victim_task, task);
    bpf_program__set_autoload(skel->progs.mark_victim_pid, !task);
    bpf_program__set_attach_target(task ? skel->progs.mark_victim_task : skel->progs.mark_victim_pid, 0, tp.c_str());
    notes["oom"] = task ? fmt::format("tp_btf/{} (victim task_struct)", tp) : fmt::format("tp_btf/{} (victim pid only)", tp);
    for (auto [prog, name] : {std::pair{skel->progs.start_task_reaping, "start_task_reaping"},
                              std::pair{skel->progs.finish_task_reaping, "finish_task_reaping"}}) {
      if (!signature(name).exists) bpf_program__set_autoload(prog, false);
    }
  }
  if (enabled.count("exits")) {
    std::string tp = tracepoint("exits", "sched_process_exit");
    bpf_program__set_attach_target(skel->progs.handle_exit, 0, tp.c_str());
    notes["exits"] = "tp_btf/" + tp;
  }
  if (enabled.count("faults")) {
    std::string tp = tracepoint("faults", "page_fault_user");
    bpf_program__set_attach_target(skel->progs.count_fault, 0, tp.c_str());
    notes["faults"] = "tp_btf/" + tp;
  }
  if (enabled.count("rss")) {
    std::string tp = tracepoint("rss", "rss_stat");
    TracepointSignature sig = signature(tp);
    bool old = sig.args >= 3;
    bpf_program__set_autoload(skel->progs.rss_stat_new, !old);
    bpf_program__set_autoload(skel->progs.rss_stat_old, old);
    bpf_program__set_attach_target(old ? skel->progs.rss_stat_old : skel->progs.rss_stat_new, 0, tp.c_str());
    notes["rss"] = fmt::format("tp_btf/{} ({})", tp, old ? "before 6.2: fires on counter sync" : "6.2+: every change");
  }
  if (enabled.count("mmap")) notes["mmap"] = "tp/syscalls/sys_{enter,exit}_{mmap,munmap,mremap,mlock,mlock2,munlock}";
  if (int err = headroom_bpf__load(skel.get()); err != 0) {
    skel.reset();
    return makeError(-err, "loading the BPF programs");
  }
  return ok();
}

void Sensors::Impl::startBpf() {
  routeLibbpfLogToSpdlog();
  vmlinux.reset(btf__load_vmlinux_btf());
  std::map<std::string, std::string> notes;
  std::set<std::string> enabled = {"oom", "exits"};
  if (cfg.faults) enabled.insert("faults");
  if (cfg.mmap) enabled.insert("mmap");
  if (cfg.rss) enabled.insert("rss");
  if (cfg.cuda) enabled.insert("cuda");

  // Probe before load: switch off what this kernel lacks, and say so.
  auto probe = [&](const std::string& sensor, const std::string& tp, const char* what) {
    if (!enabled.count(sensor)) return;
    if (!signature(tp).exists) {
      enabled.erase(sensor);
      set(sensor, SensorState::kDegraded, fmt::format("tracepoint {} not in this kernel ({})", tp, what));
    }
  };
  probe("oom", tracepoint("oom", "mark_victim"), "OOM kills come from /dev/kmsg alone");
  probe("exits", tracepoint("exits", "sched_process_exit"), "exits are not classified in the kernel");
  probe("faults", tracepoint("faults", "page_fault_user"), "x86 only; /proc/<pid>/stat still has the counts");
  probe("rss", tracepoint("rss", "rss_stat"), "RSS comes from /proc");
  if (enabled.count("mmap") && !(ensureTracefs() && syscallTracepointsExist())) {
    enabled.erase("mmap");
    set("mmap", SensorState::kDegraded, "syscall tracepoints unavailable (tracefs not mounted and cannot be mounted)");
  }
  for (const auto& s : {"faults", "mmap", "rss", "cuda"}) {
    if (!enabled.count(s) && status(s).state == SensorState::kOff && status(s).reason.empty())
      set(s, SensorState::kOff, "switched off in the configuration");
  }

  // Load; if the kernel refuses a program, switch off the sensor it belongs to and retry (or,
  // when libbpf does not say which, the least important sensor still on).
  const std::vector<std::string> sacrifice = {"cuda", "rss", "mmap", "faults", "exits", "oom"};
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
    std::string victim;
    for (const auto& [sensor, progs] : sensorPrograms()) {
      for (const char* p : progs) {
        if (failed == p && enabled.count(sensor)) victim = sensor;
      }
    }
    if (victim.empty()) {
      for (const auto& s : sacrifice) {
        if (enabled.count(s)) {
          victim = s;
          break;
        }
      }
    }
    if (victim.empty()) return;
    set(victim, SensorState::kDegraded,
        failed.empty() ? fmt::format("{} (switched off so the rest could load)", st.error().describe())
                       : fmt::format("the kernel refused program {}: {}", failed, st.error().describe()));
    enabled.erase(victim);
  }

  if (cfg.tracked_cgroups) {
    if (auto st = trackCgroupsNow(*cfg.tracked_cgroups); !st) spdlog::warn("tracking cgroups: {}", st.error().describe());
  }

  for (const auto& sensor : enabled) {
    if (sensor == "cuda") continue;  // attached per library
    std::string failure;
    for (const char* p : sensorPrograms().at(sensor)) {
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
    if (failure.empty()) set(sensor, SensorState::kActive, notes[sensor]);
    else set(sensor, SensorState::kDegraded, failure);
  }

  rings.reset(ring_buffer__new(bpf_map__fd(skel->maps.oom_ring), oomCallback, this, nullptr));
  if (!rings || ring_buffer__add(rings.get(), bpf_map__fd(skel->maps.exit_ring), exitCallback, this) != 0) {
    set("oom", SensorState::kDegraded, fmt::format("ring buffer: {}", std::strerror(errno)));
    rings.reset();
  }
  if (enabled.count("cuda")) {
    std::optional<Error> failure;
    for (const auto& lib : cfg.cuda_libraries) {
      if (auto st = attachCudaNow(lib, false); !st && !failure) failure = st.error();
    }
    for (const auto& t : cfg.cuda_runtime_targets) {
      if (auto st = attachCudaNow(t, true); !st && !failure) failure = st.error();
    }
    if (cuda_attached.empty()) {
      if (failure) set("cuda", SensorState::kDegraded, failure->describe());
      else set("cuda", SensorState::kOff, "no CUDA library found yet (libcuda.so.1)");
    }
  }
}

void Sensors::Impl::startKmsg() {
  if (!cfg.kmsg) {
    set("kmsg", SensorState::kOff, "switched off in the configuration");
    return;
  }
  auto r = KmsgReader::open(*fs, false);
  if (!r) {
    set("kmsg", SensorState::kDegraded, r.error().describe());
    return;
  }
  kmsg.emplace(std::move(*r));
  set("kmsg", SensorState::kActive, fs->display("/dev/kmsg"));
}

Status Sensors::Impl::trackCgroupsNow(const std::vector<std::uint64_t>& ids) {
  if (!skel) return makeError(ENODEV, "BPF is not loaded");
  if (!cfg.tracked_cgroups) return makeError(EINVAL, "tracking every cgroup: no filter was configured at start");
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

Status Sensors::Impl::attachCudaNow(const std::string& path, bool runtime) {
  if (!skel) return makeError(ENODEV, "BPF is not loaded");
  if (path.empty() || path.front() != '/') return makeError(EINVAL, fmt::format("CUDA target \"{}\" is not an absolute path", path));
  if (cuda_attached.count(path)) return ok();
  if (!canAccess(path.c_str(), R_OK)) return errnoError(fmt::format("CUDA target {}", path));
  auto symbols = elfFunctionOffsets(path);
  if (!symbols) return symbols.error();
  std::size_t attached = 0;
  std::vector<std::string> names;
  for (const CudaProbe& p : cudaProbes()) {
    if (p.runtime != runtime) continue;
    bpf_program* entry = program(p.program);
    if (entry == nullptr || !bpf_program__autoload(entry)) continue;
    for (const char* sym : p.symbols) {
      auto it = symbols->find(sym);
      if (it == symbols->end()) continue;  // this variant is not in the file
      bpf_uprobe_opts in{};
      in.sz = sizeof(in);
      bpf_link* l = bpf_program__attach_uprobe_opts(entry, -1, path.c_str(), it->second, &in);
      bpf_uprobe_opts out{};
      out.sz = sizeof(out);
      out.retprobe = true;
      bpf_link* r = l == nullptr ? nullptr
                                 : bpf_program__attach_uprobe_opts(skel->progs.cuda_return, -1, path.c_str(), it->second, &out);
      if (l == nullptr || r == nullptr) {
        int err = errno;
        if (l != nullptr) bpf_link__destroy(l);
        // Linux took uprobes back from CAP_PERFMON in 2025 ("perf: Revert to requiring
        // CAP_SYS_ADMIN for uprobes", 6.16 and the stable kernels since).
        return makeError(err, fmt::format("attaching a uprobe to {} in {}{}", sym, path,
                                          err == EACCES || err == EPERM
                                              ? " (uprobes need CAP_SYS_ADMIN; CAP_PERFMON sufficed on kernels before mid-2025)"
                                              : ""));
      }
      links.emplace_back(l);
      links.emplace_back(r);
      ++attached;
      names.emplace_back(sym);
    }
  }
  if (attached == 0) return makeError(ENOENT, fmt::format("no CUDA {} API symbol found in {}", runtime ? "runtime" : "driver", path));
  cuda_attached.insert(path);
  SensorStatus& st = status("cuda");
  std::string what = fmt::format("{} ({} functions)", path, attached);
  st.reason = st.state == SensorState::kActive ? st.reason + ", " + what : "uprobes on " + what;
  st.state = SensorState::kActive;
  spdlog::info("cuda: attached to {}: {}", path, fmt::join(names, " "));
  return ok();
}

Sensors::Sensors(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Sensors::~Sensors() = default;

std::unique_ptr<Sensors> Sensors::start(const FsRoot& fs, const SensorsConfig& cfg, const CgroupMounts& mounts) {
  auto impl = std::make_unique<Impl>();
  impl->fs = &fs;
  impl->cfg = cfg;
  impl->mounts = mounts;
  if (const CgroupMount* m = mounts.memoryMount()) impl->hierarchy.emplace(fs, mounts.memoryVersion(), *m);
  for (const char* n : {"oom", "kmsg", "exits", "faults", "mmap", "rss", "cuda"}) impl->status(n);
  if (cfg.bpf) {
    impl->startBpf();
  } else {
    for (const char* n : {"oom", "exits", "faults", "mmap", "rss", "cuda"})
      impl->set(n, SensorState::kOff, "BPF switched off (--no-bpf)");
  }
  impl->startKmsg();
  OomJoiner::Options jo;
  jo.expect_bpf = impl->status("oom").state == SensorState::kActive;
  jo.expect_kmsg = impl->status("kmsg").state == SensorState::kActive;
  impl->joiner = OomJoiner(jo);
  impl->buildCgroupPaths();
  return std::unique_ptr<Sensors>(new Sensors(std::move(impl)));
}

const std::vector<SensorStatus>& Sensors::status() const { return impl_->statuses; }

void Sensors::poll(int timeout_ms) {
  Impl& m = *impl_;
  if (m.rings) {
    // A record wakes the epoll at once (an irq_work; on a machine without self-IPI, at the
    // next timer tick, which NO_HZ keeps running while one is pending). Consume once more
    // should a wakeup ever be missed. No short slices: 100 wakeups a second cost an idle agent
    // 0.85 % of a core here and made no OOM record sooner (make bench: 0.2 ms either way).
    if (ring_buffer__poll(m.rings.get(), timeout_ms) == 0) ring_buffer__consume(m.rings.get());
  } else if (m.kmsg) {
    pollfd p{m.kmsg->fd(), POLLIN, 0};
    ::poll(&p, 1, timeout_ms);
  } else if (timeout_ms > 0) {
    ::usleep(static_cast<useconds_t>(timeout_ms) * 1000);
  }
  std::int64_t now = nowNs(CLOCK_MONOTONIC);
  if (m.kmsg) {
    for (const auto& rec : m.kmsg->readAvailable()) {
      if (auto report = m.kmsg_parser.feed(rec)) {
        // The kernel log's clock is the monotonic clock in microseconds.
        m.joiner.addReport(*report, static_cast<std::int64_t>(report->ts_us) * 1000, now);
      }
    }
  }
  for (auto& e : m.joiner.takeReady(now, nowNs(CLOCK_REALTIME))) m.ooms.push_back(std::move(e));
}

std::vector<OomEvent> Sensors::takeOomEvents() { return std::exchange(impl_->ooms, {}); }
std::vector<ExitEvent> Sensors::takeExitEvents() { return std::exchange(impl_->exits, {}); }

std::optional<ProcessActivity> Sensors::activity(pid_t tgid) const {
  Impl& m = *impl_;  // the fault sums are a cache
  if (!m.skel) return std::nullopt;
  ProcessActivity a;
  bool found = false;
  __u32 key = static_cast<__u32>(tgid);
  // RSS lives in the leader's task storage (looked up through a pidfd); faults in per-CPU runs
  // and a per-process total.
  Fd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, tgid, 0)));
  proc_hot hot{};
  if (pidfd.valid()) {
    int fdkey = pidfd.get();
    if (bpf_map_lookup_elem(bpf_map__fd(m.skel->maps.proc_hot), &fdkey, &hot) == 0 && hot.rss_updates > 0) {
      found = true;
      a.rss_file = hot.rss_file_pages * 4096;
      a.rss_anon = hot.rss_anon_pages * 4096;
      a.rss_shmem = hot.rss_shmem_pages * 4096;
      a.swap = hot.rss_swapents * 4096;
    }
  }
  if (auto faults = m.faultsOf(tgid)) {
    found = true;
    a.faults = *faults;
  }
  proc_activity pa{};
  if (bpf_map_lookup_elem(bpf_map__fd(m.skel->maps.proc_activity), &key, &pa) == 0) {
    found = true;
    a.mmap_bytes = pa.mmap_bytes;
    a.munmap_bytes = pa.munmap_bytes;
    a.mremap_grow_bytes = pa.mremap_grow_bytes;
    a.mremap_shrink_bytes = pa.mremap_shrink_bytes;
    a.mlock_bytes = pa.mlock_bytes;
    a.munlock_bytes = pa.munlock_bytes;
  }
  if (!found) return std::nullopt;
  return a;
}

std::optional<GpuMemory> Sensors::gpu(pid_t tgid) const {
  const Impl& m = *impl_;
  if (!m.skel) return std::nullopt;
  __u32 key = static_cast<__u32>(tgid);
  gpu_mem g{};
  if (bpf_map_lookup_elem(bpf_map__fd(m.skel->maps.gpu_mem), &key, &g) != 0) return std::nullopt;
  return GpuMemory{g.pinned_live, g.pinned_peak, g.pinned_allocs, g.pinned_frees, g.device_live,   g.device_peak,
                   g.device_allocs, g.device_frees, g.failed_calls, g.implicit_frees};
}

std::vector<std::uint64_t> Sensors::pinnedAddresses(pid_t tgid) const {
  std::vector<std::uint64_t> out;
  const Impl& m = *impl_;
  if (!m.skel) return out;
  int fd = bpf_map__fd(m.skel->maps.gpu_allocs);
  gpu_alloc_key key{}, next{};
  bool first = true;
  while (bpf_map_get_next_key(fd, first ? nullptr : &key, &next) == 0) {
    first = false;
    if (next.tgid == static_cast<__u32>(tgid) && next.kind == HR_ALLOC_PINNED) out.push_back(next.addr);
    key = next;
  }
  return out;
}

SensorCounters Sensors::counters() const {
  const Impl& m = *impl_;
  SensorCounters c;
  if (m.skel) {
    c.oom_ring_drops = __atomic_load_n(&m.skel->bss->ring_drops[HR_RING_OOM], __ATOMIC_RELAXED);
    c.exit_ring_drops = __atomic_load_n(&m.skel->bss->ring_drops[HR_RING_EXIT], __ATOMIC_RELAXED);
    c.map_full_drops = __atomic_load_n(&m.skel->bss->map_full_drops, __ATOMIC_RELAXED);
  }
  if (m.kmsg) c.kmsg_lost = m.kmsg->lost();
  c.kmsg_reports_abandoned = m.kmsg_parser.abandoned();
  c.events = m.events;
  c.last_oom_mark_latency_ns = m.last_mark_latency_ns;
  return c;
}

SensorReadings Sensors::readings(const std::vector<ProcessSample>& processes) const {
  SensorReadings r;
  r.status = status();
  for (const ProcessSample& p : processes) {
    if (auto a = activity(p.pid)) r.activity[p.pid] = *a;
    auto g = gpu(p.pid);
    if (!g) continue;
    r.gpu[p.pid] = *g;
    if (g->pinned_live == 0) continue;
    // Where the pinned pages live decides whether they are already in the visible sum.
    auto smaps = impl_->fs->readFile(fmt::format("/proc/{}/smaps", p.pid));
    if (!smaps) continue;
    if (auto inside = pinnedInsideRss(parseSmapsVmas(*smaps), pinnedAddresses(p.pid))) r.pinned_inside_rss[p.pid] = *inside;
  }
  return r;
}

Status Sensors::trackCgroups(const std::vector<std::uint64_t>& ids) { return impl_->trackCgroupsNow(ids); }
Status Sensors::attachCuda(const std::string& path, bool runtime) { return impl_->attachCudaNow(path, runtime); }

void Sensors::discoverCuda(const std::vector<pid_t>& pids) {
  Impl& m = *impl_;
  if (!m.skel || !m.cfg.cuda) return;
  std::set<std::string> found;
  for (pid_t pid : pids) {
    auto maps = m.fs->readFile(fmt::format("/proc/{}/maps", pid));
    if (!maps) continue;
    for (auto line : splitLines(*maps)) {
      auto slash = line.find('/');
      if (slash == std::string_view::npos) continue;
      std::string_view path = line.substr(slash);
      auto base = path.substr(path.rfind('/') + 1);
      if (base.rfind("libcuda.so", 0) == 0) found.emplace(path);
    }
  }
  for (const char* usual : {"/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib64/libcuda.so.1",
                            "/usr/local/nvidia/lib64/libcuda.so.1", "/usr/lib/aarch64-linux-gnu/libcuda.so.1"}) {
    if (canAccess(usual, R_OK)) {
      char real[PATH_MAX];
      if (::realpath(usual, real) != nullptr) found.emplace(real);
    }
  }
  for (const auto& lib : found) {
    if (!m.cuda_attached.count(lib)) {
      if (auto st = m.attachCudaNow(lib, false); !st) m.cudaFailed(st.error());
    }
  }
}

}  // namespace headroom
