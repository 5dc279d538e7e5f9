// `headroom run -- CMD ARGS...`: the flags made into a SupervisorConfig (every error names the
// flag and the value), and the supervisor (supervisor/supervisor.h).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <ostream>

#include "headroom/cli/commands.h"
#include "headroom/config/config.h"
#include "headroom/supervisor/supervisor.h"
#include "headroom/util/exit_codes.h"
#include "headroom/util/units.h"

namespace headroom::cli {
namespace {

bool validEnvName(std::string_view n) {
  if (n.empty() || std::isdigit(static_cast<unsigned char>(n[0]))) return false;
  return std::all_of(n.begin(), n.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

Result<SupervisorConfig> supervisorConfig(const RunOptions& o) {
  SupervisorConfig c;
  c.root = o.root;
  c.cgroup = o.cgroup;
  c.command = o.command;
  if (c.command.empty()) return usageError("no command: headroom run [options] -- CMD ARGS...");
  auto policy = policyFromFlags(o.policy);
  if (!policy) return policy.error();
  c.policy = *policy;
  auto duration = [](const char* flag, const std::string& text) -> Result<std::chrono::milliseconds> {
    auto d = parseDuration(text);
    if (!d) return badInput(fmt::format("{} \"{}\": {}", flag, text, d.error().describe()));
    return *d;
  };
  auto rt = duration("--reclaim-timeout", o.reclaim_timeout);
  if (!rt) return rt.error();
  c.reclaim_timeout = *rt;
  auto si = duration("--sample-interval", o.sample_interval);
  if (!si) return si.error();
  if (si->count() < 10) return badInput(fmt::format("--sample-interval \"{}\": at least 10ms", o.sample_interval));
  c.sample_interval = *si;
  for (const std::string& spec : o.budget_env) {
    auto eq = spec.find('=');
    std::string name = spec.substr(0, eq);
    std::string tmpl = eq == std::string::npos ? o.budget_format : spec.substr(eq + 1);
    if (!validEnvName(name))
      return badInput(fmt::format("--budget-env \"{}\": \"{}\" is not a variable name", spec, name));
    if (auto f = formatBudget(tmpl, 0); !f)
      return badInput(fmt::format("--budget-env \"{}\": {}", spec, f.error().describe()));
    c.handover.env[name] = tmpl;
  }
  for (const std::string& t : o.budget_arg) {
    if (auto f = formatBudget(t, 0); !f) return badInput(fmt::format("--budget-arg: {}", f.error().describe()));
  }
  c.handover.args = o.budget_arg;
  if (auto f = formatBudget(o.budget_format, 0); !f)
    return badInput(fmt::format("--budget-format: {}", f.error().describe()));
  c.handover.file_format = o.budget_format;
  if (!o.budget_file.empty() && o.budget_file.front() != '/')
    return badInput(fmt::format("--budget-file \"{}\": an absolute path, please", o.budget_file));
  c.handover.file = o.budget_file;
  c.keep_state = !o.no_state;
  c.state_file = o.state_file;
  c.probe = o.probe;
  if (!o.probe_stop_margin.empty()) {
    auto m = parseSize(o.probe_stop_margin);
    if (!m) return badInput(fmt::format("--probe-stop-margin \"{}\": {}", o.probe_stop_margin, m.error().describe()));
    c.probe_stop_margin = *m;
  }
  c.self_report = o.self_report;
  c.bpf = o.bpf;
  auto hook = parseWarningHook(o.on_warning);
  if (!hook) return badInput(fmt::format("--on-warning \"{}\": {}", o.on_warning.substr(0, 64), hook.error().message));
  c.warning.on_warning = o.on_warning;
  auto eta = duration("--warning-eta", o.warning_eta);
  if (!eta) return eta.error();
  c.warning.eta = *eta;
  if (auto st = validate(c.warning); !st)
    return badInput(fmt::format("--warning-eta \"{}\": must be at least 1s", o.warning_eta));
  return c;
}

}  // namespace

int runSupervisor(const RunOptions& opts, std::ostream& /*out*/, std::ostream& err) {
  installRunSignalHandlers();
  auto cfg = supervisorConfig(opts);
  if (!cfg) return fail(err, "run", cfg.error());
  auto supervisor = Supervisor::create(std::move(*cfg), err);
  if (!supervisor) return fail(err, "run", supervisor.error());
  return (*supervisor)->run();
}

}  // namespace headroom::cli
