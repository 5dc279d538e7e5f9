#include <algorithm>
#include <cstdlib>
#include <utility>

#include "headroom/sensors/oom_joiner.h"
#include "headroom/sources/oom_log.h"

namespace headroom {
namespace {

bool contains(const std::vector<pid_t>& v, pid_t p) { return std::find(v.begin(), v.end(), p) != v.end(); }

// Fills what one source left empty from the other, never overwriting.
void merge(OomVictim& into, const OomVictim& from) {
  if (into.tgid == 0) into.tgid = from.tgid;
  if (into.comm.empty()) into.comm = from.comm;
  if (into.cgroup.empty()) into.cgroup = from.cgroup;
  if (!into.uid) into.uid = from.uid;
  if (!into.oom_score_adj) into.oom_score_adj = from.oom_score_adj;
  if (!into.total_vm) into.total_vm = from.total_vm;
  if (!into.anon_rss) into.anon_rss = from.anon_rss;
  if (!into.file_rss) into.file_rss = from.file_rss;
  if (!into.shmem_rss) into.shmem_rss = from.shmem_rss;
  if (!into.pgtables) into.pgtables = from.pgtables;
  if (!into.swap) into.swap = from.swap;
  if (!into.locked) into.locked = from.locked;
  if (!into.pinned_vm) into.pinned_vm = from.pinned_vm;
  if (!into.cuda_pinned) into.cuda_pinned = from.cuda_pinned;
  if (!into.cuda_device) into.cuda_device = from.cuda_device;
  // Skipped only when no source saw the kill sent: the kernel's "Killed process" line is printed
  // only for a kill it sent, and the victim marked exiting may be one that began to exit on the
  // SIGKILL sent just before the mark (the kernel signals, then marks), or one marked again by a
  // later OOM in the same cgroup while it dies.
  into.kill_skipped = into.kill_skipped && from.kill_skipped;
}

}  // namespace

OomJoiner::Pending& OomJoiner::begin(std::int64_t ts_ns, std::int64_t now_ns) {
  Pending& p = pending_.emplace_back();
  p.event.id = next_id_++;
  p.event.monotonic_time_ns = ts_ns;
  p.first_seen_ns = now_ns;
  return p;
}

OomJoiner::Pending* OomJoiner::findFor(pid_t victim, std::int64_t ts_ns) {
  for (auto& p : pending_) {
    if (std::llabs(p.event.monotonic_time_ns - ts_ns) > opts_.match_window_ns) continue;
    if (p.event.victim(victim) != nullptr) return &p;
  }
  return nullptr;
}

void OomJoiner::addMark(const OomMark& m, std::int64_t now_ns) {
  pid_t key = m.victim.process();
  Pending* p = findFor(key, m.ts_ns);
  if (p == nullptr) {
    // memory.oom.group: several marks from one trigger in one burst are one incident.
    for (auto& q : pending_) {
      if (q.event.trigger_pid == m.trigger_pid && std::llabs(q.event.monotonic_time_ns - m.ts_ns) < opts_.settle_ns) {
        p = &q;
        break;
      }
    }
  }
  if (p == nullptr) p = &begin(m.ts_ns, now_ns);
  OomEvent& e = p->event;
  e.from_bpf = true;
  if (e.trigger_pid == 0) {
    e.trigger_pid = m.trigger_pid;
    e.trigger_tgid = m.trigger_tgid;
    e.trigger_comm = m.trigger_comm;
    e.trigger_cgroup = m.trigger_cgroup;
  }
  OomVictim* v = nullptr;
  for (auto& x : e.victims) {
    if (x.pid == m.victim.pid || (x.tgid != 0 && x.tgid == m.victim.tgid)) v = &x;
  }
  if (v == nullptr) {
    e.victims.push_back(m.victim);
  } else {
    merge(*v, m.victim);
  }
  if (e.read_at_kill.empty() && !m.read_at_kill.empty()) {
    e.read_at_kill = m.read_at_kill;
    e.read_at_kill_ns = m.read_at_kill_ns;
  }
  p->marked.push_back(key);
  p->last_update_ns = now_ns;
}

void OomJoiner::addReport(const KernelOomReport& r, std::int64_t report_mono_ns, std::int64_t now_ns,
                          std::vector<CgroupMemory> read_at_kill, std::int64_t read_at_kill_ns) {
  Pending* p = findFor(r.victim.tgid, report_mono_ns);
  if (p == nullptr) {
    for (auto& q : pending_) {
      if (q.kmsg_incident != 0 && q.kmsg_incident == r.first_seq) p = &q;
    }
  }
  if (p == nullptr) p = &begin(report_mono_ns, now_ns);
  OomEvent& e = p->event;
  e.from_kmsg = true;
  p->kmsg_incident = r.first_seq;
  if (!e.kmsg_seq) e.kmsg_seq = r.first_seq;
  if (!r.oom_group || e.constraint.empty()) {
    e.constraint = r.constraint;
    e.domain_cgroup = r.oom_memcg;
    e.global = r.global_oom || r.constraint == "CONSTRAINT_NONE";
    e.domain_limit_bytes = r.memcg_limit_bytes;
    e.domain_usage_bytes = r.memcg_usage_bytes;
    e.kernel_memcg = r.memcg;
    e.kernel_machine = r.machine;
  }
  e.kernel_lost_records += r.lost_records;
  if (e.read_at_kill.empty() && !read_at_kill.empty()) {
    e.read_at_kill = std::move(read_at_kill);
    e.read_at_kill_ns = read_at_kill_ns;
  }
  if (!r.tasks.empty()) e.tasks = r.tasks;
  if (e.trigger_pid == 0 && r.trigger_pid) {
    e.trigger_pid = *r.trigger_pid;
    e.trigger_comm = r.trigger_comm;
  }
  OomVictim* v = nullptr;
  for (auto& x : e.victims) {
    if (x.tgid == r.victim.tgid || x.pid == r.victim.pid) v = &x;
  }
  if (v == nullptr) {
    e.victims.push_back(r.victim);
  } else {
    // The kernel's figures are exact: they win over BPF's approximate counters.
    OomVictim kernel = r.victim;
    merge(kernel, *v);
    kernel.pid = v->pid;
    *v = kernel;
  }
  p->reported.push_back(r.victim.tgid);
  p->last_update_ns = now_ns;
}

void OomJoiner::addReap(pid_t pid, bool finished, std::int64_t ts_ns) {
  for (auto& p : pending_) {
    if (p.event.victim(pid) == nullptr) continue;
    if (finished)
      p.event.reap_finish_ns = ts_ns;
    else
      p.event.reap_start_ns = ts_ns;
  }
}

std::vector<OomEvent> OomJoiner::takeReady(std::int64_t now_ns, std::int64_t wall_now_ns) {
  std::vector<OomEvent> out;
  auto ready = [&](const Pending& p) {
    if (now_ns - p.last_update_ns < opts_.settle_ns) return false;
    if (now_ns - p.first_seen_ns >= opts_.max_wait_ns) return true;
    for (const auto& v : p.event.victims) {
      pid_t k = v.process();
      if (opts_.expect_bpf && !contains(p.marked, k) && !contains(p.marked, v.pid)) return false;
      if (opts_.expect_kmsg && !contains(p.reported, k) && !contains(p.reported, v.pid)) return false;
    }
    return true;
  };
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (ready(*it)) {
      it->event.wall_time_ns = wall_now_ns;
      out.push_back(std::move(it->event));
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

std::optional<std::uint64_t> OomJoiner::untoldSince() const {
  std::optional<std::uint64_t> since;
  for (const Pending& p : pending_) {
    if (p.started_told || p.kmsg_incident == 0) continue;
    if (!since || p.kmsg_incident < *since) since = p.kmsg_incident;
  }
  return since;
}

std::vector<OomEvent> OomJoiner::takeStarted() {
  std::vector<OomEvent> out;
  for (Pending& p : pending_) {
    if (std::exchange(p.started_told, true)) continue;
    out.push_back(p.event);
  }
  return out;
}

}  // namespace headroom
