#include <fmt/format.h>
#include <gtest/gtest.h>

#include "headroom/model/roles.h"

namespace headroom {
namespace {

TEST(RoleRule, ParsesEachKind) {
  auto c = parseRoleRule("prover=comm:cuzk");
  ASSERT_TRUE(c) << c.error().describe();
  EXPECT_EQ(c->role, Role::kProver);
  EXPECT_EQ(c->kind, RoleRule::Kind::kComm);
  EXPECT_EQ(c->text(), "prover=comm:cuzk");
  auto r = parseRoleRule("colocated=cmdline:curio\\s+run");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, RoleRule::Kind::kCmdline);
  auto g = parseRoleRule("system=cgroup:/system.slice/");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->pattern, "/system.slice");
}

TEST(RoleRule, ErrorsNameTheRuleAndWhatIsAllowed) {
  auto no_eq = parseRoleRule("prover");
  ASSERT_FALSE(no_eq);
  EXPECT_NE(no_eq.error().message.find("ROLE=KIND:VALUE"), std::string::npos);
  auto bad_role = parseRoleRule("boss=comm:x");
  ASSERT_FALSE(bad_role);
  EXPECT_NE(bad_role.error().message.find("\"boss\""), std::string::npos);
  EXPECT_FALSE(parseRoleRule("self=comm:x")) << "self is the agent's own, not assignable";
  auto bad_kind = parseRoleRule("prover=exe:/bin/x");
  ASSERT_FALSE(bad_kind);
  EXPECT_NE(bad_kind.error().message.find("comm, cmdline, cgroup"), std::string::npos);
  auto bad_re = parseRoleRule("prover=cmdline:([");
  ASSERT_FALSE(bad_re);
  EXPECT_NE(bad_re.error().message.find("bad regex"), std::string::npos);
  EXPECT_FALSE(parseRoleRule("prover=comm:"));
  EXPECT_FALSE(parseRoleRule("prover=comm:a-name-longer-than-15"));
}

TEST(RoleMatcher, FirstMatchWinsSelfAlwaysFallbackSystem) {
  std::vector<RoleRule> rules;
  rules.push_back(*parseRoleRule("prover=comm:cuzk"));
  rules.push_back(*parseRoleRule("colocated=cmdline:^curio "));
  rules.push_back(*parseRoleRule("prover=cgroup:/proving"));
  RoleMatcher m(std::move(rules));
  EXPECT_EQ(m.match(10, 1, "cuzk", "cuzk daemon", "/"), Role::kProver);
  EXPECT_EQ(m.match(11, 1, "curio", "curio run", "/proving/curio"), Role::kColocated) << "order decides";
  EXPECT_EQ(m.match(12, 1, "helper", "helper", "/proving/x"), Role::kProver);
  EXPECT_EQ(m.match(13, 1, "sshd", "sshd -D", "/"), Role::kSystem);
  EXPECT_EQ(m.match(1, 1, "cuzk", "cuzk", "/"), Role::kSelf);
  EXPECT_EQ(m.match(14, 1, "x", "x", "/provingx"), Role::kSystem) << "cgroup prefix is by path component";
}

// A sampled process's command line, shared from one sample to the next, is judged once per
// command line: the verdicts must be the ones match() gives, rule order included, whichever
// command lines come and go (more than the memo keeps, some of them again).
TEST(RoleMatcher, SampledCommandLinesAreJudgedAsMatchJudgesThem) {
  std::vector<RoleRule> rules;
  rules.push_back(*parseRoleRule("system=comm:sshd"));
  rules.push_back(*parseRoleRule("prover=cmdline:--gpu [0-9]+"));
  rules.push_back(*parseRoleRule("colocated=cgroup:/proving/curio"));
  rules.push_back(*parseRoleRule("colocated=cmdline:^curio "));
  const RoleMatcher m(std::move(rules));
  const RoleMatcher copy = m;  // shares the memo, as the same rules may
  struct Case {
    std::string comm, cmdline, cgroup;
  };
  std::vector<Case> cases = {
      {"cuzk", "cuzk daemon --gpu 0", "/"},
      {"sshd", "sshd --gpu 1", "/"},
      {"curio", "curio run", "/"},
      {"x", "x --gpu 2", "/proving/curio"},
      {"y", "y", "/proving/curio/sub"},
      {"z", "z --gpu", "/"},
      {"w", "", "/"},
      {"curio", "curio run --gpu 7", "/proving/curio"},
  };
  for (int i = 0; i < 10000; ++i) cases.push_back({"p", fmt::format("prog{} {}", i, i % 3 == 0 ? "--gpu 1" : ""), "/"});
  std::vector<SharedString> kept;  // some command lines live on (processes that stay), most go
  for (int round = 0; round < 2; ++round) {
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      SharedString cmdline = c.cmdline;
      if (round == 1 && i % 7 == 0 && i / 7 < kept.size()) cmdline = kept[i / 7];
      const Role want = m.match(100, 1, c.comm, c.cmdline, c.cgroup);
      EXPECT_EQ(m.matchSampled(100, 1, c.comm, cmdline, c.cgroup), want) << c.cmdline;
      EXPECT_EQ(copy.matchSampled(100, 1, c.comm, cmdline, c.cgroup), want) << c.cmdline;
      EXPECT_EQ(m.matchSampled(100, 1, c.comm, cmdline, c.cgroup), want) << "asked again: " << c.cmdline;
      if (round == 0 && i % 7 == 0) kept.push_back(cmdline);
    }
  }
  EXPECT_EQ(m.matchSampled(1, 1, "cuzk", SharedString("cuzk --gpu 0"), "/"), Role::kSelf);
}

}  // namespace
}  // namespace headroom
