// OOM incidents in the agent: the durable record of each kill (the journal, with the samples
// read whole before it and the flight recorder's last minute), and the kills that only the
// cgroups' own counters show, where no kernel source (BPF, /dev/kmsg) is there to name them.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "headroom/config/config.h"
#include "headroom/daemon/prover_budget.h"
#include "headroom/journal/flight_recorder.h"
#include "headroom/journal/journal.h"
#include "headroom/journal/oom_record.h"
#include "headroom/model/oom_counter.h"
#include "headroom/model/snapshot.h"
#include "headroom/sensors/oom_event.h"
#include "headroom/util/logging.h"

namespace headroom {

// What the agent knows at a kill besides its samples.
struct IncidentFacts {
  // The prover's budget: when the kill concerns the prover, the record holds the budget in force
  // and what the prover said it used.
  const ProverBudget* prover = nullptr;
  std::optional<std::uint64_t> self_reported;
  std::vector<SensorStatus> sensors;
  HostIdentity host;
  std::size_t top_per_role = 10;
};

class IncidentJournal {
 public:
  // Opens (again) as the config says; a journal that cannot open is off, and the error says why
  // (the caller says it once: the agent's start refuses an explicit path, a reload runs on).
  Status configure(const JournalConfig& cfg);
  // {"state": "on", "path"} or {"state": "off", "path", "reason"}, for /healthz.
  nlohmann::json state() const;
  const JournalWriter* writer() const { return writer_.get(); }

  // Each sample into the flight recorder (`self_reported`: by cgroup, what the prover said it
  // used), and then kept for the records (a few seconds of them), once whatever it reveals of the
  // last sample has been handled.
  void fly(const Snapshot& snap, const std::map<std::string, std::uint64_t>& self_reported);
  void keep(std::shared_ptr<const Snapshot> snap);
  // The last sample kept (nullptr before the first).
  std::shared_ptr<const Snapshot> last() const { return recent_.empty() ? nullptr : recent_.back(); }

  // The kill's record. The breakdown is that of the last sample read whole before the kill (one
  // that began before it but read the victim's cgroup after it would show the memory freed); the
  // flight recorder's points up to the kill. Returns the record's id, or why it was not written
  // (nullopt when the journal is off).
  std::optional<Result<std::uint64_t>> record(const OomEvent& e, const IncidentFacts& facts) const;

 private:
  JournalConfig cfg_;
  bool configured_ = false;
  std::unique_ptr<JournalWriter> writer_;
  std::string off_;  // why the journal is off ("" when on)
  FlightRecorder flight_;
  // The kill is reported up to a few seconds after it, when samples of the emptied cgroup have
  // come in already: the records reach back past the OOM sources' settle time (2 s): every
  // sample a kill after which could still be handed over, at least two.
  std::deque<std::shared_ptr<const Snapshot>> recent_;
};

// OOM kills from the cgroups' counters, where no kernel source names them: each rise of a
// cgroup's oom_kill between two samples is an incident (from_counter), its victims inferred from
// the processes gone. Said once that this is all there is.
class CountedOoms {
 public:
  // `kernel_source`: BPF's mark_victim or /dev/kmsg is active; then the counters only move their
  // baseline and nothing is returned.
  std::vector<OomEvent> update(const Snapshot* previous, const Snapshot& now, bool kernel_source);

 private:
  OomCounterWatch watch_;
  WarnOnce once_;
  std::uint64_t ids_ = 0;
};

}  // namespace headroom
