// The durable record of each OOM kill, the fourth hop of a kill's path: the journal's record,
// made of the kill, the samples read whole before it and the flight recorder's last minute, kept
// in memory while the journal cannot take it, and the state beside it that lets the next agent
// find what this one did not record (kills in flight, how far it read the kernel log).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "headroom/config/config.h"
#include "headroom/controller/prover_budget.h"
#include "headroom/incidents/known_kills.h"
#include "headroom/journal/flight_recorder.h"
#include "headroom/journal/journal.h"
#include "headroom/journal/journal_state.h"
#include "headroom/journal/oom_record.h"
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
  OomWorkloads workloads;  // the names of what it hit (none: what the paths say)
  // Whether the kill was warned of (model/oom_forecast.h's verdict), when the agent forecasts.
  std::optional<nlohmann::json> warning;
};

// A record the journal could not take (a full or read-only file system, an I/O error) is kept
// in memory, the newest first to stay, within kMaxPendingRecords and kMaxPendingBytes, and
// written by the next flush() that succeeds: a journal whose disk fills up loses no kill that
// happened while the backlog had room, and one that stays broken cannot grow the agent.
class IncidentJournal {
 public:
  static constexpr std::size_t kMaxPendingRecords = 64;
  static constexpr std::size_t kMaxPendingBytes = 16ULL << 20;  // dumped JSON, all waiting records together

  // Opens (again) as the config says; a journal that cannot open is off, and the error says why
  // (the caller says it once: the agent's start refuses an explicit path, a reload runs on).
  // Records waiting in memory stay, for the journal the config names now. At each opening the
  // kills the journal holds are read (what a kill found after the fact is looked up in), and the
  // state beside it (journal/journal_state.h); `boot_id`: this boot's.
  Status configure(const JournalConfig& cfg, const std::string& boot_id);
  // {"state": "on" | "degraded" | "off", "path", "reason" (degraded, off), "pending_records",
  // "dropped_records"}, for /healthz. Degraded: open, but the last write failed and records wait.
  nlohmann::json state() const;
  const JournalWriter* writer() const { return writer_.get(); }

  // Each sample into the flight recorder (`self_reported`: by cgroup, what the prover said it
  // used), and then kept for the records (a few seconds of them), once whatever it reveals of the
  // last sample has been handled.
  void fly(const Snapshot& snap, const std::map<std::string, std::uint64_t>& self_reported);
  void keep(std::shared_ptr<const Snapshot> snap);
  // A fast reading of a cgroup near its limit, between samples, into the flight recorder.
  void flyFast(const std::string& cgroup, FlightPoint point) { flight_.add(cgroup, std::move(point)); }
  // The last sample kept (nullptr before the first).
  std::shared_ptr<const Snapshot> last() const { return recent_.empty() ? nullptr : recent_.back(); }

  // The kill's record. The breakdown is that of the last sample read whole before the kill (one
  // that began before it but read the victim's cgroup after it would show the memory freed); the
  // flight recorder's points up to the kill. Returns the record's id, or why it was not written
  // (then it waits in memory for flush(), behind any that wait already); nullopt when the
  // journal is off.
  // `key`: the incident's in flight (begin()), dropped from the state once the record is
  // written. A kill found after the fact (e.found_after) has no sample, flight or budget of its
  // own: the kernel's figures only.
  std::optional<Result<std::uint64_t>> record(const OomEvent& e, const IncidentFacts& facts,
                                              const std::string& key = {});
  // A record an earlier agent left in flight, written as it stands, marked found after the fact
  // ("in_flight"; with `found`, the kernel log's report of the same kill, its event replacing the
  // record's first word).
  std::optional<Result<std::uint64_t>> recordInFlight(const std::string& key, const OomEvent* found,
                                                      const IncidentFacts& facts);

