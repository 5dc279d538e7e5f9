// OOM records off the machine, end to end (docs/events.md): the real agent writes each record of
// real OOM kills as a JSON line into a file rotated for real, and to a real systemd-journald in a
// mount namespace of its own; `headroom report --from-json` given what came out (the files, stdin,
// journalctl's JSON) prints byte for byte what `headroom report` prints from the journal.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "testing/cgroup_sandbox.h"
#include "testing/child_process.h"
#include "testing/fixture_tree.h"
#include "testing/integration.h"

namespace headroom {
namespace {

using testing::CgroupSandbox;
using testing::ChildProcess;
using testing::CommandResult;
using testing::fileText;
using testing::runCommand;
using testing::TempDir;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr const char* kMessageId = "78cbe2b375704b3eaa519cd951e0e16e";

// A workload that climbs past the cgroup's limit and is OOM-killed; the agent's record of it.
void oomKill(testing::AgentProcess& agent, const CgroupSandbox& sb, int record) {
  auto w = ChildProcess::spawn({HEADROOM_WORKLOAD, "--anon-slow", std::to_string(256 * kMiB)}, sb.procsFile());
  ASSERT_TRUE(w) << w.error().describe();
  ASSERT_TRUE(agent.waitLog(fmt::format("OOM kill recorded as record {} ", record), 60s)) << agent.logText();
}

CommandResult report(std::vector<std::string> source, const std::vector<std::string>& args) {
  std::vector<std::string> a = {HEADROOM_BINARY, "report"};
  a.insert(a.end(), source.begin(), source.end());
  a.insert(a.end(), args.begin(), args.end());
  return runCommand(a);
}

// Every report option on the journal and on the records read back: the same bytes out.
void expectSameReports(const std::vector<std::string>& journal, const std::vector<std::string>& from_json,
                       const std::vector<std::vector<std::string>>& variants) {
  for (const auto& args : variants) {
    SCOPED_TRACE(fmt::format("report {}", fmt::join(args, " ")));
    CommandResult want = report(journal, args);
    CommandResult got = report(from_json, args);
    ASSERT_EQ(want.exit_code, 0) << want.err;
    ASSERT_EQ(got.exit_code, 0) << got.err;
    EXPECT_FALSE(want.out.empty());
    EXPECT_EQ(got.out, want.out);
    EXPECT_EQ(got.err, "") << "nothing skipped, nothing read twice";
  }
}

TEST(Events, RecordsInTheRotatedFileReportTheSameAsTheJournal) {
  SKIP_WITHOUT_ROOT();
  auto sb = CgroupSandbox::create("events-file");
  ASSERT_TRUE(sb) << sb.error().describe();
  ASSERT_TRUE(sb->setLimit(128 * kMiB));
  TempDir tmp;
  const std::string journal = tmp.file("oom.hrj");
  const std::string events = tmp.file("ev/events.jsonl");
  // A record is more than 4 KiB: each kill rotates the file. No warnings: their start and end
  // go to the same file (docs/events.md), and whether a climb is warned before its kill depends
  // on how fast the machine runs it (an emulated one warns the slow climb, adding two lines);
  // the warnings' events are the warning test's.
  testing::AgentProcess agent({"--interval", "200ms", "--cgroup", sb->path(), "--journal", journal, "--budget.enabled",
                               "false", "--warning.enabled", "false", "--events.output", events, "--events.max-bytes",
                               "4KiB", "--events.max-files", "5", "--events.journald", "off"},
                              testing::infoLogOptions());
  ASSERT_TRUE(agent.waitLog("events: each OOM record also goes to file")) << agent.logText();
  for (int i = 1; i <= 3; ++i) oomKill(agent, *sb, i);
  ASSERT_TRUE(agent.waitMetrics([](const std::string& t) {
    return testing::metric(t, "headroom_events_written_total", {{"sink", "file"}}).value_or(0) == 3;
  })) << agent.metrics();
  const std::string m = agent.metrics();
  EXPECT_EQ(testing::metric(m, "headroom_events_failures_total", {{"sink", "file"}}), 0);
  EXPECT_EQ(testing::metric(m, "headroom_events_dropped_total"), 0);
  EXPECT_EQ(testing::metric(m, "headroom_events_file_rotations_total"), 2) << m;

  // Rotated for real: one whole line in each file, the newest in the file itself.
  const std::vector<std::string> files = {events + ".2", events + ".1", events};
  for (std::size_t i = 0; i < files.size(); ++i) {
    const std::string text = fileText(files[i]);
    ASSERT_FALSE(text.empty()) << files[i];
    EXPECT_EQ(text.find('\n'), text.size() - 1) << files[i] << ": one whole line";
    auto env = nlohmann::json::parse(text);
    EXPECT_EQ(env["schema"], "headroom.event.v1");
    EXPECT_EQ(env["kind"], "oom_kill");
    EXPECT_EQ(env["id"], i + 1);
  }
  EXPECT_FALSE(std::filesystem::exists(events + ".3"));

  // What the files hold reports exactly as the journal does, with every option.
  const std::vector<std::string> from = {"--from-json", files[0], "--from-json", files[1], "--from-json", files[2]};
  const std::vector<std::vector<std::string>> variants = {
      {}, {"--json"}, {"--list"}, {"--list", "--json"}, {"--id", "2"}, {"--id", "1", "--json"}, {"--since", "1h"}};
  expectSameReports({"--journal", journal}, from, variants);
  CommandResult svg_j = report({"--journal", journal}, {"--svg", tmp.file("j.svg"), "--html", tmp.file("j.html")});
  CommandResult svg_e = report(from, {"--svg", tmp.file("e.svg"), "--html", tmp.file("e.html")});
  ASSERT_EQ(svg_e.exit_code, 0) << svg_e.err;
  EXPECT_EQ(fileText(tmp.file("e.svg")), fileText(tmp.file("j.svg")));
  EXPECT_EQ(fileText(tmp.file("e.html")), fileText(tmp.file("j.html")));

  // The same through stdin, the lines in the order a store that answers newest first gives them,
  // with another program's log line mixed in.
  std::string newest_first = "level=info msg=\"tail started\"\n";
  for (auto it = files.rbegin(); it != files.rend(); ++it) newest_first += fileText(*it);
  const std::string store = tmp.file("store.jsonl", newest_first);
  for (const auto& args : variants) {
    SCOPED_TRACE(fmt::format("report --from-json - {}", fmt::join(args, " ")));
    std::vector<std::string> a = {"/bin/sh", "-c", "f=$1; shift; exec \"$0\" report --from-json - \"$@\" < \"$f\"",
                                  HEADROOM_BINARY, store};
    a.insert(a.end(), args.begin(), args.end());
    CommandResult got = runCommand(a);
    CommandResult want = report({"--journal", journal}, args);
    ASSERT_EQ(got.exit_code, 0) << got.err;
    EXPECT_EQ(got.out, want.out);
    EXPECT_EQ(got.err, "headroom report: stdin: skipped 1 line(s) that are not headroom OOM kill events\n");
  }
}

// A private systemd-journald: /run and /var/log/journal are tmpfs in a mount namespace of the
// agent's own, the runtime journal (/run/log/journal) a directory of the test's, so journalctl
// reads it from outside. Without /var/log/journal (the kernel matrix's guests) journald keeps
// the runtime journal alone, as Storage=auto does. The journald is stopped with the test.
struct PrivateJournald {
  TempDir dir;
  std::string prelude() const {
    return fmt::format(
        "set -e; mount --make-rprivate /; mount -t tmpfs tmpfs /run; mkdir -p /run/systemd/journal /run/log/journal; "
        "mount --bind {0} /run/log/journal; if [ -d /var/log/journal ]; then mount -t tmpfs tmpfs /var/log/journal; "
        "fi; "
        "SYSTEMD_LOG_LEVEL=debug SYSTEMD_LOG_TARGET=console /lib/systemd/systemd-journald </dev/null >{2} 2>&1 & "
        "echo $! > {1}; "
        "i=0; while [ ! -S /run/systemd/journal/socket ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; set +e; ",
        dir.file("runtime"), dir.file("journald.pid"), dir.file("journald.log"));
  }
  PrivateJournald() { std::filesystem::create_directories(dir.file("runtime")); }
  ~PrivateJournald() {
    std::ifstream in(dir.file("journald.pid"));
    pid_t pid = 0;
    if (in >> pid && pid > 0) ::kill(pid, SIGTERM);
    for (int i = 0; i < 100 && pid > 0 && ::kill(pid, 0) == 0; ++i) std::this_thread::sleep_for(20ms);
  }
  // journalctl -o json --all of the entries with our MESSAGE_ID, once there are `n`.
  std::string entries(std::size_t n) const {
    for (auto end = Clock::now() + 20s; Clock::now() < end; std::this_thread::sleep_for(100ms)) {
      std::string machine;
      for (const auto& e : std::filesystem::directory_iterator(dir.file("runtime")))
        if (e.is_directory()) machine = e.path().string();
      if (machine.empty()) continue;
      auto r = runCommand({"/usr/bin/journalctl", "--directory", machine, "-o", "json", "--all", "--no-pager",
                           std::string("MESSAGE_ID=") + kMessageId});
      if (r.exit_code == 0 && static_cast<std::size_t>(std::count(r.out.begin(), r.out.end(), '\n')) >= n) return r.out;
    }
    return {};
  }
  // Everything journald holds, for a failure's message.
  std::string everything() const {
    std::string out = runCommand({"/usr/bin/find", dir.path.string()}).out + prelude() + "\n" +
                      runCommand({"/usr/bin/tail", "-n", "40", dir.file("journald.log")}).out;
    for (const auto& e : std::filesystem::directory_iterator(dir.file("runtime")))
      out += runCommand({"/usr/bin/journalctl", "--directory", e.path().string(), "--no-pager", "-o", "short"}).out;
    return out;
  }
};

TEST(Events, AnOomKillReachesARealJournaldWithItsFieldsAndReadsBackTheSame) {
  SKIP_WITHOUT_ROOT();
  if (::access("/lib/systemd/systemd-journald", X_OK) != 0 || ::access("/usr/bin/journalctl", X_OK) != 0 ||
      ::access("/usr/bin/unshare", X_OK) != 0)
    GTEST_SKIP() << "no systemd-journald, journalctl or unshare";
  auto sb = CgroupSandbox::create("events-journald");
  ASSERT_TRUE(sb) << sb.error().describe();
  ASSERT_TRUE(sb->setLimit(128 * kMiB));
  TempDir tmp;
  const std::string journal = tmp.file("oom.hrj");
  PrivateJournald jd;
  testing::AgentProcess::Options o = testing::infoLogOptions();
  o.launcher = {"/usr/bin/unshare", "--mount", "--propagation", "private"};
  o.prelude = jd.prelude();
  // As systemd starts it: journald = "auto" sees INVOCATION_ID and the socket.
  o.env = {{"INVOCATION_ID", "0123456789abcdef0123456789abcdef"}};
  testing::AgentProcess agent(
      {"--interval", "200ms", "--cgroup", sb->path(), "--journal", journal, "--budget.enabled", "false"}, o);
  ASSERT_TRUE(agent.waitLog("events: each OOM record also goes to journald")) << agent.logText();
  auto w = ChildProcess::spawn({HEADROOM_WORKLOAD, "--anon-slow", std::to_string(256 * kMiB)}, sb->procsFile());
  ASSERT_TRUE(w) << w.error().describe();
  ASSERT_TRUE(agent.waitLog("OOM kill recorded as record 1 ", 60s)) << agent.logText();
  const std::string out = jd.entries(1);
  ASSERT_FALSE(out.empty()) << "no entry in journald\n" << agent.logText() << jd.everything();
  EXPECT_TRUE(agent.waitMetrics([](const std::string& t) {
    return testing::metric(t, "headroom_events_written_total", {{"sink", "journald"}}).value_or(0) == 1;
  }));
  auto entry = nlohmann::json::parse(out.substr(0, out.find('\n')));
  const auto rec = nlohmann::json::parse(report({"--journal", journal}, {"--json"}).out);
  EXPECT_EQ(entry["MESSAGE_ID"], kMessageId);
  EXPECT_EQ(entry["PRIORITY"], "3");
  EXPECT_EQ(entry["SYSLOG_IDENTIFIER"], "headroom");
  EXPECT_EQ(entry["HEADROOM_RECORD_ID"], "1");
  EXPECT_EQ(entry["HEADROOM_VICTIM_PID"], std::to_string(w->pid()));
  EXPECT_EQ(entry["HEADROOM_VICTIM_COMM"], "headroom-worklo");
  EXPECT_EQ(entry["HEADROOM_CGROUP"], sb->path());
  EXPECT_EQ(entry["HEADROOM_OOM_DOMAIN"], sb->path());
  EXPECT_EQ(entry["HEADROOM_LIMIT_BYTES"], std::to_string(128 * kMiB));
  ASSERT_TRUE(entry.contains("HEADROOM_AT_KILL_ANON_BYTES")) << out;
  EXPECT_GT(std::stoull(entry["HEADROOM_AT_KILL_ANON_BYTES"].get<std::string>()), 64 * kMiB);
  EXPECT_NE(entry["MESSAGE"].get<std::string>().find(fmt::format("pid {} (headroom-worklo) was OOM-killed", w->pid())),
            std::string::npos)
      << entry["MESSAGE"];
  EXPECT_EQ(nlohmann::json::parse(entry["HEADROOM_RECORD"].get<std::string>()), rec);
  // journalctl's JSON, as it came, reads back to the same reports.
  expectSameReports({"--journal", journal}, {"--from-json", tmp.file("journalctl.json", out)},
                    {{}, {"--json"}, {"--list"}, {"--id", "1", "--json"}});
}

}  // namespace
}  // namespace headroom
