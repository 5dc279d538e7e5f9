#include "headroom/daemon/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "headroom/sources/fs_root.h"

extern char** environ;  // NOLINT: POSIX

namespace headroom {

Captured runCaptured(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  Captured c;
  if (argv.empty()) {
    c.start_error = "no command";
    return c;
  }
  std::array<int, 2> out{-1, -1}, err{-1, -1};
  if (::pipe2(out.data(), O_CLOEXEC) != 0 || ::pipe2(err.data(), O_CLOEXEC) != 0) {
    c.start_error = std::strerror(errno);
    for (int fd : {out[0], out[1], err[0], err[1]}) {
      if (fd >= 0) ::close(fd);
    }
    return c;
  }
  Fd out_read(out[0]), err_read(err[0]);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&fa, err[1], STDERR_FILENO);
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));  // NOLINT: posix_spawn's type
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  ::close(err[1]);
  if (rc != 0) {
    c.start_error = std::strerror(rc);
    return c;
  }
  auto end = Clock::now() + timeout;
  std::array<pollfd, 2> fds = {pollfd{out_read.get(), POLLIN, 0}, pollfd{err_read.get(), POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0 && Clock::now() < end) {
    if (::poll(fds.data(), fds.size(), 200) < 0 && errno != EINTR) break;
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP)) == 0) continue;
      std::array<char, 4096> buf{};
      ssize_t n = ::read(fds[i].fd, buf.data(), buf.size());
      if (n > 0) {
        (i == 0 ? c.out : c.err).append(buf.data(), static_cast<std::size_t>(n));
      } else {
        fds[i].fd = -1;  // closed with its Fd
        --open_fds;
      }
    }
  }
  if (open_fds > 0) ::kill(pid, SIGKILL);  // out of time
  int st = 0;
  ::waitpid(pid, &st, 0);
  c.status = open_fds > 0 ? -1 : st;
  return c;
}

}  // namespace headroom
