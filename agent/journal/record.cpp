// One OOM journal record (docs/journal.md, version 1) built from the event, the last sample,
// the budget in force and the flight recorder. Pure: no I/O, no clock.
#include <map>

#include "headroom/journal/oom_record.h"
#include "headroom/model/at_kill.h"
#include "headroom/model/kill_ledger.h"
#include "headroom/model/snapshot_json.h"
#include "headroom/sources/cgroup.h"

namespace headroom {
namespace {

using nlohmann::json;

constexpr int kRecordVersion = 1;
constexpr std::size_t kLargestCgroups = 10;

template <typename T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

double seconds(std::int64_t ns) { return static_cast<double>(ns) / 1e9; }

json cgroupJson(const Snapshot& snap, const CgroupSnapshot& c) {
  json bounds = json::array();
  for (const Bound& b : c.bounds) bounds.push_back(toJson(b));
  return {{"path", c.memory.path},
          {"sampled_at", seconds(snap.wall_time_ns)},
          {"memory", toJson(c.memory)},
          {"workload", toJson(c.workload)},
          {"attribution", toJson(c.attribution)},
          {"bounds", bounds},
          {"tightest_bound", c.tightest ? toJson(*c.tightest) : json(nullptr)}};
}

// The cgroup's processes (already by PSS, largest first), at most `per_role` of each role.
json processesJson(const Snapshot& snap, const CgroupSnapshot& c, std::size_t per_role) {
  json out = json::array();
  std::map<Role, std::size_t> taken;
  for (std::size_t i : c.processes) {
    if (i >= snap.processes.size()) continue;
    const ProcessSnapshot& p = snap.processes[i];
    if (taken[p.role]++ >= per_role) continue;
    json j = toJson(p);
    j["gpu_memory_bytes"] = snap.gpu.reading ? opt(snap.gpu.reading->processBytes(p.sample.pid)) : json(nullptr);
    out.push_back(std::move(j));
  }
  return out;
}

json budgetInForce(const BudgetDecision* d) {
  if (d == nullptr || !d->valid) return nullptr;
  return {{"budget_bytes", d->budget},
          {"margin_bytes", d->margin},
          {"generation", d->generation},
          {"reason", d->reason},
          {"margin_source", d->margin_source}};
}

}  // namespace

std::string oomRecordCgroup(const OomEvent& e, const Snapshot* last) {
  std::optional<std::string> domain;
  if (e.domain_cgroup && !e.domain_cgroup->empty()) domain = normaliseCgroupPath(*e.domain_cgroup);
  std::optional<std::string> victim;
  for (const OomVictim& v : e.victims) {
    if (!v.cgroup.empty()) {
      victim = normaliseCgroupPath(v.cgroup);
      break;
    }
  }
  if (!victim && !e.trigger_cgroup.empty()) victim = normaliseCgroupPath(e.trigger_cgroup);
  if (!victim && !e.counter_cgroup.empty()) victim = normaliseCgroupPath(e.counter_cgroup);
  std::string named = domain ? *domain : victim.value_or("");
  if (last == nullptr || named.empty() || last->findCgroup(named) != nullptr) return named;
  // The domain was not sampled: the victim's cgroup, or its nearest sampled ancestor that is
  // still inside the domain.
  for (std::optional<std::string> p = victim; p; p = parentCgroup(*p)) {
    if (domain && !cgroupIsWithin(*p, *domain)) break;
    if (last->findCgroup(*p) != nullptr) return *p;
  }
  return named;
}

nlohmann::json makeOomRecord(const RecordContext& ctx) {
  static const OomEvent kNoEvent{};
  const OomEvent& e = ctx.event != nullptr ? *ctx.event : kNoEvent;
  const std::string cgroup = ctx.cgroup.empty() ? oomRecordCgroup(e, ctx.last) : normaliseCgroupPath(ctx.cgroup);
  const CgroupSnapshot* cg = ctx.last != nullptr && !cgroup.empty() ? ctx.last->findCgroup(cgroup) : nullptr;

  // Without names looked up, each workload is what the paths say.
  OomWorkloads workloads = ctx.workloads;
  if (workloads.cgroup.empty()) workloads.cgroup.identity = identifyCgroup(cgroup);
  workloads.victims.resize(e.victims.size());
  for (std::size_t i = 0; i < e.victims.size(); ++i) {
    if (workloads.victims[i].empty() && !e.victims[i].cgroup.empty())
      workloads.victims[i].identity = identifyCgroup(normaliseCgroupPath(e.victims[i].cgroup));
  }
  json event = toJson(e, workloads);
  json workload = event["workload"];  // the record's own, at its top
  event.erase("workload");
  event["tasks_total"] = e.tasks.size();  // the journal keeps every task; /v1/ooms may keep fewer
  json at_kill = event["at_kill"];        // the record's own, at its top
  event.erase("at_kill");
  const std::optional<KillBreakdown> breakdown = breakdownAtKill(e);

  json charged = nullptr;
  if (e.domain_usage_bytes) {
    charged = *e.domain_usage_bytes;
  } else if (breakdown && breakdown->source == KillBreakdown::Source::kFilesRead) {
    charged = breakdown->usage;
  } else if (cg != nullptr) {
    charged = cg->memory.usage;
  }

  json ledger = json::array();
  for (const KillLedger& l : killLedgers(e, ctx.last)) ledger.push_back(toJson(l));

  json sensors = json::array();
  const std::vector<SensorStatus>& ss = !ctx.sensors.empty() || ctx.last == nullptr ? ctx.sensors : ctx.last->sensors;
  for (const SensorStatus& s : ss) sensors.push_back(toJson(s));

  json points = json::array();
  for (const FlightPoint& p : ctx.flight) points.push_back(toJson(p));
  // The flight's last point is the kill itself, when the breakdown is of the flight's cgroup.
  if (breakdown && !breakdown->cgroup.empty() && breakdown->cgroup == cgroup) {
    FlightPoint kill;
    kill.wall_time_ns = ctx.kill_wall_ns != 0 ? ctx.kill_wall_ns : e.wall_time_ns;
    kill.usage = breakdown->usage;
    kill.limit = breakdown->limit;
    for (const Part& p : breakdown->attribution.parts) kill.parts[p.kind] = p.bytes;
    kill.self_reported = ctx.self_reported;
    json k = toJson(kill);
    k["at_kill"] = true;
    points.push_back(std::move(k));
  }

  // A global OOM: which cgroups held the most, by the last sample.
  json largest = nullptr;
  if (e.global && ctx.last != nullptr) {
    largest = json::array();
    for (const CgroupSnapshot& c : ctx.last->cgroups) {  // by usage, largest first
      if (largest.size() >= kLargestCgroups) break;
      largest.push_back({{"path", c.memory.path},
                         {"usage_bytes", c.memory.usage},
                         {"invisible_bytes", c.attribution.invisibleBytes()}});
    }
  }

  return {
      {"version", kRecordVersion},
      {"time", seconds(e.wall_time_ns)},
      {"kill_time", ctx.kill_wall_ns != 0 ? json(seconds(ctx.kill_wall_ns)) : json(nullptr)},
      {"host",
       {{"hostname", ctx.host.hostname},
        {"kernel", ctx.host.kernel},
        {"agent_version", ctx.host.agent_version},
        {"boot_id", ctx.host.boot_id.empty() ? json(nullptr) : json(ctx.host.boot_id)}}},
      {"found_after",
       e.found_after.empty() ? json(nullptr) : json{{"how", e.found_after}, {"at", seconds(ctx.found_wall_ns)}}},
      {"workload", std::move(workload)},
      {"at_kill", std::move(at_kill)},
      {"event", std::move(event)},
      {"ledger", std::move(ledger)},
      {"cgroup", cg != nullptr ? cgroupJson(*ctx.last, *cg) : json(nullptr)},
      {"processes", cg != nullptr ? processesJson(*ctx.last, *cg, ctx.top_per_role) : json::array()},
      {"largest_cgroups", std::move(largest)},
      {"budget", budgetInForce(ctx.budget)},
      {"warning", ctx.warning ? *ctx.warning : json(nullptr)},
      {"self_reported_bytes", opt(ctx.self_reported)},
      {"charged_bytes", std::move(charged)},
      {"sensors", std::move(sensors)},
      {"flight",
       {{"cgroup", cgroup.empty() ? json(nullptr) : json(cgroup)},
        {"window_seconds", seconds(ctx.flight_window_ns)},
        {"points", std::move(points)}}},
  };
}

}  // namespace headroom
