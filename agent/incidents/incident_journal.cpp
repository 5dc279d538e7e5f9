#include "headroom/incidents/incident_journal.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <utility>

#include "headroom/util/clock.h"
#include "headroom/util/json.h"

namespace headroom {
namespace {

// Samples kept for the records: enough to reach back past the OOM sources' settle time at any
// interval, and bounded. A kill is handed over at most the joiner's wait for the other source
// (2 s) and a poll after it, and its record takes the last sample read whole before it: a sample
// is needed while a kill after it, and before the next one, could still be handed over. Each
// holds every process (MiBs at thousands of processes): no more are kept.
constexpr std::size_t kRecentSamples = 64;
constexpr std::int64_t kHandoverNs = 2'500'000'000;  // the joiner's 2 s wait, and a margin
constexpr const char* kStateWrite = "state-write";

// A record the journal refuses whatever the disk does (larger than journal.max_bytes): waiting
// would hold every record behind it for ever.
bool refusedForGood(const Error& e) { return e.code == EFBIG || e.kind == ErrorKind::kBadData; }

}  // namespace

Status IncidentJournal::configure(const JournalConfig& cfg, const std::string& boot_id) {
  if (configured_ && cfg == cfg_ && boot_id == boot_id_) return ok();
  saveState();  // what changed since the last write, beside the journal it belongs to
  configured_ = true;
  cfg_ = cfg;
  boot_id_ = boot_id;
  state_path_.clear();
  writer_.reset();  // the old file's lock goes first
  flight_.setWindow(std::chrono::duration_cast<std::chrono::nanoseconds>(cfg.flight_window).count());
  if (!cfg.enabled) {
    off_ = "journal.enabled = false";
    return ok();
  }
  auto w = JournalWriter::open(JournalOptions{journalFileOf(cfg.path), cfg.max_bytes});
  if (!w) {
    off_ = w.error().describe();
    return w.error();
  }
  writer_ = std::move(*w);
  off_.clear();
  const JournalStats& st = writer_->stats();
  if (!st.torn_file.empty())
    spdlog::warn("journal {}: a torn last record (a crash mid-write) was set aside in {}", writer_->path(),
                 st.torn_file);
  if (st.damaged_records > 0)
    spdlog::warn("journal {}: {} damaged record(s) found; readers skip them", writer_->path(), st.damaged_records);
  spdlog::info("journal: OOM kills are recorded in {}", writer_->path());
  load();
  return ok();
}

void IncidentJournal::load() {
  known_ = KnownKills{};
  if (auto st = forEachJournalRecord(writer_->path(), [this](const nlohmann::json& r) { known_.add(r); }); !st)
    spdlog::warn("journal: reading its records back: {}; kills found after the fact may be recorded again",
                 st.error().describe());
  for (const Pending& p : pending_) known_.add(p.record);
  state_path_ = journalStateFileOf(writer_->path());
  previous_.reset();
  if (auto prev = readJournalState(state_path_); !prev) {
    spdlog::warn("journal: {}; replaced by this agent's", prev.error().describe());
  } else {
    previous_ = std::move(*prev);
  }
  // An earlier agent's incidents in flight stay until written (whatever the boot); where it ran
  // and read in this boot, how far, and the counts it saw.
  const bool same_boot = previous_ && !boot_id_.empty() && previous_->boot_id == boot_id_;
  JournalState next;
  next.boot_id = boot_id_;
  if (previous_) next.in_flight = previous_->in_flight;
  for (const Pending& p : pending_) {
    if (!p.key.empty()) next.in_flight[p.key] = p.record;
  }
  if (same_boot) {
    next.kernel_log_seq = previous_->kernel_log_seq;
    next.oom_kill_counts = previous_->oom_kill_counts;
  }
  state_dirty_ = next != state_ || !previous_;
  state_ = std::move(next);
  writeState(true);
}

bool IncidentJournal::holds(const OomEvent& e, const std::string& key) const {
  return (!key.empty() && known_.holdsKey(key)) || known_.holds(e, boot_id_);
}

bool IncidentJournal::holdsRecord(const nlohmann::json& record) const {
  if (!record.is_object()) return false;
  if (record.contains("key") && record.at("key").is_string() && known_.holdsKey(record.at("key").get<std::string>()))
    return true;
  if (!record.contains("event") || !record.at("event").is_object()) return false;
  const std::string boot = KnownKills::bootIdOf(record);
  return known_.holds(oomEventFromJson(record.at("event")), boot.empty() ? boot_id_ : boot);
}

void IncidentJournal::begin(const std::string& key, const OomEvent& e, const IncidentFacts& facts) {
  if (!writer_ || key.empty()) return;
  Built b = build(e, facts);
  b.record["key"] = key;
  state_.in_flight[key] = std::move(b.record);
  state_dirty_ = true;
  writeState(true);  // durable before the wait for the rest of it
}

void IncidentJournal::forget(const std::string& key) {
  if (state_.in_flight.erase(key) == 0) return;
  state_dirty_ = true;
  writeState(true);
}

void IncidentJournal::noteKernelLog(std::uint64_t seq) {
  if (state_.kernel_log_seq == seq) return;
  state_.kernel_log_seq = seq;
  state_dirty_ = true;
  writeState(false);
}

void IncidentJournal::noteCounts(const std::map<std::string, std::uint64_t>& counts) {
  if (counts == state_.oom_kill_counts) return;
  state_.oom_kill_counts = counts;
  state_dirty_ = true;
  writeState(false);
}

void IncidentJournal::saveState() { writeState(true); }

void IncidentJournal::writeState(bool now) {
  if (state_path_.empty() || !state_dirty_) return;
  const std::int64_t t = monotonicNs();
  if (!now && t - state_saved_ns_ < kStateSaveNs) return;
  state_saved_ns_ = t;
  if (auto st = writeJournalState(state_path_, state_); !st) {
    once_.say(kStateWrite, fmt::format("journal: writing its state: {} (a restart may then record a kill found "
                                       "after the fact twice, or lose one seen in flight)",
                                       st.error().describe()));
    return;
  }
  once_.clear(kStateWrite, "journal: its state is written again");
  state_dirty_ = false;
}

nlohmann::json IncidentJournal::state() const {
  nlohmann::json j;
  if (writer_ && failing_.empty()) {
    j = {{"state", "on"}, {"path", writer_->path()}};
  } else if (writer_) {
    j = {{"state", "degraded"},
         {"path", writer_->path()},
         {"reason", fmt::format("writing failed: {}; {} record(s) kept in memory, retried at each sample", failing_,
                                pending_.size())}};
  } else {
    j = {{"state", "off"}, {"path", cfg_.path}, {"reason", off_}};
  }
  j["pending_records"] = pending_.size();
  j["dropped_records"] = dropped_;
  return j;
}

void IncidentJournal::wait(Pending p, const Error& why) {
  failing_ = why.describe();
  pending_bytes_ += p.bytes;
  if (!p.key.empty()) {
    // The whole record in flight: a restart writes it, not the first word begin() kept.
    state_.in_flight[p.key] = p.record;
    state_dirty_ = true;
  }
  pending_.push_back(std::move(p));
  // The newest stay: a journal broken for long keeps the latest kills, and at least the one
  // that just came, whatever its size.
  while (pending_.size() > 1 && (pending_.size() > kMaxPendingRecords || pending_bytes_ > kMaxPendingBytes)) {
    pending_bytes_ -= pending_.front().bytes;
    if (state_.in_flight.erase(pending_.front().key) != 0) state_dirty_ = true;
    pending_.pop_front();
    ++dropped_;
  }
  writeState(true);
}

Result<std::uint64_t> IncidentJournal::write(nlohmann::json record, std::int64_t kill_wall_ns, const std::string& key) {
  known_.add(record);  // seen: never again, whether it is written now or waits
  if (!pending_.empty()) {
    // Behind the records that wait (their write failed a moment ago): in the order of the kills.
    Error e = makeError(ErrorKind::kIo, failing_);
    const std::size_t bytes = dumpJson(record).size();
    wait(Pending{std::move(record), kill_wall_ns, bytes, key}, e);
    return unexpected(e);
  }
  auto id = writer_->append(record);  // a copy: kept for a retry if it fails
  if (id) {
    failing_.clear();
    written(std::move(record), *id, key);
    return id;
  }
  ++write_failures_;
  if (refusedForGood(id.error())) {
    forget(key);
    return id;
  }
  const std::size_t bytes = dumpJson(record).size();
  wait(Pending{std::move(record), kill_wall_ns, bytes, key}, id.error());
  return id;
}

std::vector<IncidentJournal::Flushed> IncidentJournal::flush() {
  std::vector<Flushed> out;
  if (!writer_) return out;
  while (!pending_.empty()) {
    Pending& p = pending_.front();
    auto id = writer_->append(p.record);
    if (!id && refusedForGood(id.error())) {
      // The journal changed at a reload (a smaller max_bytes): this one can never go in.
      ++write_failures_;
      ++dropped_;
      pending_bytes_ -= p.bytes;
      const std::string key = std::move(p.key);
      pending_.pop_front();
      forget(key);
      continue;
    }
    if (!id) {
      ++write_failures_;
      failing_ = id.error().describe();
      return out;
    }
    out.push_back(Flushed{*id, p.kill_wall_ns});
    pending_bytes_ -= p.bytes;
    nlohmann::json record = std::move(p.record);
    const std::string key = std::move(p.key);
    pending_.pop_front();
    written(std::move(record), *id, key);
  }
  failing_.clear();
  return out;
}

void IncidentJournal::written(nlohmann::json record, std::uint64_t id, const std::string& key) {
  forget(key);       // on disk: no longer in flight
  writeState(true);  // and what the state says beside it (the counts that showed it) with it
  if (!on_written_) return;
  record["id"] = id;  // as JournalWriter::append set it in the frame
  on_written_(record);
}

void IncidentJournal::fly(const Snapshot& snap, const std::map<std::string, std::uint64_t>& self_reported) {
  flight_.record(snap, self_reported);
}

void IncidentJournal::keep(std::shared_ptr<const Snapshot> snap) {
  recent_.push_back(std::move(snap));
  const auto done = [](const Snapshot& s) {
    return s.completed_monotonic_ns != 0 ? s.completed_monotonic_ns : s.monotonic_time_ns;
  };
  // The oldest goes once the next one was done longer ago than any kill can wait to be handed
  // over (a kill between the two is then recorded already); two are always kept.
  while (recent_.size() > kRecentSamples ||
         (recent_.size() > 2 && done(*recent_.back()) - done(*recent_[1]) > kHandoverNs))
    recent_.pop_front();
}

IncidentJournal::Built IncidentJournal::build(const OomEvent& e, const IncidentFacts& facts) const {
  // The kill's time on both clocks: the kernel's monotonic stamp, and the wall clock by the
  // distance from now.
  std::int64_t now_mono = monotonicNs();
  std::int64_t kill_mono = e.monotonic_time_ns > 0 && e.monotonic_time_ns <= now_mono ? e.monotonic_time_ns : now_mono;
  std::int64_t kill_wall = realtimeNs() - (now_mono - kill_mono);
  RecordContext ctx;
  ctx.event = &e;
  ctx.sensors = facts.sensors;
  ctx.host = facts.host;
  ctx.top_per_role = facts.top_per_role;
  ctx.kill_wall_ns = kill_wall;
  ctx.workloads = facts.workloads;
  ctx.flight_window_ns = flight_.window();
  ctx.warning = facts.warning;
  if (!e.found_after.empty()) {
    // Found after the fact: the samples, the flight and the budget of now are not the kill's.
    ctx.found_wall_ns = realtimeNs();
    ctx.cgroup = oomRecordCgroup(e, nullptr);
    return {makeOomRecord(ctx), kill_wall};
  }
  std::shared_ptr<const Snapshot> snap;
  for (const auto& r : recent_) {
    if ((r->completed_monotonic_ns != 0 ? r->completed_monotonic_ns : r->monotonic_time_ns) <= kill_mono) snap = r;
  }
  if (!snap && !recent_.empty()) snap = recent_.front();  // none before it: the oldest kept, said by its sampled_at
  ctx.last = snap.get();
  ctx.cgroup = oomRecordCgroup(e, ctx.last);
  for (FlightPoint& p : flight_.points(ctx.cgroup)) {
    bool done_before =
        p.completed_monotonic_ns != 0 ? p.completed_monotonic_ns <= kill_mono : p.wall_time_ns <= kill_wall;
    if (done_before) ctx.flight.push_back(std::move(p));  // what came before the kill
  }
  // The budget in force at the kill: for the prover's cgroup, inside what died or around it.
  if (facts.prover != nullptr && facts.prover->concerns(ctx.cgroup)) {
    ctx.budget = facts.prover->inForce();
    ctx.self_reported = facts.self_reported;
  }
  return {makeOomRecord(ctx), kill_wall};
}

std::optional<Result<std::uint64_t>> IncidentJournal::record(const OomEvent& e, const IncidentFacts& facts,
                                                             const std::string& key) {
  if (!writer_) return std::nullopt;
  Built b = build(e, facts);
  if (!key.empty()) b.record["key"] = key;
  return write(std::move(b.record), b.kill_wall_ns, key);
}

std::optional<Result<std::uint64_t>> IncidentJournal::recordInFlight(const std::string& key, const OomEvent* found,
                                                                     const IncidentFacts& facts) {
  auto it = state_.in_flight.find(key);
  if (!writer_ || it == state_.in_flight.end()) return std::nullopt;
  nlohmann::json record;
  std::int64_t kill_wall = 0;
  if (found != nullptr) {
    // The kernel's whole report of it, with what the earlier agent had gathered around its first
    // word (the samples before it, the flight, the budget).
    OomEvent e = *found;
    e.found_after = "in_flight";
    Built b = build(e, facts);
    record = std::move(b.record);
    kill_wall = b.kill_wall_ns;
    for (const auto& [name, value] : it->second.items()) {
      auto mine = record.find(name);
      if (mine == record.end() || mine->is_null() || (mine->is_array() && mine->empty())) record[name] = value;
    }
  } else {
    record = it->second;
    if (auto t = record.find("kill_time"); t != record.end() && t->is_number())
      kill_wall = static_cast<std::int64_t>(t->get<double>() * 1e9);
  }
  record["found_after"] = {{"how", "in_flight"}, {"at", static_cast<double>(realtimeNs()) / 1e9}};
  record["key"] = key;
  return write(std::move(record), kill_wall, key);
}

}  // namespace headroom
