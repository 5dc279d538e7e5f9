// What more than one subcommand shares: the budget policy's flags (`run`, `budget`), --role-rule
// (`snapshot`, `budget`, `top`), the --agent-* flags (`budget`, `top`), and how a failure is said.
#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <charconv>
#include <fstream>
#include <ostream>

#include "headroom/cli/commands.h"
#include "headroom/util/exit_codes.h"
#include "headroom/util/files.h"
#include "headroom/util/units.h"

namespace headroom::cli {
namespace {

Result<double> parseFactor(const std::string& flag, const std::string& text) {
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size())
    return badInput(fmt::format("{} \"{}\": not a number (e.g. 1.5)", flag, text));
  return v;
}

}  // namespace

Result<BudgetPolicy> policyFromFlags(const PolicyFlags& f, BudgetPolicy p) {
  auto size = [](const std::string& flag, const std::string& text, std::uint64_t& into) -> Status {
    if (text.empty()) return ok();
    auto v = parseSize(text);
    if (!v) return badInput(fmt::format("{} \"{}\": {}", flag, text, v.error().describe()));
    into = *v;
    return ok();
  };
  auto factor = [](const std::string& flag, const std::string& text, double& into) -> Status {
    if (text.empty()) return ok();
    auto v = parseFactor(flag, text);
    if (!v) return unexpected(v.error());
    into = *v;
    return ok();
  };
  for (const Status& s :
       {size("--margin-floor", f.margin_floor, p.margin_floor), size("--margin-step", f.margin_step, p.margin_step),
        factor("--margin-growth", f.margin_growth, p.margin_growth),
        factor("--overhead-factor", f.overhead_factor, p.overhead_factor)}) {
    if (!s) return unexpected(s.error());
  }
  if (f.max_retries) p.max_retries = *f.max_retries;
  if (f.give_back_after) p.give_back_after = *f.give_back_after;
  if (auto s = validate(p); !s) {
    // validate() names the setting; the user typed a flag.
    std::string msg = s.error().describe();
    for (auto [key, flag] : {std::pair{"margin_growth", "--margin-growth"},
                             {"overhead_factor", "--overhead-factor"},
                             {"max_retries", "--max-retries"},
                             {"give_back_after", "--give-back-after"}}) {
      if (msg.rfind(key, 0) == 0) msg = flag + msg.substr(std::string_view(key).size());
    }
    return badInput(msg);
  }
  return p;
}

Result<std::vector<RoleRule>> roleRulesFromFlags(const std::vector<std::string>& specs) {
  std::vector<RoleRule> rules;
  rules.reserve(specs.size());
  for (const std::string& spec : specs) {
    auto r = parseRoleRule(spec);
    if (!r) return r.error().wrap("--role-rule").as(ErrorKind::kBadInput);
    rules.push_back(std::move(*r));
  }
  return rules;
}

Status writeOutputFile(const std::string& path, std::string_view content, const char* what) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  std::string display = fmt::format("the {} to {}", what, path);
  if (!fd.valid()) return errnoError("writing " + display);
  if (auto st = writeAll(fd.get(), content, display); !st) return st;
  if (::close(fd.release()) != 0) return errnoError("writing " + display);
  return ok();
}

int fail(std::ostream& err, std::string_view command, const Error& e) {
  err << "headroom " << command << ": " << e.describe() << "\n";
  return exitCodeFor(e);
}

Result<HttpClientAuth> agentClientAuth(const AgentClientOptions& agent) {
  HttpClientAuth auth{agent.ca, agent.cert, agent.key, agent.user, ""};
  if (!agent.password_file.empty()) {
    std::ifstream in(agent.password_file);
    if (!in || !std::getline(in, auth.password))
      return errnoError(fmt::format("--agent-password-file {}: cannot be read", agent.password_file))
          .as(ErrorKind::kBadInput);
  }
  return auth;
}

}  // namespace headroom::cli
