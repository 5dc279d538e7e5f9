// `headroom snapshot`: one sample of the machine as a table or JSON, or (--watch-ooms) the OOM
// kills the sensors see, printed as they come.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <ostream>

#include "headroom/cli/commands.h"
#include "headroom/daemon/gpu_reader.h"
#include "headroom/incidents/kill_names.h"
#include "headroom/journal/oom_record.h"
#include "headroom/model/snapshot_json.h"
#include "headroom/sensors/sensors.h"
#include "headroom/sources/collector.h"
#include "headroom/util/exit_codes.h"

namespace headroom::cli {
namespace {

std::atomic<bool> g_stop{false};
void onStopSignal(int) { g_stop = true; }

Result<SensorsConfig> sensorsConfig(const SnapshotOptions& opts, const FsRoot& fs) {
  SensorsConfig sc;
  sc.bpf = opts.bpf;
  sc.cuda_libraries = opts.cuda_libraries;
  for (const auto& spec : opts.tracepoints) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      return badInput(fmt::format("--tracepoint: \"{}\" is not SENSOR=NAME", spec));
    auto sensor = sensorIdFromName(spec.substr(0, eq));
    if (!sensor)
      return badInput(
          fmt::format("--tracepoint: \"{}\": no sensor \"{}\" (oom, exits, faults, rss)", spec, spec.substr(0, eq)));
    sc.tracepoints[*sensor] = spec.substr(eq + 1);
  }
  // The sensors read the live kernel: a fixture root has none.
  if (!fs.isLive()) sc.bpf = sc.kmsg = false;
  return sc;
}

int watchOoms(const SnapshotOptions& opts, const FsRoot& fs, Sensors& sensors, std::ostream& out) {
  std::signal(SIGINT, onStopSignal);
  std::signal(SIGTERM, onStopSignal);
  if (opts.json) {
    // The first object says that watching has begun and with which sensors.
    nlohmann::json header = {{"watching", true}, {"sensors", nlohmann::json::array()}};
    for (const auto& s : sensors.status()) header["sensors"].push_back(toJson(s));
    out << dumpJson(header) << "\n" << std::flush;
  } else {
    for (const auto& s : sensors.status())
      out << fmt::format("sensor {}: {}{}\n", toString(s.id), toString(s.state),
                         s.reason.empty() ? "" : " (" + s.reason + ")");
    out << "watching for OOM kills (Ctrl-C to stop)\n" << std::flush;
  }
  WorkloadResolver names(fs, WorkloadLookup{});
  std::size_t seen = 0;
  auto deadline = opts.watch_seconds > 0 ? std::chrono::steady_clock::now() +
                                               std::chrono::milliseconds(static_cast<long>(opts.watch_seconds * 1000))
                                         : std::chrono::steady_clock::time_point::max();
  while (!g_stop && std::chrono::steady_clock::now() < deadline) {
    sensors.poll(100);
    for (const OomEvent& e : sensors.takeOomEvents()) {
      // The workload of the OOM domain, else of the first victim: the paths as the kernel names them.
      const OomWorkloads w = oomWorkloads(e, oomRecordCgroup(e), names, kKillNamesWait);
      if (opts.json) {
        out << dumpJson(toJson(e, w)) << "\n" << std::flush;
      } else {
        std::string line = describeOom(e);
        for (std::size_t i = 0; i < w.victims.size(); ++i) {
          if (std::string d = describeWorkload(w.victims[i]); !d.empty())
            line += fmt::format(" | victim {} workload: {}", e.victims[i].process(), d);
        }
        out << line << "\n" << std::flush;
      }
      if (opts.max_ooms > 0 && ++seen >= opts.max_ooms) return kExitOk;
    }
    (void)sensors.takeExitEvents();
  }
  return kExitOk;
}

}  // namespace

int runSnapshot(const SnapshotOptions& opts, std::ostream& out, std::ostream& err) {
  auto rules = roleRulesFromFlags(opts.role_rules);
  if (!rules) return fail(err, "snapshot", rules.error());
  auto source = openSourceRoot(opts.root);
  if (!source) return fail(err, "snapshot", source.error());
  auto sc = sensorsConfig(opts, *source->fs);
  if (!sc) return fail(err, "snapshot", sc.error());
  auto sensors = Sensors::start(*source->fs, *sc, source->collector->mounts());
  if (opts.watch_ooms) return watchOoms(opts, *source->fs, *sensors, out);

  CollectOptions co;
  if (opts.cgroup) co.cgroups = {*opts.cgroup};
  co.pid = opts.pid;
  co.read_smaps = opts.smaps;
  auto raw = source->collector->collect(co);
  if (!raw)
    return fail(err, "snapshot", raw.error().as(ErrorKind::kBadInput));  // a --cgroup or --pid that is not there
  std::vector<pid_t> pids;
  for (const ProcessSample& p : raw->processes) pids.push_back(p.pid);
  sensors->discoverCuda(pids);
  auto readings = sensors->readings(raw->processes);
  GpuReader gpus;  // the GPUs' device memory (NVML), as the agent reads it
  gpus.configure(*sc, source->fs->isLive());
  raw->gpu = gpus.read();
  // Every cgroup's names asked at once, then a moment for the engines to answer.
  WorkloadResolver names(*source->fs, WorkloadLookup{});
  names.name(*raw);
  if (!names.idle(std::chrono::seconds(3))) spdlog::debug("container engines still asked after 3 s: names left out");
  names.name(*raw);
  auto snap = buildSnapshot(std::move(*raw), RoleMatcher(std::move(*rules)), std::move(readings));
  if (opts.json)
    out << dumpJson(toJson(*snap), 2) << "\n";
  else
    out << renderSnapshotTable(*snap, opts.top);
  return kExitOk;
}

}  // namespace headroom::cli
