// The catalogue of metric families: name, type, labels and help of every family the exporter can
// emit (docs/metrics.md is checked against it).
#include <string>
#include <unordered_map>
#include <vector>

#include "families.h"
#include "headroom/exporter/exporter.h"

namespace headroom {
namespace {

using namespace exporter_detail;  // the family names

std::vector<MetricInfo> buildCatalog() {
  using L = std::vector<std::string>;
  constexpr MetricType kG = MetricType::kGauge;
  constexpr MetricType kC = MetricType::kCounter;
  // Every family about a cgroup starts with its path and what operators call it (the
  // exporter's CgroupLabels): "cgroup", "unit", "container", "pod", "namespace".
  const L cg = {"cgroup", "unit", "container", "pod", "namespace"};
  auto with = [&cg](std::initializer_list<std::string> more) {
    L out = cg;
    out.insert(out.end(), more);
    return out;
  };
  const L proc = with({"role", "process"});
  const L proc_kind = with({"role", "process", "kind"});
  return {
      // agent
      {kBuildInfo, kG, {"version"}, "Always 1; the agent's version is the label."},
      {kProcessResident, kG, {}, "Resident memory of the headroom agent itself, in bytes."},
      {kProcessCpu, kC, {}, "User and system CPU time the headroom agent has used, in seconds."},
      {kProcessStart, kG, {}, "Start time of the headroom agent, in seconds since the Unix epoch."},
      {kSampleDuration, kG, {}, "Duration of the last sample (collection and model), in seconds."},
      {kSampleCpu,
       kC,
       {"phase", "mode"},
       "CPU time the sampling thread spent in each phase of its samples (processes, cgroups, model, exporter), user "
       "and system apart, in seconds."},
      {kLastSample, kG, {}, "Time of the last successful sample, in seconds since the Unix epoch."},
      {kSamples, kC, {}, "Samples taken."},
      {kSampleFailures, kC, {}, "Samples that failed."},
      {kConfigReloads, kC, {}, "Configuration reloads applied."},
      {kConfigReloadFailures, kC, {}, "Configuration reloads refused (the previous configuration stays)."},
      {kJournalUp, kG, {}, "1 when the OOM journal is open for writing, 0 when it is off (see the log for why)."},
      {kJournalRecords, kC, {}, "OOM records written to the journal (each fsync'd)."},
      {kJournalWriteFailures,
       kC,
       {},
       "Failed writes of OOM records to the journal (a record kept in memory counts at each retry)."},
      {kJournalDamaged,
       kC,
       {},
       "Damaged journal records found (a torn tail set aside at start, corrupt lines skipped)."},
      {kJournalBytes, kG, {}, "Size of the journal file, in bytes."},
      {kJournalPending,
       kG,
       {},
       "OOM records the journal could not take yet, kept in memory and retried at each sample."},
      {kJournalDropped,
       kC,
       {},
       "OOM records given up while waiting for the journal (more than the in-memory backlog's bounds)."},
      {kJournalFoundAfter,
       kC,
       {"how"},
       "OOM kills the agent did not see happen, found at its start and journaled: in the kernel's log "
       "(kernel_log), left in flight by an agent that stopped (in_flight), or by a cgroup's OOM-kill counter "
       "(counters)."},
      {kJournalUnread,
       kG,
       {},
       "Records of this boot's kernel log that left its ring before any agent read them: OOM kills among them "
       "can be missing from the journal."},
      {kEventsWritten,
       kC,
       {"sink"},
       "OOM records sent off the machine, per sink (file, stdout, journald): lines written whole, journal entries "
       "accepted."},
      {kEventsFailures,
       kC,
       {"sink"},
       "OOM records a sink could not take (the record stays in the journal; that sink never gets it)."},
      {kEventsDropped,
       kC,
       {},
       "OOM records given up before any sink wrote them: the writer's queue was over its bounds."},
      {kEventsQueued, kG, {}, "OOM records waiting for the events writer."},
      {kEventsRotations, kC, {}, "Rotations of the events file (events.max_bytes)."},
      {kOomScoreAdj,
       kG,
       {},
       "The agent's own oom_score_adj (-1000 to 1000; -900 under the shipped systemd unit): how the OOM killer "
       "weighs it."},
      {kSelfReportFailures, kC, {}, "Samples where the prover's self-reported memory use could not be read."},
      {kHttpConnections, kC, {}, "Connections the HTTP endpoint accepted."},
      {kHttpConnectionsOpen, kG, {}, "Connections the HTTP endpoint serves now."},
      {kHttpRequests, kC, {}, "Requests the HTTP endpoint answered, whatever the status."},
      {kHttpRefused,
       kC,
       {"reason"},
       "Connections and requests the HTTP endpoint refused or closed early: timeout (a request, handshake or response "
       "past its deadline), evicted (waiting for a request while others waited for a thread), busy (too many waiting: "
       "503), too_large (headers over 16 KiB: 431), malformed (ambiguous framing: a bare LF, a Transfer-Encoding, two "
       "Content-Lengths: 400), tls (a failed handshake or a client certificate not allowed), unauthorized (no or wrong "
       "basic auth: 401)."},
      {kUpdateFailures, kC, {}, "Exporter updates that failed (the previous update's series stay)."},
      {kScrapeDuration, kG, {}, "Duration of the previous scrape's rendering, in seconds."},
      {kSeries, kG, {}, "Series exported by the last update, this one included."},
      {kSeriesDropped, kG, {}, "Series the caps (max_cgroups, max_series) left out of the last update."},
      {kProcessesTracked, kG, {}, "Processes read in the last walk of every process."},
      {kProcessWalkAge,
       kG,
       {},
       "Age of the per-process figures: seconds from the last walk of every process to the sample."},
      {kProcessesSkipped, kG, {}, "Processes seen but not read in the last sample (over the process cap)."},
      {kCgroupsMissing, kG, {}, "Watched cgroups (config key cgroups) that did not exist at the last sample."},
      // probe
      {kProbeAllocatable, kG, cg, "What the latest probe found allocatable in the cgroup, in bytes."},
      {kProbeAllocated, kG, cg, "What the latest probe allocated and touched, in bytes."},
      {kProbeOverhead, kG, with({"kind"}),
       "The latest probe's charge beyond what it allocated, in bytes, by kind (others: other processes' growth; "
       "kernel)."},
      {kProbeThroughput, kG, cg, "The latest probe's touching speed, in bytes per second."},
      {kProbeDuration, kG, cg, "How long the latest probe took, release and reclaim included, in seconds."},
      {kProbeTimestamp, kG, cg, "When the latest probe of the cgroup ran, in seconds since the Unix epoch."},
      {kProbeAborted, kG, cg, "1 when the latest probe stopped early because memory pressure rose."},
      {kProbes, kC, {"outcome"}, "Probe requests by outcome (done, aborted, failed, refused)."},
      // budget
      {kBudget, kG, cg,
       "The prover's budget: what it may use in all, in bytes, as /v1/budget serves it (no series when none can be "
       "given)."},
      {kMargin, kG, cg, "What the budget keeps back for everything the controller cannot see, in bytes."},
      {kBudgetGeneration, kG, cg,
       "Rises whenever the published budget or margin changes; a long-running prover re-reads /v1/budget then."},
      {kMarginChanges, kC, with({"reason"}),
       "Changes to the prover's learned margin, by reason (oom_kill: grown after an OOM kill; give_back: shrunk after "
       "clean periods)."},
      // sensors
      {kSensorState,
       kG,
       {"sensor", "state"},
       "1 for the sensor's current state (active, degraded, off), 0 for the others."},
      {kRingDrops, kC, {"ring"}, "Records the BPF ring buffers had no room for, by ring (oom, exit)."},
      {kMapFullDrops, kC, {}, "Updates the BPF per-process maps had no room for."},
      {kKmsgLost, kC, {}, "Messages /dev/kmsg overwrote before they were read."},
      {kKmsgAbandoned, kC, {}, "OOM reports in /dev/kmsg abandoned incomplete."},
      {kSensorEvents, kC, {}, "Records consumed from the BPF ring buffers."},
      {kOomLatency,
       kG,
       {},
       "For the last OOM kill, the time from oom:mark_victim in the kernel to the record in user space, in seconds."},
      {kOomKills, kC, proc, "OOM kills the sensors saw, by victim's cgroup, role and command."},
      {kOomKillLast, kG, proc, "Time of the last OOM kill the sensors saw, in seconds since the Unix epoch."},
      // host
      {kHostMemory, kG, {"kind"}, "Host memory from /proc/meminfo, in bytes."},
      {kHostPressure, kC, {"kind"}, "Host memory pressure stall time (/proc/pressure/memory total), in seconds."},
      // cgroups
      {kCgroupLimit, kG, cg, "The cgroup's own memory limit, in bytes (no series when unlimited)."},
      {kCgroupEffectiveLimit, kG, cg, "The limit of the tightest bound (own, an ancestor's, or the host's), in bytes."},
      {kCgroupUsage, kG, cg, "Memory charged to the cgroup and its descendants, in bytes."},
      {kCgroupPeak, kG, cg, "Highest memory usage the kernel recorded for the cgroup, in bytes."},
      {kCgroupHeadroom, kG, cg, "Room left under the tightest bound, in bytes."},
      {kCgroupMemory, kG, with({"kind"}),
       "The cgroup's usage split into parts, in bytes; with kind=unattributed they add up to usage."},
      {kCgroupInvisible, kG, cg, "Memory charged to the cgroup that no process's RSS shows, in bytes."},
      {kCgroupOomEvents, kC, cg, "Times the cgroup hit its limit and the OOM killer was invoked (memory.events oom)."},
      {kCgroupOomKills, kC, cg,
       "Processes the OOM killer killed in the cgroup (memory.events oom_kill, v1 oom_control)."},
      {kCgroupLimitHits, kC, cg, "Times usage hit the limit (v1 memory.failcnt, v2 memory.events max)."},
      {kCgroupMemoryEvents, kC, with({"event"}),
       "The cgroup's memory events as the kernel counts them, by event (v2 memory.events: low, high, max, oom, "
       "oom_kill, oom_group_kill; memory.swap.events as swap_high, swap_max, swap_fail)."},
      {kCgroupPressure, kC, with({"kind"}),
       "Memory pressure stall time of the cgroup (v2 memory.pressure total), in seconds."},
      {kCgroupProcesses, kG, cg, "Processes in the cgroup and its descendants."},
      // time to OOM
      {kCgroupOomEta, kG, cg,
       "Seconds until the cgroup's nearest bound runs out at the present growth of what cannot be reclaimed (+Inf "
       "when not growing toward it)."},
      {kCgroupOomWarning, kG, cg, "1 while an OOM warning is in force for the cgroup (docs/warnings.md)."},
      {kCgroupGrowth, kG, cg,
       "Growth of what the kernel cannot reclaim under the cgroup's nearest bound (a robust trend), in bytes per "
       "second."},
      {kCgroupEtaConfidence, kG, cg,
       "How far the time to OOM can be trusted: 0 none, 0.33 low, 0.67 medium, 1 high (warnings need medium)."},
      {kOomWarnings, kC, cg, "OOM warnings given for the cgroup's bound (one per episode)."},
      {kWarningHooks, kC, {"outcome"}, "The prover's warning hook, by outcome (ok, failed)."},
      // processes
      {kProcRss, kG, proc_kind,
       "Resident memory of the processes in the group, by kind (anon, file, shmem), in bytes."},
      {kProcPss, kG, proc, "Proportional set size of the processes in the group, in bytes."},
      {kProcPageTables, kG, proc, "Page tables of the processes in the group (VmPTE), in bytes."},
      {kProcSwap, kG, proc, "Swapped-out memory of the processes in the group, in bytes."},
      {kProcPinned, kG, proc, "Host memory pinned for device DMA by the processes in the group, in bytes."},
      {kProcPinnedPeak, kG, proc, "Sum of the processes' peak pinned host memory, in bytes."},
      {kProcDevice, kG, proc, "CUDA device memory allocated by the processes in the group, in bytes."},
      {kProcDevicePeak, kG, proc, "Sum of the processes' peak CUDA device memory, in bytes."},
      // GPUs (NVML)
      {kGpuMemoryTotal, kG, {"gpu", "uuid", "name"}, "Device memory of the GPU, in bytes (NVML)."},
      {kGpuMemoryUsed,
       kG,
       {"gpu", "uuid"},
       "Device memory in use on the GPU, the driver's own included, in bytes (NVML)."},
      {kGpuProcessMemory, kG, with({"role", "process", "gpu"}),
       "Device memory the driver reports for the processes in the group on the GPU (their allocations and "
       "contexts), in bytes (NVML)."},
      {kProcFaults, kC, proc_kind, "Page faults of the processes in the group, by kind (minor, major)."},
      {kProcMmap, kC, with({"role", "process", "op"}),
       "Bytes the processes in the group mapped and unmapped, by op (mmap, munmap)."},
      {kProcGroupSize, kG, proc, "Processes summed into the group's series."},
  };
}

const std::unordered_map<std::string_view, const MetricInfo*>& catalogIndex() {
  static const std::unordered_map<std::string_view, const MetricInfo*> index = [] {
    std::unordered_map<std::string_view, const MetricInfo*> m;
    for (const MetricInfo& i : metricCatalog()) m.emplace(i.name, &i);
    return m;
  }();
  return index;
}

}  // namespace

const std::vector<MetricInfo>& metricCatalog() {
  static const std::vector<MetricInfo> catalog = buildCatalog();
  return catalog;
}

const MetricInfo* findMetric(std::string_view name) {
  const auto& index = catalogIndex();
  auto it = index.find(name);
  return it == index.end() ? nullptr : it->second;
}

}  // namespace headroom
