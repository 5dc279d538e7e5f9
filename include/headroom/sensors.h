// BPF sensors: owners of the libbpf skeletons (open -> size maps -> load -> attach, RAII).
// For now the exit counter, which proves the pipeline from .bpf.c to a loaded, attached program.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "headroom/result.h"

struct exitcount_bpf;

namespace headroom {

// Routes libbpf's own log lines into spdlog (once per process; idempotent).
void routeLibbpfLogToSpdlog();

// Whether this kernel exposes a tracepoint, told by BTF alone (no tracefs needed):
// a `btf_trace_<name>` typedef exists for every tracepoint the kernel has.
bool kernelHasTracepoint(const std::string& name);

struct ExitCount {
  std::uint64_t thread_exits = 0;
  bool group_dead = false;
  int exit_code = 0;  // wait-status style: (status << 8) | terminating signal
};

class ExitCounter {
 public:
  // Opens, sizes the map to `max_groups`, loads and attaches; each step's failure is an error
  // that says which step.
  static Result<ExitCounter> start(std::uint32_t max_groups = 4096);

  std::optional<ExitCount> lookup(pid_t tgid) const;
  std::uint64_t totalExits() const;

 private:
  struct SkelDeleter {
    void operator()(exitcount_bpf* s) const;
  };
  explicit ExitCounter(std::unique_ptr<exitcount_bpf, SkelDeleter> s) : skel_(std::move(s)) {}
  std::unique_ptr<exitcount_bpf, SkelDeleter> skel_;
};

}  // namespace headroom
