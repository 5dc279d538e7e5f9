// Roles sort processes into prover / colocated / system / self by match rules: comm exact,
// cmdline regex, or cgroup path prefix. The first matching rule wins; the agent is always self.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "headroom/util/result.h"
#include "headroom/util/shared_string.h"

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
  explicit RoleMatcher(std::vector<RoleRule> rules, Role fallback = Role::kSystem);

  // `cgroup` is the process's memory cgroup path.
  Role match(pid_t pid, pid_t self_pid, std::string_view comm, std::string_view cmdline, std::string_view cgroup) const;
  // The same for a sampled process, whose command line the sampler shares from one sample to the
  // next: each cmdline rule's regex is searched once per command line, not once per sample
  // (the verdicts kept for the command lines seen lately, by their shared buffer).
  Role matchSampled(pid_t pid, pid_t self_pid, std::string_view comm, const SharedString& cmdline,
                    std::string_view cgroup) const;
  const std::vector<RoleRule>& rules() const { return rules_; }

 private:
  template <typename CmdlineMatches>
  Role decide(pid_t pid, pid_t self_pid, std::string_view comm, std::string_view cgroup,
              CmdlineMatches&& cmdline_matches) const;
  // Bit k: the k-th cmdline rule matches.
  std::uint64_t cmdlineVerdicts(const SharedString& cmdline) const;

  struct Verdicts {
    std::weak_ptr<const std::string> cmdline;  // the buffer the key names (expired: not it)
    std::uint64_t matched = 0;
  };
  struct Memo {
    std::mutex mu;
    std::unordered_map<const void*, Verdicts> by_cmdline;
  };
  static constexpr std::size_t kMemoEntries = 8192;  // then the expired go, or all

  std::vector<RoleRule> rules_;
  Role fallback_ = Role::kSystem;
  // Only with 1 to 64 cmdline rules (a bit each); shared by copies, whose rules are the same.
  std::shared_ptr<Memo> memo_;
};

}  // namespace headroom
