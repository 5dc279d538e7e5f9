// The budget controller: turns live signals into a memory budget for the prover and, when the
// prover is OOM-killed anyway, learns a larger margin from what the kill showed. Pure: inputs
// in, decisions out, no I/O (the state file's text is made and read here, written elsewhere).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/model/snapshot.h"
#include "headroom/util/files.h"  // writeFileAtomic, for the budget file
#include "headroom/util/result.h"

namespace headroom {

// The policy; every value configurable, defaults as in DESIGN.md.
struct BudgetPolicy {
  std::uint64_t margin_floor = 1ULL << 30;   // the margin never goes below this
  double margin_growth = 1.5;                // on a confirmed OOM kill: margin x this, at least
  std::uint64_t margin_step = 256ULL << 20;  // ... and margin + this, at least
  double overhead_factor = 1.5;              // ... and this x the overhead beyond the budget at the kill
  unsigned max_retries = 3;                  // OOM-killed attempts retried by `headroom run`
  // Give-back: after this many clean runs (or clean periods of a long-running prover), the
  // learned margin shrinks by margin_step, never below what the floor and overhead ask.
  unsigned give_back_after = 3;
  std::chrono::milliseconds clean_period{std::chrono::hours(1)};
  // Neighbours' growth and the overhead's peak are taken over this window.
  std::chrono::milliseconds growth_window{std::chrono::minutes(5)};
  // Ahead of the kill: the budget keeps back what the neighbours' steady growth (a trusted trend
  // over twice this) will take over this horizon; 0: only their regrowth over growth_window.
  std::chrono::milliseconds forecast_horizon{std::chrono::seconds(30)};
  // A probe older than this no longer caps the budget.
  std::chrono::milliseconds probe_max_age{std::chrono::hours(1)};
  // A new generation is published when the budget moves by more than the larger of these.
  std::uint64_t hysteresis_bytes = 32ULL << 20;
  double hysteresis_fraction = 0.01;

  bool operator==(const BudgetPolicy&) const = default;
};
// Errors name the setting and the value ("margin_growth = 0.9: must be at least 1").
Status validate(const BudgetPolicy& p);

// One bound on the prover: a cgroup with a limit (its own or an ancestor's) or the host.
struct BudgetBound {
  std::string name;  // cgroup path, or "host"
  std::string kind;  // "limit", "memory.high" (v2), "MemAvailable" (host)
  std::uint64_t limit = 0;
  std::uint64_t usage = 0;        // host: MemTotal - MemAvailable
  std::uint64_t reclaimable = 0;  // page cache the kernel can drop at once (clean, unmapped); host: 0
  // Everything under this bound that is not the prover: usage - reclaimable - prover usage.
  std::uint64_t neighbours = 0;
  // limit - usage + reclaimable (0 when over).
  std::uint64_t room() const;
};

struct ProbeFinding {
  std::uint64_t allocatable = 0;   // what the probe could allocate
  std::uint64_t prover_usage = 0;  // what the prover held while it probed
  std::int64_t time_ns = 0;        // CLOCK_MONOTONIC of the probe
};

// Everything the controller looks at in one tick.
struct BudgetInputs {
  std::int64_t time_ns = 0;         // CLOCK_MONOTONIC
  std::string cgroup;               // where the prover runs
  std::vector<BudgetBound> bounds;  // own cgroup first, host last
  std::uint64_t prover_usage = 0;   // what the kernel charges for the prover's processes
  std::size_t prover_processes = 0;
  std::optional<std::uint64_t> self_reported;  // what the prover says it uses, when it says
  // The prover cgroup's invisible overhead (page tables, slab, kernel stacks, ...) now.
  std::uint64_t overhead = 0;
  std::optional<ProbeFinding> probe;
};

// What an OOM kill showed about the prover, measured at the kill.
struct KillEvidence {
  std::int64_t time_ns = 0;
  std::string what;           // the evidence in words, for the record (may hold any bytes: comms, paths)
  bool prover_victim = true;  // false: another process in its cgroup was the victim
  std::uint64_t budget = 0;   // the budget the prover was given
  std::uint64_t charge = 0;   // what the kernel charged for the prover at the kill
  std::optional<std::uint64_t> self_reported;  // what it believed it used
  std::uint64_t pinned = 0;                    // pinned (CUDA) or mlocked bytes, often outside any budget
  std::uint64_t page_tables = 0;
  // The rest of what no process shows: slab, kernel stacks, shmem nobody maps, other kernel
  // charge (its share at the last sample, or the domain's at the kill when that is the prover's).
  std::uint64_t kernel = 0;

  bool operator==(const KillEvidence&) const = default;
};

// A change to the learned margin, with why.
struct MarginChange {
  std::uint64_t before = 0, after = 0;
  std::string reason;

