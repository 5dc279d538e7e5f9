// `headroom run -- CMD ARGS...`: supervises a prover. Each attempt gets a budget from the
// controller; each exit is judged on the kernel's evidence (supervisor/verdict.h), never on
// "137 means OOM"; a confirmed OOM kill grows the margin, waits for the kernel to give the memory
// back, and retries, at most policy.max_retries times. Single-threaded: it forks the prover.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "headroom/controller/controller.h"
#include "headroom/controller/warning.h"
#include "headroom/util/result.h"

namespace headroom {

// How the budget reaches the prover, besides HEADROOM_BUDGET_BYTES and its kin (docs/prover-contract.md).
struct BudgetHandover {
  std::map<std::string, std::string> env;  // NAME -> template ("{gib}GiB")
  std::vector<std::string> args;           // templates appended to the command
  std::string file;                        // written atomically before each attempt ("" none)
  std::string file_format = "{bytes}";
};

struct SupervisorConfig {
  std::string root = "/";
  std::string cgroup;  // where the prover runs; "" = the caller's own (made when missing)
  BudgetPolicy policy;
  std::chrono::milliseconds reclaim_timeout{60000};
  std::chrono::milliseconds sample_interval{250};
  bool keep_state = true;  // false: learn nothing across runs
  std::string state_file;  // "" = defaultStatePath(cgroup)
  bool probe = false;      // probe the cgroup before the first attempt
  std::optional<std::uint64_t> probe_stop_margin;
  BudgetHandover handover;
  std::string self_report;  // a file where the prover says how much it uses ("" none)
  bool bpf = true;
  // The time to OOM of the prover's cgroup, from each sample; on_warning (--on-warning) tells the
  // prover once per warning (signal: the prover's own process).
  WarningSettings warning;
  std::vector<std::string> command;
};

class Supervisor {
 public:
  // Opens the root, the prover's cgroup (made when missing, removed at the end), the state file
  // and the sensors, and says on `log` where the OOM evidence will come from. Errors: bad input
  // (a corrupt state file, a cgroup nowhere), or the machine's.
  static Result<std::unique_ptr<Supervisor>> create(SupervisorConfig cfg, std::ostream& log);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // The attempts, until one ends cleanly, one ends otherwise than by an OOM kill, the retries are
  // used up, or a signal stops it. Returns the exit status a shell would give for the prover's
  // last attempt (128 + signal when it was killed); 126 or 127 when it could not be placed or
  // started, 1 when no budget could be given before any attempt.
  int run();

 private:
  struct Impl;
  explicit Supervisor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// SIGINT, SIGTERM and SIGHUP stop the retries and are passed on to the prover (one from the
// terminal has reached its process group already).
void installRunSignalHandlers();

}  // namespace headroom
