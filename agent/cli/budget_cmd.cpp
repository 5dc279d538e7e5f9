// `headroom budget`: the prover's budget now, in one line for an entrypoint script. From the
// agent when one answers (it has the history: neighbours' growth, probes, OOM kills); computed
// here otherwise, with the same controller and the same state file, which is only read.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <ostream>

#include "headroom/cli/commands.h"
#include "headroom/sources/cgroup.h"
#include "headroom/controller/controller.h"
#include "headroom/exporter/exporter.h"
#include "headroom/exporter/http.h"
#include "headroom/model/snapshot_json.h"
#include "headroom/util/units.h"

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

// Why no budget came, and the exit code that says it.
struct Failure {
  int code = kExitFailure;
  std::string message;
};

Result<std::uint64_t> u64Field(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned()) return makeError(0, fmt::format("{}: missing or not a byte count", key));
  return it->get<std::uint64_t>();
}

// `refused`: the agent answered with a decision of no budget (no room): that is the answer, and
// computing one here instead would hand out what the agent, with more history, refused.
Result<Answer> askAgent(const BudgetCliOptions& opts, bool& refused) {
  std::string base = opts.agent_url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  std::string url = base + "/v1/budget";
  auto r = httpGet(url, kAgentTimeout);
  if (!r) return r.error();
  auto j = nlohmann::json::parse(r->body, nullptr, false);
  if (r->status != 200) {
    std::string why = j.is_object() && j.contains("error") && j["error"].is_string() ? j["error"].get<std::string>()
                                                                                     : fmt::format("HTTP {}", r->status);
    refused = j.is_object() && j.contains("decision") && j["decision"].is_object() &&
              (opts.cgroup.empty() || normaliseCgroupPath(opts.cgroup) == j.value("cgroup", ""));
    return makeError(0, fmt::format("{} answered {}: {}", url, r->status, why));
  }
  if (!j.is_object()) return makeError(0, fmt::format("{}: the answer is not a JSON object", url));
  Answer a;
  for (auto [key, into] : {std::pair{"budget_bytes", &a.budget}, {"margin_bytes", &a.margin}, {"generation", &a.generation}}) {
    auto v = u64Field(j, key);
    if (!v) return v.error().wrap(url);
    *into = *v;
  }
  a.cgroup = j.value("cgroup", "");
  // An agent that budgets for another prover does not answer for this one.
  if (!opts.cgroup.empty() && normaliseCgroupPath(opts.cgroup) != a.cgroup)
    return makeError(0, fmt::format("the agent at {} budgets for cgroup {}, not --cgroup {}", base, a.cgroup, opts.cgroup));
  a.source = "agent";
  a.doc = std::move(j);
  return a;
}

Result<Answer> computeLocally(const BudgetCliOptions& opts, const BudgetPolicy& policy, std::vector<RoleRule> rules,
                              Failure& failure) {
  auto fail = [&](int code, std::string message) -> Error {
    failure = Failure{code, message};
    return makeError(0, std::move(message));
  };
  auto host = openHost(opts.root);
  if (!host) return fail(kExitBadInput, host.error().describe());
  std::string cgroup;
  if (!opts.cgroup.empty()) {
    cgroup = normaliseCgroupPath(opts.cgroup);
  } else {
    auto own = callersMemoryCgroup(*host->fs, host->collector->hierarchy());
    if (!own) return fail(kExitFailure, fmt::format("finding this process's memory cgroup (give --cgroup): {}", own.error().describe()));
    cgroup = std::move(*own);
  }
  CollectOptions co;
  co.cgroups = {cgroup};
  auto raw = host->collector->collect(co);
  if (!raw) return fail(opts.cgroup.empty() ? kExitFailure : kExitBadInput, raw.error().describe());
  auto snap = buildSnapshot(std::move(*raw), RoleMatcher(std::move(rules)));
  auto in = budgetInputs(*snap, ProverScope{cgroup, std::nullopt});
  if (!in) return fail(kExitFailure, in.error().describe());

  std::string path = opts.state_file.empty() ? defaultStatePath(cgroup) : opts.state_file;
  ControllerState state;
  auto loaded = loadState(path);
  if (!loaded) {
    // Said even at the default log level: the budget comes without what was learned.
    spdlog::warn("{}: computing with a fresh state (the file is left as it is)", loaded.error().describe());
  } else if (*loaded) {
    state = std::move(**loaded);
  }
  BudgetController controller(policy, std::move(state));
  BudgetDecision d = controller.decide(*in);
  if (!d.valid) return fail(kExitFailure, fmt::format("cgroup {}: {}", cgroup, d.reason));
  Answer a;
  a.budget = d.budget;
  a.margin = d.margin;
  a.generation = d.generation;
  a.cgroup = cgroup;
  a.source = "local";
  double when = static_cast<double>(snap->wall_time_ns) / 1e9;
  a.doc = budgetJson(d, controller.state(), when);
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
    out << fmt::format("HEADROOM_BUDGET_BYTES={} HEADROOM_MARGIN_BYTES={} HEADROOM_BUDGET_GENERATION={} HEADROOM_BUDGET_SOURCE={}\n",
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
    return kExitBadInput;
  }
  std::vector<RoleRule> rules;
  for (const std::string& spec : opts.role_rules) {
    auto r = parseRoleRule(spec);
    if (!r) {
      err << "headroom budget: --role-rule: " << r.error().describe() << "\n";
      return kExitBadInput;
    }
    rules.push_back(std::move(*r));
  }

  std::string agent_said;
  if (!opts.local) {
    bool refused = false;
    auto a = askAgent(opts, refused);
    if (a) {
      spdlog::info("budget for {} from the agent at {} (generation {})", a->cgroup, opts.agent_url, a->generation);
      print(*a, opts.format, out);
      return kExitOk;
    }
    agent_said = a.error().describe();
    if (refused) {
      err << "headroom budget: no budget: " << agent_said << "\n";
      return kExitFailure;
    }
    spdlog::info("no budget from the agent ({}): computing it here", agent_said);
  }
  Failure failure;
  auto a = computeLocally(opts, *policy, std::move(rules), failure);
  if (!a) {
    err << "headroom budget: no budget: " << failure.message;
    if (!agent_said.empty()) err << " (and from the agent: " << agent_said << ")";
    err << "\n";
    return failure.code;
  }
  print(*a, opts.format, out);
  return kExitOk;
}

}  // namespace headroom::cli
