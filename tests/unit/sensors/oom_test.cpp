#include <gtest/gtest.h>
#include <sys/wait.h>

#include <csignal>

#include "headroom/sensors/oom_joiner.h"
#include "headroom/sources/oom_log.h"

namespace headroom {
namespace {

constexpr std::int64_t kMs = 1'000'000;

int signaled(int sig) { return sig; }           // wait status of a signal death
int exitedWith(int code) { return code << 8; }  // wait status of an exit

TEST(ClassifyExit, KillNineIsNeverAnOomKillByItself) {
  EXPECT_EQ(classifyExit(1, signaled(SIGKILL), false, false).describe(), "signaled(9)");
  EXPECT_EQ(classifyExit(1, signaled(SIGKILL), true, false).describe(), "oom_killed");
  EXPECT_EQ(classifyExit(1, signaled(SIGKILL), false, true).describe(), "oom_killed");
  EXPECT_EQ(classifyExit(1, signaled(SIGSEGV), true, false).describe(), "signaled(11)");
  EXPECT_EQ(classifyExit(1, exitedWith(3), false, false).describe(), "exited(3)");
  auto skipped = classifyExit(1, exitedWith(0), true, false);
  EXPECT_EQ(skipped.describe(), "exited(0)");
  EXPECT_NE(skipped.note.find("already exiting"), std::string::npos);
  EXPECT_TRUE(WIFSIGNALED(signaled(SIGKILL)));
}

OomMark mark(pid_t victim, std::int64_t ts, pid_t trigger = 50) {
  OomMark m;
  m.ts_ns = ts;
  m.trigger_pid = m.trigger_tgid = trigger;
  m.trigger_comm = "alloc";
  m.victim.pid = m.victim.tgid = victim;
  m.victim.comm = "victim";
  m.victim.anon_rss = 1000;
  return m;
}

KernelOomReport report(pid_t victim, std::uint64_t seq, bool group = false) {
  KernelOomReport r;
  r.first_seq = seq;
  r.constraint = "CONSTRAINT_MEMCG";
  r.oom_memcg = "/a";
  r.task_memcg = "/a/b";
  r.memcg_limit_bytes = 4096;
  r.victim.pid = r.victim.tgid = victim;
  r.victim.comm = "victim";
  r.victim.anon_rss = 2048;  // exact, wins over BPF's approximation
  r.victim.cgroup = "/a/b";
  r.oom_group = group;
  return r;
}

TEST(OomJoiner, JoinsBpfAndKmsgByVictim) {
  OomJoiner j;
  j.addMark(mark(10, 1000 * kMs), 1000 * kMs);
  EXPECT_TRUE(j.takeReady(1300 * kMs, 0).empty()) << "still waiting for the kernel's report";
  j.addReport(report(10, 7), 1001 * kMs, 1010 * kMs);
  EXPECT_TRUE(j.takeReady(1100 * kMs, 0).empty()) << "not settled yet";
  auto ready = j.takeReady(1300 * kMs, 42);
  ASSERT_EQ(ready.size(), 1u);
  const OomEvent& e = ready[0];
  EXPECT_TRUE(e.from_bpf && e.from_kmsg);
  ASSERT_EQ(e.victims.size(), 1u);
  EXPECT_EQ(e.victims[0].anon_rss.value(), 2048u);
  EXPECT_EQ(e.trigger_pid, 50);
  EXPECT_EQ(e.domain_cgroup.value(), "/a");
  EXPECT_EQ(e.domain_limit_bytes.value(), 4096u);
  EXPECT_EQ(e.wall_time_ns, 42);
  EXPECT_EQ(j.pending(), 0u);
}

TEST(OomJoiner, GivesUpWaitingForTheOtherSource) {
  OomJoiner j;
  j.addMark(mark(10, 0), 0);
  EXPECT_TRUE(j.takeReady(1000 * kMs, 0).empty());
  auto ready = j.takeReady(2500 * kMs, 0);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_FALSE(ready[0].from_kmsg);
}

TEST(OomJoiner, OneSourceAloneIsReadyWhenSettled) {
  OomJoiner::Options o;
  o.expect_bpf = false;
  OomJoiner j(o);
  j.addReport(report(10, 7), 0, 0);
  EXPECT_EQ(j.takeReady(300 * kMs, 0).size(), 1u);
}

TEST(OomJoiner, OomGroupIsOneIncidentWithSeveralVictims) {
  OomJoiner j;
  j.addMark(mark(10, 1000 * kMs), 1000 * kMs);
  j.addMark(mark(11, 1001 * kMs), 1001 * kMs);
  j.addReport(report(10, 7), 1000 * kMs, 1002 * kMs);
  j.addReport(report(11, 7, true), 1001 * kMs, 1002 * kMs);
  auto ready = j.takeReady(1400 * kMs, 0);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].victims.size(), 2u);
}

