#include "headroom/controller/budget_document.h"

namespace headroom {

namespace {

nlohmann::json optionalBytes(const std::optional<std::uint64_t>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

}  // namespace

nlohmann::json budgetDocument(const BudgetDecision& d, const ControllerState& learned, double unix_time) {
  using nlohmann::json;
  const BudgetInputs& in = d.inputs;
  json bounds = json::array();
  for (const BudgetBound& b : in.bounds) {
    bounds.push_back({{"name", b.name},
                      {"kind", b.kind},
                      {"limit_bytes", b.limit},
                      {"usage_bytes", b.usage},
                      {"reclaimable_bytes", b.reclaimable},
                      {"neighbours_bytes", b.neighbours},
                      {"room_bytes", b.room()}});
  }
  json probe = nullptr;
  if (in.probe) {
    probe = {{"allocatable_bytes", in.probe->allocatable},
             {"prover_usage_bytes", in.probe->prover_usage},
             {"age_seconds", static_cast<double>(d.time_ns - in.probe->time_ns) / 1e9}};
  }
  json last_kill = nullptr;
  if (learned.last_kill) {
    const KillEvidence& k = *learned.last_kill;
    last_kill = {{"what", k.what},
                 {"prover_victim", k.prover_victim},
                 {"budget_bytes", k.budget},
                 {"charge_bytes", k.charge},
                 {"self_reported_bytes", optionalBytes(k.self_reported)},
                 {"pinned_bytes", k.pinned},
                 {"page_tables_bytes", k.page_tables},
                 {"kernel_bytes", k.kernel},
                 {"monotonic_time_ns", k.time_ns}};
  }
  json history = json::array();
  for (const MarginChange& c : learned.history)
    history.push_back({{"before_bytes", c.before}, {"after_bytes", c.after}, {"reason", c.reason}});
  return {
      {"valid", d.valid},
      {"budget_bytes", d.budget},
      {"margin_bytes", d.margin},
      {"generation", d.generation},
      {"cgroup", in.cgroup},
      {"tightest_bound", d.tightest},
      {"room_bytes", d.room},
      {"neighbour_growth_bytes", d.neighbour_growth},
      {"forecast_growth_bytes", d.forecast_growth},
      {"overhead_growth_bytes", d.overhead_growth},
      {"probe_cap_bytes", optionalBytes(d.probe_cap)},
      {"capped_by_probe", d.capped_by_probe},
      {"margin_source", d.margin_source},
      {"reason", d.reason},
      {"inputs",
       {{"bounds", std::move(bounds)},
        {"prover_usage_bytes", in.prover_usage},
        {"prover_processes", in.prover_processes},
        {"self_reported_bytes", optionalBytes(in.self_reported)},
        {"overhead_bytes", in.overhead},
        {"probe", std::move(probe)}}},
      {"learned",
       {{"learned_margin_bytes", learned.learned_margin},
        {"oom_kills", learned.oom_kills},
        {"clean_runs", learned.clean_runs},
        {"last_kill", std::move(last_kill)},
        {"history", std::move(history)}}},
      {"time", unix_time},
  };
}

}  // namespace headroom
