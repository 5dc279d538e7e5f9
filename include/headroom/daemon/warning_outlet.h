// What the agent's warnings set off (docs/warnings.md): each start and end said in the log, sent
// to the events and counted in the metrics, and the prover's hook run once as any bound of the
// prover's cgroup is warned; then each hook's outcome said and counted.
#pragma once

#include <string>
#include <vector>

#include "headroom/controller/warning.h"
#include "headroom/exporter/exporter.h"
#include "headroom/incidents/kill_path.h"
#include "headroom/model/oom_forecast.h"
#include "headroom/model/snapshot.h"
#include "headroom/util/logging.h"

namespace headroom {

class WarningOutlet {
 public:
  // `on_warning`: warning.on_warning, checked with the config. `exporter` and `kills` outlive it.
  WarningOutlet(Exporter& exporter, KillPath& kills, const std::string& on_warning);
  void configure(const std::string& on_warning);

  // The warnings that started or ended (OomForecaster::takeChanges), with the snapshot that holds
  // the prover's cgroup (`prover`, "" when none is known) and its processes. True when there were any.
  bool publish(const std::vector<WarningEpisode>& changes, const OomForecaster& f, const Snapshot* snap,
               const std::string& prover);
  // The hooks' outcomes since the last call, said and counted.
  void collectOutcomes();
  bool hooksRunning() const { return hooks_.running() > 0; }

 private:
  void tellProver(const OomForecaster& f, const Snapshot* snap, const std::string& prover);

  Exporter& exporter_;
  KillPath& kills_;
  WarningHook hook_;
  HookRunner hooks_;
  WarnOnce once_;
  bool prover_warned_ = false;  // a bound of the prover's cgroup is warned (the hook ran as it began)
};

// The log line of a warning's start ("OOM warning: /job runs out of memory in ~16 s: ...") or end.
std::string warningMessage(const WarningEpisode& w);

}  // namespace headroom
