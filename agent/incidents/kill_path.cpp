// The path of an OOM kill: names, evidence, durable record, publication. See incidents/kill_path.h.
#include "headroom/incidents/kill_path.h"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <utility>

#include "headroom/incidents/kill_names.h"
#include "headroom/incidents/known_kills.h"
#include "headroom/report/events.h"
#include "headroom/sources/cgroup.h"
#include "headroom/util/clock.h"
#include "headroom/util/units.h"

namespace headroom {
namespace {

constexpr const char* kJournalWrite = "journal-write";
constexpr std::array<const char*, 3> kCatchUpModes = {"boot", "restarts", "off"};  // JournalCatchUp's order

// A journal that could not be opened (the default path at start, any path at a reload): off,
// said once, and the agent runs on.
void journalOff(const Error& e) {
  spdlog::error("the OOM journal is off: {} (the agent keeps running; set journal.path or --journal to another place)",
                e.describe());
}

}  // namespace

KillPath::KillPath(Exporter& exporter, ProverBudget& budget, HostIdentity host, EventSink::JournaldSend send)
    : exporter_(exporter), budget_(budget), host_(std::move(host)), events_(std::move(send)) {
  journal_.onWritten([this](const nlohmann::json& record) { events_.emit(record); });
}

Status KillPath::configure(const KillPathSettings& s, WorkloadResolver& names, bool starting) {
  names_ = &names;
  roles_ = RoleMatcher(s.role_rules);
  top_per_role_ = s.top_per_role;
  board_.setCapacity(s.recent_ooms);
  catch_up_.mode = s.journal.catch_up;
  if (key_prefix_.empty()) key_prefix_ = fmt::format("{}", realtimeNs());
  if (auto st = journal_.configure(s.journal, host_.boot_id); !st) {
    // An explicit journal that cannot be opened is a mistake to fix, not a journal to lose.
    if (starting && s.journal.path_given)
      return st.error().wrap(fmt::format("--journal / journal.path {}", s.journal.path)).as(ErrorKind::kBadInput);
    journalOff(st.error());
  }
  setBoardJournal();
  // The events file is opened again at every reload: a logrotate that moved it is followed.
  if (auto st = events_.configure(s.events); !st) {
    if (starting) return st.error().wrap(fmt::format("events.output {}", s.events.output)).as(ErrorKind::kBadInput);
    spdlog::error("events.output: {} (the agent keeps running; records go on to the journal and journald)",
                  st.error().describe());
  }
  board_.setEvents(events_.state());
  return ok();
}

void KillPath::sample(std::shared_ptr<const Snapshot> snap, std::optional<std::uint64_t> self_reported,
                      const std::vector<SensorStatus>& sensors) {
  self_reported_ = self_reported;
  std::map<std::string, std::uint64_t> self_by_cgroup;
  if (std::string bc = budget_.cgroup(); !bc.empty() && self_reported) self_by_cgroup[bc] = *self_reported;
  journal_.fly(*snap, self_by_cgroup);
  // Against the last sample, before this one is kept. The counts go into the state before any
  // kill they show is begun: a restart then does not count it again.
  std::vector<OomEvent> counted = counted_.update(journal_.last().get(), *snap, namesOomVictims(sensors));
  if (log_settled_) journal_.noteKernelLog(*log_settled_);
  journal_.noteCounts(counted_.counts());
  for (const OomEvent& e : counted) {
    begin(e, sensors);
    take(e, sensors);
  }
  flush();  // a journal that failed is tried again each sample
  journal_.keep(std::move(snap));
  setBoardJournal();  // what is in flight now
  board_.setEvents(events_.state());
}

std::string KillPath::keyOf(const OomEvent& e) const {
  const char* source = e.from_counter ? "c" : "s";
  return fmt::format("{}-{}{}-{}", key_prefix_, source, sensors_started_, e.id);
}

void KillPath::begin(const OomEvent& e, const std::vector<SensorStatus>& sensors) {
  const std::string key = keyOf(e);
  if (journal_.holds(e, key)) return;  // a report the last agent recorded, read again
  journal_.begin(key, e, IncidentFacts{&budget_, self_reported_, sensors, host_, top_per_role_, {}, std::nullopt});
}

bool KillPath::admitted(const OomEvent& e) const {
  const std::optional<JournalState>& prev = journal_.previous();
  switch (catch_up_.mode) {
    case JournalCatchUp::kOff: return false;
    case JournalCatchUp::kBoot: return true;
    case JournalCatchUp::kRestarts:
      if (!prev) return false;                          // no agent ran here before: nothing to catch up with
      if (prev->boot_id != host_.boot_id) return true;  // it ran in an earlier boot: all of this one
      return sinceLastRead(e);
  }
  return false;
}

bool KillPath::sinceLastRead(const OomEvent& e) const {
  const std::optional<JournalState>& prev = journal_.previous();
  return !prev || !prev->kernel_log_seq || !e.kmsg_seq || *e.kmsg_seq >= *prev->kernel_log_seq;
}

void KillPath::sensorsStarted(std::vector<OomEvent> found, const std::optional<KernelLogPosition>& log,
                              const std::vector<SensorStatus>& sensors) {
  ++sensors_started_;
  const std::optional<JournalState>& prev = journal_.previous();
  const bool same_boot = prev && !host_.boot_id.empty() && prev->boot_id == host_.boot_id;
  const bool first = !std::exchange(started_, true);
  if (first && log && log->from_start && log->ring_start && catch_up_.mode != JournalCatchUp::kOff) {
    // Sequence numbers start at 0 each boot: what the ring no longer holds, no agent read (but
    // the last one, up to where its state says).
    if (same_boot && prev->kernel_log_seq) {
      catch_up_.unread_records =
          *log->ring_start > *prev->kernel_log_seq ? *log->ring_start - *prev->kernel_log_seq : 0;
    } else if (catch_up_.mode == JournalCatchUp::kBoot || prev) {
      catch_up_.unread_records = *log->ring_start;
    }
    if (catch_up_.unread_records > 0)
      spdlog::error(
          "kernel log: {} record(s) of this boot left the ring before any agent read them: OOM kills among them "
          "are not in the journal{}",
          catch_up_.unread_records, same_boot ? " (the cgroups' OOM-kill counters catch up on them)" : "");
  }
  // Each victim cgroup's kills the log shows since the last agent's read: the counters' rises
  // less these are the kills the log lost.
  std::map<std::string, std::uint64_t> logged;
  for (const OomEvent& e : found) {
    if (same_boot && sinceLastRead(e)) {
      for (const OomVictim& v : e.victims)
        if (!v.kill_skipped && !v.cgroup.empty()) ++logged[normaliseCgroupPath(v.cgroup)];
    }
  }
  if (first) {
    // Kills left in flight, each with the log's report of it where the ring holds one (whatever
    // the catch-up asks: that kill is wanted).
    recoverInFlight(found, sensors);
    if (same_boot && catch_up_.mode != JournalCatchUp::kOff)
      counted_.prime(prev->oom_kill_counts, catch_up_.unread_records > 0, std::move(logged));
  }
  for (const OomEvent& e : found) {
    if (!e.found_after.empty() && !admitted(e)) {
      ++catch_up_.not_asked;
      continue;
    }
    take(e, sensors);
  }
  // Read up to here: a restart before the first sample does not read it again.
  if (log) {
    log_settled_ = log->settled;
    journal_.noteKernelLog(log->settled);
    journal_.saveState();
  }
  if (first) {
    spdlog::info(
        "journal: catching up ({}): {} OOM kill(s) found in the kernel's log, {} left in flight by an earlier agent, "
        "{} already journaled, {} before the last agent's read",
        kCatchUpModes[static_cast<std::size_t>(catch_up_.mode)], catch_up_.foundBy("kernel_log"),
        catch_up_.foundBy("in_flight"), catch_up_.already_journaled, catch_up_.not_asked);
  }
  setBoardJournal();
}

void KillPath::stop() {
  if (log_settled_) journal_.noteKernelLog(*log_settled_);
  journal_.saveState();
}

void KillPath::recoverInFlight(std::vector<OomEvent>& found, const std::vector<SensorStatus>& sensors) {
  const std::map<std::string, nlohmann::json> in_flight = journal_.inFlight();  // a copy: written, they go
  for (const auto& [key, rec] : in_flight) {
    if (journal_.holdsRecord(rec)) {
      journal_.forget(key);  // the record was written; the state not yet
      ++catch_up_.already_journaled;
      continue;
    }
    // The kernel's report of the same kill, when the log still holds it: one record of the two.
    std::string boot = KnownKills::bootIdOf(rec);
    if (boot.empty()) boot = host_.boot_id;
    KnownKills one;
    one.add(rec);
    auto same = std::find_if(found.begin(), found.end(), [&](const OomEvent& e) { return one.holds(e, boot); });
    std::optional<OomEvent> matched;
    if (same != found.end()) {
      matched = std::move(*same);
      found.erase(same);
    }
    const IncidentFacts facts{nullptr, std::nullopt, sensors, host_, top_per_role_, {}, std::nullopt};
    auto id = journal_.recordInFlight(key, matched ? &*matched : nullptr, facts);
    if (!id) continue;
    ++catch_up_.found["in_flight"];
    OomEvent e = matched ? *matched
                         : oomEventFromJson(rec.is_object() && rec.contains("event") ? rec.at("event")
                                                                                     : nlohmann::json::object());
    e.found_after = "in_flight";
    spdlog::warn("{} (found after the fact: an earlier agent stopped before recording it)", describeOom(e));
    if (*id) spdlog::info("journal: OOM kill recorded as record {} in {}", **id, journal_.writer()->path());
    publish(e, OomWorkloads{}, nullptr);
  }
}

void KillPath::take(const OomEvent& e, const std::vector<SensorStatus>& sensors) {
  const std::string key = keyOf(e);
  if (journal_.holds(e, key)) {
    journal_.forget(key);
    if (!e.found_after.empty()) ++catch_up_.already_journaled;
    return;
  }
  if (!e.found_after.empty()) ++catch_up_.found[e.found_after];
  // Found after the fact: no sample of this agent's is of the moment of the kill.
  const std::shared_ptr<const Snapshot> last = e.found_after.empty() ? journal_.last() : nullptr;
  // Names: what died, waiting a moment for an engine asked about a container the samples never
  // saw (born and killed between two), so that the record, the metrics and /v1/ooms agree. Not
  // for a kill found after the fact: what the engine knows now, at once (a ring of hundreds of
  // old kills must not hold the agent's start for minutes).
  const auto wait = e.found_after.empty() ? kKillNamesWait : std::chrono::milliseconds(0);
  const OomWorkloads workloads =
      names_ != nullptr ? oomWorkloads(e, oomRecordCgroup(e, last.get()), *names_, wait) : OomWorkloads{};
  if (e.found_after.empty())
    spdlog::warn("{}", describeOom(e));
  else
    spdlog::warn("{} (found after the fact, in the {})", describeOom(e),
                 e.found_after == "counters" ? "cgroup's OOM-kill counter" : "kernel's log");
  // Evidence and the durable record first: it holds the budget in force at the kill, before the
  // kill grows it.
  IncidentFacts facts{&budget_, self_reported_, sensors, host_, top_per_role_, workloads, std::nullopt};
  if (e.found_after.empty() && warning_of_) facts.warning = warning_of_(e, oomRecordCgroup(e, last.get()));
  record(e, facts, key);
  publish(e, workloads, last.get());
}

void KillPath::record(const OomEvent& e, const IncidentFacts& facts, const std::string& key) {
  flush();  // records that wait go first, in the order of their kills
  const std::uint64_t dropped = journal_.dropped();
  auto id = journal_.record(e, facts, key);
  if (!id) return;    // the journal is off: said when it was configured
  setBoardJournal();  // before the log says it: a reader of both sees the same
  if (*id) {
    spdlog::info("journal: OOM kill recorded as record {} in {} (headroom report --id {})", **id,
                 journal_.writer()->path(), **id);
  } else if (journal_.pending() == 0) {
    spdlog::error("journal: the OOM kill could not be recorded: {}", id->error().describe());  // refused for good
  } else {
    // One line per kill the journal could not take (the retries at each sample say nothing);
    // "writing works again" when the backlog is written.
    once_.say(kJournalWrite,
              fmt::format("journal: the OOM kill could not be recorded: {} (kept in memory, {} waiting: written "
                          "when the journal can take it; /healthz says \"degraded\")",
                          id->error().describe(), journal_.pending()),
              spdlog::level::err);
  }
  if (journal_.dropped() > dropped)
    spdlog::error("journal: {} waiting record(s) of earlier OOM kills dropped: more than {} records or {} wait",
                  journal_.dropped() - dropped, IncidentJournal::kMaxPendingRecords,
                  formatBytes(IncidentJournal::kMaxPendingBytes));
}

void KillPath::publish(const OomEvent& e, const OomWorkloads& workloads, const Snapshot* last) {
  const double when = e.wall_time_ns > 0 ? static_cast<double>(e.wall_time_ns) / 1e9 : unixSeconds();
  for (const OomVictim& v : e.victims) {
    if (v.kill_skipped) continue;  // already exiting: the kernel sent no kill
    const VictimPlace place = placeVictim(v, last, roles_);
    exporter_.recordOomKill(place.cgroup.empty() ? "unknown" : place.cgroup,
                            place.cgroup.empty() ? Workload{} : nameOf(place.cgroup), place.role, v.comm, when);
  }
  // Counted kills no gone process could stand for: counted still, the process unknown.
  if (e.from_counter) {
    for (std::size_t i = e.victims.size(); i < e.counted_kills; ++i)
      exporter_.recordOomKill(e.counter_cgroup, nameOf(e.counter_cgroup), roles_.match(0, 0, "", "", e.counter_cgroup),
                              "unknown", when);
  }
  if (budget_.onOomKill(e, last, roles_)) exporter_.countMarginChange(budget_.cgroup(), "oom_kill");
  board_.addOom(e, workloads);
}

void KillPath::flush() {
  if (journal_.pending() == 0) return;
  const std::vector<IncidentJournal::Flushed> written = journal_.flush();
  setBoardJournal();
  for (const IncidentJournal::Flushed& f : written)
    spdlog::info(
        "journal: OOM kill of {} recorded as record {} in {} once the journal could take it (headroom report "
        "--id {})",
        fmt::format("{:%FT%TZ}", fmt::gmtime(static_cast<std::time_t>(f.kill_wall_ns / 1'000'000'000))), f.id,
        journal_.writer()->path(), f.id);
  if (journal_.pending() == 0) once_.clear(kJournalWrite, "journal: writing works again; no record waits");
}

void KillPath::setBoardJournal() {
  nlohmann::json j = journal_.state();
  nlohmann::json found = nlohmann::json::object();
  for (const char* how : {"kernel_log", "in_flight", "counters"}) found[how] = catch_up_.foundBy(how);
  j["catch_up"] = {{"mode", kCatchUpModes[static_cast<std::size_t>(catch_up_.mode)]},
                   {"found", std::move(found)},
                   {"already_journaled", catch_up_.already_journaled},
                   {"not_asked", catch_up_.not_asked},
                   {"unread_records", catch_up_.unread_records},
                   {"in_flight", journal_.inFlight().size()}};
  board_.setJournal(std::move(j));
}

Workload KillPath::nameOf(const std::string& cgroup) const {
  if (names_ != nullptr) return names_->resolve(cgroup);
  Workload w;
  w.identity = identifyCgroup(cgroup);
  return w;
}

void KillPath::addFigures(AgentSelf& self) const {
  if (const JournalWriter* w = journal_.writer()) {
    const JournalStats& js = w->stats();
    self.journal_up = true;
    self.journal_records_total = js.records_written;
    self.journal_damaged_records_total = js.damaged_records;
    self.journal_bytes = js.bytes;
  } else {
    self.journal_up = false;
  }
  self.journal_write_failures_total = journal_.writeFailures();
  self.journal_pending_records = journal_.pending();
  self.journal_dropped_records_total = journal_.dropped();
  self.journal_found_after_total = catch_up_.found;
  self.journal_kernel_log_unread_records = catch_up_.unread_records;
  const EventSinkStats ev = events_.stats();
  self.event_sinks.clear();
  for (const EventSinkStats::Sink& s : ev.sinks) self.event_sinks.push_back({s.name, s.written, s.failures});
  self.events_dropped_total = ev.dropped;
  self.events_queued = ev.queued;
  self.events_file_rotations_total = ev.rotations;
}

}  // namespace headroom

namespace headroom {

void KillPath::announce(const nlohmann::json& warning) {
  std::string message = warning.contains("message") && warning.at("message").is_string()
                            ? warning.at("message").get<std::string>()
                            : std::string("OOM warning");
  WarningEvent ev = makeWarningEvent(warning, host_.hostname, unixSeconds(), message);
  events_.emitPrepared(std::move(ev.line), std::move(ev.fields));
}

}  // namespace headroom
