#include "headroom/incidents/incident_journal.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cerrno>

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
constexpr const char* kCountersOnly = "counters only";

// A record the journal refuses whatever the disk does (larger than journal.max_bytes): waiting
// would hold every record behind it for ever.
bool refusedForGood(const Error& e) { return e.code == EFBIG || e.kind == ErrorKind::kBadData; }

}  // namespace

Status IncidentJournal::configure(const JournalConfig& cfg) {
  if (configured_ && cfg == cfg_) return ok();
  configured_ = true;
  cfg_ = cfg;
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
  return ok();
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
  pending_.push_back(std::move(p));
  // The newest stay: a journal broken for long keeps the latest kills, and at least the one
  // that just came, whatever its size.
  while (pending_.size() > 1 && (pending_.size() > kMaxPendingRecords || pending_bytes_ > kMaxPendingBytes)) {
    pending_bytes_ -= pending_.front().bytes;
    pending_.pop_front();
    ++dropped_;
  }
}

Result<std::uint64_t> IncidentJournal::write(nlohmann::json record, std::int64_t kill_wall_ns) {
  if (!pending_.empty()) {
    // Behind the records that wait (their write failed a moment ago): in the order of the kills.
    Error e = makeError(ErrorKind::kIo, failing_);
    const std::size_t bytes = dumpJson(record).size();
    wait(Pending{std::move(record), kill_wall_ns, bytes}, e);
    return unexpected(e);
  }
  auto id = writer_->append(record);  // a copy: kept for a retry if it fails
  if (id) {
    failing_.clear();
    written(std::move(record), *id);
    return id;
  }
  ++write_failures_;
  if (refusedForGood(id.error())) return id;
  const std::size_t bytes = dumpJson(record).size();
  wait(Pending{std::move(record), kill_wall_ns, bytes}, id.error());
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
      pending_.pop_front();
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
    pending_.pop_front();
    written(std::move(record), *id);
  }
  failing_.clear();
  return out;
}

void IncidentJournal::written(nlohmann::json record, std::uint64_t id) {
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

std::optional<Result<std::uint64_t>> IncidentJournal::record(const OomEvent& e, const IncidentFacts& facts) {
  if (!writer_) return std::nullopt;
  // The kill's time on both clocks: the kernel's monotonic stamp, and the wall clock by the
  // distance from now.
  std::int64_t now_mono = monotonicNs();
  std::int64_t kill_mono = e.monotonic_time_ns > 0 && e.monotonic_time_ns <= now_mono ? e.monotonic_time_ns : now_mono;
  std::int64_t kill_wall = realtimeNs() - (now_mono - kill_mono);
  std::shared_ptr<const Snapshot> snap;
  for (const auto& r : recent_) {
    if ((r->completed_monotonic_ns != 0 ? r->completed_monotonic_ns : r->monotonic_time_ns) <= kill_mono) snap = r;
  }
  if (!snap && !recent_.empty()) snap = recent_.front();  // none before it: the oldest kept, said by its sampled_at
  RecordContext ctx;
  ctx.event = &e;
  ctx.last = snap.get();
  ctx.cgroup = oomRecordCgroup(e, ctx.last);
  for (FlightPoint& p : flight_.points(ctx.cgroup)) {
    bool done_before =
        p.completed_monotonic_ns != 0 ? p.completed_monotonic_ns <= kill_mono : p.wall_time_ns <= kill_wall;
    if (done_before) ctx.flight.push_back(std::move(p));  // what came before the kill
  }
  ctx.flight_window_ns = flight_.window();
  // The budget in force at the kill: for the prover's cgroup, inside what died or around it.
  if (facts.prover != nullptr && facts.prover->concerns(ctx.cgroup)) {
    ctx.budget = facts.prover->inForce();
    ctx.self_reported = facts.self_reported;
  }
  ctx.sensors = facts.sensors;
  ctx.host = facts.host;
  ctx.top_per_role = facts.top_per_role;
  ctx.kill_wall_ns = kill_wall;
  ctx.workloads = facts.workloads;
  return write(makeOomRecord(ctx), kill_wall);
}

std::vector<OomEvent> CountedOoms::update(const Snapshot* previous, const Snapshot& now, bool kernel_source) {
  std::vector<OomEvent> events = watch_.update(previous, now);  // the baseline moves every sample
  if (kernel_source) {
    once_.clear(kCountersOnly);
    return {};
  }
  once_.say(kCountersOnly,
            "OOM kills: neither BPF (oom:mark_victim) nor /dev/kmsg is available; they are counted from "
            "the cgroups' OOM-kill counters at each sample, the victim inferred from the processes gone");
  for (OomEvent& e : events) e.id = ++ids_;
  return events;
}

}  // namespace headroom
