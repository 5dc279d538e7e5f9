// One tick's metrics: every family filled from the snapshot, under the caps, into the catalogue's
// prometheus-cpp families (MetricFamily, ClientMetric; the sink is their Collectable), collected
// and written by prometheus-cpp's TextSerializer as the page (the text exposition format, version
// 0.0.4) once per tick; scrapes copy it. Not a Registry of Gauge and Counter objects: every series
// is the snapshot's, rebuilt each tick (gone cgroups and processes must leave no series), which
// live metric objects would have to be added, looked up by label map and removed for each tick.
// Past 500 lines with a reason: the series sink (the one budget of series), the grouping of
// processes under the per-role cap and the filling of each family share that accounting, and
// apart they would pass it through every function. The families' names are families.h, their
// catalogue metric_catalog.cpp.
#include "headroom/exporter/exporter.h"

#include <prometheus/client_metric.h>
#include <prometheus/metric_family.h>
#include <prometheus/metric_type.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <exception>
#include <initializer_list>
#include <limits>
#include <set>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "families.h"
#include "headroom/util/text.h"
#include "headroom/version.h"
#include "process_groups.h"

namespace headroom {
namespace {

using namespace exporter_detail;  // the family names

// The labels every series about a cgroup starts with (the catalogue's kCgroupLabels): its path
// and what operators call it.
struct CgroupLabels {
  std::string_view path, unit, container, pod, pod_namespace;
};
CgroupLabels labelsOf(std::string_view path, const Workload& w) {
  return {path, w.identity.unit, w.container, w.pod, w.pod_namespace};
}

// The catalogue's entry for a family the code is about to fill: a name missing from it is a
// programming error (asserted in debug builds; the family is left out otherwise).
const MetricInfo* infoOf(std::string_view name) {
  const MetricInfo* info = findMetric(name);
  assert(info != nullptr && "metric family missing from metricCatalog()");
  return info;
}

double sec(std::uint64_t us) { return static_cast<double>(us) / 1e6; }
double num(std::uint64_t v) { return static_cast<double>(v); }

prometheus::MetricType exposedType(MetricType t) {
  return t == MetricType::kCounter ? prometheus::MetricType::Counter : prometheus::MetricType::Gauge;
}

// Adds series under a budget; what does not fit is counted, not added. In counting mode (a
// cgroup or process left out by a cap) every series is counted only. The catalogue is
// prometheus-cpp's families here (one MetricFamily each, one ClientMetric per series, labels in
// name order), published once per update for TextSerializer to write the page at the first
// scrape after it. The families live from one update to the next: a series set again keeps its
// ClientMetric (its labels are not built again), one not set in an update is taken out when the
// update ends, and a family's series are sorted by labels again only when some came or went. A
// family the update changed nothing in is published as the same object as before, and the page
// keeps its text.
class SeriesSink {
 public:
  SeriesSink() : families_(metricCatalog().size()) {
    for (std::size_t rank = 0; rank < families_.size(); ++rank) {
      const MetricInfo& info = metricCatalog()[rank];
      Family& f = families_[rank];
      f.info = &info;
      f.label_order.resize(info.labels.size());
      for (std::size_t i = 0; i < f.label_order.size(); ++i) f.label_order[i] = i;
      std::sort(f.label_order.begin(), f.label_order.end(),
                [&](std::size_t a, std::size_t b) { return info.labels[a] < info.labels[b]; });
      f.family.name = info.name;
      f.family.help = info.help;  // written as it is: the catalogue's help has nothing to escape
      f.family.type = exposedType(info.type);
    }
  }

  // A new update: every series unset, `budget` series to come.
  void begin(std::size_t budget) {
    budget_ = budget;
    added_ = dropped_ = 0;
    counting_only_ = false;
    ++generation_;
    for (Family& f : families_) {
      f.set = 0;
      f.changed = false;
    }
  }

  // One series of the family `name`, label values in the catalogue's label order.
  void add(std::string_view name, std::initializer_list<std::string_view> values, double value) {
    put(name, values.begin(), values.size(), value, false);
  }
  // One series of a family whose labels start with a cgroup's (kCgroupLabels): those, then `rest`.
  void add(std::string_view name, const CgroupLabels& cg, std::initializer_list<std::string_view> rest, double value) {
    std::array<std::string_view, 8> values{cg.path, cg.unit, cg.container, cg.pod, cg.pod_namespace};
    std::size_t n = 5;
    for (std::string_view v : rest) {
      if (n == values.size()) return;
      values[n++] = v;
    }
    put(name, values.data(), n, value, false);
  }
  void add(std::string_view name, const CgroupLabels& cg, double value) { add(name, cg, {}, value); }
  // A series outside the budget (the reserved accounting series).
  void addReserved(std::string_view name, double value) { put(name, nullptr, 0, value, true); }

