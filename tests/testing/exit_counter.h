// The owner of the test program tests/bpf/exitcount.bpf.c: the BPF pipeline (CO-RE object,
// skeleton, libbpf's log in spdlog, RAII) checked on a program of its own, apart from the sensors.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>

#include "headroom/util/result.h"

struct exitcount_bpf;

namespace headroom::testing {

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

}  // namespace headroom::testing
