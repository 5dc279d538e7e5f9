// What this kernel and this process allow the sensors, checked before anything is loaded: the
// kernel's tracepoints and their signatures by BTF alone (no tracefs needed), tracefs for the
// syscall tracepoints, and the reasons an attachment is refused.
#pragma once

#include <optional>
#include <string>

struct btf;

namespace headroom {

// Which of two tracepoint signatures this kernel has, told by BTF: the number of arguments of
// btf_trace_<name> (without the leading void *) and whether the first is a pointer.
struct TracepointSignature {
  bool exists = false;
  int args = 0;
  bool first_is_pointer = false;
};
// `vmlinux`: the kernel's BTF when the caller holds it (else it is loaded for this call).
TracepointSignature tracepointSignature(const std::string& name, const ::btf* vmlinux = nullptr);
// Whether this kernel exposes a tracepoint: a `btf_trace_<name>` typedef exists for each.
bool kernelHasTracepoint(const std::string& name);

// Whether the kernel has a BPF map type (a bpf_map_type) or helper (a bpf_func_id), told by
// libbpf's probes (a map made, a program loaded and freed at once); nullopt when the probe could
// not tell (no permission, say): then the load decides.
std::optional<bool> kernelHasMapType(int type);
std::optional<bool> kernelHasHelper(int id);

// access() with the effective ids and capabilities. Plain access() checks the real uid and, for
// a non-root one, drops every capability: an agent running as its own user with
// CAP_DAC_READ_SEARCH (systemd User= + AmbientCapabilities=) would be told that
// /sys/kernel/tracing (mode 0700) or a prover's binary does not exist although it can open them.
bool canAccess(const char* path, int mode);

// tracefs, which tp/ programs need (tp_btf and raw_tp do not): mounted at /sys/kernel/tracing
// when it is not (it is not on a fresh machine); false when it is neither there nor mountable.
bool ensureTracefs();
// The syscall tracepoints the mmap sensor attaches to.
bool syscallTracepointsExist();

// Why perf_event_open (a tp/ program's attachment) refused, when the kernel's settings say it:
// "" otherwise.
std::string perfEventHint(int err);

}  // namespace headroom
