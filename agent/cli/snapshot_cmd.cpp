#include <fmt/format.h>

#include <atomic>
#include <csignal>
#include <ostream>

#include "agent/cli/commands.h"
#include "headroom/collector.h"
#include "headroom/sensors.h"
#include "headroom/snapshot_json.h"
#include "headroom/units.h"

namespace headroom::cli {
namespace {

std::atomic<bool> g_stop{false};
void onStopSignal(int) { g_stop = true; }

// A comm is whatever the process named itself: no control character reaches a log line.
std::string printable(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return out;
}

}  // namespace

std::string describeOom(const OomEvent& e) {
  std::string victims;
  for (const OomVictim& v : e.victims) {
    if (!victims.empty()) victims += "; ";
    victims += fmt::format("pid {} ({}) in {}", v.tgid != 0 ? v.tgid : v.pid, printable(v.comm), v.cgroup.empty() ? "?" : v.cgroup);
    if (v.anon_rss) {
      victims += fmt::format(" anon {} file {} shmem {} pgtables {}", formatBytes(*v.anon_rss),
                             formatBytes(v.file_rss.value_or(0)), formatBytes(v.shmem_rss.value_or(0)),
                             formatBytes(v.pgtables.value_or(0)));
    }
    if (v.kill_skipped) victims += " (already exiting: no kill sent)";
    if (v.inferred) victims += " (inferred: gone from the cgroup)";
  }
  std::string domain = e.global ? "the whole machine" : e.domain_cgroup.value_or("?");
  if (e.domain_limit_bytes)
    domain += fmt::format(" (limit {}, usage {})", formatBytes(*e.domain_limit_bytes),
                          formatBytes(e.domain_usage_bytes.value_or(0)));
  if (e.from_counter) {
    if (victims.empty()) victims = "victim not known";
    domain = fmt::format("not known (the OOM-kill counter of {} rose by {})", e.counter_cgroup.empty() ? "?" : e.counter_cgroup,
                         e.counted_kills);
  }
  std::string sources = e.from_bpf && e.from_kmsg ? "bpf+kmsg" : e.from_bpf ? "bpf" : e.from_kmsg ? "kmsg" : "counter";
  return fmt::format("OOM kill: {} | OOM domain {} | trigger pid {} ({}) | {} [{}]", victims, domain, e.trigger_pid,
                     printable(e.trigger_comm), e.constraint.empty() ? "constraint unknown" : e.constraint, sources);
}

void fillFromSensors(const FsRoot& fs, RawSample& raw, const Sensors& sensors) {
  raw.sensors = sensors.status();
  for (const ProcessSample& p : raw.processes) {
    if (auto a = sensors.activity(p.pid)) raw.activity[p.pid] = *a;
    auto g = sensors.gpu(p.pid);
    if (!g) continue;
    raw.gpu[p.pid] = *g;
    if (g->pinned_live == 0) continue;
    // Where the pinned pages live decides whether they are already in the visible sum.
    auto smaps = fs.readFile(fmt::format("/proc/{}/smaps", p.pid));
    if (!smaps) continue;
    if (auto inside = pinnedInsideRss(parseSmapsVmas(*smaps), sensors.pinnedAddresses(p.pid)))
      raw.pinned_inside_rss[p.pid] = *inside;
  }
}

int runSnapshot(const SnapshotOptions& opts, std::ostream& out, std::ostream& err) {
  std::vector<RoleRule> rules;
  for (const auto& spec : opts.role_rules) {
    auto r = parseRoleRule(spec);
    if (!r) {
      err << "headroom snapshot: --role-rule: " << r.error().describe() << "\n";
      return kExitBadInput;
    }
    rules.push_back(std::move(*r));
  }
  SensorsConfig sc;
  sc.bpf = opts.bpf;
  sc.cuda_libraries = opts.cuda_libraries;
  for (const auto& spec : opts.tracepoints) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      err << "headroom snapshot: --tracepoint: \"" << spec << "\" is not SENSOR=NAME\n";
      return kExitBadInput;
    }
    sc.tracepoints[spec.substr(0, eq)] = spec.substr(eq + 1);
  }
  auto host = openHost(opts.root);
  if (!host) {
    err << "headroom snapshot: " << host.error().describe() << "\n";
    return kExitBadInput;
  }
  const FsRoot* fs = host->fs.get();
  const Collector* collector = host->collector.get();
  // The sensors read the live kernel: a fixture root has none.
  if (!fs->isLive()) {
    sc.bpf = false;
    sc.kmsg = false;
  }
  auto sensors = Sensors::start(*fs, sc, collector->mounts());

  if (opts.watch_ooms) {
    std::signal(SIGINT, onStopSignal);
    std::signal(SIGTERM, onStopSignal);
    if (opts.json) {
      // The first object says that watching has begun and with which sensors.
      nlohmann::json header = {{"watching", true}, {"sensors", nlohmann::json::array()}};
      for (const auto& s : sensors->status())
        header["sensors"].push_back({{"name", s.name}, {"state", toString(s.state)}, {"reason", s.reason}});
      out << dumpJson(header) << "\n" << std::flush;
    } else {
      for (const auto& s : sensors->status())
        out << fmt::format("sensor {}: {}{}\n", s.name, toString(s.state), s.reason.empty() ? "" : " (" + s.reason + ")");
      out << "watching for OOM kills (Ctrl-C to stop)\n" << std::flush;
    }
    std::size_t seen = 0;
    auto deadline = opts.watch_seconds > 0
                        ? std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<long>(opts.watch_seconds * 1000))
                        : std::chrono::steady_clock::time_point::max();
    while (!g_stop && std::chrono::steady_clock::now() < deadline) {
      sensors->poll(100);
      for (const OomEvent& e : sensors->takeOomEvents()) {
        out << (opts.json ? dumpJson(toJson(e)) : describeOom(e)) << "\n" << std::flush;
        if (opts.max_ooms > 0 && ++seen >= opts.max_ooms) return kExitOk;
      }
      (void)sensors->takeExitEvents();
    }
    return kExitOk;
  }

  CollectOptions co;
  if (opts.cgroup) co.cgroups = {*opts.cgroup};
  co.pid = opts.pid;
  co.read_smaps = opts.smaps;
  auto raw = collector->collect(co);
  if (!raw) {
    err << "headroom snapshot: " << raw.error().describe() << "\n";
    return kExitBadInput;
  }
  std::vector<pid_t> pids;
  for (const ProcessSample& p : raw->processes) pids.push_back(p.pid);
  sensors->discoverCuda(pids);
  fillFromSensors(*fs, *raw, *sensors);
  auto snap = buildSnapshot(std::move(*raw), RoleMatcher(std::move(rules)));
  if (opts.json) {
    out << dumpJson(toJson(*snap), 2) << "\n";
  } else {
    out << renderSnapshotTable(*snap, opts.top);
  }
  return kExitOk;
}

}  // namespace headroom::cli
