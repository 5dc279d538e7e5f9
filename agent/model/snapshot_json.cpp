#include "headroom/model/snapshot_json.h"

namespace headroom {
namespace {

using nlohmann::json;

template <typename T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

json toJson(const StatMap& m) {
  json o = json::object();
  for (const auto& [k, v] : m.entries()) o[k] = v;
  return o;
}

json toJson(const PsiLine& l) {
  return {{"avg10", l.avg10}, {"avg60", l.avg60}, {"avg300", l.avg300}, {"total_us", l.total_us}};
}

}  // namespace

json toJson(const Bound& b) {
  return {{"name", b.name},
          {"limit_bytes", b.limit},
          {"usage_bytes", b.usage},
          {"reclaimable_bytes", b.reclaimable},
          {"room_bytes", b.room()}};
}

json toJson(const CgroupMemory& c) {
  json j = {
      {"version", c.version},
      {"path", c.path},
      {"limit_bytes", opt(c.limit)},
      {"usage_bytes", c.usage},
      {"usage_source",
       c.version == 1 ? "memory.usage_in_bytes" : (c.usage_from_stat ? "memory.stat" : "memory.current")},
      {"peak_bytes", opt(c.peak)},
      {"high_bytes", opt(c.high)},
      {"swap_current_bytes", opt(c.swap_current)},
      {"oom_events", opt(c.oom_events)},
      {"oom_kills", opt(c.oom_kills)},
      {"stat", toJson(c.stat)},
      {"warnings", c.warnings},
  };
  if (c.version == 1) {
    j["hierarchical_limit_bytes"] = opt(c.effectiveLimitHint());
    j["kmem_usage_bytes"] = opt(c.kmem_usage);
    j["failcnt"] = opt(c.failcnt);
    j["under_oom"] = c.under_oom;
    j["oom_control"] = toJson(c.oom_control);
  } else {
    j["events"] = toJson(c.events);
    j["events_local"] = toJson(c.events_local);
    j["pressure"] = c.pressure ? toJson(*c.pressure) : json(nullptr);
  }
  return j;
}

namespace {

json toJson(const PinnedOverlay& p) {
  const char* res = p.residency == PinnedOverlay::Residency::kInsideRss    ? "inside_rss"
                    : p.residency == PinnedOverlay::Residency::kOutsideRss ? "outside_rss"
                                                                           : "unknown";
  return {{"live_bytes", p.live_bytes},
          {"peak_bytes", p.peak_bytes},
          {"allocations", p.allocations},
          {"residency", res},
          {"source", p.source}};
}

json toJson(const ProcessActivity& a) {
  return {{"faults", a.faults},
          {"mmap_bytes", a.mmap_bytes},
          {"munmap_bytes", a.munmap_bytes},
          {"mremap_grow_bytes", a.mremap_grow_bytes},
          {"mremap_shrink_bytes", a.mremap_shrink_bytes},
          {"mlock_bytes", a.mlock_bytes},
          {"munlock_bytes", a.munlock_bytes},
          {"rss_file_bytes", opt(a.rss_file)},
          {"rss_anon_bytes", opt(a.rss_anon)},
          {"rss_shmem_bytes", opt(a.rss_shmem)},
          {"swap_bytes", opt(a.swap)}};
}

}  // namespace

json toJson(const ProcessSnapshot& p) {
  const ProcessSample& s = p.sample;
  const ProcessAttribution& a = p.attribution;
  return {
      {"pid", s.pid},
      {"start_time_ticks", s.start_time_ticks},
      {"ppid", s.ppid},
      {"uid", s.uid},
      {"comm", s.comm},
      {"cmdline", s.cmdline},
      {"role", toString(p.role)},
      {"cgroup", s.memory_cgroup},
      {"attributed_cgroup", p.cgroup},
      {"threads", s.status.threads},
      {"rss_bytes", a.rss},
      {"rss_anon_bytes", a.rss_anon},
      {"rss_file_bytes", a.rss_file},
      {"rss_shmem_bytes", a.rss_shmem},
      {"pss_bytes", opt(a.pss)},
      {"pss_anon_bytes", opt(a.pss_anon)},
      {"pss_file_bytes", opt(a.pss_file)},
      {"pss_shmem_bytes", opt(a.pss_shmem)},
      {"page_tables_bytes", a.page_tables},
      {"locked_bytes", a.locked},
      {"pinned_vm_bytes", s.status.vm_pin},
      {"swap_bytes", a.swap},
      {"minor_faults", s.minflt},
      {"major_faults", s.majflt},
      {"overhead_share_bytes", a.overhead_share},
      {"overhead_rule", a.overhead_rule},
      {"pinned", a.pinned ? toJson(*a.pinned) : json(nullptr)},
      {"device_bytes", opt(a.device_bytes)},
      {"device_peak_bytes", opt(a.device_peak_bytes)},
      {"activity", p.activity ? toJson(*p.activity) : json(nullptr)},
  };
}

json toJson(const SensorStatus& s) { return {{"name", s.name}, {"state", toString(s.state)}, {"reason", s.reason}}; }

json toJson(const Psi& p) { return {{"some", toJson(p.some)}, {"full", p.full ? toJson(*p.full) : json(nullptr)}}; }

json toJson(const Meminfo& m) {
  return {
      {"mem_total_bytes", m.mem_total},
      {"mem_free_bytes", m.mem_free},
      {"mem_available_bytes", m.mem_available},
      {"mem_available_estimated", m.mem_available_estimated},
      {"buffers_bytes", m.buffers},
      {"cached_bytes", m.cached},
      {"shmem_bytes", m.shmem},
      {"anon_pages_bytes", m.anon_pages},
      {"mlocked_bytes", m.mlocked},
      {"page_tables_bytes", m.page_tables},
      {"sec_page_tables_bytes", m.sec_page_tables},
      {"kernel_stack_bytes", m.kernel_stack},
      {"slab_bytes", m.slab},
      {"slab_reclaimable_bytes", m.s_reclaimable},
      {"slab_unreclaimable_bytes", m.s_unreclaim},
      {"percpu_bytes", m.percpu},
      {"swap_total_bytes", m.swap_total},
      {"swap_free_bytes", m.swap_free},
      {"hugepages_total", m.hugepages_total},
      {"hugepages_free", m.hugepages_free},
      {"hugepage_size_bytes", m.hugepage_size},
      {"hugetlb_bytes", m.hugetlb},
  };
}

json toJson(const Attribution& a) {
  json parts = json::array();
  for (const Part& p : a.parts) {
    parts.push_back({{"kind", toString(p.kind)},
                     {"visible", isVisible(p.kind)},
                     {"bytes", p.bytes},
                     {"accuracy", toString(p.accuracy)},
                     {"source", p.source}});
  }
  return {{"usage_bytes", a.usage},
          {"visible_bytes", a.visibleBytes()},
          {"invisible_bytes", a.invisibleBytes()},
          {"unattributed_bytes", a.unattributed},
          {"parts", parts},
          {"notes", a.notes}};
}

json toJson(const Snapshot& s) {
  json cgroups = json::array();
  for (const CgroupSnapshot& c : s.cgroups) {
    json bounds = json::array();
    for (const Bound& b : c.bounds) bounds.push_back(toJson(b));
    json pids = json::array();
    for (std::size_t i : c.processes) pids.push_back(s.processes[i].sample.pid);
    cgroups.push_back({{"memory", toJson(c.memory)},
                       {"attribution", toJson(c.attribution)},
                       {"bounds", bounds},
                       {"tightest_bound", c.tightest ? toJson(*c.tightest) : json(nullptr)},
                       {"headroom_bytes", opt(c.headroom())},
                       {"pids", pids}});
  }
  json procs = json::array();
  for (const ProcessSnapshot& p : s.processes) procs.push_back(toJson(p));
  const CollectStats& st = s.stats;
  json sensors = json::array();
  for (const SensorStatus& ss : s.sensors) sensors.push_back(toJson(ss));
  return {
      {"sensors", sensors},
      {"schema_version", kSnapshotSchemaVersion},
      {"wall_time_ns", s.wall_time_ns},
      {"cgroup_mode", toString(s.mode)},
      {"memory_cgroup_version", s.memory_version},
      {"memory_cgroup_mount", s.memory_mount},
      {"host",
       {{"meminfo", toJson(s.host.meminfo)}, {"pressure", s.host.pressure ? toJson(*s.host.pressure) : json(nullptr)}}},
      {"cgroups", cgroups},
      {"processes", procs},
      {"self_pid", s.self_pid},
      {"focus_pid", opt(s.focus_pid)},
      {"stats",
       {{"processes_seen", st.processes_seen},
        {"processes_read", st.processes_read},
        {"processes_vanished", st.processes_vanished},
        {"processes_failed", st.processes_failed},
        {"processes_skipped", st.processes_skipped},
        {"processes_without_pss", st.processes_without_pss},
        {"kernel_threads", st.kernel_threads},
        {"processes_outside_mount", st.processes_outside_mount},
        {"warnings", st.warnings}}},
  };
}

json toJson(const OomEvent& e) {
  json victims = json::array();
  for (const OomVictim& v : e.victims) {
    victims.push_back({{"pid", v.pid},
                       {"tgid", v.tgid},
                       {"comm", v.comm},
                       {"uid", opt(v.uid)},
                       {"oom_score_adj", opt(v.oom_score_adj)},
                       {"cgroup", v.cgroup},
                       {"total_vm_bytes", opt(v.total_vm)},
                       {"anon_rss_bytes", opt(v.anon_rss)},
                       {"file_rss_bytes", opt(v.file_rss)},
                       {"shmem_rss_bytes", opt(v.shmem_rss)},
                       {"pgtables_bytes", opt(v.pgtables)},
                       {"swap_bytes", opt(v.swap)},
                       {"kill_skipped", v.kill_skipped},
                       {"inferred", v.inferred}});
  }
  json tasks = json::array();
  for (const OomTaskDumpEntry& t : e.tasks) {
    tasks.push_back({{"pid", t.pid},
                     {"uid", t.uid},
                     {"tgid", t.tgid},
                     {"total_vm_bytes", t.total_vm_bytes},
                     {"rss_bytes", t.rss_bytes},
                     {"rss_anon_bytes", opt(t.rss_anon_bytes)},
                     {"rss_file_bytes", opt(t.rss_file_bytes)},
                     {"rss_shmem_bytes", opt(t.rss_shmem_bytes)},
                     {"pgtables_bytes", t.pgtables_bytes},
                     {"swap_bytes", t.swap_bytes},
                     {"oom_score_adj", t.oom_score_adj},
                     {"name", t.name}});
  }
  return {{"id", e.id},
          {"wall_time_ns", e.wall_time_ns},
          {"monotonic_time_ns", e.monotonic_time_ns},
          {"victims", victims},
          {"trigger",
           {{"pid", e.trigger_pid}, {"tgid", e.trigger_tgid}, {"comm", e.trigger_comm}, {"cgroup", e.trigger_cgroup}}},
          {"constraint", e.constraint},
          {"oom_domain",
           {{"cgroup", opt(e.domain_cgroup)},
            {"global", e.global},
            {"limit_bytes", opt(e.domain_limit_bytes)},
            {"usage_bytes", opt(e.domain_usage_bytes)}}},
          {"tasks", tasks},
          {"sources", {{"bpf", e.from_bpf}, {"kmsg", e.from_kmsg}, {"counter", e.from_counter}}},
          {"counter", e.from_counter ? json{{"cgroup", e.counter_cgroup}, {"kills", e.counted_kills}} : json(nullptr)},
          {"reap_start_ns", opt(e.reap_start_ns)},
          {"reap_finish_ns", opt(e.reap_finish_ns)}};
}

json toJson(const ExitEvent& e) {
  return {{"pid", e.pid},
          {"comm", e.comm},
          {"outcome", e.describe()},
          {"kind", toString(e.kind)},
          {"code", e.code},
          {"signal", e.signal},
          {"wait_status", e.wait_status},
          {"oom_marked", e.oom_marked},
          {"shares_oom_mm", e.shares_oom_mm},
          {"cgroup", e.cgroup},
          {"monotonic_time_ns", e.monotonic_time_ns},
          {"note", e.note}};
}

}  // namespace headroom
