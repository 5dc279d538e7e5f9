// What the agent's warnings set off. See daemon/warning_outlet.h.
#include "headroom/daemon/warning_outlet.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "headroom/sources/cgroup.h"
#include "headroom/util/units.h"

namespace headroom {

std::string warningMessage(const WarningEpisode& w) {
  if (w.ended_ns)
    return fmt::format("OOM warning over for {}: {} after {:.1f} s", w.bound, w.end_reason,
                       static_cast<double>(*w.ended_ns - w.started_ns) / 1e9);
  const OomEta& e = w.at_start;
  std::string growers;
  for (const Grower& g : e.growers)
    growers += fmt::format("{}pid {} {} +{}/s", growers.empty() ? "; growing: " : ", ", g.pid, g.comm,
                           formatBytes(static_cast<std::uint64_t>(std::max(0.0, g.growth_bytes_per_second))));
  return fmt::format("OOM warning: {} runs out of memory in ~{:.0f} s: {} held of {} (+{}/s, confidence {}{}){}",
                     w.bound, e.eta_seconds.value_or(0), formatBytes(e.held), formatBytes(e.limit),
                     formatBytes(static_cast<std::uint64_t>(std::max(0.0, e.growth_bytes_per_second))),
                     toString(e.confidence), e.signals.empty() ? "" : fmt::format("; {}", fmt::join(e.signals, ", ")),
                     growers);
}

WarningOutlet::WarningOutlet(Exporter& exporter, KillPath& kills, const std::string& on_warning)
    : exporter_(exporter), kills_(kills) {
  configure(on_warning);
}

void WarningOutlet::configure(const std::string& on_warning) {
  hook_ = *parseWarningHook(on_warning);  // checked with the config
}

bool WarningOutlet::publish(const std::vector<WarningEpisode>& changes, const OomForecaster& f, const Snapshot* snap,
                            const std::string& prover) {
  for (const WarningEpisode& w : changes) {
    const std::string message = warningMessage(w);
    if (w.ended_ns) {
      spdlog::info("{}", message);
    } else {
      spdlog::warn("{}", message);
      exporter_.countWarning(w.bound);
    }
    nlohmann::json event = toJson(w);
    event["state"] = w.ended_ns ? "ended" : "started";
    event["message"] = message;
    kills_.announce(event);
  }
  tellProver(f, snap, prover);
  return !changes.empty();
}

void WarningOutlet::tellProver(const OomForecaster& f, const Snapshot* snap, const std::string& prover) {
  // The prover's cgroup is warned while any of its bounds is: the hook runs once as that begins,
  // however many of its bounds are warned together or in turn.
  if (prover.empty() && hook_.kind != WarningHook::Kind::kNone && !f.active().empty())
    once_.say("warning-hook",
              "warning.on_warning: cgroups are warned and no prover cgroup is known to tell (a prover role rule or "
              "budget.cgroup says which)");
  const CgroupSnapshot* pc = snap != nullptr && !prover.empty() ? snap->findCgroup(prover) : nullptr;
  const WarningEpisode* w = pc != nullptr ? warningFor(f, pc->bounds) : nullptr;
  const bool begins = w != nullptr && !prover_warned_;
  prover_warned_ = w != nullptr;
  if (!begins || hook_.kind == WarningHook::Kind::kNone) return;
  std::vector<pid_t> provers, all;
  for (const ProcessSnapshot& p : snap->processes) {
    if (!cgroupIsWithin(p.cgroup.str(), prover)) continue;
    all.push_back(p.sample.pid);
    if (p.role == Role::kProver) provers.push_back(p.sample.pid);
  }
  nlohmann::json situation = toJson(*w);
  situation["state"] = "started";
  situation["cgroup"] = prover;
  spdlog::info("warning.on_warning: telling the prover in {} ({})", prover, hook_.text);
  hooks_.fire(hook_, situation, provers.empty() ? all : provers);
}

void WarningOutlet::collectOutcomes() {
  for (const HookRunner::Outcome& o : hooks_.poll()) {
    exporter_.countWarningHook(o.ok ? "ok" : "failed");
    if (o.ok)
      spdlog::info("warning.on_warning {}: {}", o.hook, o.detail);
    else
      spdlog::warn("warning.on_warning {}: {}", o.hook, o.detail);
  }
}

}  // namespace headroom
