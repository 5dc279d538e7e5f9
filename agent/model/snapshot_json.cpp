#include "headroom/model/snapshot_json.h"

#include <type_traits>

#include "headroom/model/at_kill.h"

namespace headroom {
namespace {

using nlohmann::json;

template <typename T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

json toJson(const StatMap& m) {
  json o = json::object();
  for (const auto& [k, v] : m.entries()) o[std::string(k)] = v;
  return o;
}

json toJson(const OomCounterLine& c) {
  return {{"usage_bytes", opt(c.usage)}, {"limit_bytes", opt(c.limit)}, {"failcnt", opt(c.failcnt)}};
}

template <typename T>
json optJson(const std::optional<T>& v) {
  return v ? toJson(*v) : json(nullptr);
}

// What the kernel printed of the moment, every key as reported (units made bytes).
json kernelReportJson(const OomEvent& e) {
  if (!e.kernel_memcg && !e.kernel_machine) return nullptr;
  json j = {{"lost_records", e.kernel_lost_records}};
  if (e.kernel_memcg) {
    const OomMemcgState& m = *e.kernel_memcg;
    j["memcg"] = {{"memory", toJson(m.memory)}, {"memory_swap", optJson(m.memsw)}, {"swap", optJson(m.swap)},
                  {"kmem", optJson(m.kmem)},    {"stats_cgroup", m.stats_cgroup},  {"stats", toJson(m.stats)},
                  {"stats_cut", m.stats_cut}};
  }
  if (e.kernel_machine) {
    const OomMachineState& m = *e.kernel_machine;
    json nodes = json::array();
    for (const auto& [node, stats] : m.nodes) nodes.push_back({{"node", node}, {"stats", toJson(stats)}});
    json huge = json::array();
    for (const OomHugepages& h : m.hugepages)
      huge.push_back({{"node", h.node},
                      {"page_bytes", h.page_bytes},
                      {"total", h.total},
                      {"free", h.free},
                      {"surplus", h.surplus}});
    json slab = json::array();
    for (const OomSlabCache& c : m.unreclaimable_slab)
      slab.push_back({{"name", c.name}, {"used_bytes", c.used_bytes}, {"total_bytes", c.total_bytes}});
    j["machine"] = {{"counters", toJson(m.counters)},
                    {"nodes", nodes},
                    {"hugepages", huge},
                    {"pagecache_bytes", opt(m.pagecache_bytes)},
                    {"swap_cache_bytes", opt(m.swap_cache_bytes)},
                    {"swap_free_bytes", opt(m.swap_free_bytes)},
                    {"swap_total_bytes", opt(m.swap_total_bytes)},
                    {"ram_bytes", opt(m.ram_bytes)},
                    {"reserved_bytes", opt(m.reserved_bytes)},
                    {"unreclaimable_slab", slab}};
  }
  return j;
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
      // "light": the usage, the limit and the OOM counters read at this sample, the rest at the
      // last walk's (a cgroup far from every bound, between two walks).
      {"read", c.light ? "light" : "whole"},
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
      {"rss_drift_bytes", s.status.rss_drift},
      {"pss_bytes", opt(a.pss)},
      {"pss_anon_bytes", opt(a.pss_anon)},
      {"pss_file_bytes", opt(a.pss_file)},
      {"pss_shmem_bytes", opt(a.pss_shmem)},
      {"page_tables_bytes", a.page_tables},
      {"locked_bytes", a.locked},
      {"pinned_vm_bytes", s.status.vm_pin},
      {"swap_bytes", a.swap},
      {"oom_score_adj", opt(s.oom_score_adj)},
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

json toJson(const SensorStatus& s) {
  return {{"name", toString(s.id)}, {"state", toString(s.state)}, {"reason", s.reason}};
}

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

json toJson(const KillBreakdown& b) {
  json slab = json::array();
  for (const OomSlabCache& c : b.slab)
    slab.push_back({{"name", c.name}, {"used_bytes", c.used_bytes}, {"total_bytes", c.total_bytes}});
  json j = toJson(b.attribution);
  j["source"] = toString(b.source);
  j["cgroup"] = b.cgroup.empty() ? json(nullptr) : json(b.cgroup);
  j["domain_inferred"] = b.domain_inferred;
  j["limit_bytes"] = opt(b.limit);
  j["failcnt"] = opt(b.failcnt);
  j["peak_bytes"] = opt(b.peak);
  j["read_after_seconds"] = b.read_after_ns ? json(static_cast<double>(*b.read_after_ns) / 1e9) : json(nullptr);
  j["adds_up"] = b.source == KillBreakdown::Source::kMachine ? json(nullptr) : json(b.adds_up);
  if (b.source == KillBreakdown::Source::kMachine) {
    j["free_bytes"] = opt(b.free_bytes);
    j["ram_bytes"] = opt(b.ram_bytes);
    j["hugetlb_bytes"] = opt(b.hugetlb_bytes);
    j["unreclaimable_slab"] = slab;
  }
  return j;
}

json toJson(const Workload& w) {
  const WorkloadIdentity& id = w.identity;
  return {{"unit", id.unit},       {"container", w.container},
          {"pod", w.pod},          {"namespace", w.pod_namespace},
          {"runtime", id.runtime}, {"container_id", id.container_id},
          {"pod_uid", id.pod_uid}, {"qos", id.qos}};
}

Workload workloadFromJson(const json& j) {
  Workload w;
  if (!j.is_object()) return w;
  auto str = [&j](const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  w.identity.unit = str("unit");
  w.container = str("container");
  w.pod = str("pod");
  w.pod_namespace = str("namespace");
  w.identity.runtime = str("runtime");
  w.identity.container_id = str("container_id");
  w.identity.pod_uid = str("pod_uid");
  w.identity.qos = str("qos");
  return w;
}

json toJson(const GpuSample& g) {
  json devices = json::array();
  if (g.reading) {
    for (const GpuDevice& d : g.reading->devices) {
      json procs = json::array();
      for (const GpuProcessMemory& p : d.processes)
        procs.push_back({{"pid", p.pid}, {"used_bytes", opt(p.used_bytes)}});
      devices.push_back({{"index", d.index},
                         {"uuid", d.uuid},
                         {"name", d.name},
                         {"total_bytes", d.total_bytes},
                         {"used_bytes", d.used_bytes},
                         {"processes", std::move(procs)}});
    }
  }
  return {{"state", g.state},
          {"reason", g.reason},
          {"driver_version", g.reading ? json(g.reading->driver_version) : json(nullptr)},
          {"devices", std::move(devices)}};
}

json toJson(const Snapshot& s) {
  json cgroups = json::array();
  for (const CgroupSnapshot& c : s.cgroups) {
    json bounds = json::array();
    for (const Bound& b : c.bounds) bounds.push_back(toJson(b));
    json pids = json::array();
    for (std::size_t i : c.processes) pids.push_back(s.processes[i].sample.pid);
    cgroups.push_back({{"memory", toJson(c.memory)},
                       {"workload", toJson(c.workload)},
                       {"attribution", toJson(c.attribution)},
                       {"bounds", bounds},
                       {"tightest_bound", c.tightest ? toJson(*c.tightest) : json(nullptr)},
                       {"headroom_bytes", opt(c.headroom())},
                       {"pids", pids}});
  }
  json procs = json::array();
  for (const ProcessSnapshot& p : s.processes) {
    json j = toJson(p);
    j["gpu_memory_bytes"] = s.gpu.reading ? opt(s.gpu.reading->processBytes(p.sample.pid)) : json(nullptr);
    // PSS is read again only when due (process_cache.h): how old this figure is.
    j["pss_age_s"] =
        p.sample.smaps && p.sample.smaps_read_ns != 0
            ? json(static_cast<double>(std::max<std::int64_t>(0, s.completed_monotonic_ns - p.sample.smaps_read_ns)) /
                   1e9)
            : json(nullptr);
    procs.push_back(std::move(j));
  }
  const CollectStats& st = s.stats;
  json sensors = json::array();
  for (const SensorStatus& ss : s.sensors) sensors.push_back(toJson(ss));
  return {
      {"sensors", sensors},
      {"gpus", toJson(s.gpu)},
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
        {"processes_pss_pending", st.processes_pss_pending},
        {"kernel_threads", st.kernel_threads},
        {"processes_outside_mount", st.processes_outside_mount},
        {"process_source", st.process_source},
        {"processes_carried", st.processes_carried},
        {"processes_refreshed", st.processes_refreshed},
        {"processes_walked_ns", st.processes_walked_ns},
        {"proc_files_read",
         {{"total", st.proc_reads.files},
          {"status", st.proc_reads.status},
          {"smaps_rollup", st.proc_reads.smaps},
          {"cmdline", st.proc_reads.cmdline},
          {"cgroup", st.proc_reads.cgroup}}},
        {"warnings", st.warnings}}},
  };
}

namespace {

// The cgroups read the moment the kill was seen: what a short-lived cgroup leaves behind.
json readAtKillJson(const OomEvent& e) {
  json out = json::array();
  for (const CgroupMemory& m : e.read_at_kill) {
    json j = {{"path", m.path},
              {"usage_bytes", m.usage},
              {"limit_bytes", opt(m.limit)},
              {"peak_bytes", opt(m.peak)},
              {"oom_kills", opt(m.oom_kills)},
              {"oom_events", opt(m.oom_events)}};
    if (m.version == 1) j["failcnt"] = opt(m.failcnt);
    out.push_back(std::move(j));
  }
  if (out.empty()) return nullptr;
  const double after = e.monotonic_time_ns > 0 && e.read_at_kill_ns > 0
                           ? static_cast<double>(e.read_at_kill_ns - e.monotonic_time_ns) / 1e9
                           : 0.0;
  return {{"after_seconds", after}, {"cgroups", out}};
}

}  // namespace

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
                       {"locked_bytes", opt(v.locked)},
                       {"pinned_vm_bytes", opt(v.pinned_vm)},
                       {"cuda_pinned_bytes", opt(v.cuda_pinned)},
                       {"cuda_device_bytes", opt(v.cuda_device)},
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
          {"reap_finish_ns", opt(e.reap_finish_ns)},
          {"at_kill", optJson(breakdownAtKill(e))},
          {"kernel_report", kernelReportJson(e)},
          {"read_at_kill", readAtKillJson(e)},
          {"kernel_log_seq", opt(e.kmsg_seq)},
          {"found_after", e.found_after.empty() ? json(nullptr) : json(e.found_after)}};
}

