#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "testing/exit_counter.h"

#include "exitcount.h"
#include "exitcount.skel.h"
#include "headroom/sensors/kernel_support.h"
#include "headroom/sensors/sensors.h"

namespace headroom::testing {

void ExitCounter::SkelDeleter::operator()(exitcount_bpf* s) const { exitcount_bpf__destroy(s); }

Result<ExitCounter> ExitCounter::start(std::uint32_t max_groups) {
  routeLibbpfLogToSpdlog();
  if (!kernelHasTracepoint("sched_process_exit"))
    return sysError(ENOENT, "tracepoint sched:sched_process_exit not in this kernel's BTF");
  std::unique_ptr<exitcount_bpf, SkelDeleter> skel(exitcount_bpf__open());
  if (!skel) return errnoError("opening the exitcount BPF object");
  if (int err = bpf_map__set_max_entries(skel->maps.exit_counts, max_groups); err != 0)
    return sysError(-err, fmt::format("sizing exit_counts to {} entries", max_groups));
  if (int err = exitcount_bpf__load(skel.get()); err != 0) return sysError(-err, "loading the exitcount BPF programs");
  if (int err = exitcount_bpf__attach(skel.get()); err != 0)
    return sysError(-err, "attaching tp_btf/sched_process_exit");
  return ExitCounter(std::move(skel));
}

std::optional<ExitCount> ExitCounter::lookup(pid_t tgid) const {
  __u32 key = static_cast<__u32>(tgid);
  exit_count v{};
  if (bpf_map__lookup_elem(skel_->maps.exit_counts, &key, sizeof key, &v, sizeof v, 0) != 0) return std::nullopt;
  return ExitCount{v.thread_exits, v.group_exits != 0, v.exit_code};
}

std::uint64_t ExitCounter::totalExits() const { return __atomic_load_n(&skel_->bss->total_exits, __ATOMIC_RELAXED); }

}  // namespace headroom::testing
