// The OOM report assembler (sources/oom_log.h) on the forms and fragments of reports: hand-made
// lines in each kernel's layout (the forms' real reports are in tests/fixtures/oom-logs, checked
// through `headroom explain`), each test naming the kernels whose form it is.
#include <gtest/gtest.h>

#include "headroom/sources/oom_log.h"

namespace headroom {
namespace {

constexpr std::uint64_t kKiB = 1024;

TEST(OomLog, HandMadeRhel6KillLinesWithUidAndSacrificeChild) {
  // 2.6.32: "Kill process P (comm) score S or sacrifice child", then the child killed instead.
  auto r = parseOomLog(
      "Out of memory: Kill process 100 (java) score 900 or sacrifice child\n"
      "Killed process 101, UID 48, (httpd) total-vm:204800kB, anon-rss:102400kB, file-rss:512kB\n");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].victim.pid, 101);
  EXPECT_EQ(r[0].victim.comm, "httpd");
  EXPECT_EQ(r[0].victim.uid.value(), 48u);
  EXPECT_EQ(r[0].victim.anon_rss.value(), 102400 * kKiB);
  EXPECT_FALSE(r[0].victim.shmem_rss.has_value()) << "not printed before 4.x";
  EXPECT_EQ(r[0].chosen_pid.value(), 100);
  EXPECT_EQ(r[0].proof, KillProof::kKilledLine);
  EXPECT_FALSE(r[0].header_seen);
}

TEST(OomLog, HandMadePre419MemcgReportNamesItsCgroupsInTheTaskInLine) {
  // 3.10 .. 4.18: "Task in X killed as a result of limit of Y", one stats line per cgroup of the
  // domain's tree (their sum is the domain's), the task table with nr_ptes.
  auto r = parseOomLog(
      "java invoked oom-killer: gfp_mask=0xd0, order=0, oom_score_adj=0\n"
      "java cpuset=abc mems_allowed=0\n"
      "CPU: 3 PID: 200 Comm: java Not tainted 3.10.0-957.el7.x86_64 #1\n"
      "Task in /kubepods/pod1/c1 killed as a result of limit of /kubepods/pod1\n"
      "memory: usage 1048576kB, limit 1048576kB, failcnt 12\n"
      "memory+swap: usage 1048576kB, limit 9007199254740988kB, failcnt 0\n"
      "kmem: usage 0kB, limit 9007199254740988kB, failcnt 0\n"
      "Memory cgroup stats for /kubepods/pod1: cache:0KB rss:0KB rss_huge:0KB\n"
      "Memory cgroup stats for /kubepods/pod1/c1: cache:100KB rss:1048000KB rss_huge:0KB\n"
      "[ pid ]   uid  tgid total_vm      rss nr_ptes swapents oom_score_adj name\n"
      "[  200]     0   200   500000   262000     600        0             0 java\n"
      "Memory cgroup out of memory: Kill process 200 (java) score 1000 or sacrifice child\n"
      "Killed process 200 (java) total-vm:2000000kB, anon-rss:1047000kB, file-rss:1000kB, shmem-rss:0kB\n");
  ASSERT_EQ(r.size(), 1u);
  const auto& k = r[0];
  EXPECT_EQ(k.kernel_release, "3.10.0-957.el7.x86_64");
  EXPECT_EQ(k.trigger_pid.value(), 200);
  EXPECT_EQ(k.task_memcg.value(), "/kubepods/pod1/c1");
  EXPECT_EQ(k.oom_memcg.value(), "/kubepods/pod1");
  EXPECT_EQ(k.constraint, "CONSTRAINT_MEMCG");
  EXPECT_EQ(k.memcg_limit_bytes.value(), 1048576 * kKiB);
  ASSERT_TRUE(k.memcg.has_value());
  EXPECT_FALSE(k.memcg->memsw->limit.has_value()) << "the kernel's no limit";
  EXPECT_EQ(k.memcg->stats_cgroup, "/kubepods/pod1");
  EXPECT_EQ(k.memcg->stats.get("rss").value(), 1048000 * kKiB) << "the tree's lines summed";
  ASSERT_EQ(k.tasks.size(), 1u);
  EXPECT_EQ(k.tasks[0].pgtables_bytes, 600u * 4096);
  EXPECT_EQ(k.tasks[0].rss_bytes, 262000u * 4096);
  EXPECT_EQ(k.victim.cgroup, "/kubepods/pod1/c1");
}

TEST(OomLog, HandMadeExcerptStartingAtTheStackFindsTheTriggerBeforeIt) {
  auto r = parseOomLog(
      "CPU: 5 PID: 3000 Comm: cuzk Tainted: G           OE     6.8.0-45-generic #45-Ubuntu\n"
      "Call Trace:\n"
      " dump_stack_lvl+0x76/0xa0\n"
      " dump_header+0x47/0x1f0\n"
      " oom_kill_process+0x118/0x280\n"
      " out_of_memory+0x103/0x350\n"
      "memory: usage 2048kB, limit 2048kB, failcnt 3\n"
      "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/p,task_memcg=/p/w,"
      "task=cuzk,pid=3000,uid=0\n"
      "Memory cgroup out of memory: Killed process 3000 (cuzk) total-vm:9000kB, anon-rss:2000kB, file-rss:4kB, "
      "shmem-rss:0kB, UID:0 pgtables:64kB oom_score_adj:0\n");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_FALSE(r[0].header_seen);
  EXPECT_EQ(r[0].trigger_pid.value(), 3000);
  EXPECT_EQ(r[0].trigger_comm, "cuzk");
  EXPECT_EQ(r[0].kernel_release, "6.8.0-45-generic");
  EXPECT_EQ(r[0].oom_memcg.value(), "/p");
}

