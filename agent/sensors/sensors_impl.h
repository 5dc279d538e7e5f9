// Sensors::Impl, shared by the files that implement the sensors: the facade and its event
// consumer (sensors.cpp), the loader (loader.cpp), the per-process maps (maps.cpp) and the CUDA
// uprobes (cuda_uprobes.cpp). Private to agent/sensors.
#pragma once

#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include <array>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "headroom.skel.h"
#include "headroom/sensors/detail/program_table.h"
#include "headroom/sensors/kernel_support.h"
#include "headroom/sensors/oom_joiner.h"
#include "headroom/sensors/sensors.h"
#include "headroom/sensors/task_iter.h"
#include "headroom/sources/cgroup_index.h"
#include "headroom/sources/fs_root.h"
#include "headroom/sources/kmsg.h"
#include "headroom/sources/oom_log.h"

struct proc_activity;  // bpf/events.h

namespace headroom {

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
struct BtfDeleter {
  void operator()(btf* b) const { btf__free(b); }
};

struct Sensors::Impl {
  const FsRoot* fs = nullptr;
  SensorsConfig cfg;
  CgroupMounts mounts;
  std::optional<CgroupHierarchy> hierarchy;
  std::optional<CgroupIndex> cgroups;  // names the cgroup ids of the events
  std::unique_ptr<headroom_bpf, SkelDeleter> skel;
  std::vector<Link> links;
  std::unique_ptr<ring_buffer, RingDeleter> rings;
  std::unique_ptr<btf, BtfDeleter> vmlinux;  // the kernel's BTF, loaded once at start
  std::optional<KmsgReader> kmsg;
  std::unique_ptr<TaskIterator> tasks;  // the collector's per-process source, when it loads
  OomLogAssembler kmsg_parser{OomLogAssembler::Emit::kAtKill};
  OomJoiner joiner;
  std::vector<SensorStatus> statuses;
  std::vector<ExitEvent> exits;
  // SIGKILL'd exits no mark named yet: the kernel sends the OOM victim its SIGKILL before it
  // marks it (mm/oom_kill.c, __oom_kill_process), so an idle victim on another CPU can exit
  // before oom:mark_victim runs. Held until the mark comes or kLateMarkWaitNs passed.
  struct HeldExit {
    ExitEvent exit;
    std::int64_t until_ns = 0;
  };
  std::vector<HeldExit> held_exits;
  // The processes the last marks named (the rings are read one after the other: the mark may be
  // read before the exit that came first).
  std::deque<pid_t> recent_marks;
  void holdOrQueue(ExitEvent e, std::int64_t now_ns);
  void lateMark(pid_t tgid);
  void releaseHeld(std::int64_t now_ns, bool all = false);
  std::vector<OomEvent> ooms;
  std::vector<OomEvent> started;  // begun since the last takeStartedOoms()
  // The kills the first read of the ring found (kmsg_from_start), told with the next events.
  std::vector<OomEvent> found_at_start;
  std::optional<std::uint64_t> log_start;  // the oldest record the ring held then
  void onReport(const KernelOomReport& report, std::int64_t now);
  void readRingAtStart();  // kmsg_from_start: what the ring holds, once the joiner is made
  std::set<std::string> cuda_attached;
  // Libraries whose probes could not attach, each with why: not tried again (reading a driver's
  // symbols costs milliseconds) until the sensors start again; the reason names every one.
  std::map<std::string, std::string> cuda_failed;
  std::uint64_t events = 0;
  std::optional<std::int64_t> last_mark_latency_ns;
  // Per process, the fault count last answered (with the mm it was for): a count read while a
  // CPU's run was being ended can briefly miss that run, and a counter must never go back.
  std::map<pid_t, std::pair<std::uint64_t, std::uint64_t>> answered_faults;
  int cpus = std::max(1, libbpf_num_possible_cpus());  // the per-CPU map's value count
  // What poll() waits on: the rings' epoll, /dev/kmsg and the caller's wakeup descriptor, made
  // anew when one of them changes.
  Fd poll_set;
  std::array<int, 4> poll_fds{-1, -1, -1, -1};
  Status preparePollSet(int wake_fd, int watch_fd);
  bool poll_warned = false;

  // ---- the state registry (sensors.cpp) ----
  SensorStatus& status(SensorId id);
  void set(SensorId id, SensorState st, std::string reason);
  // The tracepoint a sensor attaches to: its own, or the config's override.
  std::string tracepoint(SensorId sensor, const std::string& dflt) const;
  TracepointSignature signature(const std::string& name) const { return tracepointSignature(name, vmlinux.get()); }
  bpf_program* program(const char* name) const {
    return skel ? bpf_object__find_program_by_name(skel->obj, name) : nullptr;
  }

  // ---- the rings (sensors.cpp) ----
  // A cgroup id of an event as a path ("cgroup-id:N" when it cannot be found).
  std::string cgroupPath(std::uint64_t id);
  // The memory files of `cgroup` (a path in the hierarchy) and of its ancestors that have a
  // limit, read now: the moment an OOM kill is seen (OomEvent::read_at_kill).
  std::vector<CgroupMemory> readAtKill(const std::string& cgroup) const;
  void onOomRecord(const void* data, std::size_t size);
  void onExitRecord(const void* data, std::size_t size);
  void startTasks();
  void startKmsg();

  // ---- the loader (loader.cpp) ----
  void startBpf();
  // Opens the object with the given sensors' programs on (each the variant this kernel fits and
  // has the features for), the maps named in `uncreated` left out; `notes` gets what each
  // attaches to. Returns why a load failed.
  Status openAndLoad(const std::set<SensorId>& enabled, const std::set<detail::KernelFeature>& missing,
                     const std::set<std::string>& uncreated, std::map<SensorId, std::string>& notes);
  Status trackCgroupsNow(const std::vector<std::uint64_t>& ids);

  // ---- the per-process maps (maps.cpp) ----
  std::optional<std::uint64_t> faultsOf(pid_t tgid);
  // A process's counters: its mapping activity (`pa`, from the map, or none), RSS and faults
  // when those sensors are on.
  std::optional<ProcessActivity> activityOf(pid_t tgid, const proc_activity* pa, bool rss, bool faults);
  bool active(SensorId sensor) const { return sensorActive(statuses, sensor); }

  // ---- CUDA (cuda_uprobes.cpp) ----
  Status attachCudaNow(const std::string& path, bool runtime);
  void attachConfiguredCuda();
  // A CUDA target found (or configured) but not attached: said in the sensor's state unless
  // another target is already attached.
  void cudaFailed(const std::string& library, const Error& e);
};

}  // namespace headroom
