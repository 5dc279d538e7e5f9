// One tick's metrics: every family filled from the snapshot, under the caps, into the catalogue's
// prometheus-cpp series (series_sink.h: each series a ClientMetric shared from one update to the
// next), written by prometheus-cpp's TextSerializer as the page (the text exposition format,
// version 0.0.4) by the first scrape after an update, the text of every series the update did not
// change kept from the page before; scrapes copy it. Not a Registry of Gauge and Counter objects:
// every series is the snapshot's, rebuilt each tick (gone cgroups and processes must leave no
// series), which live metric objects would have to be added, looked up by label map and removed
// for each tick. Past 500 lines with a reason: the budget of series, the grouping of processes
// under the per-role cap and the filling of each family share that accounting, and apart they
// would pass it through every function. The families' names are families.h, their catalogue
// metric_catalog.cpp.
#include "headroom/exporter/exporter.h"

#include <prometheus/client_metric.h>

#include <algorithm>
#include <exception>
#include <limits>
#include <map>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "families.h"
#include "headroom/version.h"
#include "process_groups.h"
#include "series_sink.h"

namespace headroom {
namespace {

using namespace exporter_detail;  // the family names

// A cgroup's labels: its path and what operators call it.
CgroupLabels labelsOf(std::string_view path, const Workload& w) {
  return {path, w.identity.unit, w.container, w.pod, w.pod_namespace};
}

double sec(std::uint64_t us) { return static_cast<double>(us) / 1e6; }
double num(std::uint64_t v) { return static_cast<double>(v); }

void emitProcessGroup(SeriesSink& sink, const ProcessGroup& g, const Workload& w) {
  const CgroupLabels cg = labelsOf(g.cgroup, w);
  const std::string_view role = toString(g.role);
  const std::string_view process = g.process;
  sink.add(kProcRss, cg, {role, process, "anon"}, num(g.rss_anon));
  sink.add(kProcRss, cg, {role, process, "file"}, num(g.rss_file));
  sink.add(kProcRss, cg, {role, process, "shmem"}, num(g.rss_shmem));
  if (g.pssKnown()) sink.add(kProcPss, cg, {role, process}, num(g.pss));
  sink.add(kProcPageTables, cg, {role, process}, num(g.page_tables));
  sink.add(kProcSwap, cg, {role, process}, num(g.swap));
  if (g.with_pinned > 0) {
    sink.add(kProcPinned, cg, {role, process}, num(g.pinned));
    sink.add(kProcPinnedPeak, cg, {role, process}, num(g.pinned_peak));
  }
  if (g.with_device > 0) sink.add(kProcDevice, cg, {role, process}, num(g.device));
  if (g.with_device_peak > 0) sink.add(kProcDevicePeak, cg, {role, process}, num(g.device_peak));
  sink.add(kProcFaults, cg, {role, process, "minor"}, num(g.minflt));
  sink.add(kProcFaults, cg, {role, process, "major"}, num(g.majflt));
  if (g.with_activity > 0) {
    sink.add(kProcMmap, cg, {role, process, "mmap"}, num(g.mmap));
    sink.add(kProcMmap, cg, {role, process, "munmap"}, num(g.munmap));
  }
  sink.add(kProcGroupSize, cg, {role, process}, num(g.count));
}

void emitCgroup(SeriesSink& sink, const CgroupSnapshot& c) {
  const CgroupMemory& m = c.memory;
  const CgroupLabels cg = labelsOf(m.path, c.workload);
  sink.add(kCgroupUsage, cg, num(m.usage));
  if (m.limit) sink.add(kCgroupLimit, cg, num(*m.limit));
  if (c.tightest) sink.add(kCgroupEffectiveLimit, cg, num(c.tightest->limit));
  if (auto h = c.headroom()) sink.add(kCgroupHeadroom, cg, num(*h));
  if (m.peak) sink.add(kCgroupPeak, cg, num(*m.peak));
  for (const Part& p : c.attribution.parts) sink.add(kCgroupMemory, cg, {toString(p.kind)}, num(p.bytes));
  sink.add(kCgroupMemory, cg, {"unattributed"}, static_cast<double>(c.attribution.unattributed));
  sink.add(kCgroupInvisible, cg, num(c.attribution.invisibleBytes()));
  if (m.oom_events) sink.add(kCgroupOomEvents, cg, num(*m.oom_events));
  if (m.oom_kills) sink.add(kCgroupOomKills, cg, num(*m.oom_kills));
  const std::optional<std::uint64_t> hits = m.version == 1 ? m.failcnt : m.events.get("max");
  if (hits) sink.add(kCgroupLimitHits, cg, num(*hits));
  for (const auto& [event, n] : m.events.entries()) sink.add(kCgroupMemoryEvents, cg, {std::string(event)}, num(n));
  for (const auto& [event, n] : m.swap_events.entries())
    sink.add(kCgroupMemoryEvents, cg, {"swap_" + std::string(event)}, num(n));
  if (m.pressure) {
    sink.add(kCgroupPressure, cg, {"some"}, sec(m.pressure->some.total_us));
    if (m.pressure->full) sink.add(kCgroupPressure, cg, {"full"}, sec(m.pressure->full->total_us));
  }
  sink.add(kCgroupProcesses, cg, num(c.processes.size()));
}

void emitHost(SeriesSink& sink, const HostSnapshot& host) {
  const Meminfo& mi = host.meminfo;
  struct Field {
    std::string_view kind;
    std::uint64_t value;
    const char* key;  // meminfo key: the series only where the kernel has it; nullptr: always
  };
  const Field fields[] = {
      {"mem_total", mi.mem_total, nullptr},
      {"mem_free", mi.mem_free, "MemFree"},
      {"mem_available", mi.mem_available, nullptr},
      {"buffers", mi.buffers, "Buffers"},
      {"cached", mi.cached, "Cached"},
      {"shmem", mi.shmem, "Shmem"},
      {"anon_pages", mi.anon_pages, "AnonPages"},
      {"mlocked", mi.mlocked, nullptr},
      {"page_tables", mi.page_tables, nullptr},
      {"sec_page_tables", mi.sec_page_tables, "SecPageTables"},
      {"kernel_stack", mi.kernel_stack, nullptr},
      {"slab", mi.slab, nullptr},
      {"slab_reclaimable", mi.s_reclaimable, "SReclaimable"},
      {"slab_unreclaimable", mi.s_unreclaim, "SUnreclaim"},
      {"percpu", mi.percpu, "Percpu"},
      {"swap_total", mi.swap_total, "SwapTotal"},
      {"swap_free", mi.swap_free, "SwapFree"},
      {"hugetlb", mi.hugetlb, "HugePages_Total"},
  };
  for (const Field& f : fields) {
    if (f.key == nullptr || mi.all.contains(f.key)) sink.add(kHostMemory, {f.kind}, num(f.value));
  }
  if (host.pressure) {
    sink.add(kHostPressure, {"some"}, sec(host.pressure->some.total_us));
    if (host.pressure->full) sink.add(kHostPressure, {"full"}, sec(host.pressure->full->total_us));
  }
}

void emitAgent(SeriesSink& sink, const Snapshot& snap, const AgentSelf& self, std::uint64_t update_failures) {
  sink.add(kBuildInfo, {kVersion}, 1);
  sink.add(kProcessResident, {}, num(self.rss_bytes));
  sink.add(kProcessCpu, {}, self.cpu_seconds);
  if (self.start_time_seconds > 0) sink.add(kProcessStart, {}, self.start_time_seconds);
  sink.add(kSampleDuration, {}, self.last_sample_duration_s);
  for (const auto& [phase, cpu] :
       {std::pair{"processes", self.sample_cpu.processes}, std::pair{"cgroups", self.sample_cpu.cgroups},
        std::pair{"model", self.sample_cpu.model}, std::pair{"exporter", self.sample_cpu.exporter}}) {
    sink.add(kSampleCpu, {phase, "user"}, cpu.user_s);
    sink.add(kSampleCpu, {phase, "system"}, cpu.system_s);
  }
  if (self.last_sample_timestamp_s > 0) sink.add(kLastSample, {}, self.last_sample_timestamp_s);
  sink.add(kSamples, {}, num(self.samples_total));
  sink.add(kSampleFailures, {}, num(self.sample_failures_total));
  sink.add(kConfigReloads, {}, num(self.config_reloads_total));
  sink.add(kConfigReloadFailures, {}, num(self.config_reload_failures_total));
  sink.add(kJournalUp, {}, self.journal_up ? 1.0 : 0.0);
  sink.add(kJournalRecords, {}, num(self.journal_records_total));
  sink.add(kJournalWriteFailures, {}, num(self.journal_write_failures_total));
  sink.add(kJournalDamaged, {}, num(self.journal_damaged_records_total));
  sink.add(kJournalBytes, {}, num(self.journal_bytes));
  sink.add(kJournalPending, {}, num(self.journal_pending_records));
  sink.add(kJournalDropped, {}, num(self.journal_dropped_records_total));
  for (const char* how : {"kernel_log", "in_flight", "counters"}) {
    auto it = self.journal_found_after_total.find(how);
    sink.add(kJournalFoundAfter, {how}, num(it != self.journal_found_after_total.end() ? it->second : 0));
  }
  sink.add(kJournalUnread, {}, num(self.journal_kernel_log_unread_records));
  for (const AgentSelf::EventSinkFigures& e : self.event_sinks) {
    sink.add(kEventsWritten, {e.sink}, num(e.written_total));
    sink.add(kEventsFailures, {e.sink}, num(e.failures_total));
  }
  sink.add(kEventsDropped, {}, num(self.events_dropped_total));
  sink.add(kEventsQueued, {}, num(self.events_queued));
  sink.add(kEventsRotations, {}, num(self.events_file_rotations_total));
  if (self.oom_score_adj) sink.add(kOomScoreAdj, {}, static_cast<double>(*self.oom_score_adj));
  sink.add(kSelfReportFailures, {}, num(self.self_report_failures_total));
  sink.add(kUpdateFailures, {}, num(update_failures));
  sink.add(kProcessesTracked, {}, num(snap.stats.processes_read));
  if (snap.stats.processes_walked_ns > 0)
    sink.add(
        kProcessWalkAge, {},
        static_cast<double>(std::max<std::int64_t>(0, snap.monotonic_time_ns - snap.stats.processes_walked_ns)) / 1e9);
  sink.add(kProcessesSkipped, {}, num(snap.stats.processes_skipped));
  sink.add(kCgroupsMissing, {}, num(snap.stats.cgroups_missing.size()));
}

void emitHttp(SeriesSink& sink, const HttpServerStats& http) {
  sink.add(kHttpConnections, {}, num(http.connections));
  sink.add(kHttpConnectionsOpen, {}, num(http.open));
  sink.add(kHttpRequests, {}, num(http.requests));
  for (const auto& [reason, n] :
       {std::pair{"timeout", http.timeouts}, std::pair{"evicted", http.evicted}, std::pair{"busy", http.busy},
        std::pair{"too_large", http.too_large}, std::pair{"malformed", http.malformed},
        std::pair{"tls", http.tls_failures}, std::pair{"unauthorized", http.unauthorized}})
    sink.add(kHttpRefused, {reason}, num(n));
}

// Each GPU, and the device memory of its processes summed by (cgroup, role, comm) as the
// per-process series are: a process NVML lists that no sample has is the driver's word alone,
// under the cgroup "" and its pid's comm unknown ("?").
void emitGpus(SeriesSink& sink, const Snapshot& snap) {
  if (!snap.gpu.reading) return;
  for (const GpuDevice& d : snap.gpu.reading->devices) {
    const std::string gpu = std::to_string(d.index);
    sink.add(kGpuMemoryTotal, {gpu, d.uuid, d.name}, num(d.total_bytes));
    sink.add(kGpuMemoryUsed, {gpu, d.uuid}, num(d.used_bytes));
    std::map<std::tuple<std::string_view, Role, std::string_view>, std::pair<std::uint64_t, const Workload*>> groups;
    for (const GpuProcessMemory& p : d.processes) {
      if (!p.used_bytes) continue;
      const ProcessSnapshot* ps = snap.findProcess(p.pid);
      const CgroupSnapshot* c = ps != nullptr ? snap.findCgroup(ps->cgroup) : nullptr;
      auto& g = groups[{ps != nullptr ? std::string_view(ps->cgroup) : std::string_view(),
                        ps != nullptr ? ps->role : Role::kSystem,
                        ps != nullptr ? std::string_view(ps->sample.comm) : std::string_view("?")}];
      g.first += *p.used_bytes;
      g.second = c != nullptr ? &c->workload : nullptr;
    }
    static const Workload kNone;
    for (const auto& [key, g] : groups) {
      const auto& [cgroup, role, process] = key;
      sink.add(kGpuProcessMemory, labelsOf(cgroup, g.second != nullptr ? *g.second : kNone),
               {toString(role), process, gpu}, num(g.first));
    }
  }
}

void emitSensors(SeriesSink& sink, const Snapshot& snap, const SensorCounters& counters) {
  for (const SensorStatus& s : snap.sensors) {
    for (SensorState st : {SensorState::kActive, SensorState::kDegraded, SensorState::kOff}) {
      sink.add(kSensorState, {toString(s.id), toString(st)}, s.state == st ? 1 : 0);
    }
  }
  // NVML beside the BPF sensors: the same states.
  for (const char* st : {"active", "degraded", "off"})
    sink.add(kSensorState, {"nvml", st}, snap.gpu.state == st ? 1 : 0);
  sink.add(kRingDrops, {"oom"}, num(counters.oom_ring_drops));
  sink.add(kRingDrops, {"exit"}, num(counters.exit_ring_drops));
  sink.add(kMapFullDrops, {}, num(counters.map_full_drops));
  sink.add(kKmsgLost, {}, num(counters.kmsg_lost));
  sink.add(kKmsgAbandoned, {}, num(counters.kmsg_reports_abandoned));
  sink.add(kSensorEvents, {}, num(counters.events));
  if (counters.last_oom_mark_latency_ns) {
    sink.add(kOomLatency, {}, static_cast<double>(*counters.last_oom_mark_latency_ns) / 1e9);
  }
}

}  // namespace

const char* toString(MetricType t) { return t == MetricType::kCounter ? "counter" : "gauge"; }

struct Exporter::State {
  struct OomCount {
    double kills = 0;
    double last_timestamp_s = 0;
  };
  // The last update's families, out of the sink (under mu_): a scrape writes them as text only if
  // no scrape has since the update, and never while an update runs.
  std::shared_ptr<const Families> families;
  std::uint64_t generation = 0;  // updates that gave families
  std::size_t series = 0;        // sample lines render() writes
  std::size_t dropped = 0;
  bool scrape_slot = true;  // max_series leaves room for the scrape duration
  std::uint64_t update_failures = 0;
  // {cgroup, role, process} -> kills; for the agent's lifetime.
  // {cgroup, role, process, unit, container, pod, namespace} -> kills: names learnt after a
  // cgroup's first kill start a set of their own, so no set's count ever changes its labels.
  using OomKey = std::tuple<std::string, std::string, std::string, std::string, std::string, std::string, std::string>;
  std::map<OomKey, OomCount> oom_kills;
  std::map<std::string, ProbeFigures> probes;  // by cgroup, the latest of each
  std::map<std::string, double> probe_outcomes;
  struct Budget {
    std::string cgroup;
    bool valid = false;
    std::uint64_t budget = 0, margin = 0, generation = 0;
  };
  std::optional<Budget> budget;
  std::map<std::pair<std::string, std::string>, double> margin_changes;  // {cgroup, reason}
  std::vector<Forecast> forecasts;
  std::map<std::string, double> warnings;       // by cgroup, for the agent's lifetime (capped)
  std::map<std::string, double> warning_hooks;  // by outcome
  // The series from one update to the next: used by update() alone, under update_mu (not mu_,
  // so that a scrape never waits for an update).
  std::mutex update_mu;
  SeriesSink sink;
  GroupSums group_sums;
  // The page: the exposition text of the families of update `page_generation` (the scrape
  // duration is added per scrape). Written by the scrape that first finds a newer update, under
  // render_mu (one at a time); when scrapes are rarer than samples, most updates are never
  // written as text at all. A series an update did not change keeps its text.
  std::mutex render_mu;
  PageText page;
  std::uint64_t page_generation = 0;
};

void Exporter::recordBudget(const BudgetDecision& d) {
  std::lock_guard<std::mutex> lock(mu_);
  state_->budget = State::Budget{d.inputs.cgroup, d.valid, d.budget, d.margin, d.generation};
}

void Exporter::clearBudget() {
  std::lock_guard<std::mutex> lock(mu_);
  state_->budget.reset();
}

void Exporter::countMarginChange(const std::string& cgroup, const std::string& reason) {
  // Bounded: one prover cgroup at a time, two reasons; a cap keeps a prover that moves between
  // many cgroups from growing the page.
  constexpr std::size_t kMaxSets = 64;
  std::lock_guard<std::mutex> lock(mu_);
  auto& changes = state_->margin_changes;
  auto key = std::make_pair(cgroup, reason);
  if (changes.size() >= kMaxSets && !changes.contains(key)) key.first = std::string(kOther);
  changes[key] += 1;
}

void Exporter::recordForecasts(std::vector<Forecast> forecasts) {
  std::lock_guard<std::mutex> lock(mu_);
  state_->forecasts = std::move(forecasts);
}

void Exporter::countWarning(const std::string& cgroup) {
  constexpr std::size_t kMaxSets = 256;
  std::lock_guard<std::mutex> lock(mu_);
  auto& w = state_->warnings;
  w[w.size() >= kMaxSets && !w.contains(cgroup) ? std::string(kOther) : cgroup] += 1;
}

void Exporter::countWarningHook(const std::string& outcome) {
  std::lock_guard<std::mutex> lock(mu_);
  state_->warning_hooks[outcome] += 1;
}

void Exporter::recordProbe(const std::string& cgroup, const ProbeFigures& figures) {
  constexpr std::size_t kProbedCgroups = 16;
  std::lock_guard<std::mutex> lock(mu_);
  auto& probes = state_->probes;
  probes[cgroup] = figures;
  while (probes.size() > kProbedCgroups) {
    auto oldest = std::min_element(probes.begin(), probes.end(), [](const auto& a, const auto& b) {
      return a.second.timestamp_s < b.second.timestamp_s;
    });
    probes.erase(oldest);
  }
}

void Exporter::countProbe(const std::string& outcome) {
  std::lock_guard<std::mutex> lock(mu_);
  state_->probe_outcomes[outcome] += 1;
}

Exporter::Exporter(ExporterLimits limits) : limits_(limits), state_(std::make_unique<State>()) {}
Exporter::~Exporter() = default;

void Exporter::setLimits(ExporterLimits limits) {
  std::lock_guard<std::mutex> lock(mu_);
  limits_ = limits;
}

void Exporter::recordOomKill(const std::string& cgroup, const Workload& workload, Role role, const std::string& process,
                             double timestamp_s) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& kills = state_->oom_kills;
  const std::string r = toString(role);
  const std::string& unit = workload.identity.unit;
  State::OomKey key{cgroup, r, process, unit, workload.container, workload.pod, workload.pod_namespace};
  if (kills.size() >= limits_.max_oom_label_sets && !kills.contains(key)) {
    key = State::OomKey{cgroup, r, std::string(kOther), unit, workload.container, workload.pod, workload.pod_namespace};
    // Past the cap even a cgroup's "other" is not new: all of the role's overflow in one set.
    if (!kills.contains(key)) key = State::OomKey{std::string(kOther), r, std::string(kOther), "", "", "", ""};
  }
  State::OomCount& c = kills[key];
  c.kills += 1;
  c.last_timestamp_s = std::max(c.last_timestamp_s, timestamp_s);
}

