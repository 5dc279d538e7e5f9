#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdarg>
#include <mutex>

#include "exitcount.skel.h"
#include "events.h"
#include "headroom/sensors.h"

namespace headroom {
namespace {

int libbpfPrint(enum libbpf_print_level level, const char* format, va_list args) {
  char buf[1024];
  int n = std::vsnprintf(buf, sizeof buf, format, args);
  std::string_view line(buf, n < 0 ? 0 : std::min<std::size_t>(static_cast<std::size_t>(n), sizeof buf - 1));
  while (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  switch (level) {
    case LIBBPF_WARN: spdlog::warn("libbpf: {}", line); break;
    case LIBBPF_INFO: spdlog::info("libbpf: {}", line); break;
    default: spdlog::debug("libbpf: {}", line); break;
  }
  return n;
}

}  // namespace

void routeLibbpfLogToSpdlog() {
  static std::once_flag once;
  std::call_once(once, [] { libbpf_set_print(libbpfPrint); });
}

bool kernelHasTracepoint(const std::string& name) {
  btf* vmlinux = btf__load_vmlinux_btf();
  if (vmlinux == nullptr) return false;
  bool found = btf__find_by_name_kind(vmlinux, ("btf_trace_" + name).c_str(), BTF_KIND_TYPEDEF) >= 0;
  btf__free(vmlinux);
  return found;
}

void ExitCounter::SkelDeleter::operator()(exitcount_bpf* s) const { exitcount_bpf__destroy(s); }

Result<ExitCounter> ExitCounter::start(std::uint32_t max_groups) {
  routeLibbpfLogToSpdlog();
  if (!kernelHasTracepoint("sched_process_exit"))
    return makeError(ENOENT, "tracepoint sched:sched_process_exit not in this kernel's BTF");
  std::unique_ptr<exitcount_bpf, SkelDeleter> skel(exitcount_bpf__open());
  if (!skel) return errnoError("opening the exitcount BPF object");
  if (int err = bpf_map__set_max_entries(skel->maps.exit_counts, max_groups); err != 0)
    return makeError(-err, fmt::format("sizing exit_counts to {} entries", max_groups));
  if (int err = exitcount_bpf__load(skel.get()); err != 0) return makeError(-err, "loading the exitcount BPF programs");
  if (int err = exitcount_bpf__attach(skel.get()); err != 0)
    return makeError(-err, "attaching tp_btf/sched_process_exit");
  return ExitCounter(std::move(skel));
}

std::optional<ExitCount> ExitCounter::lookup(pid_t tgid) const {
  __u32 key = static_cast<__u32>(tgid);
  exit_count v{};
  if (bpf_map__lookup_elem(skel_->maps.exit_counts, &key, sizeof key, &v, sizeof v, 0) != 0) return std::nullopt;
  return ExitCount{v.thread_exits, v.group_exits != 0, v.exit_code};
}

std::uint64_t ExitCounter::totalExits() const {
  return __atomic_load_n(&skel_->bss->total_exits, __ATOMIC_RELAXED);
}

}  // namespace headroom
