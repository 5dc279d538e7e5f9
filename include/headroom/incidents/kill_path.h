// The path of an OOM kill, owned here from the joined incident to what is published: names (the
// workloads it hit), evidence (the samples before it, the budget in force), the durable record
// (the journal, held in memory while the journal cannot take it), and publication (the metrics,
// /v1/ooms, the events sent off the machine, the prover's budget). docs/architecture.md draws it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "headroom/config/config.h"
#include "headroom/controller/prover_budget.h"
#include "headroom/exporter/exporter.h"
#include "headroom/incidents/counted_ooms.h"
#include "headroom/incidents/event_sink.h"
#include "headroom/incidents/incident_journal.h"
#include "headroom/incidents/kill_board.h"
#include "headroom/model/roles.h"
#include "headroom/model/snapshot.h"
#include "headroom/sensors/oom_event.h"
#include "headroom/sources/workload_names.h"
#include "headroom/util/logging.h"
#include "headroom/util/result.h"

namespace headroom {

// What the configuration says of the kill path (a reload changes it).
struct KillPathSettings {
  JournalConfig journal;
  EventsConfig events;
  std::size_t recent_ooms = 256;     // kills kept for /v1/ooms
  std::size_t top_per_role = 10;     // processes per role in a record
  std::vector<RoleRule> role_rules;  // a victim's role, when no sample saw it
};

// What the start found of the kills no agent saw happen (docs/journal.md, "Kills found after the
// fact"): for /healthz and /metrics.
struct CatchUpFigures {
  JournalCatchUp mode = JournalCatchUp::kBoot;
  std::map<std::string, std::uint64_t> found;  // journaled, by how: kernel_log, in_flight, counters
  std::uint64_t already_journaled = 0;         // found, and the journal held them
  std::uint64_t not_asked = 0;                 // found before the last agent's state (journal.catch_up = restarts)
  std::uint64_t unread_records = 0;            // of this boot's kernel log, gone before any agent read them

  std::uint64_t foundBy(const std::string& how) const {
    auto it = found.find(how);
    return it != found.end() ? it->second : 0;
  }
};

class KillPath {
 public:
  // `exporter` and `budget` outlive it; `send` is journald's call (tests give another).
  KillPath(Exporter& exporter, ProverBudget& budget, HostIdentity host, EventSink::JournaldSend send = {});
  KillPath(const KillPath&) = delete;
  KillPath& operator=(const KillPath&) = delete;

  // At start (`starting`) and at each reload: opens the journal and the events' sinks as `s` says.
  // At start, an explicit journal path or events output that cannot be opened is an error (bad
  // input, naming which); otherwise a journal that cannot open is off and an output that cannot
  // open is left out, each said in the log, and the agent runs on. `names` outlives the path, or
  // the next configure.
  Status configure(const KillPathSettings& s, WorkloadResolver& names, bool starting);

  // Each sample, before it is published: into the flight recorder; where no kernel source names
  // victims (`sensors`), the kills the cgroups' counters show taken as incidents; records that
  // wait written; then kept for the records of kills to come. `self_reported`: what the prover
  // said it used.
  void sample(std::shared_ptr<const Snapshot> snap, std::optional<std::uint64_t> self_reported,
              const std::vector<SensorStatus>& sensors);
  // One incident the sensors joined (BPF's mark and the kernel's report): named, recorded and
  // published. One the journal holds already (found again after the fact) is passed over.
  void take(const OomEvent& e, const std::vector<SensorStatus>& sensors);
  // An incident first seen, before the sensors wait for the rest of it: its record as far as it
  // goes made durable (the state beside the journal), so that a stop before take() loses nothing.
  void begin(const OomEvent& e, const std::vector<SensorStatus>& sensors);
  // Each time the sensors start (the agent's start, a reload that restarts them), after
  // configure(): the kills their first read of the kernel log found (OomEvent::found_after), and
  // where it began. At the agent's start, also the kills an earlier agent left in flight, and the
  // counters' catch-up from its last sample.
  void sensorsStarted(std::vector<OomEvent> found, const std::optional<KernelLogPosition>& log,
                      const std::vector<SensorStatus>& sensors);
  // Where every earlier report of the kernel log has been handed over (to begin() or take()):
  // kept in the state beside the journal, for journal.catch_up = restarts.
  void kernelLogSettled(std::uint64_t seq) { log_settled_ = seq; }
  // At the agent's stop: the state beside the journal written.
  void stop();
  const CatchUpFigures& catchUp() const { return catch_up_; }

  const KillBoard& board() const { return board_; }
  // A kill the cgroups' counters told waits for its victim to be gone from a walk of every
  // process (the sampler walks at the next sample).
  bool awaitingVictims() const { return counted_.waiting(); }
  // The journal's and the events' figures, for /metrics.
  void addFigures(AgentSelf& self) const;
  // Whether a kill was warned of (its record's `warning`), asked once for each kill seen live;
  // absent: the agent does not forecast.
  using WarningOf = std::function<std::optional<nlohmann::json>(const OomEvent& e, const std::string& cgroup)>;
  void setWarningOf(WarningOf f) { warning_of_ = std::move(f); }
  // A fast reading of a cgroup near its limit: into the flight recorder, for the run-up of a kill.
  void flyFast(const std::string& cgroup, FlightPoint point) { journal_.flyFast(cgroup, std::move(point)); }
  // A warning's event (docs/events.md, kind oom_warning) to the events' sinks.
  void announce(const nlohmann::json& warning);
  // Waits until the events' sinks took every record, at most `limit`: true when none waits.
  bool drain(std::chrono::milliseconds limit) { return events_.drain(limit); }

 private:
  void record(const OomEvent& e, const IncidentFacts& facts, const std::string& key);
  std::string keyOf(const OomEvent& e) const;  // the incident's while in flight
  bool admitted(const OomEvent& e) const;      // a kill found after the fact: journal.catch_up asks for it
  // Of the kernel log after where the last agent read it to (or that agent did not say).
  bool sinceLastRead(const OomEvent& e) const;
  void recoverInFlight(std::vector<OomEvent>& found, const std::vector<SensorStatus>& sensors);
  void setBoardJournal();
  void publish(const OomEvent& e, const OomWorkloads& workloads, const Snapshot* last);
  void flush();  // the records that wait, in the order of their kills
  Workload nameOf(const std::string& cgroup) const;

  Exporter& exporter_;
  ProverBudget& budget_;
  HostIdentity host_;
  IncidentJournal journal_;
  EventSink events_;  // every record the journal takes, off the machine too
  CountedOoms counted_;
  KillBoard board_;
  RoleMatcher roles_;
  std::size_t top_per_role_ = 10;
  WorkloadResolver* names_ = nullptr;
  std::optional<std::uint64_t> self_reported_;  // the prover's word at the last sample
  WarnOnce once_;
  CatchUpFigures catch_up_;
  bool started_ = false;                      // the agent's start is caught up
  std::string key_prefix_;                    // this agent's, and the sensors' start
  std::uint64_t sensors_started_ = 0;         // how often they started
  std::optional<std::uint64_t> log_settled_;  // kernelLogSettled()
  WarningOf warning_of_;
};

}  // namespace headroom
