#include "headroom/sensors/kernel_support.h"

#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <fstream>

namespace headroom {
namespace {

constexpr const char* kTracefs = "/sys/kernel/tracing";
// Where tracefs is found: its own mount, or under debugfs on older setups.
constexpr std::array<const char*, 2> kTracefsPlaces = {kTracefs, "/sys/kernel/debug/tracing"};
// Debian's kernels (and Android's) add a level 3 to kernel.perf_event_paranoid, their default,
// at which the kernel opens perf events for CAP_SYS_ADMIN only: CAP_PERFMON is refused (seen on
// Debian 12's 6.1 and 13's 6.12).
constexpr int kParanoidAdminOnly = 3;

}  // namespace

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

bool kernelHasTracepoint(const std::string& name) { return tracepointSignature(name).exists; }

std::optional<bool> kernelHasMapType(int type) {
  int r = libbpf_probe_bpf_map_type(static_cast<bpf_map_type>(type), nullptr);
  if (r < 0) return std::nullopt;
  if (r == 1) return true;
  // libbpf reads any refusal as "no such type", a missing privilege too: the type is missing
  // only where a map every kernel has can be made.
  if (libbpf_probe_bpf_map_type(BPF_MAP_TYPE_HASH, nullptr) != 1) return std::nullopt;
  return false;
}

std::optional<bool> kernelHasHelper(int id) {
  // A kprobe program: libbpf cannot probe tp_btf ones (they need an attach target), and every
  // helper headroom probes is given to kprobe programs as to tp_btf ones (kernel/trace/bpf_trace.c).
  int r = libbpf_probe_bpf_helper(BPF_PROG_TYPE_KPROBE, static_cast<bpf_func_id>(id), nullptr);
  if (r < 0) return std::nullopt;
  return r == 1;
}

bool canAccess(const char* path, int mode) { return ::faccessat(AT_FDCWD, path, mode, AT_EACCESS) == 0; }

bool ensureTracefs() {
  for (const char* base : kTracefsPlaces) {
    if (canAccess(fmt::format("{}/events", base).c_str(), F_OK)) return true;
  }
  if (::mount("tracefs", kTracefs, "tracefs", 0, nullptr) == 0) {
    spdlog::info("mounted tracefs at {} for the syscall tracepoints", kTracefs);
    return true;
  }
  return false;
}

bool syscallTracepointsExist() {
  return std::any_of(kTracefsPlaces.begin(), kTracefsPlaces.end(), [](const char* base) {
    return canAccess(fmt::format("{}/events/syscalls/sys_enter_mmap", base).c_str(), F_OK);
  });
}

std::string perfEventHint(int err) {
  if (err != EACCES && err != EPERM) return "";
  std::ifstream f("/proc/sys/kernel/perf_event_paranoid");
  int level = 0;
  if (!(f >> level) || level < kParanoidAdminOnly) return "";
  return fmt::format(
      " (kernel.perf_event_paranoid is {}: this kernel opens tracepoint events for CAP_SYS_ADMIN only; "
      "set it to 2, or grant CAP_SYS_ADMIN)",
      level);
}

}  // namespace headroom