  // ---- across restarts (docs/journal.md, "Kills found after the fact") ----
  // The state the last agent left beside this journal (nullopt: none, or unreadable: said).
  const std::optional<JournalState>& previous() const { return previous_; }
  // The incidents in flight, by key (an earlier agent's, until written or forgotten).
  const std::map<std::string, nlohmann::json>& inFlight() const { return state_.in_flight; }
  // Whether the journal holds `e` already (or a record of it waits in memory), or the record made
  // from the incident in flight under `key`.
  bool holds(const OomEvent& e, const std::string& key = {}) const;
  bool holdsRecord(const nlohmann::json& record) const;  // an in-flight record's kill
  // An incident first seen: its record as far as it goes, kept in the state file under `key`
  // until record() writes it, so that a stop before then loses nothing.
  void begin(const std::string& key, const OomEvent& e, const IncidentFacts& facts);
  void forget(const std::string& key);  // the journal held it already
  // Each sample: where every earlier report of the kernel log has been handed out, and each
  // sampled cgroup's OOM-kill count. Kept in the state: written with each incident, else at
  // most every kStateSaveNs when changed.
  void noteKernelLog(std::uint64_t seq);
  void noteCounts(const std::map<std::string, std::uint64_t>& counts);
  void saveState();  // now, when it changed (at stop)
  static constexpr std::int64_t kStateSaveNs = 10'000'000'000;

  // Writes the records waiting in memory, oldest first, until one fails.
  struct Flushed {
    std::uint64_t id = 0;
    std::int64_t kill_wall_ns = 0;  // the kill it records
  };
  std::vector<Flushed> flush();

  // Called with each record the journal took, as journaled (its id set), at once or from the
  // backlog: what the events sink sends off the machine. Must not block.
  void onWritten(std::function<void(const nlohmann::json&)> f) { on_written_ = std::move(f); }

  std::size_t pending() const { return pending_.size(); }
  std::uint64_t dropped() const { return dropped_; }               // waiting records given up (over the bounds)
  std::uint64_t writeFailures() const { return write_failures_; }  // failed writes, each retry counted
  const std::string& failing() const { return failing_; }          // the last write error while records wait

 private:
  struct Pending {
    nlohmann::json record;
    std::int64_t kill_wall_ns = 0;
    std::size_t bytes = 0;
    std::string key;  // in flight under it until written
  };
  struct Built {
    nlohmann::json record;
    std::int64_t kill_wall_ns = 0;
  };
  Built build(const OomEvent& e, const IncidentFacts& facts) const;
  // Appends, or keeps the record waiting when the journal fails (in flight under `key` then).
  Result<std::uint64_t> write(nlohmann::json record, std::int64_t kill_wall_ns, const std::string& key);
  void wait(Pending p, const Error& why);
  void written(nlohmann::json record, std::uint64_t id, const std::string& key);
  void load();  // the journal's kills and the state beside it, at an opening
  void writeState(bool now);

  JournalConfig cfg_;
  bool configured_ = false;
  std::unique_ptr<JournalWriter> writer_;
  std::string off_;  // why the journal is off ("" when on)
  FlightRecorder flight_;
  // The kill is reported up to a few seconds after it, when samples of the emptied cgroup have
  // come in already: the records reach back past the OOM sources' settle time (2 s): every
  // sample a kill after which could still be handed over, at least two.
  std::deque<std::shared_ptr<const Snapshot>> recent_;
  std::deque<Pending> pending_;
  std::size_t pending_bytes_ = 0;
  std::uint64_t dropped_ = 0;
  std::uint64_t write_failures_ = 0;
  std::string failing_;
  std::function<void(const nlohmann::json&)> on_written_;
  std::string boot_id_;
  KnownKills known_;
  std::optional<JournalState> previous_;
  JournalState state_;
  std::string state_path_;  // "" while the journal is off
  bool state_dirty_ = false;
  std::int64_t state_saved_ns_ = 0;
  WarnOnce once_;
};

}  // namespace headroom
