#include "testing/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include <fmt/format.h>

namespace headroom::testing {

Result<ChildProcess> ChildProcess::spawn(const std::vector<std::string>& argv, const std::string& cgroup_procs) {
  int out[2], in[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return errnoError("pipe");
  if (::pipe2(in, O_CLOEXEC) != 0) return errnoError("pipe");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));  // NOLINT: execv's signature
  args.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) return errnoError("fork");
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec.
    if (!cgroup_procs.empty()) {
      int fd = ::open(cgroup_procs.c_str(), O_WRONLY);
      char buf[24];
      int n = 0;
      for (pid_t p = ::getpid(); p > 0; p /= 10) buf[n++] = static_cast<char>('0' + p % 10);
      char rev[24];
      for (int i = 0; i < n; ++i) rev[i] = buf[n - 1 - i];
      if (fd < 0 || ::write(fd, rev, static_cast<std::size_t>(n)) != n) ::_exit(126);
      ::close(fd);
    }
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(in[0], STDIN_FILENO);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(in[0]);
  return ChildProcess(pid, out[0], in[1]);
}

ChildProcess::ChildProcess(ChildProcess&& o) noexcept
    : pid_(o.pid_), out_fd_(o.out_fd_), in_fd_(o.in_fd_), buffer_(std::move(o.buffer_)), status_(o.status_) {
  o.pid_ = -1;
  o.out_fd_ = -1;
  o.in_fd_ = -1;
}

ChildProcess::~ChildProcess() {
  if (running()) {
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
  }
  if (out_fd_ >= 0) ::close(out_fd_);
  if (in_fd_ >= 0) ::close(in_fd_);
}

Result<std::string> ChildProcess::readLine(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return sysError(ETIMEDOUT, fmt::format("no line from pid {} in time", pid_));
    pollfd p{out_fd_, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno != EINTR) return errnoError("poll");
    if (r <= 0) continue;
    char buf[4096];
    ssize_t n = ::read(out_fd_, buf, sizeof buf);
    if (n < 0 && errno != EINTR) return errnoError("read");
    if (n == 0) return sysError(EPIPE, fmt::format("pid {} closed its stdout", pid_));
    if (n > 0) buffer_.append(buf, static_cast<std::size_t>(n));
  }
}

Status ChildProcess::writeLine(const std::string& line) {
  std::string l = line + "\n";
  if (in_fd_ < 0 || ::write(in_fd_, l.data(), l.size()) != static_cast<ssize_t>(l.size()))
    return errnoError(fmt::format("writing to pid {}", pid_));
  return ok();
}

void ChildProcess::closeStdin() {
  if (in_fd_ >= 0) ::close(in_fd_);
  in_fd_ = -1;
}

void ChildProcess::kill(int sig) {
  if (running()) ::kill(pid_, sig);
}

Result<int> ChildProcess::wait(std::chrono::milliseconds timeout) {
  if (status_) return *status_;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int st = 0;
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      status_ = st;
      return st;
    }
    if (r < 0) return errnoError(fmt::format("waitpid {}", pid_));
    if (std::chrono::steady_clock::now() > deadline)
      return sysError(ETIMEDOUT, fmt::format("pid {} did not exit", pid_));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

CommandResult runCommand(const std::vector<std::string>& argv) {
  CommandResult res;
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) return res;
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));  // NOLINT: execv's signature
  args.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, STDIN_FILENO);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[8192];
      ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
        continue;
      }
      (i == 0 ? res.out : res.err).append(buf, static_cast<std::size_t>(n));
    }
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  res.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return res;
}

}  // namespace headroom::testing
