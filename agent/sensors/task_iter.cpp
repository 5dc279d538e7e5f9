#include "headroom/sensors/task_iter.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <span>
#include <tuple>

#include "events.h"
#include "headroom/sensors/libbpf_log.h"
#include "headroom/sensors/ring_decode.h"
#include "headroom/sources/fs_root.h"
#include "headroom_tasks.skel.h"

namespace headroom {
namespace {

// PROC_PID_INIT_INO (include/linux/proc_ns.h): the initial pid namespace's inode number.
constexpr ino_t kInitPidNsInode = 0xEFFFFFFCU;
constexpr const char* kVmlinuxBtf = "/sys/kernel/btf/vmlinux";
// The output of one read, grown when a machine has more tasks; 64 pages to start.
constexpr std::size_t kFirstBuffer = 64 * 4096;

struct SkelDeleter {
  void operator()(headroom_tasks_bpf* s) const { headroom_tasks_bpf__destroy(s); }
};
struct LinkDeleter {
  void operator()(bpf_link* l) const { bpf_link__destroy(l); }
};

}  // namespace

struct TaskIterator::Impl {
  std::unique_ptr<headroom_tasks_bpf, SkelDeleter> skel;
  std::unique_ptr<bpf_link, LinkDeleter> link;
  std::vector<std::byte> buffer = std::vector<std::byte>(kFirstBuffer);
  std::uint64_t ticks = static_cast<std::uint64_t>(::sysconf(_SC_CLK_TCK));
  std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  std::unordered_map<pid_t, TaskCounters> counters;
  bool counters_fresh = false;
  std::vector<pid_t> exact;  // sorted: what the rss_exact map holds
};

TaskIterator::TaskIterator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TaskIterator::~TaskIterator() = default;

Result<std::unique_ptr<TaskIterator>> TaskIterator::open(int memory_version, int activity_fd, int gpu_fd) {
  struct stat ns {};
  if (::stat("/proc/self/ns/pid", &ns) != 0) return errnoError("/proc/self/ns/pid");
  if (ns.st_ino != kInitPidNsInode)
    return badData(
        "the agent runs in a pid namespace of its own: the kernel's pids are not this /proc's "
        "(run it with the host's pid namespace, e.g. hostPID)");
  routeLibbpfLogToSpdlog();
  auto impl = std::make_unique<Impl>();
  detail::LibbpfLogCapture capture;
  // The kernel's BTF named as the only target: libbpf would otherwise look through the modules'
  // BTF for a type this kernel lacks (the pre-6.2 RSS layout), which needs CAP_SYS_ADMIN.
  bpf_object_open_opts opts{};  // by hand: LIBBPF_OPTS is a GNU statement expression, not C++
  opts.sz = sizeof(opts);
  opts.btf_custom_path = ::access(kVmlinuxBtf, R_OK) == 0 ? kVmlinuxBtf : nullptr;
  impl->skel.reset(headroom_tasks_bpf__open_opts(&opts));
  if (!impl->skel) return errnoError("opening the task iterator's BPF object");
  impl->skel->rodata->cfg_memory_v1 = memory_version == 1;
  impl->skel->rodata->cfg_nr_cpus = static_cast<__u32>(std::max(1, libbpf_num_possible_cpus()));
  for (auto [map, fd, what] : {std::tuple{impl->skel->maps.proc_activity, activity_fd, "proc_activity"},
                               std::tuple{impl->skel->maps.gpu_mem, gpu_fd, "gpu_mem"}}) {
    if (fd < 0) continue;
    if (int err = bpf_map__reuse_fd(map, fd); err != 0)
      return sysError(-err, fmt::format("sharing the sensors' {} map with the task iterator", what));
  }
  if (int err = headroom_tasks_bpf__load(impl->skel.get()); err != 0) {
    const std::string& log = capture.text();
    // Refused before the verifier ran (no verifier log): this process may not load BPF at all.
    if ((err == -EPERM || err == -EACCES) && log.find("PROG LOAD LOG") == std::string::npos)
      return sysError(
          -err, fmt::format("BPF not permitted ({}): needs CAP_BPF and CAP_PERFMON, or root", std::strerror(-err)));
    return sysError(-err, fmt::format("loading the task iterator (iter/task){}", log.empty() ? "" : ": " + log));
  }
  impl->link.reset(bpf_program__attach_iter(impl->skel->progs.dump_tasks, nullptr));
  if (!impl->link) return errnoError("attaching the task iterator");
  auto it = std::unique_ptr<TaskIterator>(new TaskIterator(std::move(impl)));
  // One read now: a kernel that loads the program but cannot run it fails here, not later.
  if (auto first = it->read(); !first) return first.error();
  return it;
}

Result<std::vector<KernelProcess>> TaskIterator::read() {
  Impl& m = *impl_;
  Fd fd(bpf_iter_create(bpf_link__fd(m.link.get())));
  if (!fd.valid()) return errnoError("creating a task iterator");
  m.counters_fresh = false;
  // The CPUs online now: the drift of a counter read without its per-CPU parts.
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  const std::uint64_t drift = rssDriftPages(online > 0 ? static_cast<std::uint64_t>(online) : 1);
  std::size_t used = 0;
  for (;;) {
    if (m.buffer.size() - used < 4096) m.buffer.resize(m.buffer.size() * 2);
    ssize_t n = ::read(fd.get(), m.buffer.data() + used, m.buffer.size() - used);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errnoError("reading the task iterator");
    if (n == 0) break;
    used += static_cast<std::size_t>(n);
  }
  auto out = decodeTaskRecords(std::span(m.buffer.data(), used), m.ticks, m.page, true, &m.counters, drift);
  m.counters_fresh = out.has_value();
  return out;
}

static_assert(ProcessSource::kMaxExact == HR_RSS_EXACT_MAX, "the rss_exact map holds what sumExactly takes");

void TaskIterator::sumExactly(const std::vector<pid_t>& pids) {
  Impl& m = *impl_;
  std::vector<pid_t> want(
      pids.begin(), pids.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(pids.size(), HR_RSS_EXACT_MAX)));
  std::sort(want.begin(), want.end());
  want.erase(std::unique(want.begin(), want.end()), want.end());
  if (want == m.exact) return;
  const int fd = bpf_map__fd(m.skel->maps.rss_exact);
  std::vector<pid_t> gone, added;
  std::set_difference(m.exact.begin(), m.exact.end(), want.begin(), want.end(), std::back_inserter(gone));
  std::set_difference(want.begin(), want.end(), m.exact.begin(), m.exact.end(), std::back_inserter(added));
  for (pid_t p : gone) {
    auto key = static_cast<__u32>(p);
    bpf_map_delete_elem(fd, &key);
  }
  std::vector<pid_t> held;
  std::set_difference(m.exact.begin(), m.exact.end(), gone.begin(), gone.end(), std::back_inserter(held));
  const __u8 one = 1;
  for (pid_t p : added) {
    auto key = static_cast<__u32>(p);
    if (bpf_map_update_elem(fd, &key, &one, BPF_ANY) == 0) held.push_back(p);
  }
  std::sort(held.begin(), held.end());
  m.exact = std::move(held);
  m.skel->bss->rss_exact_count = static_cast<__u32>(m.exact.size());
}

std::optional<std::unordered_map<pid_t, TaskCounters>> TaskIterator::takeCounters() {
  if (!impl_->counters_fresh) return std::nullopt;
  impl_->counters_fresh = false;
  return std::move(impl_->counters);
}

}  // namespace headroom
