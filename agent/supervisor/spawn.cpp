#include "headroom/supervisor/spawn.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>

namespace headroom {
namespace {

// What the child reports through the pipe when it cannot go on: the stage and its errno.
enum Stage : int { kMoving = 1, kExecuting = 2 };

}  // namespace

Result<pid_t> spawnProver(const SpawnSpec& s) {
  if (s.argv.empty()) return badInput("no command");
  std::vector<std::string> args = s.argv;
  std::vector<std::string> env_strings;
  env_strings.reserve(s.env.size());
  for (const auto& [k, v] : s.env) env_strings.push_back(fmt::format("{}={}", k, v));
  std::vector<char*> argv, envp;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const char* procs = s.procs_file.empty() ? nullptr : s.procs_file.c_str();

  std::array<int, 2> pipefd{};
  if (::pipe2(pipefd.data(), O_CLOEXEC) != 0) return errnoError("pipe");
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    return errnoError("fork");
  }
  if (pid == 0) {
    // The child: async-signal-safe calls only.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &dfl, nullptr);
    std::array<int, 2> report = {0, 0};  // stage, errno
    if (procs != nullptr) {
      int fd = ::open(procs, O_WRONLY | O_CLOEXEC);
      if (fd < 0 || ::write(fd, "0", 1) != 1) {
        report = {kMoving, errno};
        (void)!::write(pipefd[1], report.data(), sizeof report);
        ::_exit(126);
      }
      ::close(fd);
    }
    ::execvpe(argv[0], argv.data(), envp.data());
    report = {kExecuting, errno};
    (void)!::write(pipefd[1], report.data(), sizeof report);
    ::_exit(127);
  }
  ::close(pipefd[1]);
  std::array<int, 2> report = {0, 0};
  ssize_t n = 0;
  do {
    n = ::read(pipefd[0], report.data(), sizeof report);
  } while (n < 0 && errno == EINTR);
  ::close(pipefd[0]);
  if (n == static_cast<ssize_t>(sizeof report)) {
    int st = 0;
    ::waitpid(pid, &st, 0);
    if (report[0] == kMoving)
      return makeError(ErrorKind::kNotPlaced, fmt::format("moving the prover into {} ({})", s.cgroup, s.procs_file),
                       report[1]);
    return makeError(ErrorKind::kNotStarted, fmt::format("starting {}", s.argv.front()), report[1]);
  }
  return pid;
}

}  // namespace headroom
