#include "headroom/supervisor/verdict.h"

#include <fmt/format.h>
#include <sys/wait.h>

#include <algorithm>
#include <csignal>

#include "headroom/sources/cgroup.h"

namespace headroom {
namespace {

constexpr int kMaxTreeDepth = 64;
constexpr std::size_t kMaxParents = 65536;

bool inCgroupOrTree(const AttemptEvidence& ev, const OomVictim& v) {
  return ev.tree.contains(v.process()) ||
         (!v.cgroup.empty() && cgroupIsWithin(normaliseCgroupPath(v.cgroup), ev.cgroup));
}

std::string sourcesOf(const OomEvent& e) {
  if (e.from_bpf && e.from_kmsg) return "mark_victim + /dev/kmsg";
  return e.from_bpf ? "mark_victim" : "/dev/kmsg";
}

}  // namespace

bool ProverTree::contains(pid_t pid) const {
  for (int depth = 0; depth < kMaxTreeDepth && pid > 1; ++depth) {
    if (members.count(pid) != 0) return true;
    auto it = parents.find(pid);
    if (it == parents.end()) return false;
    pid = it->second;
  }
  return false;
}

void ProverTree::noteExit(const ExitEvent& x) {
  if (x.parent_pid > 0 && parents.size() < kMaxParents) parents[x.pid] = x.parent_pid;
}

std::uint64_t counterRise(const AttemptEvidence& ev) {
  // A counter read only once says nothing: never compare against a missing "before".
  if (!ev.oom_kills_before || !ev.oom_kills_after || *ev.oom_kills_after <= *ev.oom_kills_before) return 0;
  return *ev.oom_kills_after - *ev.oom_kills_before;
}

std::size_t victimsNamed(const AttemptEvidence& ev) {
  std::size_t n = 0;
  for (const OomEvent& e : ev.ooms) {
    for (const OomVictim& v : e.victims) n += !v.kill_skipped && inCgroupOrTree(ev, v);
  }
  return n;
}

bool awaitsOomReport(const AttemptEvidence& ev) {
  bool sigkill = WIFSIGNALED(ev.wait_status) && WTERMSIG(ev.wait_status) == SIGKILL;
  bool counter_known = ev.oom_kills_before && ev.oom_kills_after;
  return ev.oom_source_active && (counterRise(ev) > 0 || (sigkill && !counter_known)) &&
         victimsNamed(ev) < std::max<std::uint64_t>(counterRise(ev), 1);
}

Verdict classifyAttempt(const AttemptEvidence& ev) {
  Verdict out;
  const bool sigkill = WIFSIGNALED(ev.wait_status) && WTERMSIG(ev.wait_status) == SIGKILL;
  const bool counter_known = ev.oom_kills_before && ev.oom_kills_after;
  const std::uint64_t rose = counterRise(ev);

  const OomVictim* prover_victim = nullptr;
  const OomEvent* prover_event = nullptr;
  const OomVictim* other_victim = nullptr;
  for (const OomEvent& e : ev.ooms) {
    for (const OomVictim& v : e.victims) {
      if (v.kill_skipped || !inCgroupOrTree(ev, v)) continue;
      // The prover is its whole tree: a wrapper's child killed is the prover killed.
      if (ev.tree.contains(v.process()) && prover_victim == nullptr) {
        prover_victim = &v;
        prover_event = &e;
      } else if (!ev.tree.contains(v.process()) && other_victim == nullptr) {
        other_victim = &v;
      }
    }
  }
  std::string counter = counter_known
                            ? fmt::format("{} oom_kill {} -> {}", ev.cgroup, *ev.oom_kills_before, *ev.oom_kills_after)
                            : fmt::format("{} has no oom_kill counter", ev.cgroup);
  bool exit_says_oom = ev.exit && ev.exit->kind == ExitKind::kOomKilled;

  bool prover_killed =
      sigkill || (prover_victim != nullptr && prover_victim->process() != ev.child && prover_victim->pid != ev.child);
  if (prover_killed && (prover_victim != nullptr || (sigkill && exit_says_oom))) {
    out.prover_oom = true;
    std::string by = prover_event != nullptr ? sourcesOf(*prover_event) : "the exit sensor (marked by the OOM killer)";
    pid_t victim = prover_victim != nullptr ? prover_victim->process() : ev.child;
    out.evidence = fmt::format(
        "OOM kill of pid {}{} confirmed by the kernel ({}; {})", victim,
        victim == ev.child ? "" : fmt::format(" (of the prover's tree, started by pid {})", ev.child), by, counter);
    if (prover_event != nullptr && prover_event->domain_cgroup)
      out.evidence += fmt::format("; OOM domain {}", *prover_event->domain_cgroup);
  } else if (sigkill && rose > 0 && other_victim == nullptr) {
    // No sensor named the victim, but the kernel's own counter says a kill happened here.
    out.prover_oom = true;
    out.evidence =
        fmt::format("OOM kill in {} confirmed by the kernel's counter ({}); victim not named: {}", ev.cgroup, counter,
                    ev.oom_source_active ? "no OOM report arrived within 3 s" : "no OOM sensor is active");
  } else if (other_victim != nullptr || (rose > 0 && !sigkill)) {
    out.other_oom = true;
    out.evidence = other_victim != nullptr
                       ? fmt::format("OOM kill of pid {} ({}) beside the prover in {} ({})", other_victim->process(),
                                     other_victim->comm, ev.cgroup, counter)
                       : fmt::format("an OOM kill in {} while the prover ran ({})", ev.cgroup, counter);
  } else if (sigkill) {
    out.evidence = fmt::format("signal 9, not an OOM kill (no OOM kill of pid {}: {}{})", ev.child, counter,
                               ev.oom_source_active ? ", no mark_victim or kernel report for it" : "");
  }

  if (out.prover_oom || out.other_oom) {
    // The prover's tree as last sampled stands for it; the kernel's figures for its victim, when
    // they came, are its charge at the kill.
    const KillVictim victim{out.prover_oom ? prover_victim : nullptr, out.prover_oom, ev.last_tree};
    // The kill's own numbers, when the OOM domain is the prover's cgroup (or inside it).
    const OomEvent* event = prover_event;
    for (const OomEvent& e : ev.ooms) {
      if (event == nullptr && !e.victims.empty()) event = &e;
    }
    out.kill = killEvidence(std::span(&victim, 1), event, ev.cgroup, ev.now_ns, out.evidence);
    out.kill->budget = ev.budget;
    out.kill->self_reported = ev.self_reported;
  }
  return out;
}

}  // namespace headroom