  bool operator==(const MarginChange&) const = default;
};

struct BudgetDecision {
  std::uint64_t budget = 0;  // bytes the prover may use in all
  std::uint64_t margin = 0;
  // Rises when a kill or give-back changes the learned margin, when validity flips, or when the
  // budget moves beyond the hysteresis; between generations budget and margin stay as published.
  std::uint64_t generation = 0;
  bool valid = false;                      // false: no bound could be read, or no room at all
  std::string tightest;                    // the bound the room came from
  std::uint64_t room = 0;                  // under the tightest bound, after neighbours' expected growth
  std::uint64_t neighbour_growth = 0;      // expected growth of neighbours in the tightest bound
  std::uint64_t forecast_growth = 0;       // ... of it, what their steady trend takes over the horizon
  std::uint64_t overhead_growth = 0;       // the overhead's recent peak above its level now
  std::optional<std::uint64_t> probe_cap;  // allocatable + prover usage, when a fresh probe says
  bool capped_by_probe = false;
  std::string margin_source;  // "floor", "invisible overhead", "learned (...)"
  std::string reason;         // the whole computation in words
  BudgetInputs inputs;        // what it came from
  std::int64_t time_ns = 0;
};

// What persists across restarts: the learned margin and the run history that moves it.
struct ControllerState {
  std::uint64_t learned_margin = 0;  // 0: nothing learned yet
  std::uint64_t generation = 0;
  std::uint64_t oom_kills = 0;  // confirmed kills that grew the margin, ever
  unsigned retries = 0;         // OOM-killed attempts in the current run
  unsigned clean_runs = 0;      // clean runs (or periods) since the last kill or give-back
  std::optional<KillEvidence> last_kill;
  std::vector<MarginChange> history;  // the newest last, at most kHistory
  static constexpr std::size_t kHistory = 32;

  bool operator==(const ControllerState&) const = default;
};
// The state file's text (JSON) and back; a bad file is an error naming what is wrong.
std::string serialiseState(const ControllerState& s);
Result<ControllerState> parseState(std::string_view text, std::string_view source);

class BudgetController {
 public:
  explicit BudgetController(BudgetPolicy policy, ControllerState state = {});

  // Recomputes the budget from this tick's inputs; the generation rises when the budget moves
  // by more than the hysteresis or the margin changes.
  BudgetDecision decide(const BudgetInputs& in);
  // A confirmed OOM kill: the margin in force (the larger of the last decision's and the
  // learned one) grows to the largest of margin x growth, margin + step, and overhead_factor x
  // the overhead beyond the budget; counts a retry. The next decide() publishes a new generation.
  MarginChange onOomKill(const KillEvidence& k);
  // A run that ended cleanly (or a clean period of a long-running prover): clears the retry
  // count, and after give_back_after of them gives back margin_step of the learned margin.
  std::optional<MarginChange> onCleanRun();
  // A new supervised run starts: retries count from zero again.
  void startRun() { state_.retries = 0; }
  // Whether another attempt is allowed after the kills counted so far.
  bool retryAllowed() const { return state_.retries <= policy_.max_retries; }

  // The margin decide() would use with this overhead: max(floor, overhead, learned).
  std::uint64_t marginFor(std::uint64_t overhead, std::string* source = nullptr) const;

  const ControllerState& state() const { return state_; }
  const BudgetPolicy& policy() const { return policy_; }
  const std::optional<BudgetDecision>& last() const { return last_; }
  // The budget in force: the last valid decision, which a prover that was handed it still runs
  // under when a later tick finds no room (a kill at the limit usually follows such a tick).
  const std::optional<BudgetDecision>& lastValid() const { return last_valid_; }

 private:
  struct Tick {
    std::int64_t time_ns = 0;
    std::map<std::string, std::uint64_t> neighbours;  // by bound name
    std::uint64_t overhead = 0;
  };
  BudgetPolicy policy_;
  ControllerState state_;
  std::deque<Tick> window_;
  std::optional<BudgetDecision> last_;
  std::optional<BudgetDecision> last_valid_;
  bool margin_changed_ = false;
};

// Who the prover is, for the inputs: a cgroup, and either these processes (the supervisor's
// prover tree) or every process of role prover in the cgroup's subtree.
struct ProverScope {
  std::string cgroup;
  std::optional<std::set<pid_t>> pids;
};
// Builds one tick's inputs from a snapshot (pure). Error: the cgroup is not in the snapshot.
Result<BudgetInputs> budgetInputs(const Snapshot& snap, const ProverScope& scope);

// The state file (I/O, kept apart from the state machine). The default path is per prover
// cgroup, so `headroom run`, `headroom budget` and the agent learn together for one prover:
// <dir>/budget<cgroup path with '/' as '_'>.json, dir /var/lib/headroom by default.
std::string defaultStatePath(std::string_view cgroup, std::string_view dir = "/var/lib/headroom");
// A missing file is a fresh state (nullopt); an unreadable or corrupt one is an error.
Result<std::optional<ControllerState>> loadState(const std::string& path);
// Atomic: a temporary file beside it, fsync, rename, fsync of the directory (made if missing).
Status saveState(const std::string& path, const ControllerState& s);

// Formats a budget for the prover: "{bytes}", "{kib}", "{mib}", "{gib}" (whole units, rounded
// down) and "{gib_float}" (two decimals) are replaced in `tmpl`. Error: an unknown placeholder.
Result<std::string> formatBudget(std::string_view tmpl, std::uint64_t budget);

}  // namespace headroom
