// `headroom budget`: the prover's budget now, in one line for an entrypoint script. From the
// agent when one answers (it has the history: neighbours' growth, probes, OOM kills); computed
// here otherwise by the agent's own ProverBudget, with the state file only read.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <ostream>

#include "headroom/cli/commands.h"
#include "headroom/controller/prover_budget.h"
#include "headroom/net/http_client.h"
#include "headroom/sources/cgroup.h"
#include "headroom/sources/collector.h"
#include "headroom/util/exit_codes.h"
#include "headroom/util/json.h"

namespace headroom::cli {
namespace {

// Long enough for a busy agent, short enough that a launch script does not hang on a stuck one.
constexpr auto kAgentTimeout = std::chrono::milliseconds(2000);

struct Answer {
  std::uint64_t budget = 0, margin = 0, generation = 0;
  std::string cgroup;
  std::string source;  // "agent" or "local"
  // The /v1/budget document. Built from a value_t: json's noexcept default constructor reaches
  // code that may throw, which clang-tidy (bugprone-exception-escape) would pin on Answer.
  nlohmann::json doc{nlohmann::json::value_t::null};
};

Result<std::uint64_t> u64Field(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned()) return badData(fmt::format("{}: missing or not a byte count", key));
  return it->get<std::uint64_t>();
}

// An agent that answered with a decision of no budget (no room) has the last word: a budget
// computed here, with less history, would hand out what it refused. That answer is an error of
// kind kUnavailable; any other failure to get an answer is another kind.
Result<Answer> askAgent(const BudgetCliOptions& opts) {
  std::string base = opts.agent.url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  std::string url = base + "/v1/budget";
  auto auth = agentClientAuth(opts.agent);
  if (!auth) return auth.error();
  auto r = httpGet(url, kAgentTimeout, *auth);
  if (!r) return r.error();
  auto j = nlohmann::json::parse(r->body, nullptr, false);
  if (r->status != 200) {
    std::string why = j.is_object() && j.contains("error") && j["error"].is_string()
                          ? j["error"].get<std::string>()
                          : fmt::format("HTTP {}", r->status);
    // Credentials the agent refuses are the caller's to fix, not a reason to compute elsewhere.
    if (r->status == 401)
      return badInput(
          fmt::format("{} answered 401: {} (--agent-user, --agent-password-file)", url,
                      opts.agent.user.empty() ? "it asks for basic auth" : "the user or password is wrong"));
    bool refused = j.is_object() && j.contains("decision") && j["decision"].is_object() &&
                   (opts.cgroup.empty() || normaliseCgroupPath(opts.cgroup) == j.value("cgroup", ""));
    return makeError(refused ? ErrorKind::kUnavailable : ErrorKind::kIo,
                     fmt::format("{} answered {}: {}", url, r->status, why));
  }
  if (!j.is_object()) return badData(fmt::format("{}: the answer is not a JSON object", url));
  Answer a;
  for (auto [key, into] :
       {std::pair{"budget_bytes", &a.budget}, {"margin_bytes", &a.margin}, {"generation", &a.generation}}) {
    auto v = u64Field(j, key);
    if (!v) return v.error().wrap(url);
    *into = *v;
  }
  a.cgroup = j.value("cgroup", "");
  // An agent that budgets for another prover does not answer for this one.
  if (!opts.cgroup.empty() && normaliseCgroupPath(opts.cgroup) != a.cgroup)
    return notFound(fmt::format("the agent at {} budgets for cgroup {}, not --cgroup {}", base, a.cgroup, opts.cgroup));
  a.source = "agent";
  a.doc = std::move(j);
  return a;
}

Result<Answer> computeLocally(const BudgetCliOptions& opts, const BudgetPolicy& policy, std::vector<RoleRule> rules) {
  auto source = openSourceRoot(opts.root);
  if (!source) return source.error();
  std::string cgroup;
  if (!opts.cgroup.empty()) {
    cgroup = normaliseCgroupPath(opts.cgroup);
  } else {
    auto own = callersMemoryCgroup(*source->fs, source->collector->hierarchy());
    if (!own)
      return makeError(ErrorKind::kNotFound,
                       fmt::format("finding this process's memory cgroup (give --cgroup): {}", own.error().describe()));
    cgroup = std::move(*own);
  }
  CollectOptions co;
  co.cgroups = {cgroup};
  auto raw = source->collector->collect(co);
  // A --cgroup that cannot be read is the user's; the caller's own, the machine's.
  if (!raw) return opts.cgroup.empty() ? raw.error().as(ErrorKind::kNotFound) : raw.error().as(ErrorKind::kBadInput);
  auto snap = buildSnapshot(std::move(*raw), RoleMatcher(std::move(rules)));

  BudgetConfig cfg;
  cfg.cgroup = cgroup;
  cfg.policy = policy;
  cfg.state_file = opts.state_file;
  ProverBudget::Options po;
  po.save_state = false;
  po.say_outcomes = false;
  ProverBudget budget(std::move(cfg), {}, po);
  auto u = budget.update(*snap, std::nullopt);
  if (!u || !u->decision) {
    std::string why = u ? u->document.value("error", "no decision") : "no decision";
    return makeError(ErrorKind::kUnavailable, why);
  }
  const BudgetDecision& d = *u->decision;
  if (!d.valid) return makeError(ErrorKind::kUnavailable, fmt::format("cgroup {}: {}", cgroup, d.reason));
  Answer a;
  a.budget = d.budget;
  a.margin = d.margin;
  a.generation = d.generation;
  a.cgroup = cgroup;
  a.source = "local";
  a.doc = std::move(u->document);
  spdlog::info("budget for {} computed here: {}", cgroup, d.reason);
  return a;
}

void print(const Answer& a, const std::string& format, std::ostream& out) {
  if (format == "bytes") {
    out << a.budget << "\n";
  } else if (format == "mib") {
    out << (a.budget >> 20) << "\n";
  } else if (format == "gib") {
    out << (a.budget >> 30) << "\n";
  } else if (format == "env") {
    // Digits and two fixed words: safe to eval or source as they are.
    out << fmt::format(
        "HEADROOM_BUDGET_BYTES={} HEADROOM_MARGIN_BYTES={} HEADROOM_BUDGET_GENERATION={} HEADROOM_BUDGET_SOURCE={}\n",
        a.budget, a.margin, a.generation, a.source);
  } else {
    nlohmann::json doc = a.doc;
    doc["source"] = a.source;
    out << dumpJson(doc) << "\n";
  }
}

}  // namespace

