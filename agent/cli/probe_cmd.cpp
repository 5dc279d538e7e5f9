// `headroom probe`: how much more can really be allocated in a cgroup right now.
#include <fmt/format.h>

#include <ostream>

#include "headroom/cli/commands.h"
#include "headroom/model/snapshot_json.h"
#include "headroom/probe/probe.h"
#include "headroom/sources/collector.h"
#include "headroom/util/exit_codes.h"
#include "headroom/util/units.h"

namespace headroom::cli {
namespace {

nlohmann::json toJson(const ProbeResult& r) {
  nlohmann::json parts = nlohmann::json::object();
  for (const auto& [k, v] : r.kernel_overhead_parts) parts[k] = v;
  return {
      // The old tool's fields, same names and meaning.
      {"cgroup_limit_bytes", r.cgroup_limit_bytes},
      {"usage_before_bytes", r.usage_before_bytes},
      {"allocated_bytes", r.allocated_bytes},
      {"usage_peak_bytes", r.usage_peak_bytes},
      {"usage_after_bytes", r.usage_after_bytes},
      {"overhead_bytes", r.overhead_bytes},
      {"probe_chunks", r.probe_chunks},
      // New.
      {"cgroup", r.cgroup},
      {"bound",
       {{"name", r.bound.name},
        {"kind", r.bound.kind},
        {"limit_bytes", r.bound.limit},
        {"usage_before_bytes", r.bound.usage_before}}},
      {"stop_margin_bytes", r.stop_margin_bytes},
      {"allocatable_bytes", r.allocatable_bytes},
      {"placement", r.placement},
      {"touch", r.touch},
      {"threads", r.threads},
      {"touch_seconds", r.touch_seconds},
      {"bytes_per_second", r.bytes_per_second},
      {"others_growth_bytes", r.others_growth_bytes},
      {"kernel_overhead_bytes", r.kernel_overhead_bytes},
      {"kernel_overhead_parts", parts},
      {"reclaim_seconds", r.reclaim_seconds},
      {"reclaimed", r.reclaimed},
      {"stop_reason", r.stop_reason},
      {"aborted", r.aborted},
      {"oom_kills_before", r.oom_kills_before},
      {"oom_kills_after", r.oom_kills_after},
      {"started_at", r.started_at},
      {"duration_seconds", r.duration_seconds},
  };
}

std::string renderProbe(const ProbeResult& r) {
  std::string s = fmt::format(
      "probe of {}: {} allocatable ({} allocated in {} chunk(s), {} of room left at the peak)\n"
      "  bound      {} {} {} (usage {} before); stop margin {}\n"
      "  usage      before {}, peak {}, after {} ({} in {:.2f} s)\n"
      "  overhead   {} beyond what the probe allocated: others grew {}, kernel {}\n",
      r.cgroup, formatBytes(r.allocatable_bytes), formatBytes(r.allocated_bytes), r.probe_chunks,
      formatBytes(r.allocatable_bytes - r.allocated_bytes), r.bound.name, r.bound.kind, formatBytes(r.bound.limit),
      formatBytes(r.bound.usage_before), formatBytes(r.stop_margin_bytes), formatBytes(r.usage_before_bytes),
      formatBytes(r.usage_peak_bytes), formatBytes(r.usage_after_bytes), r.reclaimed ? "reclaimed" : "NOT reclaimed",
      r.reclaim_seconds, formatSignedBytes(r.overhead_bytes), formatSignedBytes(r.others_growth_bytes),
      formatSignedBytes(r.kernel_overhead_bytes));
  if (!r.kernel_overhead_parts.empty()) {
    s += "  kernel     ";
    bool first = true;
    for (const auto& [k, v] : r.kernel_overhead_parts) {
      s += fmt::format("{}{} {}", first ? "" : ", ", k, formatSignedBytes(v));
      first = false;
    }
    s += "\n";
  }
  s += fmt::format("  touch      {} with {} thread(s): {:.2f} GiB/s\n", r.touch, r.threads,
                   r.bytes_per_second / static_cast<double>(1ULL << 30));
  s += fmt::format("  placement  {}\n", r.placement);
  s += fmt::format("  stopped    {}{}\n", r.aborted ? "ABORTED: " : "", r.stop_reason);
  if (r.oom_kills_after != r.oom_kills_before)
    s += fmt::format("  WARNING    the cgroup's oom_kill counter rose from {} to {}\n", r.oom_kills_before,
                     r.oom_kills_after);
  return s;
}

Result<ProbeOptions> probeOptions(const ProbeCliOptions& o) {
  ProbeOptions po;
  po.cgroup = o.cgroup;
  auto size = [](const char* flag, const std::string& v) -> Result<std::uint64_t> {
    auto r = parseSize(v);
    if (!r) return badInput(fmt::format("{} {}: {}", flag, v, r.error().message));
    return *r;
  };
  if (!o.chunk.empty()) {
    auto c = size("--chunk", o.chunk);
    if (!c) return c.error();
    if (*c < (4ULL << 20)) return badInput(fmt::format("--chunk {}: the chunk must be at least 4 MiB", o.chunk));
    po.chunk = *c;
  }
  if (!o.stop_margin.empty()) {
    auto m = size("--stop-margin", o.stop_margin);
    if (!m) return m.error();
    po.stop_margin = *m;
  }
  if (!o.max.empty()) {
    auto m = size("--max", o.max);
    if (!m) return m.error();
    po.max_bytes = *m;
  }
  auto touch = touchModeFromString(o.touch);
  if (!touch) return badInput(fmt::format("--touch {}", touch.error().message));
  po.touch = *touch;
  po.threads = o.threads;
  auto timeout = parseDuration(o.reclaim_timeout);
  if (!timeout) return badInput(fmt::format("--reclaim-timeout {}: {}", o.reclaim_timeout, timeout.error().message));
  po.reclaim_timeout = *timeout;
  return po;
}

}  // namespace

int runProbeCommand(const ProbeCliOptions& o, std::ostream& out, std::ostream& err) {
  auto po = probeOptions(o);
  if (!po) return fail(err, "probe", po.error());
  auto source = openSourceRoot(o.root);
  if (!source) return fail(err, "probe", source.error());
  auto r = runProbe(*source->fs, *source->collector, *po);
  if (!r) return fail(err, "probe", r.error());
  out << (o.json ? dumpJson(toJson(*r)) + "\n" : renderProbe(*r));
  return r->aborted ? kExitAborted : kExitOk;
}

}  // namespace headroom::cli
