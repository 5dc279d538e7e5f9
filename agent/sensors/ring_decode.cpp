#include "headroom/sensors/ring_decode.h"

#include <cstring>
#include <string>

#include "events.h"

namespace headroom {
namespace {

constexpr std::uint64_t kPageBytes = 4096;

std::string commOf(const char (&c)[HR_COMM_LEN]) { return std::string(c, strnlen(c, HR_COMM_LEN)); }

// The record as its struct, when the bytes hold one whole.
template <typename T>
std::optional<T> as(std::span<const std::byte> bytes) {
  if (bytes.size() < sizeof(T)) return std::nullopt;
  T v{};
  std::memcpy(&v, bytes.data(), sizeof v);
  return v;
}

DecodedOomMark decodeMark(const oom_victim_event& e) {
  DecodedOomMark d;
  OomMark& m = d.mark;
  m.ts_ns = static_cast<std::int64_t>(e.ts_ns);
  m.trigger_pid = static_cast<pid_t>(e.trigger.pid);
  m.trigger_tgid = static_cast<pid_t>(e.trigger.tgid);
  m.trigger_comm = commOf(e.trigger.comm);
  d.trigger_cgroup_id = e.trigger_cgroup_id;
  OomVictim& v = m.victim;
  v.pid = static_cast<pid_t>(e.victim.pid);
  d.victim_is_task = (e.flags & HR_OOM_VICTIM_TASK) != 0;
  if (!d.victim_is_task) return d;
  v.tgid = static_cast<pid_t>(e.victim.tgid);
  v.comm = commOf(e.victim.comm);
  v.uid = e.victim_uid;
  v.oom_score_adj = e.victim_oom_score_adj;
  d.victim_cgroup_id = e.victim_cgroup_id;
  v.total_vm = e.victim_total_vm_pages * kPageBytes;
  v.anon_rss = e.victim_rss_anon_pages * kPageBytes;
  v.file_rss = e.victim_rss_file_pages * kPageBytes;
  v.shmem_rss = e.victim_rss_shmem_pages * kPageBytes;
  v.swap = e.victim_swapents * kPageBytes;
  v.pgtables = e.victim_pgtables_bytes;
  v.kill_skipped = (e.flags & HR_OOM_VICTIM_EXITING) != 0;
  return d;
}

}  // namespace

OomRingRecord decodeOomRecord(std::span<const std::byte> bytes) {
  auto type = as<std::uint32_t>(bytes);
  if (!type) return {};
  if (*type == HR_EV_OOM_VICTIM) {
    if (auto e = as<oom_victim_event>(bytes)) return decodeMark(*e);
  } else if (*type == HR_EV_REAP_START || *type == HR_EV_REAP_FINISH) {
    if (auto e = as<reap_event>(bytes))
      return DecodedReap{static_cast<pid_t>(e->pid), *type == HR_EV_REAP_FINISH, static_cast<std::int64_t>(e->ts_ns)};
  }
  return {};
}

std::optional<DecodedExit> decodeExitRecord(std::span<const std::byte> bytes) {
  auto e = as<exit_event>(bytes);
  if (!e || e->type != HR_EV_EXIT) return std::nullopt;
  DecodedExit d;
  d.exit = classifyExit(static_cast<pid_t>(e->task.tgid), e->exit_code, (e->flags & HR_EXIT_OOM_MARKED) != 0,
                        (e->flags & HR_EXIT_SHARES_OOM_MM) != 0);
  d.exit.comm = commOf(e->task.comm);
  d.exit.parent_pid = static_cast<pid_t>(e->parent_tgid);
  d.exit.monotonic_time_ns = static_cast<std::int64_t>(e->ts_ns);
  d.cgroup_id = e->cgroup_id;
  return d;
}

}  // namespace headroom