json toJson(const OomEvent& e, const OomWorkloads& w) {
  json j = toJson(e);
  j["workload"] = toJson(w.cgroup);
  json& victims = j["victims"];
  for (std::size_t i = 0; i < victims.size(); ++i)
    victims[i]["workload"] = toJson(i < w.victims.size() ? w.victims[i] : Workload{});
  return j;
}

namespace {

// A value of the type asked for, or nothing.
template <typename T>
bool read(const json& v, T& into) {
  if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) return false;
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) return false;
  } else if constexpr (std::is_unsigned_v<T>) {
    if (!v.is_number_unsigned()) return false;
  } else {
    if (!v.is_number_integer()) return false;
  }
  into = v.get<T>();
  return true;
}

template <typename T>
void take(const json& j, const char* key, T& into) {
  if (auto it = j.find(key); it != j.end()) read(*it, into);
}

template <typename T>
void take(const json& j, const char* key, std::optional<T>& into) {
  T v{};
  if (auto it = j.find(key); it != j.end() && read(*it, v)) into = v;
}

}  // namespace

OomEvent oomEventFromJson(const json& event) {
  OomEvent e;
  if (!event.is_object()) return e;
  take(event, "id", e.id);
  take(event, "wall_time_ns", e.wall_time_ns);
  take(event, "monotonic_time_ns", e.monotonic_time_ns);
  if (auto v = event.find("victims"); v != event.end() && v->is_array()) {
    for (const json& j : *v) {
      if (!j.is_object()) continue;
      OomVictim o;
      take(j, "pid", o.pid);
      take(j, "tgid", o.tgid);
      take(j, "comm", o.comm);
      take(j, "uid", o.uid);
      take(j, "oom_score_adj", o.oom_score_adj);
      take(j, "cgroup", o.cgroup);
      take(j, "total_vm_bytes", o.total_vm);
      take(j, "anon_rss_bytes", o.anon_rss);
      take(j, "file_rss_bytes", o.file_rss);
      take(j, "shmem_rss_bytes", o.shmem_rss);
      take(j, "pgtables_bytes", o.pgtables);
      take(j, "swap_bytes", o.swap);
      take(j, "locked_bytes", o.locked);
      take(j, "pinned_vm_bytes", o.pinned_vm);
      take(j, "cuda_pinned_bytes", o.cuda_pinned);
      take(j, "cuda_device_bytes", o.cuda_device);
      take(j, "kill_skipped", o.kill_skipped);
      take(j, "inferred", o.inferred);
      e.victims.push_back(std::move(o));
    }
  }
  if (auto t = event.find("trigger"); t != event.end() && t->is_object()) {
    take(*t, "pid", e.trigger_pid);
    take(*t, "tgid", e.trigger_tgid);
    take(*t, "comm", e.trigger_comm);
    take(*t, "cgroup", e.trigger_cgroup);
  }
  take(event, "constraint", e.constraint);
  if (auto d = event.find("oom_domain"); d != event.end() && d->is_object()) {
    take(*d, "cgroup", e.domain_cgroup);
    take(*d, "global", e.global);
    take(*d, "limit_bytes", e.domain_limit_bytes);
    take(*d, "usage_bytes", e.domain_usage_bytes);
  }
  if (auto s = event.find("sources"); s != event.end() && s->is_object()) {
    take(*s, "bpf", e.from_bpf);
    take(*s, "kmsg", e.from_kmsg);
    take(*s, "counter", e.from_counter);
  }
  if (auto c = event.find("counter"); c != event.end() && c->is_object()) {
    take(*c, "cgroup", e.counter_cgroup);
    take(*c, "kills", e.counted_kills);
  }
  take(event, "kernel_log_seq", e.kmsg_seq);
  take(event, "found_after", e.found_after);
  return e;
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
