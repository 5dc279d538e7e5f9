// Child processes for tests: started with fork+exec, optionally inside a cgroup from their
// first instruction, with their stdout readable line by line. Only pids started here are ever
// signalled.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "headroom/util/result.h"

namespace headroom::testing {

class ChildProcess {
 public:
  // `cgroup_procs`: a cgroup.procs file the child writes its own pid into before exec.
  static Result<ChildProcess> spawn(const std::vector<std::string>& argv, const std::string& cgroup_procs = "");

  ChildProcess(ChildProcess&& o) noexcept;
  ChildProcess& operator=(ChildProcess&&) = delete;
  ChildProcess(const ChildProcess&) = delete;
  ~ChildProcess();  // SIGKILLs and reaps a child still running

  pid_t pid() const { return pid_; }
  // The next line of the child's stdout, or an error on EOF/timeout.
  Result<std::string> readLine(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  // Writes one line to the child's stdin.
  Status writeLine(const std::string& line);
  // Closes the child's stdin (the workload's "finish now" signal).
  void closeStdin();
  void kill(int sig);
  // Waits for the exit; the raw wait status.
  Result<int> wait(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  bool running() const { return pid_ > 0 && !status_; }

 private:
  ChildProcess(pid_t pid, int out_fd, int in_fd) : pid_(pid), out_fd_(out_fd), in_fd_(in_fd) {}
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int in_fd_ = -1;
  std::string buffer_;
  std::optional<int> status_;
};

// Runs a command to completion, capturing stdout and stderr.
struct CommandResult {
  int exit_code = -1;  // -1 when killed by a signal
  std::string out;
  std::string err;
};
CommandResult runCommand(const std::vector<std::string>& argv);

}  // namespace headroom::testing
