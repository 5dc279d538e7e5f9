// The path of an OOM kill: names, evidence, durable record, publication. See incidents/kill_path.h.
#include "headroom/incidents/kill_path.h"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "headroom/incidents/kill_names.h"
#include "headroom/util/clock.h"
#include "headroom/util/units.h"

namespace headroom {
namespace {

constexpr const char* kJournalWrite = "journal-write";

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
  if (auto st = journal_.configure(s.journal); !st) {
    // An explicit journal that cannot be opened is a mistake to fix, not a journal to lose.
    if (starting && s.journal.path_given)
      return st.error().wrap(fmt::format("--journal / journal.path {}", s.journal.path)).as(ErrorKind::kBadInput);
    journalOff(st.error());
  }
  board_.setJournal(journal_.state());
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
  // Against the last sample, before this one is kept.
  for (const OomEvent& e : counted_.update(journal_.last().get(), *snap, namesOomVictims(sensors))) take(e, sensors);
  flush();  // a journal that failed is tried again each sample
  journal_.keep(std::move(snap));
  board_.setEvents(events_.state());
}

void KillPath::take(const OomEvent& e, const std::vector<SensorStatus>& sensors) {
  const std::shared_ptr<const Snapshot> last = journal_.last();
  // Names: what died, waiting a moment for an engine asked about a container the samples never
  // saw (born and killed between two), so that the record, the metrics and /v1/ooms agree.
  const OomWorkloads workloads =
      names_ != nullptr ? oomWorkloads(e, oomRecordCgroup(e, last.get()), *names_, kKillNamesWait) : OomWorkloads{};
  spdlog::warn("{}", describeOom(e));
  // Evidence and the durable record first: it holds the budget in force at the kill, before the
  // kill grows it.
  record(e, IncidentFacts{&budget_, self_reported_, sensors, host_, top_per_role_, workloads});
  publish(e, workloads, last.get());
}

void KillPath::record(const OomEvent& e, const IncidentFacts& facts) {
  flush();  // records that wait go first, in the order of their kills
  const std::uint64_t dropped = journal_.dropped();
  auto id = journal_.record(e, facts);
  if (!id) return;                      // the journal is off: said when it was configured
  board_.setJournal(journal_.state());  // before the log says it: a reader of both sees the same
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
  board_.setJournal(journal_.state());
  for (const IncidentJournal::Flushed& f : written)
    spdlog::info(
        "journal: OOM kill of {} recorded as record {} in {} once the journal could take it (headroom report "
        "--id {})",
        fmt::format("{:%FT%TZ}", fmt::gmtime(static_cast<std::time_t>(f.kill_wall_ns / 1'000'000'000))), f.id,
        journal_.writer()->path(), f.id);
  if (journal_.pending() == 0) once_.clear(kJournalWrite, "journal: writing works again; no record waits");
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
  const EventSinkStats ev = events_.stats();
  self.event_sinks.clear();
  for (const EventSinkStats::Sink& s : ev.sinks) self.event_sinks.push_back({s.name, s.written, s.failures});
  self.events_dropped_total = ev.dropped;
  self.events_queued = ev.queued;
  self.events_file_rotations_total = ev.rotations;
}

}  // namespace headroom
