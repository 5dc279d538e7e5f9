#include "headroom/controller/prover_budget.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "headroom/controller/budget_document.h"
#include "headroom/controller/kill_evidence.h"
#include "headroom/model/at_kill.h"
#include "headroom/sources/cgroup.h"
#include "headroom/util/clock.h"
#include "headroom/util/files.h"
#include "headroom/util/units.h"

namespace headroom {
namespace {

constexpr const char* kUnavailable = "budget unavailable";
constexpr const char* kStateSave = "budget state save";
constexpr const char* kBudgetFile = "budget file";

}  // namespace

ProverBudget::ProverBudget(BudgetConfig cfg, std::vector<RoleRule> rules, Options opts)
    : cfg_(std::move(cfg)), rules_(std::move(rules)), opts_(opts) {}

bool ProverBudget::hasProverRule() const {
  return std::any_of(rules_.begin(), rules_.end(), [](const RoleRule& r) { return r.role == Role::kProver; });
}

bool ProverBudget::awaitsProver() const { return cfg_.enabled && cgroup().empty() && hasProverRule(); }

void ProverBudget::reconfigure(BudgetConfig cfg, std::vector<RoleRule> rules) {
  // Another prover cgroup or state file: what was learned is saved, and the next sample opens
  // the new one. Only the policy changed: the learned state carries over.
  if (controller_ && (cfg.enabled != cfg_.enabled || cfg.cgroup != cfg_.cgroup || cfg.state_file != cfg_.state_file)) {
    save("config reload");
    controller_.reset();
    controller_cgroup_.clear();
  } else if (controller_ && !(cfg.policy == cfg_.policy)) {
    ControllerState kept = controller_->state();
    controller_.emplace(cfg.policy, std::move(kept));
    spdlog::info("budget: new policy applied, learned margin {} kept",
                 formatBytes(controller_->state().learned_margin));
  }
  if (cfg.cgroup != cfg_.cgroup) prover_seen_in_.clear();
  cfg_ = std::move(cfg);
  rules_ = std::move(rules);
}

std::string ProverBudget::cgroup() const {
  if (!cfg_.enabled) return {};
  return cfg_.cgroup.empty() ? prover_seen_in_ : cfg_.cgroup;
}

void ProverBudget::open(const std::string& cgroup) {
  if (controller_) save("the prover's cgroup changed");
  state_path_ = cfg_.state_file.empty() ? defaultStatePath(cgroup) : cfg_.state_file;
  state_frozen_ = false;
  state_unsaved_ = false;
  once_.clear(kStateSave);
  ControllerState state;
  auto loaded = loadState(state_path_);
  if (!loaded) {
    // Overwriting it would throw away what an operator may want to read or repair.
    if (opts_.save_state)
      spdlog::warn(
          "budget: {}; starting from a fresh state, and leaving that file as it is: nothing learned is saved "
          "until it is repaired or removed",
          loaded.error().describe());
    else
      spdlog::warn("budget: {}; computing with a fresh state (the file is left as it is)", loaded.error().describe());
    state_frozen_ = true;
  } else if (*loaded) {
    state = std::move(**loaded);
    spdlog::info("budget for {}: state from {}: learned margin {}, {} OOM kill(s), {} clean period(s)", cgroup,
                 state_path_, formatBytes(state.learned_margin), state.oom_kills, state.clean_runs);
  } else {
    spdlog::info("budget for {}: no state at {} yet, starting fresh", cgroup, state_path_);
  }
  state.retries = 0;  // `headroom run`'s count; nothing here retries
  controller_.emplace(cfg_.policy, std::move(state));
  controller_cgroup_ = cgroup;
  clean_since_ns_.reset();
  grown_unpublished_ = false;
}

void ProverBudget::save(const char* why) {
  if (!controller_ || !state_unsaved_ || !opts_.save_state) return;
  if (state_frozen_) {
    spdlog::warn("budget: not saving the state ({}): {} was unreadable at start and is left as it is", why,
                 state_path_);
    return;
  }
  auto st = saveState(state_path_, controller_->state());
  if (!st) {
    once_.say(kStateSave, fmt::format("budget: cannot save the state ({}): {}; learning in memory only until it can",
                                      why, st.error().describe()));
    return;
  }
  once_.clear(kStateSave, fmt::format("budget: state saved to {} again", state_path_));
  state_unsaved_ = false;
}

BudgetUpdate ProverBudget::unavailable(const std::string& why, const std::string& cgroup) {
  once_.say(kUnavailable, fmt::format("no budget: {}", why),
            opts_.say_outcomes ? spdlog::level::warn : spdlog::level::debug);
  BudgetUpdate u;
  u.cgroup = cgroup;
  u.document = {{"error", why}};
  if (!cgroup.empty()) u.document["cgroup"] = cgroup;
  return u;
}

std::optional<BudgetUpdate> ProverBudget::update(const Snapshot& snap, std::optional<std::uint64_t> self_reported,
                                                 const ProbeLookup& probe, bool hold) {
  if (!cfg_.enabled) {
    controller_.reset();
    return unavailable("the budget is off (budget.enabled = false)");
  }
  if (cfg_.cgroup.empty()) {
    if (!hasProverRule()) {
      return unavailable(
          "no prover to budget for: add a role rule for it (roles.rules, --role-rule prover=comm:NAME) or set "
          "budget.cgroup (--budget.cgroup)");
    }
    // The prover's cgroup: where the largest prover-role process is attributed; kept while a
    // prover runs there, and remembered when none runs (a launch script asks before it starts).
    const ProcessSnapshot* largest = nullptr;
    bool still_there = false;
    for (const ProcessSnapshot& p : snap.processes) {
      if (p.role != Role::kProver) continue;
      still_there = still_there || p.cgroup == prover_seen_in_;
      if (largest == nullptr || p.attribution.rss > largest->attribution.rss) largest = &p;
    }
    if (largest != nullptr && !still_there && !largest->cgroup.empty()) {
      spdlog::info("budget: the prover ({}, pid {}) runs in {}", largest->sample.comm, largest->sample.pid,
                   largest->cgroup);
      prover_seen_in_ = largest->cgroup;
    }
    if (prover_seen_in_.empty()) {
      std::string rules;
      for (const RoleRule& r : rules_) {
        if (r.role == Role::kProver) rules += fmt::format("{}{}", rules.empty() ? "" : ", ", r.text());
      }
      return unavailable(
          fmt::format("no process matching the prover rule(s) {} has been seen yet, and budget.cgroup "
                      "is not set (set it to have a budget before the prover starts)",
                      rules));
    }
  }
  const std::string cgroup = this->cgroup();
  if (!controller_ || controller_cgroup_ != cgroup) open(cgroup);
  if (hold) return std::nullopt;

  auto in = budgetInputs(snap, ProverScope{cgroup, std::nullopt});
  if (!in) {
    return unavailable(
        fmt::format("the prover's cgroup {} could not be read: it does not exist (yet), or is gone", cgroup), cgroup);
  }
  in->self_reported = self_reported;
  if (probe) {
    if (auto found = probe(cgroup)) in->probe = *found;
  }
  BudgetUpdate u;
  u.cgroup = cgroup;
  u.prover_usage = in->prover_usage;
  // A clean period: the prover ran through it without an OOM kill.
  if (in->prover_processes == 0) {
    clean_since_ns_.reset();
  } else if (!clean_since_ns_) {
    clean_since_ns_ = in->time_ns;
  } else if (in->time_ns - *clean_since_ns_ >=
             std::chrono::duration_cast<std::chrono::nanoseconds>(cfg_.policy.clean_period).count()) {
    clean_since_ns_ = in->time_ns;
    if (auto change = controller_->onCleanRun()) {
      spdlog::info("budget for {}: {}", cgroup, change->reason);
      u.gave_back = true;
    }
    state_unsaved_ = true;
    save("a clean period");
  }

  BudgetDecision d = controller_->decide(*in);
  grown_unpublished_ = false;
  once_.clear(kUnavailable);
  if (d.generation != published_generation_) {
    if (d.valid)
      spdlog::info("budget for {}: generation {}: {}", cgroup, d.generation, d.reason);
    else
      spdlog::log(opts_.say_outcomes ? spdlog::level::warn : spdlog::level::debug,
                  "no budget for {} (generation {}): {}", cgroup, d.generation, d.reason);
    writeBudgetFile(d);
    published_generation_ = d.generation;
  } else {
    spdlog::debug("budget for {}: {}", cgroup, d.reason);
  }
  double when = snap.wall_time_ns > 0 ? static_cast<double>(snap.wall_time_ns) / 1e9 : unixSeconds();
  nlohmann::json doc = budgetDocument(d, controller_->state(), when);
  if (d.valid) {
    u.http_status = 200;
    u.document = std::move(doc);
  } else {
    u.http_status = 503;
    u.document = {
        {"error", fmt::format("no budget for {}: {}", cgroup, d.reason)}, {"cgroup", cgroup}, {"decision", doc}};
  }
  u.decision = std::move(d);
  return u;
}

void ProverBudget::writeBudgetFile(const BudgetDecision& d) {
  if (cfg_.file.empty()) return;
  // No budget: no file, rather than a stale number a launch script would take for current.
  Status st = ok();
  if (!d.valid) {
    if (::unlink(cfg_.file.c_str()) != 0 && errno != ENOENT)
      st = errnoError(fmt::format("removing {} (no budget)", cfg_.file));
  } else {
    st = writeFileAtomic(cfg_.file, fmt::format("{}\n", d.budget));
  }
  if (!st) {
    once_.say(kBudgetFile, fmt::format("budget: cannot write the budget file: {}", st.error().describe()));
    return;
  }
  once_.clear(kBudgetFile, fmt::format("budget: the budget file {} is written again", cfg_.file));
}

std::optional<MarginChange> ProverBudget::onOomKill(const OomEvent& e, const Snapshot* last, const RoleMatcher& roles) {
  if (!cfg_.enabled) return std::nullopt;
  std::vector<KillVictim> victims;
  std::vector<std::string> places;  // each victim's memory cgroup
  std::string cgroup = this->cgroup();
  std::string what;
  for (const OomVictim& v : e.victims) {
    if (v.kill_skipped) continue;  // already exiting: the kernel sent no kill
    VictimPlace place = placeVictim(v, last, roles);
    // Without budget.cgroup: a prover killed before any sample saw it still tells where it runs;
    // not one found after the fact (of long ago, it does not say where the prover runs now).
    if (cgroup.empty() && cfg_.cgroup.empty() && e.found_after.empty() && place.role == Role::kProver &&
        !place.cgroup.empty()) {
      spdlog::info("budget: the prover ({}, pid {}) ran in {}", v.comm, v.tgid, place.cgroup);
      prover_seen_in_ = place.cgroup;
      cgroup = place.cgroup;
    }
    const std::string& memcg = v.cgroup.empty() ? place.cgroup : v.cgroup;
    if (cgroup.empty() || !cgroupIsWithin(memcg, cgroup)) continue;
    victims.push_back(KillVictim{&v, place.role == Role::kProver,
                                 place.process != nullptr ? chargedFigures(*place.process) : ChargedFigures{}});
    places.push_back(memcg);
  }
  // The words name the victims the evidence is of: the prover's own when it was one of them.
  const bool prover_killed = std::any_of(victims.begin(), victims.end(), [](const KillVictim& k) { return k.prover; });
  for (std::size_t i = 0; i < victims.size(); ++i) {
    if (prover_killed && !victims[i].prover) continue;
    const OomVictim& v = *victims[i].kernel;
    what += fmt::format("{}pid {} ({}) in {}", what.empty() ? "" : ", ", v.process(), v.comm, places[i]);
  }
  // The counter rose inside the prover's cgroup and no gone process stands for the kill.
  const bool counted = victims.empty() && e.from_counter && !cgroup.empty() && cgroupIsWithin(e.counter_cgroup, cgroup);
  if (counted) what = fmt::format("{} kill(s) counted in {}", e.counted_kills, e.counter_cgroup);
  if (victims.empty() && !counted) return std::nullopt;
  KillEvidence k = killEvidence(victims, &e, cgroup, e.monotonic_time_ns != 0 ? e.monotonic_time_ns : monotonicNs(),
                                fmt::format("{}: {}",
                                            e.from_bpf    ? "mark_victim"
                                            : e.from_kmsg ? "kernel OOM report"
                                                          : "OOM-kill counter",
                                            what));
  if (!controller_ || controller_cgroup_ != cgroup) open(cgroup);
  if (grown_unpublished_) {
    // Killed under the budget the last growth already answered: growing again would count one
    // shortfall twice.
    spdlog::warn("budget for {}: OOM kill ({}) before the grown margin was published: margin kept", cgroup, k.what);
    return std::nullopt;
  }
  if (controller_->lastValid()) k.budget = controller_->lastValid()->budget;  // the one it ran under
  MarginChange c = controller_->onOomKill(k);
  spdlog::warn("budget for {}: {}", cgroup, c.reason);
  grown_unpublished_ = true;
  grown_now_ = true;
  clean_since_ns_.reset();
  state_unsaved_ = true;
  save("an OOM kill");
  return c;
}

bool ProverBudget::concerns(const std::string& cgroup) const {
  std::string bc = this->cgroup();
  return !bc.empty() && !cgroup.empty() && (cgroupIsWithin(bc, cgroup) || cgroupIsWithin(cgroup, bc));
}

const BudgetDecision* ProverBudget::inForce() const {
  if (!controller_ || controller_cgroup_ != cgroup() || !controller_->lastValid()) return nullptr;
  return &*controller_->lastValid();
}

}  // namespace headroom