TEST(OomJoiner, SeparateIncidentsStaySeparate) {
  OomJoiner j;
  j.addMark(mark(10, 0, 50), 0);
  j.addMark(mark(20, 5000 * kMs, 60), 5000 * kMs);
  j.addReport(report(10, 7), 0, 10 * kMs);
  j.addReport(report(20, 9), 5000 * kMs, 5010 * kMs);
  auto ready = j.takeReady(6000 * kMs, 0);
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_NE(ready[0].id, ready[1].id);
  EXPECT_EQ(ready[0].victims.size(), 1u);
}

TEST(OomJoiner, AKillIsSkippedOnlyWhenNoSourceSawItSent) {
  // The mark found the victim exiting (it began to exit on the SIGKILL the kernel sends just
  // before it marks); the kernel's report says it killed it: it was killed.
  OomJoiner j;
  OomMark exiting = mark(10, 0);
  exiting.victim.kill_skipped = true;
  j.addMark(exiting, 0);
  j.addReport(report(10, 7), 0, 0);
  auto ready = j.takeReady(1000 * kMs, 0);
  ASSERT_EQ(ready.size(), 1u);
  ASSERT_EQ(ready[0].victims.size(), 1u);
  EXPECT_FALSE(ready[0].victims[0].kill_skipped);

  // Killed, then marked again by the next OOM in its cgroup while it dies: still a kill.
  OomJoiner k;
  k.addMark(mark(10, 0), 0);
  k.addMark(exiting, 100 * kMs);
  ready = k.takeReady(3000 * kMs, 0);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_FALSE(ready[0].victims[0].kill_skipped);

  // Marked exiting and nothing else: no kill sent.
  OomJoiner alone;
  alone.addMark(exiting, 0);
  ready = alone.takeReady(3000 * kMs, 0);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_TRUE(ready[0].victims[0].kill_skipped);
}

TEST(OomJoiner, ReapingProgressIsKept) {
  OomJoiner j;
  j.addMark(mark(10, 0), 0);
  j.addReap(10, false, 5);
  j.addReap(10, true, 9);
  j.addReport(report(10, 7), 0, 0);
  auto ready = j.takeReady(1000 * kMs, 0);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].reap_start_ns.value(), 5);
  EXPECT_EQ(ready[0].reap_finish_ns.value(), 9);
}

TEST(OomJoiner, AnIncidentIsToldWhenFirstSeenWithTheIdItIsReadyUnderAndItsReportsSequence) {
  OomJoiner j;
  j.addMark(mark(42, 1000 * kMs), 1000 * kMs);
  auto started = j.takeStarted();
  ASSERT_EQ(started.size(), 1u) << "durable before the wait for the report";
  EXPECT_TRUE(started[0].from_bpf);
  EXPECT_FALSE(started[0].kmsg_seq);
  EXPECT_TRUE(j.takeStarted().empty()) << "once";
  EXPECT_FALSE(j.untoldSince());
  j.addReport(report(42, 77), 1001 * kMs, 1010 * kMs);
  EXPECT_TRUE(j.takeStarted().empty()) << "the same incident";
  auto ready = j.takeReady(5'000'000'000, 1);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].id, started[0].id);
  EXPECT_EQ(ready[0].kmsg_seq, 77u);
  // A report alone: not told yet, it holds the log's watermark back.
  j.addReport(report(43, 90), 6'000'000'000, 6'000'000'000);
  EXPECT_EQ(j.untoldSince(), 90u);
  EXPECT_EQ(j.takeStarted().size(), 1u);
  EXPECT_FALSE(j.untoldSince());
}

}  // namespace
}  // namespace headroom
