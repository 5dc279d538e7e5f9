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

}  // namespace
}  // namespace headroom
