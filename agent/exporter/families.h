// The names of every metric family the exporter emits, each written once: in the catalogue
// (metric_catalog.cpp) and wherever the family is filled (exporter.cpp). Private to agent/exporter.
#pragma once

#include <cstddef>
#include <string_view>

namespace headroom::exporter_detail {

// Family names, each used once in the catalogue and wherever the family is filled.
// The agent itself.
inline constexpr const char* kBuildInfo = "headroom_build_info";
inline constexpr const char* kProcessResident = "process_resident_memory_bytes";
inline constexpr const char* kProcessCpu = "process_cpu_seconds_total";
inline constexpr const char* kProcessStart = "process_start_time_seconds";
inline constexpr const char* kSampleDuration = "headroom_sample_duration_seconds";
inline constexpr const char* kSampleCpu = "headroom_sample_cpu_seconds_total";
inline constexpr const char* kLastSample = "headroom_last_sample_timestamp_seconds";
inline constexpr const char* kSamples = "headroom_samples_total";
inline constexpr const char* kSampleFailures = "headroom_sample_failures_total";
inline constexpr const char* kConfigReloads = "headroom_config_reloads_total";
inline constexpr const char* kConfigReloadFailures = "headroom_config_reload_failures_total";
inline constexpr const char* kJournalUp = "headroom_journal_up";
inline constexpr const char* kJournalRecords = "headroom_journal_records_total";
inline constexpr const char* kJournalWriteFailures = "headroom_journal_write_failures_total";
inline constexpr const char* kJournalDamaged = "headroom_journal_damaged_records_total";
inline constexpr const char* kJournalBytes = "headroom_journal_bytes";
inline constexpr const char* kJournalPending = "headroom_journal_pending_records";
inline constexpr const char* kJournalDropped = "headroom_journal_dropped_records_total";
inline constexpr const char* kJournalFoundAfter = "headroom_journal_found_after_total";
inline constexpr const char* kJournalUnread = "headroom_journal_kernel_log_unread_records";
inline constexpr const char* kEventsWritten = "headroom_events_written_total";
inline constexpr const char* kEventsFailures = "headroom_events_failures_total";
inline constexpr const char* kEventsDropped = "headroom_events_dropped_total";
inline constexpr const char* kEventsQueued = "headroom_events_queued";
inline constexpr const char* kEventsRotations = "headroom_events_file_rotations_total";
inline constexpr const char* kOomScoreAdj = "headroom_agent_oom_score_adj";
inline constexpr const char* kSelfReportFailures = "headroom_self_report_failures_total";
inline constexpr const char* kHttpConnections = "headroom_http_connections_total";
inline constexpr const char* kHttpConnectionsOpen = "headroom_http_connections_open";
inline constexpr const char* kHttpRequests = "headroom_http_requests_total";
inline constexpr const char* kHttpRefused = "headroom_http_refused_total";
inline constexpr const char* kUpdateFailures = "headroom_exporter_update_failures_total";
inline constexpr const char* kScrapeDuration = "headroom_scrape_duration_seconds";
inline constexpr const char* kSeries = "headroom_series";
inline constexpr const char* kSeriesDropped = "headroom_series_dropped";
inline constexpr const char* kProcessesTracked = "headroom_processes_tracked";
inline constexpr const char* kProcessWalkAge = "headroom_process_walk_age_seconds";
inline constexpr const char* kProcessesSkipped = "headroom_processes_skipped";
inline constexpr const char* kCgroupsMissing = "headroom_watched_cgroups_missing";
// Probe (POST /v1/probe).
inline constexpr const char* kProbeAllocatable = "headroom_probe_allocatable_bytes";
inline constexpr const char* kProbeAllocated = "headroom_probe_allocated_bytes";
inline constexpr const char* kProbeOverhead = "headroom_probe_overhead_bytes";
inline constexpr const char* kProbeThroughput = "headroom_probe_touch_bytes_per_second";
inline constexpr const char* kProbeDuration = "headroom_probe_duration_seconds";
inline constexpr const char* kProbeTimestamp = "headroom_probe_last_timestamp_seconds";
inline constexpr const char* kProbeAborted = "headroom_probe_aborted";
inline constexpr const char* kProbes = "headroom_probes_total";
// The prover's budget.
inline constexpr const char* kBudget = "headroom_budget_bytes";
inline constexpr const char* kMargin = "headroom_margin_bytes";
inline constexpr const char* kBudgetGeneration = "headroom_budget_generation";
inline constexpr const char* kMarginChanges = "headroom_budget_margin_changes_total";
// Sensors.
inline constexpr const char* kSensorState = "headroom_sensor_state";
inline constexpr const char* kRingDrops = "headroom_ring_buffer_drops_total";
inline constexpr const char* kMapFullDrops = "headroom_map_full_drops_total";
inline constexpr const char* kKmsgLost = "headroom_kmsg_lost_total";
inline constexpr const char* kKmsgAbandoned = "headroom_kmsg_reports_abandoned_total";
inline constexpr const char* kSensorEvents = "headroom_sensor_events_total";
inline constexpr const char* kOomLatency = "headroom_oom_event_latency_seconds";
inline constexpr const char* kOomKills = "headroom_oom_kills_total";
inline constexpr const char* kOomKillLast = "headroom_oom_kill_last_timestamp_seconds";
// Host.
inline constexpr const char* kHostMemory = "headroom_host_memory_bytes";
inline constexpr const char* kHostPressure = "headroom_host_pressure_seconds_total";
// Cgroups.
inline constexpr const char* kCgroupLimit = "headroom_cgroup_limit_bytes";
inline constexpr const char* kCgroupEffectiveLimit = "headroom_cgroup_effective_limit_bytes";
inline constexpr const char* kCgroupUsage = "headroom_cgroup_usage_bytes";
inline constexpr const char* kCgroupPeak = "headroom_cgroup_peak_bytes";
inline constexpr const char* kCgroupHeadroom = "headroom_cgroup_headroom_bytes";
inline constexpr const char* kCgroupMemory = "headroom_cgroup_memory_bytes";
inline constexpr const char* kCgroupInvisible = "headroom_cgroup_invisible_bytes";
inline constexpr const char* kCgroupOomEvents = "headroom_cgroup_oom_events_total";
inline constexpr const char* kCgroupOomKills = "headroom_cgroup_oom_kills_total";
inline constexpr const char* kCgroupLimitHits = "headroom_cgroup_limit_hits_total";
inline constexpr const char* kCgroupMemoryEvents = "headroom_cgroup_memory_events_total";
inline constexpr const char* kCgroupPressure = "headroom_cgroup_pressure_seconds_total";
inline constexpr const char* kCgroupProcesses = "headroom_cgroup_processes";
// Time to OOM and warnings.
inline constexpr const char* kCgroupOomEta = "headroom_cgroup_oom_eta_seconds";
inline constexpr const char* kCgroupOomWarning = "headroom_cgroup_oom_warning";
inline constexpr const char* kCgroupGrowth = "headroom_cgroup_unreclaimable_growth_bytes_per_second";
inline constexpr const char* kCgroupEtaConfidence = "headroom_cgroup_oom_eta_confidence";
inline constexpr const char* kOomWarnings = "headroom_oom_warnings_total";
inline constexpr const char* kWarningHooks = "headroom_oom_warning_hooks_total";
// Processes, grouped by (cgroup, role, comm).
inline constexpr const char* kProcRss = "headroom_process_rss_bytes";
inline constexpr const char* kProcPss = "headroom_process_pss_bytes";
inline constexpr const char* kProcPageTables = "headroom_process_page_tables_bytes";
inline constexpr const char* kProcSwap = "headroom_process_swap_bytes";
inline constexpr const char* kProcPinned = "headroom_process_pinned_bytes";
inline constexpr const char* kProcPinnedPeak = "headroom_process_pinned_peak_bytes";
inline constexpr const char* kProcDevice = "headroom_process_device_bytes";
inline constexpr const char* kProcDevicePeak = "headroom_process_device_peak_bytes";
inline constexpr const char* kGpuMemoryTotal = "headroom_gpu_memory_total_bytes";
inline constexpr const char* kGpuMemoryUsed = "headroom_gpu_memory_used_bytes";
inline constexpr const char* kGpuProcessMemory = "headroom_gpu_process_memory_bytes";
inline constexpr const char* kProcFaults = "headroom_process_page_faults_total";
inline constexpr const char* kProcMmap = "headroom_process_mmap_bytes_total";
inline constexpr const char* kProcGroupSize = "headroom_process_group_size";

// The label value that stands for everything a cap folded together.
inline constexpr std::string_view kOther = "other";
// Series reserved ahead of every other: series dropped, series, and the scrape duration
// (added by render()), so that the accounting itself is never what the cap cuts.
inline constexpr std::size_t kReservedSeries = 3;

}  // namespace headroom::exporter_detail
