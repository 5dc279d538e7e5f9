// The kernel log's line reader (sources/log_text.h) on each form a saved log comes in. The lines
// are hand-made in each form's layout (the forms' real captures are in tests/fixtures/oom-logs
// and tested through `headroom explain`); each test names the form.
#include <gtest/gtest.h>

#include "headroom/sources/log_text.h"
#include "headroom/sources/oom_log.h"

namespace headroom {
namespace {

constexpr const char* kKilled =
    "Memory cgroup out of memory: Killed process 4242 (prover) total-vm:8000kB, anon-rss:4000kB, file-rss:100kB, "
    "shmem-rss:0kB, UID:0 pgtables:40kB oom_score_adj:0";

std::vector<std::string> texts(const LogText& t) {
  std::vector<std::string> out;
  for (const auto& l : t.lines) out.push_back(l.text);
  return out;
}

TEST(LogText, DmesgWithTimestampsAndCallerIds) {
  auto t = readLogText(
      "[ 1234.567890] a invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0\n"
      "[ 1234.567901][ T4242] CPU: 1 PID: 4242 Comm: a Not tainted 5.4.0-42-generic #46-Ubuntu\n"
      "[ 1234.568000] [  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name\n"
      "[ 1234.568001] [   4242]     0  4242     2000     1000    40960        0             0 a\n");
  ASSERT_EQ(t.lines.size(), 4u);
  EXPECT_EQ(t.lines[0].ts_us.value(), 1234567890u);
  EXPECT_EQ(t.lines[1].text.substr(0, 10), "CPU: 1 PID");
  EXPECT_EQ(t.lines[2].text.substr(0, 9), "[  pid  ]") << "a task row's bracket is not a timestamp";
  EXPECT_EQ(t.lines[3].text.substr(0, 9), "[   4242]");
  EXPECT_EQ(t.form.dmesg, 4u);
}

TEST(LogText, DmesgTInAnyLocale) {
  auto t = readLogText(
      "[Thu Dec  7 00:05:15 2017] Killed process 1 (a) total-vm:4kB, anon-rss:4kB, file-rss:0kB\n"
      "[Do Dez  7 00:05:15 2017] Killed process 2 (b) total-vm:4kB, anon-rss:4kB, file-rss:0kB\n"
      "[2017年12月7日 00:05:15] Killed process 3 (c) total-vm:4kB, anon-rss:4kB, file-rss:0kB\n");
  ASSERT_EQ(t.lines.size(), 3u);
  for (const auto& l : t.lines) EXPECT_EQ(l.text.substr(0, 15), "Killed process ") << l.text;
  EXPECT_EQ(t.lines[1].stamp, "Do Dez  7 00:05:15 2017");
}

TEST(LogText, SyslogMessagesKernLogAndJournalShortForms) {
  auto t = readLogText(
      "Mar  3 10:11:12 node-3 kernel: [12345.678901] a invoked oom-killer: gfp_mask=0xcc0, order=0\n"
      "Mar 03 10:11:12 node-3 kernel: CPU: 0 PID: 7 Comm: a Not tainted 6.1.0-13-amd64 #1\n"
      "2024-03-03T10:11:12.123456+00:00 node-3 kernel: memory: usage 4kB, limit 4kB, failcnt 1\n"
      "Tue 2024-03-03 10:11:12 UTC node-3 kernel: oom-kill:constraint=CONSTRAINT_MEMCG,task=a,pid=7,uid=0\n"
      "Mär 03 10:11:12.123456 node-3 systemd[1]: a.service: A process of this unit has been killed by the OOM "
      "killer.\n"
      "Mar  3 10:11:12 kernel: the host field left out\n");
  ASSERT_EQ(t.lines.size(), 6u);
  EXPECT_EQ(t.lines[0].text.substr(0, 18), "a invoked oom-kill");
  EXPECT_EQ(t.lines[0].ts_us.value(), 12345678901u);
  EXPECT_EQ(t.lines[0].host, "node-3");
  EXPECT_EQ(t.lines[2].text.substr(0, 13), "memory: usage");
  EXPECT_EQ(t.lines[3].text.substr(0, 9), "oom-kill:");
  EXPECT_FALSE(t.lines[4].kernel) << "systemd's line is no kernel line";
  EXPECT_TRUE(t.lines[5].kernel);
  EXPECT_EQ(t.lines[5].text, "the host field left out");
  EXPECT_EQ(t.form.hosts, std::vector<std::string>{"node-3"});
}

TEST(LogText, RsyslogEscapesAndKmsgEscapesBecomeLines) {
  auto t = readLogText(
      "Mar  3 10:11:12 h kernel: Memory cgroup stats for /a:#012anon 4096#012file 0#011\n"
      "4,10,20,-;Mem-Info:\n"
      "4,11,21,-;active_anon:1 inactive_anon:2\\x0afree:3\n");
  EXPECT_EQ(texts(t), (std::vector<std::string>{"Memory cgroup stats for /a:", "anon 4096", "file 0 ",
                                                "Mem-Info:", "active_anon:1 inactive_anon:2", "free:3"}));
  EXPECT_EQ(t.lines[5].seq.value(), 11u);
}

TEST(LogText, JournalJsonAndJsonPretty) {
  auto t = readLogText(
      R"({"_TRANSPORT":"kernel","MESSAGE":"a invoked oom-killer: gfp_mask=0xcc0, order=0","_HOSTNAME":"gpu-7",)"
      R"("_SOURCE_MONOTONIC_TIMESTAMP":"5000000","__REALTIME_TIMESTAMP":"1700000000000000"})"
      "\n"
      R"({"_TRANSPORT":"syslog","SYSLOG_IDENTIFIER":"curio","MESSAGE":[75,105,108,108,101,100]})"
      "\n"
      "{\n"
      "        \"_TRANSPORT\" : \"kernel\",\n"
      "        \"MESSAGE\" : \"Killed process 9 (a) total-vm:4kB, anon-rss:4kB, file-rss:0kB\"\n"
      "}\n");
  ASSERT_EQ(t.lines.size(), 3u);
  EXPECT_EQ(t.lines[0].host, "gpu-7");
  EXPECT_EQ(t.lines[0].ts_us.value(), 5000000u);
  EXPECT_EQ(t.lines[0].stamp, "2023-11-14T22:13:20.000Z");
  EXPECT_FALSE(t.lines[1].kernel);
  EXPECT_EQ(t.lines[1].text, "Killed") << "a MESSAGE of bytes";
  EXPECT_TRUE(t.lines[2].kernel);
  EXPECT_EQ(t.form.journal_json, 3u);
}

TEST(LogText, DmesgRawAndDecoded) {
  auto t = readLogText(
      "<4>[   12.000001] a invoked oom-killer: gfp_mask=0xcc0, order=0\n"
      "kern  :err   : [   12.000002] Out of memory: Killed process 9 (a) total-vm:4kB, anon-rss:4kB\n"
      "user  :info  : [   12.000003] Killed process 10 (fake) total-vm:4kB, anon-rss:4kB\n");
  ASSERT_EQ(t.lines.size(), 3u);
  EXPECT_EQ(t.lines[0].text.substr(0, 9), "a invoked");
  EXPECT_EQ(t.lines[1].text.substr(0, 14), "Out of memory:");
  EXPECT_FALSE(t.lines[2].kernel);
}

TEST(LogText, QuotedIndentedAndCrlfPastes) {
  auto t = readLogText(std::string("> > [ 1.000000] ") + kKilled + "\r\n\t    [ 2.000000] oom_reaper: x\r\n");
  ASSERT_EQ(t.lines.size(), 2u);
  EXPECT_EQ(t.lines[0].text, kKilled);
  EXPECT_EQ(t.lines[1].text, "oom_reaper: x");
  EXPECT_EQ(t.form.quoted, 2u);
}

// A terminal cuts a line at its width, anywhere; a mail client at a space, which it drops; a
// journal indents a record's further lines. Only the first two are joined back.
TEST(LogText, WrappedLinesAreJoinedAndARecordsOwnLinesAreNot) {
  std::string terminal;
  for (std::string line : {std::string("[ 4.000000] x invoked oom-killer: gfp_mask=0xcc0, order=0, oom_score_adj=0"),
                           std::string("[ 5.000000] ") + kKilled}) {
    for (std::size_t at = 0; at < line.size(); at += 60) terminal += line.substr(at, 60) + "\n";
  }
  auto t = readLogText(terminal);
  ASSERT_EQ(t.lines.size(), 2u);
  EXPECT_EQ(t.lines[1].text, kKilled);
  EXPECT_GT(t.form.joined, 0u);

  auto mail = readLogText(
      "[ 5.000000] Memory cgroup out of memory: Killed process 4242 (prover) total-vm:8000kB,\n"
      "anon-rss:4000kB, file-rss:100kB, shmem-rss:0kB, UID:0 pgtables:40kB oom_score_adj:0\n"
      "[ 5.100000] oom_reaper: reaped process 4242 (prover), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB\n");
  ASSERT_EQ(mail.lines.size(), 2u);
  EXPECT_EQ(mail.lines[0].text, kKilled);

  auto journal = readLogText(
      "Mar 03 10:11:12 h kernel: Memory cgroup stats for /a:\n"
      "                          anon 4096\n"
      "                          file 0\n"
      "Mar 03 10:11:12 h kernel: Tasks state (memory values in pages):\n");
  EXPECT_EQ(texts(journal), (std::vector<std::string>{"Memory cgroup stats for /a:", "anon 4096", "file 0",
                                                      "Tasks state (memory values in pages):"}));
  EXPECT_EQ(journal.lines[1].host, "h");
}

// Found by the oom_log fuzz target: a record's further lines were copied from the line before
// them through a reference into the vector they were added to, which moved as it grew.
TEST(LogText, ManyLinesOfOneRecordEachCarryItsFields) {
  std::string text = "Mar 03 10:11:12 h kernel: Memory cgroup stats for /a:\n";
  for (int i = 0; i < 200; ++i) text += fmt::format("                          key_{} {}\n", i, i);
  auto t = readLogText(text);
  ASSERT_EQ(t.lines.size(), 201u);
  for (const auto& l : t.lines) EXPECT_EQ(l.host, "h");
  EXPECT_EQ(t.lines[200].text, "key_199 199");
}

TEST(LogText, TextWithoutPrefixesIsTakenLineByLine) {
  auto t = readLogText(std::string("a invoked oom-killer: gfp_mask=0xcc0, order=0\n") + kKilled + "\n");
  EXPECT_EQ(texts(t).size(), 2u);
  EXPECT_EQ(t.form.describe(), "plain kernel messages");
}

}  // namespace
}  // namespace headroom