void Exporter::update(const Snapshot& snap, const SensorCounters& counters, const AgentSelf& self) {
  ExporterLimits limits;
  std::uint64_t update_failures = 0;
  decltype(State::oom_kills) oom_kills;
  decltype(State::probes) probes;
  decltype(State::probe_outcomes) probe_outcomes;
  decltype(State::budget) budget;
  decltype(State::margin_changes) margin_changes;
  decltype(State::forecasts) forecasts;
  decltype(State::warnings) warnings;
  decltype(State::warning_hooks) warning_hooks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    limits = limits_;
    update_failures = state_->update_failures;
    oom_kills = state_->oom_kills;
    probes = state_->probes;
    probe_outcomes = state_->probe_outcomes;
    budget = state_->budget;
    margin_changes = state_->margin_changes;
    forecasts = state_->forecasts;
    warnings = state_->warnings;
    warning_hooks = state_->warning_hooks;
  }
  // No exception (an allocation, a format) may leave the sampling path.
  try {
    const std::size_t reserved = std::min(kReservedSeries, limits.max_series);
    std::lock_guard<std::mutex> updating(state_->update_mu);
    SeriesSink& sink = state_->sink;
    sink.begin(limits.max_series - reserved);

    // In priority order: what the agent says of itself and its sensors, the host, then the
    // cgroups by usage, the HTTP endpoint's connections, then the process groups by RSS. The
    // cap cuts from the end.
    emitAgent(sink, snap, self, update_failures);
    emitSensors(sink, snap, counters);
    emitGpus(sink, snap);
    emitHost(sink, snap.host);
    // Each cgroup's workload, by path: the sampled ones' from the snapshot, any other's from its
    // path alone (a probe's or the budget's cgroup that holds no process now).
    std::unordered_map<std::string_view, const Workload*> workloads;
    workloads.reserve(snap.cgroups.size());
    for (const CgroupSnapshot& c : snap.cgroups) workloads.emplace(c.memory.path, &c.workload);
    std::map<std::string, Workload, std::less<>> unsampled;
    auto workloadOf = [&](std::string_view path) -> const Workload& {
      if (auto it = workloads.find(path); it != workloads.end()) return *it->second;
      auto it = unsampled.find(path);
      if (it == unsampled.end()) {
        Workload w;
        w.identity = identifyCgroup(path);
        it = unsampled.emplace(std::string(path), std::move(w)).first;
      }
      return it->second;
    };
    for (const auto& [key, c] : oom_kills) {
      const auto& [cgroup, role, process, unit, container, pod, pod_namespace] = key;
      const CgroupLabels cg{cgroup, unit, container, pod, pod_namespace};
      sink.add(kOomKills, cg, {role, process}, c.kills);
      sink.add(kOomKillLast, cg, {role, process}, c.last_timestamp_s);
    }
    if (budget) {
      const CgroupLabels cg = labelsOf(budget->cgroup, workloadOf(budget->cgroup));
      if (budget->valid) sink.add(kBudget, cg, num(budget->budget));
      sink.add(kMargin, cg, num(budget->margin));
      sink.add(kBudgetGeneration, cg, num(budget->generation));
    }
    for (const auto& [key, n] : margin_changes)
      sink.add(kMarginChanges, labelsOf(key.first, workloadOf(key.first)), {key.second}, n);
    for (const auto& [outcome, n] : probe_outcomes) sink.add(kProbes, {outcome}, n);
    for (const Forecast& f : forecasts) {
      const CgroupLabels cg = labelsOf(f.cgroup, workloadOf(f.cgroup));
      sink.add(kCgroupOomEta, cg, f.eta_seconds.value_or(std::numeric_limits<double>::infinity()));
      sink.add(kCgroupOomWarning, cg, f.warning ? 1 : 0);
      sink.add(kCgroupGrowth, cg, f.growth_bytes_per_second);
      sink.add(kCgroupEtaConfidence, cg, f.confidence);
    }
    for (const auto& [cgroup, n] : warnings) sink.add(kOomWarnings, labelsOf(cgroup, workloadOf(cgroup)), n);
    for (const auto& [outcome, n] : warning_hooks) sink.add(kWarningHooks, {outcome}, n);
    for (const auto& [cgroup, p] : probes) {
      const CgroupLabels cg = labelsOf(cgroup, workloadOf(cgroup));
      sink.add(kProbeAllocatable, cg, p.allocatable_bytes);
      sink.add(kProbeAllocated, cg, p.allocated_bytes);
      sink.add(kProbeOverhead, cg, {"others"}, p.others_growth_bytes);
      sink.add(kProbeOverhead, cg, {"kernel"}, p.kernel_overhead_bytes);
      sink.add(kProbeThroughput, cg, p.bytes_per_second);
      sink.add(kProbeDuration, cg, p.duration_seconds);
      sink.add(kProbeTimestamp, cg, p.timestamp_s);
      sink.add(kProbeAborted, cg, p.aborted ? 1 : 0);
    }

    std::vector<const CgroupSnapshot*> cgroups;
    cgroups.reserve(snap.cgroups.size());
    for (const CgroupSnapshot& c : snap.cgroups) cgroups.push_back(&c);
    std::stable_sort(cgroups.begin(), cgroups.end(), [](const CgroupSnapshot* a, const CgroupSnapshot* b) {
      return a->memory.usage > b->memory.usage;
    });
    std::unordered_set<std::string_view> left_out;
    for (std::size_t i = 0; i < cgroups.size(); ++i) {
      const bool keep = i < limits.max_cgroups;
      if (!keep) left_out.insert(cgroups[i]->memory.path);
      sink.setCountingOnly(!keep);
      emitCgroup(sink, *cgroups[i]);
    }
    sink.setCountingOnly(false);
    emitHttp(sink, self.http);

    state_->group_sums.update(snap, left_out);
    const ProcessGroups groups = pickGroups(state_->group_sums, limits.top_processes);
    for (const ProcessGroup& g : groups.shown) emitProcessGroup(sink, g, workloadOf(g.cgroup));
    sink.setCountingOnly(true);
    for (const ProcessGroup& g : groups.left_out) emitProcessGroup(sink, g, workloadOf(g.cgroup));
    sink.setCountingOnly(false);

    // The reserved series, in this order of priority when max_series is tiny.
    const bool dropped_slot = reserved >= 1, series_slot = reserved >= 2, scrape_slot = reserved >= 3;
    const std::size_t dropped = sink.dropped() + (kReservedSeries - reserved);
    const std::size_t series = sink.added() + reserved;
    if (dropped_slot) sink.addReserved(kSeriesDropped, num(dropped));
    if (series_slot) sink.addReserved(kSeries, num(series));

    sink.end();
    auto families = std::make_shared<const Families>(sink.publish());
    std::lock_guard<std::mutex> lock(mu_);
    state_->families = std::move(families);
    ++state_->generation;
    state_->series = series;
    state_->dropped = dropped;
    state_->scrape_slot = scrape_slot;
  } catch (const std::exception&) {
    std::lock_guard<std::mutex> lock(mu_);
    ++state_->update_failures;
  }
}

std::string Exporter::render(double last_scrape_duration_s) const {
  std::string out;
  bool scrape_slot = false;
  {
    std::lock_guard<std::mutex> rendering(state_->render_mu);
    std::shared_ptr<const Families> families;
    std::uint64_t generation = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      families = state_->families;
      generation = state_->generation;
      scrape_slot = state_->scrape_slot;
    }
    if (families && generation != state_->page_generation) {
      state_->page.write(*families);
      state_->page_generation = generation;
    }
    out.reserve(state_->page.page().size() + 256);
    out = state_->page.page();
  }
  // The scrape's own duration, known only now: its family written after the page's.
  const MetricInfo* info = infoOf(kScrapeDuration);
  if (scrape_slot && info != nullptr) {
    std::vector<prometheus::ClientMetric> series(1);
    series[0].gauge.value = last_scrape_duration_s;
    out += familyText(*info, std::move(series));
  }
  return out;
}

std::size_t Exporter::seriesCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_->series;
}

std::size_t Exporter::seriesDropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_->dropped;
}

}  // namespace headroom
