#include "headroom/sensors/oom_event.h"

#include <fmt/format.h>
#include <sys/wait.h>

#include <csignal>

#include "headroom/util/text.h"
#include "headroom/util/units.h"

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

std::string describeOom(const OomEvent& e) {
  std::string victims;
  for (const OomVictim& v : e.victims) {
    if (!victims.empty()) victims += "; ";
    victims += fmt::format("pid {} ({}) in {}", v.process(), printableText(v.comm), v.cgroup.empty() ? "?" : v.cgroup);
    if (v.anon_rss) {
      victims += fmt::format(" anon {} file {} shmem {} pgtables {}", formatBytes(*v.anon_rss),
                             formatBytes(v.file_rss.value_or(0)), formatBytes(v.shmem_rss.value_or(0)),
                             formatBytes(v.pgtables.value_or(0)));
    }
    if (v.kill_skipped) victims += " (already exiting: no kill sent)";
    if (v.inferred) victims += " (inferred: gone from the cgroup)";
  }
  std::string domain = e.global ? "the whole machine" : e.domain_cgroup.value_or("?");
  if (e.domain_limit_bytes)
    domain += fmt::format(" (limit {}, usage {})", formatBytes(*e.domain_limit_bytes),
                          formatBytes(e.domain_usage_bytes.value_or(0)));
  if (e.from_counter) {
    if (victims.empty()) victims = "victim not known";
    domain = fmt::format("not known (the OOM-kill counter of {} rose by {})",
                         e.counter_cgroup.empty() ? "?" : e.counter_cgroup, e.counted_kills);
  }
  std::string sources = e.from_bpf && e.from_kmsg ? "bpf+kmsg" : e.from_bpf ? "bpf" : e.from_kmsg ? "kmsg" : "counter";
  return fmt::format("OOM kill: {} | OOM domain {} | trigger pid {} ({}) | {} [{}]", victims, domain, e.trigger_pid,
                     printableText(e.trigger_comm), e.constraint.empty() ? "constraint unknown" : e.constraint,
                     sources);
}

}  // namespace headroom
