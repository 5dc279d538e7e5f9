#include "headroom/model/roles.h"

#include <fmt/format.h>

#include <algorithm>

#include "headroom/sources/cgroup.h"

namespace headroom {

const char* toString(Role r) {
  switch (r) {
    case Role::kProver: return "prover";
    case Role::kColocated: return "colocated";
    case Role::kSystem: return "system";
    case Role::kSelf: return "self";
  }
  return "unknown";
}

std::optional<Role> roleFromString(std::string_view s) {
  if (s == "prover") return Role::kProver;
  if (s == "colocated") return Role::kColocated;
  if (s == "system") return Role::kSystem;
  if (s == "self") return Role::kSelf;
  return std::nullopt;
}

std::string RoleRule::text() const {
  const char* k = kind == Kind::kComm ? "comm" : kind == Kind::kCmdline ? "cmdline" : "cgroup";
  return fmt::format("{}={}:{}", toString(role), k, pattern);
}

Result<RoleRule> parseRoleRule(std::string_view spec) {
  auto eq = spec.find('=');
  auto colon = eq == std::string_view::npos ? eq : spec.find(':', eq + 1);
  if (colon == std::string_view::npos)
    return badInput(fmt::format("role rule \"{}\" is not ROLE=KIND:VALUE (e.g. prover=comm:cuzk)", spec));
  std::string_view role_s = spec.substr(0, eq);
  std::string_view kind_s = spec.substr(eq + 1, colon - eq - 1);
  std::string_view value = spec.substr(colon + 1);
  RoleRule r;
  auto role = roleFromString(role_s);
  if (!role || *role == Role::kSelf)
    return badInput(fmt::format("role rule \"{}\": role \"{}\" is not one of prover, colocated, system", spec, role_s));
  r.role = *role;
  if (value.empty()) return badInput(fmt::format("role rule \"{}\": empty value", spec));
  r.pattern = std::string(value);
  if (kind_s == "comm") {
    r.kind = RoleRule::Kind::kComm;
    // The kernel keeps 15 bytes of comm: a longer name could never match.
    if (value.size() > 15)
      return badInput(fmt::format("role rule \"{}\": comm \"{}\" is longer than the kernel's 15 bytes", spec, value));
  } else if (kind_s == "cmdline") {
    r.kind = RoleRule::Kind::kCmdline;
    try {
      r.regex = std::regex(r.pattern, std::regex::ECMAScript | std::regex::optimize);
    } catch (const std::regex_error& e) {
      return badInput(fmt::format("role rule \"{}\": bad regex \"{}\": {}", spec, value, e.what()));
    }
  } else if (kind_s == "cgroup") {
    r.kind = RoleRule::Kind::kCgroup;
    r.pattern = normaliseCgroupPath(value);
  } else {
    return badInput(fmt::format("role rule \"{}\": kind \"{}\" is not one of comm, cmdline, cgroup", spec, kind_s));
  }
  return r;
}

namespace {
bool searchCmdline(const RoleRule& r, std::string_view cmdline) {
  try {
    return std::regex_search(cmdline.begin(), cmdline.end(), r.regex);
  } catch (const std::regex_error&) {
    // A pathological command line can exhaust the regex engine: no match, never a throw on
    // the sampling path.
    return false;
  }
}
}  // namespace

RoleMatcher::RoleMatcher(std::vector<RoleRule> rules, Role fallback) : rules_(std::move(rules)), fallback_(fallback) {
  const auto cmdline_rules =
      std::count_if(rules_.begin(), rules_.end(), [](const RoleRule& r) { return r.kind == RoleRule::Kind::kCmdline; });
  if (cmdline_rules > 0 && cmdline_rules <= 64) memo_ = std::make_shared<Memo>();
}

template <typename CmdlineMatches>
Role RoleMatcher::decide(pid_t pid, pid_t self_pid, std::string_view comm, std::string_view cgroup,
                         CmdlineMatches&& cmdline_matches) const {
  if (pid == self_pid && self_pid != 0) return Role::kSelf;
  std::size_t k = 0;  // the cmdline rule's index among the cmdline rules
  for (const RoleRule& r : rules_) {
    switch (r.kind) {
      case RoleRule::Kind::kComm:
        if (comm == r.pattern) return r.role;
        break;
      case RoleRule::Kind::kCmdline:
        if (cmdline_matches(k++, r)) return r.role;
        break;
      case RoleRule::Kind::kCgroup:
        if (cgroupIsWithin(cgroup, r.pattern)) return r.role;
        break;
    }
  }
  return fallback_;
}

Role RoleMatcher::match(pid_t pid, pid_t self_pid, std::string_view comm, std::string_view cmdline,
                        std::string_view cgroup) const {
  return decide(pid, self_pid, comm, cgroup, [&](std::size_t, const RoleRule& r) { return searchCmdline(r, cmdline); });
}

std::uint64_t RoleMatcher::cmdlineVerdicts(const SharedString& cmdline) const {
  std::lock_guard lock(memo_->mu);
  auto& memo = memo_->by_cmdline;
  if (auto it = memo.find(cmdline.identity()); it != memo.end() && !it->second.cmdline.expired())
    return it->second.matched;
  std::uint64_t matched = 0;
  std::size_t k = 0;
  for (const RoleRule& r : rules_) {
    if (r.kind != RoleRule::Kind::kCmdline) continue;
    if (searchCmdline(r, cmdline)) matched |= std::uint64_t{1} << k;
    ++k;
  }
  if (memo.size() >= kMemoEntries) {
    std::erase_if(memo, [](const auto& e) { return e.second.cmdline.expired(); });
    if (memo.size() >= kMemoEntries) memo.clear();
  }
  memo.insert_or_assign(cmdline.identity(), Verdicts{cmdline.watch(), matched});
  return matched;
}

Role RoleMatcher::matchSampled(pid_t pid, pid_t self_pid, std::string_view comm, const SharedString& cmdline,
                               std::string_view cgroup) const {
  if (!memo_ || cmdline.empty()) return match(pid, self_pid, comm, cmdline, cgroup);
  std::optional<std::uint64_t> verdicts;  // asked only when a cmdline rule is reached
  return decide(pid, self_pid, comm, cgroup, [&](std::size_t k, const RoleRule&) {
    if (!verdicts) verdicts = cmdlineVerdicts(cmdline);
    return ((*verdicts >> k) & 1U) != 0;
  });
}

}  // namespace headroom
