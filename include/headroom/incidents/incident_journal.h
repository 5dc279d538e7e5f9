// The durable record of each OOM kill, the fourth hop of a kill's path: the journal's record,
// made of the kill, the samples read whole before it and the flight recorder's last minute, kept
// in memory while the journal cannot take it. And the kills only the cgroups' own counters show,
// where no kernel source (BPF, /dev/kmsg) is there to name them: a signal of their own.
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
  OomWorkloads workloads;  // the names of what it hit (none: what the paths say)
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
  // Records waiting in memory stay, for the journal the config names now.
  Status configure(const JournalConfig& cfg);
  // {"state": "on" | "degraded" | "off", "path", "reason" (degraded, off), "pending_records",
  // "dropped_records"}, for /healthz. Degraded: open, but the last write failed and records wait.
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
  // (then it waits in memory for flush(), behind any that wait already); nullopt when the
  // journal is off.
  std::optional<Result<std::uint64_t>> record(const OomEvent& e, const IncidentFacts& facts);

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
  };
  // Appends, or keeps the record waiting when the journal fails.
  Result<std::uint64_t> write(nlohmann::json record, std::int64_t kill_wall_ns);
  void wait(Pending p, const Error& why);
  void written(nlohmann::json record, std::uint64_t id);

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
