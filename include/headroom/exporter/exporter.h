// The Prometheus side of the agent: one fixed catalogue of metric families (name, type, labels,
// help: the list docs/metrics.md is checked against) and the rendering of each tick's model
// into the text exposition format, label cardinality bounded by configuration.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "headroom/controller/controller.h"
#include "headroom/model/roles.h"
#include "headroom/model/snapshot.h"
#include "headroom/net/http_server.h"
#include "headroom/sensors/readings.h"
#include "headroom/util/clock.h"

namespace headroom {

enum class MetricType { kGauge, kCounter };
const char* toString(MetricType t);

struct MetricInfo {
  std::string name;  // "headroom_cgroup_usage_bytes"
  MetricType type = MetricType::kGauge;
  std::vector<std::string> labels;  // in order
  std::string help;                 // the HELP line
};
// Every family the exporter can emit; nothing is emitted that is not in here.
const std::vector<MetricInfo>& metricCatalog();
// The catalogue's entry for a family name, or nullptr.
const MetricInfo* findMetric(std::string_view name);

struct ExporterLimits {
  std::size_t top_processes = 10;        // per role: the largest (cgroup, comm) groups by RSS
  std::size_t max_cgroups = 256;         // the largest cgroups by usage
  std::size_t max_series = 20000;        // every series together
  std::size_t max_oom_label_sets = 512;  // distinct {cgroup,workload names,role,process} in the OOM counters
};

// What the agent knows of itself, filled by the agent each tick.
struct AgentSelf {
  std::uint64_t rss_bytes = 0;
  std::optional<int> oom_score_adj;  // the agent's own, from /proc/self/oom_score_adj
  double cpu_seconds = 0;
  double start_time_seconds = 0;  // unix time
  double last_sample_duration_s = 0;
  // The sampling thread's CPU time by phase, summed over every sample.
  struct PhaseCpu {
    SplitCpu processes, cgroups, model, exporter;
  } sample_cpu;
  double last_sample_timestamp_s = 0;  // unix time of the last successful sample
  std::uint64_t samples_total = 0;
  std::uint64_t sample_failures_total = 0;
  std::uint64_t config_reloads_total = 0;
  std::uint64_t config_reload_failures_total = 0;
  // The OOM journal (docs/journal.md).
  bool journal_up = false;
  std::uint64_t journal_records_total = 0;
  std::uint64_t journal_write_failures_total = 0;
  std::uint64_t journal_damaged_records_total = 0;
  std::uint64_t journal_bytes = 0;
  std::uint64_t journal_pending_records = 0;        // records the journal could not take yet, kept in memory
  std::uint64_t journal_dropped_records_total = 0;  // waiting records given up (over the backlog's bounds)
  // Kills the agent did not see happen, found at its start (docs/journal.md, "Kills found after
  // the fact"): by how ("kernel_log", "in_flight", "counters"), and the kernel log's records of
  // this boot gone before any agent read them.
  std::map<std::string, std::uint64_t> journal_found_after_total;
  std::uint64_t journal_kernel_log_unread_records = 0;
  // The events sent off the machine (docs/events.md): per sink ("file", "stdout", "journald").
  struct EventSinkFigures {
    std::string sink;
    std::uint64_t written_total = 0;
    std::uint64_t failures_total = 0;
  };
  std::vector<EventSinkFigures> event_sinks;
  std::uint64_t events_dropped_total = 0;  // records given up: the writer's queue was over its bounds
  std::uint64_t events_queued = 0;
  std::uint64_t events_file_rotations_total = 0;
  std::uint64_t self_report_failures_total = 0;
  HttpServerStats http;  // the HTTP endpoint's connections
};

class Exporter {
 public:
  explicit Exporter(ExporterLimits limits);
  ~Exporter();
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;

  // One tick: rebuilds every family from the snapshot, the sensors' counters and the agent's
  // own figures (from nothing each time, so gone cgroups and processes leave no series).
  void update(const Snapshot& snap, const SensorCounters& counters, const AgentSelf& self);
  // One OOM kill seen by the sensors (victim's memory cgroup, role, comm; unix time). Counted
  // for the agent's lifetime; label sets beyond the cap count under process="other".
  void recordOomKill(const std::string& cgroup, const Workload& workload, Role role, const std::string& process,
                     double timestamp_s);
  void setLimits(ExporterLimits limits);  // config reload

  // The latest probe of a cgroup (POST /v1/probe), shown until the agent stops; the 16 most
  // recently probed cgroups are kept.
  struct ProbeFigures {
    double allocatable_bytes = 0, allocated_bytes = 0, others_growth_bytes = 0, kernel_overhead_bytes = 0;
    double bytes_per_second = 0, duration_seconds = 0, timestamp_s = 0;
    bool aborted = false;
  };
  void recordProbe(const std::string& cgroup, const ProbeFigures& figures);
  // One probe request's outcome: done, aborted, failed, refused (rate limit, busy, bad input).
  void countProbe(const std::string& outcome);

  // The prover's budget as last decided (one prover per agent: a decision for another cgroup
  // replaces it). A decision that is not valid shows its margin and generation, no budget.
  void recordBudget(const BudgetDecision& d);
  // No budget can be computed any more (no prover, budget off): its series go.
  void clearBudget();
  // A change to the learned margin of the prover in `cgroup`, by reason: "oom_kill" (grown)
  // or "give_back" (shrunk after clean periods). Counted for the agent's lifetime.
  void countMarginChange(const std::string& cgroup, const std::string& reason);

  // Each cgroup's time to OOM at this sample (the agent's early warning), shown until the next.
  struct Forecast {
    std::string cgroup;
    std::optional<double> eta_seconds;  // none: not growing toward a bound (+Inf)
    double growth_bytes_per_second = 0;
    double confidence = 0;  // 0..1
    bool warning = false;
  };
  void recordForecasts(std::vector<Forecast> forecasts);
  // A warning given for `cgroup`'s bound; a warning hook's outcome ("ok", "failed").
  void countWarning(const std::string& cgroup);
  void countWarningHook(const std::string& outcome);

  // The text exposition format (version 0.0.4); `last_scrape_duration_s` is the previous
  // scrape's own duration, reported in this one. Thread-safe against update().
  std::string render(double last_scrape_duration_s) const;
  // Series in the last update (every sample line), and how many the caps left out.
  std::size_t seriesCount() const;
  std::size_t seriesDropped() const;

 private:
  struct State;
  mutable std::mutex mu_;
  ExporterLimits limits_;
  std::unique_ptr<State> state_;
};

}  // namespace headroom
