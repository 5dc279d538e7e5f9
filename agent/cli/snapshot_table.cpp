#include <fmt/format.h>

#include <ctime>
#include <map>

#include "headroom/cli/commands.h"
#include "headroom/util/text.h"
#include "headroom/util/units.h"

namespace headroom::cli {
namespace {

// Keeps the end of a long path, where the distinguishing part usually is.
std::string shorten(const std::string& s, std::size_t width) {
  if (s.size() <= width) return s;
  return "..." + s.substr(s.size() - (width - 3));
}

std::string partsLine(const Attribution& a, bool visible) {
  std::string line;
  for (const Part& p : a.parts) {
    if (isVisible(p.kind) != visible) continue;
    if (!line.empty()) line += "  ";
    line +=
        fmt::format("{} {}{}", toString(p.kind), formatBytes(p.bytes), p.accuracy == Accuracy::kEstimated ? "~" : "");
  }
  return line;
}

std::string optBytes(const std::optional<std::uint64_t>& v, const char* none = "none") {
  return v ? formatBytes(*v) : std::string(none);
}

}  // namespace

std::string renderSnapshotTable(const Snapshot& s, std::size_t top) {
  std::string o;
  const Meminfo& mi = s.host.meminfo;
  o += fmt::format("headroom snapshot  {}  cgroups: {} (memory on v{} at {})\n\n",
                   formatUtcMs(s.wall_time_ns / 1'000'000), toString(s.mode), s.memory_version, s.memory_mount);
  o += "MACHINE\n";
  o += fmt::format("  total {}  available {}{}  free {}  shmem {}  swap {} of {}\n", formatBytes(mi.mem_total),
                   formatBytes(mi.mem_available), mi.mem_available_estimated ? "~" : "", formatBytes(mi.mem_free),
                   formatBytes(mi.shmem), formatBytes(mi.swap_total - std::min(mi.swap_total, mi.swap_free)),
                   formatBytes(mi.swap_total));
  o += fmt::format("  kernel: page tables {}  slab {} (reclaimable {})  kernel stacks {}  percpu {}\n",
                   formatBytes(mi.page_tables), formatBytes(mi.slab), formatBytes(mi.s_reclaimable),
                   formatBytes(mi.kernel_stack), formatBytes(mi.percpu));
  o += fmt::format("  mlocked {}  hugetlb {} (no cgroup's memory usage shows hugetlb)\n", formatBytes(mi.mlocked),
                   formatBytes(mi.hugetlb));
  if (s.host.pressure) {
    const Psi& p = *s.host.pressure;
    o += fmt::format("  pressure: some avg10 {:.2f} avg60 {:.2f}", p.some.avg10, p.some.avg60);
    if (p.full) o += fmt::format("  full avg10 {:.2f} avg60 {:.2f}", p.full->avg10, p.full->avg60);
    o += "\n";
  }

  if (!s.sensors.empty()) {
    std::string line;
    std::string reasons;
    for (const SensorStatus& ss : s.sensors) {
      line += fmt::format("  {} {}", toString(ss.id), toString(ss.state));
      if (ss.state != SensorState::kActive && !ss.reason.empty())
        reasons += fmt::format("    {}: {}\n", toString(ss.id), ss.reason);
    }
    o += "\nSENSORS\n " + line + "\n" + reasons;
  }

  o += "\nCGROUPS  (~ estimated; headroom = room under the tightest bound)\n";
  o += fmt::format("  {:<44} {:>10} {:>10} {:>10} {:>10}  {}\n", "CGROUP", "LIMIT", "USAGE", "PEAK", "HEADROOM",
                   "BOUND");
  for (const CgroupSnapshot& c : s.cgroups) {
    const CgroupMemory& m = c.memory;
    std::string bound = c.tightest ? (c.tightest->name == m.path ? "own limit" : c.tightest->name) : "-";
    o += fmt::format("  {:<44} {:>10} {:>10} {:>10} {:>10}  {}\n", shorten(m.path, 44), optBytes(m.limit),
                     formatBytes(m.usage), optBytes(m.peak, "-"), optBytes(c.headroom(), "-"), bound);
    if (std::string w = describeWorkload(c.workload); !w.empty()) o += fmt::format("      workload     {}\n", w);
    const Attribution& a = c.attribution;
    o += fmt::format("      visible      {:>10}  {}\n", formatBytes(a.visibleBytes()), partsLine(a, true));
    o += fmt::format("      invisible    {:>10}  {}\n", formatBytes(a.invisibleBytes()), partsLine(a, false));
    o += fmt::format("      unattributed {:>10}\n", formatSignedBytes(a.unattributed));
    std::string counters;
    if (m.oom_kills) counters += fmt::format("oom kills {}", *m.oom_kills);
    if (m.oom_events) counters += fmt::format("  ooms {}", *m.oom_events);
    if (m.failcnt) counters += fmt::format("  failcnt {}", *m.failcnt);
    if (m.under_oom) counters += "  UNDER OOM";
    if (m.pressure) counters += fmt::format("  pressure some avg10 {:.2f}", m.pressure->some.avg10);
    if (!counters.empty()) o += fmt::format("      {}\n", counters);
    for (const auto& n : a.notes) o += fmt::format("      note: {}\n", n);
    for (const auto& w : m.warnings) o += fmt::format("      warning: {}\n", w);
  }

  o += fmt::format("\nPROCESSES  (top {} per role by PSS; overhead = share of the cgroup's invisible memory)\n", top);
  o += fmt::format("  {:<9} {:>7} {:<16} {:<28} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n", "ROLE", "PID",
                   "COMM", "CGROUP", "RSS", "PSS", "ANON", "FILE", "SHMEM", "PTE", "OVERHEAD", "PINNED");
  std::map<Role, std::size_t> shown;
  // Walk cgroups in table order and their processes by PSS, so the biggest come first.
  std::vector<std::size_t> order;
  for (const CgroupSnapshot& c : s.cgroups) {
    for (std::size_t i : c.processes) {
      if (s.processes[i].cgroup == c.memory.path) order.push_back(i);
    }
  }
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    const auto& a = s.processes[x].attribution;
    const auto& b = s.processes[y].attribution;
    return a.pss.value_or(a.rss) > b.pss.value_or(b.rss);
  });
  for (Role role : {Role::kProver, Role::kColocated, Role::kSystem, Role::kSelf}) {
    for (std::size_t i : order) {
      const ProcessSnapshot& p = s.processes[i];
      if (p.role != role) continue;
      if (s.focus_pid && p.sample.pid != *s.focus_pid) continue;
      if (shown[role]++ >= top) break;
      const ProcessAttribution& a = p.attribution;
      o += fmt::format("  {:<9} {:>7} {:<16} {:<28} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
                       toString(p.role), p.sample.pid, p.sample.comm, shorten(p.sample.memory_cgroup, 28),
                       formatBytes(a.rss) + (p.sample.status.rss_drift > 0 ? "~" : ""),
                       a.pss ? formatBytes(*a.pss) : "-", formatBytes(a.pss_anon.value_or(a.rss_anon)),
                       formatBytes(a.pss_file.value_or(a.rss_file)), formatBytes(a.pss_shmem.value_or(a.rss_shmem)),
                       formatBytes(a.page_tables), formatBytes(a.overhead_share),
                       a.pinned ? formatBytes(a.pinned->live_bytes) : "-");
    }
  }
  const CollectStats& st = s.stats;
  o += fmt::format("\n{} processes read, {} vanished mid-read, {} unreadable, {} without PSS, {} kernel threads\n",
                   st.processes_read, st.processes_vanished, st.processes_failed, st.processes_without_pss,
                   st.kernel_threads);
  if (st.processes_pss_pending > 0)
    o += fmt::format(
        "{} small processes without PSS yet (RSS stands in): their smaps_rollup waits for the read budget\n",
        st.processes_pss_pending);
  if (st.processes_outside_mount > 0)
    o +=
        fmt::format("{} processes in cgroups outside the mounted cgroup tree (not read)\n", st.processes_outside_mount);
  for (const auto& w : st.warnings) o += fmt::format("warning: {}\n", w);
  return o;
}

}  // namespace headroom::cli