TEST(OomLog, HandMadeCpuLineOfAnotherWarningIsNoTrigger) {
  auto r = parseOomLog(
      "CPU: 1 PID: 10 Comm: kworker/1:0 Not tainted 6.1.0 #1\n"
      "Call Trace:\n"
      " __warn+0x1/0x2\n"
      "Out of memory: Killed process 77 (a) total-vm:4kB, anon-rss:4kB, file-rss:0kB, shmem-rss:0kB\n");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_FALSE(r[0].trigger_pid.has_value());
  EXPECT_TRUE(r[0].kernel_release.empty());
}

TEST(OomLog, HandMadeGrepOfKillLinesGivesOneIncidentPerKill) {
  auto r = parseOomLog(
      "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/a,task=a,"
      "pid=1,uid=0\n"
      "Out of memory: Killed process 1 (a) total-vm:4kB, anon-rss:4kB, file-rss:0kB, shmem-rss:0kB, UID:0\n"
      "oom_reaper: reaped process 1 (a), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB\n"
      "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/b,task=b,"
      "pid=2,uid=0\n"
      "Out of memory: Killed process 2 (b) total-vm:4kB, anon-rss:8kB, file-rss:0kB, shmem-rss:0kB, UID:0\n"
      "Memory cgroup out of memory: Kill process 3 (c) score 5 or sacrifice child\n"
      "oom_reaper: reaped process 4 (d), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB\n");
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].victim.pid, 1);
  ASSERT_TRUE(r[0].reaped.has_value());
  EXPECT_EQ(r[1].victim.pid, 2);
  EXPECT_EQ(r[1].task_memcg.value(), "/b");
  EXPECT_NE(r[0].incident, r[1].incident);
  EXPECT_EQ(r[2].victim.pid, 3);
  EXPECT_EQ(r[2].proof, KillProof::kKillLine);
  EXPECT_FALSE(r[2].victim.anon_rss.has_value());
  EXPECT_EQ(r[3].victim.pid, 4);
  EXPECT_EQ(r[3].proof, KillProof::kReaperLine);
}

TEST(OomLog, HandMadeKillLineCutByATerminal) {
  auto r = parseOomLog("Killed process 62769 (\n");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].victim.pid, 62769);
  EXPECT_TRUE(r[0].victim.comm.empty());
  EXPECT_TRUE(r[0].victim_line_cut);
  EXPECT_TRUE(parseOomLog("Killed process\nKilled process abc (x)\n").empty()) << "no pid: no kill";
}

TEST(OomLog, HandMadeReportWithoutAKillIsAnIncidentWithoutVictims) {
  auto r = parseOomLog(
      "a invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0\n"
      "CPU: 0 PID: 5 Comm: a Not tainted 6.1.0 #1\n"
      "Out of memory and no killable processes...\n");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].proof, KillProof::kNone);
  EXPECT_EQ(r[0].victim.pid, 0);
  EXPECT_EQ(r[0].trigger_comm, "a");
}

TEST(OomLog, HandMadeOomGroupKillsAreOneIncident) {
  auto r = parseOomLog(
      "a invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0\n"
      "Memory cgroup out of memory: Killed process 1 (a) total-vm:4kB, anon-rss:4kB, file-rss:0kB, shmem-rss:0kB\n"
      "Tasks in /g are going to be killed due to memory.oom.group set\n"
      "Memory cgroup out of memory: Killed process 2 (b) total-vm:4kB, anon-rss:4kB, file-rss:0kB, shmem-rss:0kB\n"
      "oom_reaper: reaped process 1 (a), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB\n"
      "Memory cgroup out of memory: Killed process 3 (c) total-vm:4kB, anon-rss:4kB, file-rss:0kB, shmem-rss:0kB\n");
  ASSERT_EQ(r.size(), 3u);
  for (const auto& k : r) {
    EXPECT_EQ(k.incident, r[0].incident);
    EXPECT_TRUE(k.oom_group_incident);
  }
  EXPECT_FALSE(r[0].oom_group) << "the OOM killer's own pick";
  EXPECT_TRUE(r[1].oom_group) << "a member killed with it";
  EXPECT_TRUE(r[0].reaped.has_value());
}

// Live, a kill is given the moment its line arrives; the reaper's line after it is no new kill.
TEST(OomLog, LiveKillsComeAtOnceAndTheReaperAddsNone) {
  OomLogAssembler a(OomLogAssembler::Emit::kAtKill);
  auto line = [](std::string text, std::uint64_t seq) {
    LogLine l;
    l.text = std::move(text);
    l.seq = seq;
    l.ts_us = seq;
    return l;
  };
  EXPECT_TRUE(a.feed(line("a invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0", 1)).empty());
  auto k = a.feed(line("Out of memory: Killed process 9 (a) total-vm:4kB, anon-rss:4kB, file-rss:0kB", 2));
  ASSERT_EQ(k.size(), 1u);
  EXPECT_EQ(k[0].first_seq, 1u);
  EXPECT_TRUE(
      a.feed(line("oom_reaper: reaped process 9 (a), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB", 3)).empty());
  EXPECT_TRUE(a.finish().empty());
  EXPECT_EQ(a.abandoned(), 0u);
}

}  // namespace
}  // namespace headroom
