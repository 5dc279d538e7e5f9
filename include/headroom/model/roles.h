// Roles sort processes into prover / colocated / system / self by match rules: comm exact,
// cmdline regex, or cgroup path prefix. The first matching rule wins; the agent is always self.
#pragma once

#include <sys/types.h>

#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/util/result.h"

namespace headroom {

enum class Role { kProver, kColocated, kSystem, kSelf };
const char* toString(Role r);
std::optional<Role> roleFromString(std::string_view s);

struct RoleRule {
  enum class Kind { kComm, kCmdline, kCgroup };
  Role role = Role::kSystem;
  Kind kind = Kind::kComm;
  std::string pattern;       // as given
  std::regex regex;          // kCmdline only (ECMAScript, searched anywhere in the cmdline)
  std::string text() const;  // "prover=comm:cuzk"
};

// Parses "ROLE=KIND:VALUE": ROLE in prover|colocated|system, KIND in comm|cmdline|cgroup.
Result<RoleRule> parseRoleRule(std::string_view spec);

class RoleMatcher {
 public:
  RoleMatcher() = default;
  explicit RoleMatcher(std::vector<RoleRule> rules, Role fallback = Role::kSystem)
      : rules_(std::move(rules)), fallback_(fallback) {}

  // `cgroup` is the process's memory cgroup path.
  Role match(pid_t pid, pid_t self_pid, std::string_view comm, std::string_view cmdline, std::string_view cgroup) const;
  const std::vector<RoleRule>& rules() const { return rules_; }

 private:
  std::vector<RoleRule> rules_;
  Role fallback_ = Role::kSystem;
};

}  // namespace headroom
