#include "headroom/oom.h"

#include <fmt/format.h>
#include <sys/wait.h>

#include <csignal>

namespace headroom {

const OomVictim* OomEvent::victim(pid_t tgid) const {
  for (const auto& v : victims) {
    if (v.tgid == tgid || v.pid == tgid) return &v;
  }
  return nullptr;
}

const char* toString(ExitKind k) {
  switch (k) {
    case ExitKind::kExited: return "exited";
    case ExitKind::kSignaled: return "signaled";
    case ExitKind::kOomKilled: return "oom_killed";
  }
  return "unknown";
}

std::string ExitEvent::describe() const {
  switch (kind) {
    case ExitKind::kExited: return fmt::format("exited({})", code);
    case ExitKind::kSignaled: return fmt::format("signaled({})", signal);
    case ExitKind::kOomKilled: return "oom_killed";
  }
  return "unknown";
}

ExitEvent classifyExit(pid_t pid, int wait_status, bool oom_marked, bool shares_oom_mm) {
  ExitEvent e;
  e.pid = pid;
  e.wait_status = wait_status;
  e.oom_marked = oom_marked;
  e.shares_oom_mm = shares_oom_mm;
  if (WIFSIGNALED(wait_status)) {
    e.signal = WTERMSIG(wait_status);
    e.kind = (e.signal == SIGKILL && (oom_marked || shares_oom_mm)) ? ExitKind::kOomKilled : ExitKind::kSignaled;
    if (e.kind == ExitKind::kOomKilled && !oom_marked) e.note = "killed with the OOM victim whose memory it shared";
  } else {
    e.code = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 0;
    e.kind = ExitKind::kExited;
    if (oom_marked) e.note = "marked by the OOM killer while already exiting: no kill was sent";
  }
  return e;
}

}  // namespace headroom