int runBudgetCommand(const BudgetCliOptions& opts, std::ostream& out, std::ostream& err) {
  // Bad input is said whichever way the budget would come: a typo in an entrypoint script must
  // not hide behind a running agent.
  static const std::vector<std::string> kFormats = {"bytes", "mib", "gib", "env", "json"};
  if (std::find(kFormats.begin(), kFormats.end(), opts.format) == kFormats.end()) {
    err << fmt::format("headroom budget: --format {}: must be one of bytes, mib, gib, env, json\n", opts.format);
    return kExitBadInput;
  }
  auto policy = policyFromFlags(opts.policy);
  if (!policy) {
    err << "headroom budget: " << policy.error().describe() << "\n";
    return exitCodeFor(policy.error());
  }
  auto rules = roleRulesFromFlags(opts.role_rules);
  if (!rules) {
    err << "headroom budget: " << rules.error().describe() << "\n";
    return exitCodeFor(rules.error());
  }

  std::string agent_said;
  if (!opts.local) {
    auto a = askAgent(opts);
    if (a) {
      spdlog::info("budget for {} from the agent at {} (generation {})", a->cgroup, opts.agent.url, a->generation);
      print(*a, opts.format, out);
      return kExitOk;
    }
    agent_said = a.error().describe();
    if (a.error().kind == ErrorKind::kBadInput) {
      err << "headroom budget: " << agent_said << "\n";
      return kExitBadInput;
    }
    if (a.error().kind == ErrorKind::kUnavailable) {
      err << "headroom budget: no budget: " << agent_said << "\n";
      return kExitFailure;
    }
    spdlog::info("no budget from the agent ({}): computing it here", agent_said);
  }
  auto a = computeLocally(opts, *policy, std::move(*rules));
  if (!a) {
    err << "headroom budget: no budget: " << a.error().describe();
    if (!agent_said.empty()) err << " (and from the agent: " << agent_said << ")";
    err << "\n";
    return exitCodeFor(a.error());
  }
  print(*a, opts.format, out);
  return kExitOk;
}

}  // namespace headroom::cli
