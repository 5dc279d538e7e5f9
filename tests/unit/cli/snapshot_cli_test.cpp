// The real `headroom` binary against fixture trees: output, JSON and exit codes.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "testing/child_process.h"
#include "testing/fixture_tree.h"

namespace headroom {
namespace {

using testing::runCommand;

std::vector<std::string> cmd(const testing::FixtureTree& t, std::vector<std::string> args) {
  std::vector<std::string> v = {HEADROOM_BINARY, "--root", t.root(), "snapshot"};
  v.insert(v.end(), args.begin(), args.end());
  return v;
}

std::size_t lines(const std::string& s) { return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n')); }

TEST(SnapshotCli, TableShowsMachineCgroupsAndProcesses) {
  testing::FixtureTree t;
  testing::provingHostV1(t);
  auto r = runCommand(cmd(t, {"--role-rule", "prover=comm:cuzk"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("MACHINE"), std::string::npos);
  EXPECT_NE(r.out.find("available 8.00 GiB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/proving/prover"), std::string::npos);
  EXPECT_NE(r.out.find("3.00 GiB"), std::string::npos) << "headroom under /proving";
  EXPECT_NE(r.out.find("invisible"), std::string::npos);
  EXPECT_NE(r.out.find("prover"), std::string::npos);
  EXPECT_NE(r.out.find("cuzk"), std::string::npos);
  EXPECT_NE(r.out.find("1 vanished"), std::string::npos);
}

TEST(SnapshotCli, JsonAndPidFocus) {
  testing::FixtureTree t;
  testing::provingHostV1(t);
  auto r = runCommand(cmd(t, {"--json", "--pid", "101"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["cgroups"].size(), 1u);
  EXPECT_EQ(j["cgroups"][0]["memory"]["path"], "/proving/curio");
  EXPECT_EQ(j["focus_pid"], 101);
  auto table = runCommand(cmd(t, {"--pid", "101"}));
  ASSERT_EQ(table.exit_code, 0);
  EXPECT_NE(table.out.find("curio"), std::string::npos);
  EXPECT_EQ(table.out.find("cuzk"), std::string::npos);
}

TEST(SnapshotCli, BadInputIsOneLineAndExitCode2) {
  testing::FixtureTree t;
  testing::provingHostV1(t);
  struct Case {
    std::vector<std::string> argv;
    std::string must_name;
  };
  std::vector<Case> cases = {
      {cmd(t, {"--pid", "abc"}), "--pid"},
      {cmd(t, {"--frobnicate"}), "--frobnicate"},
      {cmd(t, {"--role-rule", "boss=comm:x"}), "boss"},
      {cmd(t, {"--cgroup", "/does/not/exist"}), "/does/not/exist"},
      {cmd(t, {"--pid", "4242"}), "4242"},
      {{HEADROOM_BINARY, "--root", "/no/such/root", "snapshot"}, "/no/such/root"},
      {{HEADROOM_BINARY}, "subcommand"},
  };
  for (const auto& c : cases) {
    auto r = runCommand(c.argv);
    EXPECT_EQ(r.exit_code, 2) << c.must_name << ": " << r.err;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find(c.must_name), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

TEST(SnapshotCli, RootWithoutCgroupsIsAnError) {
  testing::FixtureTree t;
  t.write("/proc/self/mountinfo", "22 26 0:21 / /sys rw,relatime - sysfs sysfs rw\n");
  t.meminfo();
  auto r = runCommand(cmd(t, {}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no memory cgroup controller"), std::string::npos) << r.err;
}

TEST(SnapshotCli, HelpAndVersionExitZero) {
  auto h = runCommand({HEADROOM_BINARY, "snapshot", "--help"});
  EXPECT_EQ(h.exit_code, 0);
  EXPECT_NE(h.out.find("--role-rule"), std::string::npos);
  auto v = runCommand({HEADROOM_BINARY, "--version"});
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_NE(v.out.find("0.1.0"), std::string::npos);
}

}  // namespace
}  // namespace headroom

namespace headroom {
namespace {

TEST(SnapshotCli, NonUtf8CommandLinesDoNotBreakJson) {
  testing::FixtureTree t;
  testing::provingHostV1(t);
  t.write("/proc/100/cmdline", std::string("cuzk\0\xff\xfe bad", 11));
  auto r = testing::runCommand(cmd(t, {"--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  bool seen = false;
  for (const auto& p : j["processes"]) {
    if (p["pid"] == 100) seen = p["cmdline"].get<std::string>().rfind("cuzk ", 0) == 0;
  }
  EXPECT_TRUE(seen);
}

}  // namespace
}  // namespace headroom