  void setCountingOnly(bool on) { counting_only_ = on; }
  std::size_t added() const { return added_; }
  std::size_t dropped() const { return dropped_; }

  // Ends the update: the series it did not set are taken out, and each family's series are in
  // order of their labels, so that a page reads (and diffs) the same from one scrape to the next.
  void end() {
    for (Family& f : families_) {
      if (f.set < f.family.metric.size()) dropUnset(f);
      if (!f.sorted) sortSeries(f);
    }
  }

  // The families with series in the update that last ended, in catalogue order, each shared
  // with the last update's list where this one changed nothing in it (no copy; a page keeps its
  // text for it).
  std::vector<std::shared_ptr<const prometheus::MetricFamily>> publish() {
    std::vector<std::shared_ptr<const prometheus::MetricFamily>> out;
    out.reserve(families_.size());
    for (Family& f : families_) {
      if (f.family.metric.empty()) {
        f.published.reset();
        continue;
      }
      if (f.changed || !f.published) f.published = std::make_shared<const prometheus::MetricFamily>(f.family);
      out.push_back(f.published);
    }
    return out;
  }

 private:
  struct Slot {
    std::size_t at = 0;            // in the family's metric
    std::uint64_t generation = 0;  // the update that last set it
  };
  struct Family {
    const MetricInfo* info = nullptr;
    std::vector<std::size_t> label_order;  // label indices by name, as the exposition sorts them
    prometheus::MetricFamily family;       // name, help, type and the series
    // A series' label values (in label_order, each ended by '\0') -> its slot.
    std::unordered_map<std::string, Slot> index;
    bool sorted = true;    // `family.metric` by labels, and every slot's place in it
    std::size_t set = 0;   // series set in this update
    bool changed = false;  // a series added, dropped or set to another value in this update
    std::shared_ptr<const prometheus::MetricFamily> published;  // publish()'s copy of `family`
  };

  void put(std::string_view name, const std::string_view* values, std::size_t n, double value, bool reserved) {
    const MetricInfo* info = infoOf(name);
    if (info == nullptr) return;
    assert(n == info->labels.size() && "label values do not match the catalogue");
    if (n != info->labels.size()) return;
    if (counting_only_ || (!reserved && added_ >= budget_)) {
      ++dropped_;
      return;
    }
    Family& f = families_[static_cast<std::size_t>(info - metricCatalog().data())];
    key_.clear();
    for (std::size_t i : f.label_order) {
      const std::string_view v = values[i];
      if (isPrintableAscii(v))
        key_ += v;
      else
        key_ += printableText(v);
      key_ += '\0';
    }
    std::vector<prometheus::ClientMetric>& metric = f.family.metric;
    auto [it, inserted] = f.index.try_emplace(key_);
    Slot& slot = it->second;
    if (inserted) {
      slot.at = metric.size();
      metric.push_back(seriesOf(f, key_));
      f.sorted = false;
      f.changed = true;
    }
    if (slot.generation != generation_) {
      slot.generation = generation_;
      ++f.set;
      ++added_;
    } else if (info->type == MetricType::kCounter) {
      return;  // a counter is set once per update; a gauge set twice keeps the last value
    }
    prometheus::ClientMetric& m = metric[slot.at];
    double& v = info->type == MetricType::kCounter ? m.counter.value : m.gauge.value;
    // Bit for bit: a NaN is "unchanged" when it was NaN before too.
    if (std::bit_cast<std::uint64_t>(v) != std::bit_cast<std::uint64_t>(value)) f.changed = true;
    v = value;
  }

  // A new series: its labels from its key.
  static prometheus::ClientMetric seriesOf(const Family& f, std::string_view key) {
    prometheus::ClientMetric m;
    m.label.reserve(f.label_order.size());
    for (std::size_t i : f.label_order) {
      const std::size_t end = key.find('\0');
      m.label.push_back({f.info->labels[i], std::string(key.substr(0, end))});
      key.remove_prefix(end + 1);
    }
    return m;
  }

  // Takes out the series this update did not set.
  void dropUnset(Family& f) {
    std::vector<prometheus::ClientMetric>& metric = f.family.metric;
    std::vector<bool> gone(metric.size(), false);
    std::erase_if(f.index, [&](const auto& kv) {
      if (kv.second.generation == generation_) return false;
      gone[kv.second.at] = true;
      return true;
    });
    std::size_t kept = 0;
    for (std::size_t i = 0; i < metric.size(); ++i) {
      if (gone[i]) continue;
      if (kept != i) metric[kept] = std::move(metric[i]);
      ++kept;
    }
    metric.erase(metric.begin() + static_cast<std::ptrdiff_t>(kept), metric.end());
    f.sorted = false;  // the slots' places moved
    f.changed = true;
  }

