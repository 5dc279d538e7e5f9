// The prover's budget, decided again at each sample: the prover's cgroup (configured, or where a
// process of role prover was last seen), the controller and its state file, the budget file for
// launch scripts, clean periods that give margin back, and a confirmed OOM kill of the prover
// that grows the margin. `headroom agent` keeps one for its life; `headroom budget --local`
// asks one once, with the state file only read.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "headroom/controller/controller.h"
#include "headroom/model/roles.h"
#include "headroom/model/snapshot.h"
#include "headroom/sensors/oom_event.h"
#include "headroom/util/logging.h"

namespace headroom {

// [budget]: the prover's budget, recomputed every tick and served on /v1/budget.
struct BudgetConfig {
  // Computed when a prover role rule exists or `cgroup` is set; /v1/budget says why not otherwise.
  bool enabled = true;
  // The prover's memory cgroup; "": the watched cgroup the largest prover-role process is
  // attributed to (remembered when the prover is not running, so a launch script still gets one).
  std::string cgroup;
  BudgetPolicy policy;     // margin_floor ... hysteresis; max_retries is `headroom run`'s alone
  std::string state_file;  // the learned margin; "": defaultStatePath(cgroup)
  std::string file;        // written atomically at each new generation for launch scripts; "": none

  bool operator==(const BudgetConfig&) const = default;
};

// One sample's outcome, for whoever publishes it (/v1/budget, the metrics).
struct BudgetUpdate {
  std::string cgroup;  // the prover's cgroup; "" when none is known
  // The controller's decision, valid or not; absent when none could be made (`document` says why).
  std::optional<BudgetDecision> decision;
  int http_status = 503;    // 200 with a valid decision
  nlohmann::json document;  // the /v1/budget answer
  std::uint64_t prover_usage = 0;
  bool gave_back = false;  // a clean period gave margin back
};

class ProverBudget {
 public:
  struct Options {
    // false: the state file is read, never written (`headroom budget` computes, it learns nothing).
    bool save_state = true;
    // false: each new generation and each reason for no budget are not logged as warnings (a
    // one-off caller says its one outcome itself).
    bool say_outcomes = true;
  };
  ProverBudget(BudgetConfig cfg, std::vector<RoleRule> rules, Options opts);
  ProverBudget(const ProverBudget&) = delete;
  ProverBudget& operator=(const ProverBudget&) = delete;

  // A new configuration (a reload): another cgroup or state file saves what was learned and opens
  // anew at the next sample; a new policy alone keeps the learned state.
  void reconfigure(BudgetConfig cfg, std::vector<RoleRule> rules);

  // The prover's cgroup: configured, or where the prover was last seen; "" when none.
  std::string cgroup() const;
  // The budget is on, has a prover rule and no cgroup for it yet: it waits for a sample that sees
  // the prover (a launch script may be asking).
  bool awaitsProver() const;

  // A probe's finding for a cgroup, when one was made.
  using ProbeLookup = std::function<std::optional<ProbeFinding>(const std::string& cgroup)>;
  // One sample. `hold`: a probe is allocating in the prover's cgroup, so nothing is decided (its
  // allocations are not the neighbours' growth): nullopt, the last answer stands.
  std::optional<BudgetUpdate> update(const Snapshot& snap, std::optional<std::uint64_t> self_reported,
                                     const ProbeLookup& probe = {}, bool hold = false);

  // An OOM kill, judged against the prover's cgroup: a kill of the prover's processes (or beside
  // them, when none of them died) grows the margin from what the kernel charged for the victims
  // (their figures at the kill, else `last`'s). Returns the change when the margin grew.
  std::optional<MarginChange> onOomKill(const OomEvent& e, const Snapshot* last, const RoleMatcher& roles);
  // Whether a kill grew the margin since the last call: the grown budget is published at once.
  bool takeGrown() { return std::exchange(grown_now_, false); }

  // Whether a kill in `cgroup` concerns the prover (its cgroup is inside it or around it), and the
  // budget it ran under (the last valid decision) when it does.
  bool concerns(const std::string& cgroup) const;
  const BudgetDecision* inForce() const;
  const BudgetController* controller() const { return controller_ ? &*controller_ : nullptr; }

  // Writes what was learned and not yet saved (`why` for the log).
  void save(const char* why);

 private:
  void open(const std::string& cgroup);
  BudgetUpdate unavailable(const std::string& why, const std::string& cgroup = "");
  void writeBudgetFile(const BudgetDecision& d);
  bool hasProverRule() const;

  BudgetConfig cfg_;
  std::vector<RoleRule> rules_;
  Options opts_;
  WarnOnce once_;
  std::optional<BudgetController> controller_;
  std::string controller_cgroup_;  // the cgroup controller_ decides for
  std::string prover_seen_in_;     // without budget.cgroup: where the prover was last seen
  std::string state_path_;
  bool state_frozen_ = false;                   // the state file was unreadable: never overwritten
  bool state_unsaved_ = false;                  // learned something the file does not hold yet
  bool grown_unpublished_ = false;              // the margin grew and no decision has used it yet
  bool grown_now_ = false;                      // ... and that is to be published at once
  std::optional<std::int64_t> clean_since_ns_;  // prover present, no kill, since then
  std::uint64_t published_generation_ = 0;
};

}  // namespace headroom
