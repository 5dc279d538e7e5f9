// `headroom agent`: the configuration from the file and the flags over it, --check-config's
// summary, and the daemon (daemon/agent.h).
#include <fmt/format.h>

#include <algorithm>
#include <ostream>

#include "headroom/cli/commands.h"
#include "headroom/daemon/agent.h"
#include "headroom/sensors/sensors.h"
#include "headroom/util/exit_codes.h"
#include "headroom/util/logging.h"

namespace headroom::cli {
namespace {

std::string budgetSummary(const AgentConfig& cfg) {
  if (!cfg.budget.enabled) return "off";
  if (!cfg.budget.cgroup.empty()) return fmt::format("for {}", cfg.budget.cgroup);
  bool prover_rule = std::any_of(cfg.role_rules.begin(), cfg.role_rules.end(),
                                 [](const RoleRule& r) { return r.role == Role::kProver; });
  return prover_rule ? "for the prover's cgroup" : "none (no prover rule, no budget.cgroup)";
}

}  // namespace

Result<AgentConfig> agentConfig(const AgentOptions& opts) {
  AgentConfig cfg;
  if (opts.config_path) {
    // A config file that cannot be read is the user's to fix, whatever the read said.
    auto loaded = loadAgentConfig(*opts.config_path);
    if (!loaded) return loaded.error().as(ErrorKind::kBadInput);
    cfg = std::move(*loaded);
  }
  for (const auto& [key, values] : opts.flags) {
    if (auto st = applyConfigFlag(cfg, key, values); !st) return st.error().as(ErrorKind::kBadInput);
  }
  return cfg;
}

int runAgent(const AgentOptions& opts, std::ostream& out, std::ostream& err) {
  if (!opts.check_config) installAgentSignalHandlers();  // before anything slow
  auto cfg = agentConfig(opts);
  if (!cfg) return fail(err, "agent", cfg.error());
  if (opts.check_config) {
    out << fmt::format(
        "config OK{}: listen {}, interval {} ms, {} role rule(s), {} watched cgroup(s), log {} {}, budget {}\n",
        opts.config_path ? " (" + *opts.config_path + ")" : " (defaults)", cfg->listen.text(), cfg->interval.count(),
        cfg->role_rules.size(), cfg->cgroups.empty() ? std::string("all") : std::to_string(cfg->cgroups.size()),
        toString(cfg->log_format), cfg->log_level, budgetSummary(*cfg));
    return kExitOk;
  }
  std::optional<std::string> log_level;
  if (opts.log_level_given) log_level = opts.log_level;
  setupLogging(cfg->log_format, log_level.value_or(cfg->log_level));
  routeLibbpfLogToSpdlog();

  AgentSetup setup;
  setup.root = opts.root;
  setup.config = std::move(*cfg);
  setup.reload = [opts] { return agentConfig(opts); };
  setup.config_source = opts.config_path.value_or("");
  setup.log_level = log_level;
  auto agent = Agent::create(std::move(setup));
  if (!agent) return fail(err, "agent", agent.error());
  if (auto st = (*agent)->run(); !st) return fail(err, "agent", st.error());
  return kExitOk;
}

}  // namespace headroom::cli