  // Sorts the family's series by labels and points every slot at its series' new place.
  void sortSeries(Family& f) {
    std::vector<prometheus::ClientMetric>& metric = f.family.metric;
    std::sort(metric.begin(), metric.end(),
              [](const prometheus::ClientMetric& a, const prometheus::ClientMetric& b) { return a.label < b.label; });
    for (std::size_t i = 0; i < metric.size(); ++i) {
      key_.clear();
      for (const prometheus::ClientMetric::Label& l : metric[i].label) {
        key_ += l.value;
        key_ += '\0';
      }
      const auto it = f.index.find(key_);
      assert(it != f.index.end() && "every series has its slot");
      if (it != f.index.end()) it->second.at = i;
    }
    f.sorted = true;
  }

  std::size_t budget_ = 0;
  std::size_t added_ = 0;
  std::size_t dropped_ = 0;
  bool counting_only_ = false;
  std::uint64_t generation_ = 0;
  std::vector<Family> families_;  // by rank in the catalogue
  std::string key_;               // the series being added, reused
};

// The page: TextSerializer's text of the families, into a buffer of `size_hint` bytes (a stream
// that grows as it goes costs more than the serializing).
std::string pageOf(const std::vector<prometheus::MetricFamily>& families, std::size_t size_hint) {
  std::string buffer;
  buffer.reserve(size_hint);
  std::ostringstream out(std::move(buffer));
  prometheus::TextSerializer().Serialize(out, families);
  return std::move(out).str();
}

using Families = std::vector<std::shared_ptr<const prometheus::MetricFamily>>;

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
  for (const auto& [reason, n] : {std::pair{"timeout", http.timeouts}, std::pair{"evicted", http.evicted},
                                  std::pair{"busy", http.busy}, std::pair{"too_large", http.too_large},
                                  std::pair{"tls", http.tls_failures}, std::pair{"unauthorized", http.unauthorized}})
    sink.add(kHttpRefused, {reason}, num(n));
}

void emitSensors(SeriesSink& sink, const Snapshot& snap, const SensorCounters& counters) {
  for (const SensorStatus& s : snap.sensors) {
    for (SensorState st : {SensorState::kActive, SensorState::kDegraded, SensorState::kOff}) {
      sink.add(kSensorState, {toString(s.id), toString(st)}, s.state == st ? 1 : 0);
    }
  }
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
  // written as text at all.
  std::mutex render_mu;
  std::string page;
  std::uint64_t page_generation = 0;
  // Each family's text on the page, by the family it was written from: a family an update did
  // not change is the same object, and its text is not written again.
  std::vector<std::pair<std::shared_ptr<const prometheus::MetricFamily>, std::string>> texts;
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
      // Each family written anew only where the update changed it (families come in catalogue
      // order, so the last page's texts are walked alongside).
      auto& texts = state_->texts;
      std::vector<std::pair<std::shared_ptr<const prometheus::MetricFamily>, std::string>> next;
      next.reserve(families->size());
      std::size_t old = 0;
      for (const auto& family : *families) {
        std::size_t j = old;
        while (j < texts.size() && texts[j].first->name != family->name) ++j;
        if (j < texts.size()) {
          old = j + 1;
          if (texts[j].first == family) {
            next.emplace_back(family, std::move(texts[j].second));
            continue;
          }
        }
        next.emplace_back(family, pageOf({*family}, 4096));
      }
      texts = std::move(next);
      std::string page;
      page.reserve(state_->page.size() + state_->page.size() / 8 + 4096);  // room for the last page and some
      for (const auto& [family, text] : texts) page += text;
      state_->page = std::move(page);
      state_->page_generation = generation;
    }
    out.reserve(state_->page.size() + 256);
    out = state_->page;
  }
  // The scrape's own duration, known only now: its family written after the page's.
  const MetricInfo* info = infoOf(kScrapeDuration);
  if (scrape_slot && info != nullptr) {
    std::vector<prometheus::MetricFamily> scrape(1);
    scrape[0].name = info->name;
    scrape[0].help = info->help;
    scrape[0].type = exposedType(info->type);
    scrape[0].metric.emplace_back().gauge.value = last_scrape_duration_s;
    out += pageOf(scrape, 256);
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
