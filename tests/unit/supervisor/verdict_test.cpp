// The verdict on one attempt of `headroom run`, from the kernel's evidence alone: what confirms
// an OOM kill of the prover, what is a kill beside it, and what a SIGKILL without the OOM killer
// is. Pure: every case is evidence made by hand.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <csignal>

#include "headroom/supervisor/verdict.h"
#include "testing/kernel_report.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

constexpr pid_t kChild = 100;
constexpr int kKilled = SIGKILL;  // a wait status: killed by SIGKILL
constexpr int kFailed = 1 << 8;   // exited(1)
constexpr std::uint64_t kMiB = 1ULL << 20;

AttemptEvidence evidence(int status) {
  AttemptEvidence ev;
  ev.child = kChild;
  ev.wait_status = status;
  ev.cgroup = "/jobs/prover";
  ev.tree.members = {kChild};
  ev.oom_kills_before = 2;
  ev.oom_kills_after = 2;
  ev.oom_source_active = true;
  ev.budget = 512 * kMiB;
  ev.last_tree = ChargedFigures{600 * kMiB, 64 * kMiB, 4 * kMiB, 2 * kMiB, 1};
  ev.now_ns = 1'000;
  return ev;
}

OomEvent killOf(pid_t tgid, const std::string& comm, const std::string& cgroup) {
  OomEvent e;
  e.from_bpf = true;
  e.domain_cgroup = "/jobs";
  OomVictim v;
  v.pid = tgid;
  v.tgid = tgid;
  v.comm = comm;
  v.cgroup = cgroup;
  v.anon_rss = 700 * kMiB;
  v.file_rss = 10 * kMiB;
  v.shmem_rss = 0;
  v.pgtables = 6 * kMiB;
  e.victims.push_back(v);
  return e;
}

TEST(Verdict, ACleanExitIsNoKill) {
  Verdict v = classifyAttempt(evidence(0));
  EXPECT_FALSE(v.prover_oom);
  EXPECT_FALSE(v.other_oom);
  EXPECT_TRUE(v.evidence.empty());
  EXPECT_FALSE(v.kill);
  EXPECT_FALSE(awaitsOomReport(evidence(0))) << "nothing to wait for after a clean exit";
}

TEST(Verdict, TheKernelNamingTheProverConfirmsItsKill) {
  AttemptEvidence ev = evidence(kKilled);
  ev.oom_kills_after = 3;
  ev.ooms.push_back(killOf(kChild, "prover", "/jobs/prover"));
  ev.self_reported = 480 * kMiB;
  Verdict v = classifyAttempt(ev);
  EXPECT_TRUE(v.prover_oom);
  EXPECT_FALSE(v.other_oom);
  EXPECT_THAT(v.evidence, HasSubstr("OOM kill of pid 100 confirmed by the kernel (mark_victim;"));
  EXPECT_THAT(v.evidence, HasSubstr("/jobs/prover oom_kill 2 -> 3"));
  EXPECT_THAT(v.evidence, HasSubstr("OOM domain /jobs"));
  ASSERT_TRUE(v.kill);
  EXPECT_TRUE(v.kill->prover_victim);
  EXPECT_EQ(v.kill->charge, 716 * kMiB) << "the kernel's figures at the kill, not the last sample's";
  EXPECT_EQ(v.kill->page_tables, 6 * kMiB);
  EXPECT_EQ(v.kill->pinned, 64 * kMiB);
  EXPECT_EQ(v.kill->kernel, 2 * kMiB);
  EXPECT_EQ(v.kill->budget, 512 * kMiB);
  EXPECT_EQ(v.kill->self_reported, 480 * kMiB);
  EXPECT_FALSE(awaitsOomReport(ev)) << "the victim is named already";
}

TEST(Verdict, AKillOfAProcessOfTheProversTreeIsTheProversKill) {
  // A wrapper (the child) whose worker was forked and OOM-killed between two samples: the exit
  // sensor gave the worker's parent, and the wrapper exited with 1.
  AttemptEvidence ev = evidence(kFailed);
  ev.oom_kills_after = 3;
  ExitEvent worker_exit;
  worker_exit.pid = 200;
  worker_exit.parent_pid = kChild;
  ev.tree.noteExit(worker_exit);
  ev.ooms.push_back(killOf(200, "worker", "/jobs/prover"));
  Verdict v = classifyAttempt(ev);
  EXPECT_TRUE(v.prover_oom);
  EXPECT_THAT(v.evidence, HasSubstr("OOM kill of pid 200 (of the prover's tree, started by pid 100)"));
  ASSERT_TRUE(v.kill);
  EXPECT_TRUE(v.kill->prover_victim);
}

TEST(Verdict, TheCounterAloneConfirmsAKillOfTheProverThatNoSensorNamed) {
  AttemptEvidence ev = evidence(kKilled);
  ev.oom_kills_after = 3;
  ev.oom_source_active = false;
  Verdict v = classifyAttempt(ev);
  EXPECT_TRUE(v.prover_oom);
  EXPECT_THAT(v.evidence, HasSubstr("confirmed by the kernel's counter"));
  EXPECT_THAT(v.evidence, HasSubstr("no OOM sensor is active"));
  ASSERT_TRUE(v.kill);
  EXPECT_EQ(v.kill->charge, 600 * kMiB) << "no figures at the kill: the last sample's";
  EXPECT_EQ(v.kill->page_tables, 4 * kMiB);
}

TEST(Verdict, ASigkillWithoutTheOomKillerIsNotAnOomKill) {
  AttemptEvidence ev = evidence(kKilled);  // kill -9: the counter did not move, no report
  Verdict v = classifyAttempt(ev);
  EXPECT_FALSE(v.prover_oom);
  EXPECT_FALSE(v.other_oom);
  EXPECT_THAT(v.evidence, HasSubstr("signal 9, not an OOM kill"));
  EXPECT_THAT(v.evidence, HasSubstr("no mark_victim or kernel report for it"));
  EXPECT_FALSE(v.kill) << "137 is any SIGKILL: nothing to learn from";
}

TEST(Verdict, AKillBesideTheProverIsNotTheProvers) {
  AttemptEvidence ev = evidence(kFailed);
  ev.oom_kills_after = 3;
  ev.ooms.push_back(killOf(300, "sidecar", "/jobs/prover"));
  Verdict v = classifyAttempt(ev);
  EXPECT_FALSE(v.prover_oom);
  EXPECT_TRUE(v.other_oom);
  EXPECT_THAT(v.evidence, HasSubstr("OOM kill of pid 300 (sidecar) beside the prover in /jobs/prover"));
  ASSERT_TRUE(v.kill);
  EXPECT_FALSE(v.kill->prover_victim);
  // A victim elsewhere, neither in the cgroup nor in the tree, says nothing of this attempt.
  AttemptEvidence elsewhere = evidence(0);
  elsewhere.ooms.push_back(killOf(400, "other", "/other"));
  EXPECT_FALSE(classifyAttempt(elsewhere).other_oom);
}

TEST(Verdict, TheExitSensorsMarkConfirmsAKillThatNoReportNamed) {
  AttemptEvidence ev = evidence(kKilled);
  ev.oom_kills_before.reset();  // no counter (a cgroup without one)
  ev.oom_kills_after.reset();
  ExitEvent x;
  x.pid = kChild;
  x.kind = ExitKind::kOomKilled;
  ev.exit = x;
  Verdict v = classifyAttempt(ev);
  EXPECT_TRUE(v.prover_oom);
  EXPECT_THAT(v.evidence, HasSubstr("the exit sensor (marked by the OOM killer)"));
  EXPECT_THAT(v.evidence, HasSubstr("has no oom_kill counter"));
}

TEST(Verdict, TheKernelsReportIsAwaitedOnlyWhenAKillIsThereToExplain) {
  AttemptEvidence rose = evidence(kKilled);
  rose.oom_kills_after = 4;  // two kills
  EXPECT_EQ(counterRise(rose), 2u);
  EXPECT_TRUE(awaitsOomReport(rose));
  rose.ooms.push_back(killOf(kChild, "prover", "/jobs/prover"));
  EXPECT_EQ(victimsNamed(rose), 1u);
  EXPECT_TRUE(awaitsOomReport(rose)) << "one of two kills is named so far";
  rose.ooms.push_back(killOf(300, "sidecar", "/jobs/prover"));
  EXPECT_FALSE(awaitsOomReport(rose));

  AttemptEvidence no_counter = evidence(kKilled);
  no_counter.oom_kills_after.reset();
  EXPECT_EQ(counterRise(no_counter), 0u) << "a counter read once says nothing";
  EXPECT_TRUE(awaitsOomReport(no_counter)) << "a SIGKILL and no counter to ask";
  no_counter.oom_source_active = false;
  EXPECT_FALSE(awaitsOomReport(no_counter)) << "no source could name it";
  EXPECT_FALSE(awaitsOomReport(evidence(kKilled))) << "the counter says no kill";
}

TEST(Verdict, TheProversTreeFollowsParentsAndStaysBounded) {
  ProverTree t;
  t.members = {kChild};
  ExitEvent x;
  x.pid = 201;
  x.parent_pid = 200;
  t.noteExit(x);
  x.pid = 200;
  x.parent_pid = kChild;
  t.noteExit(x);
  EXPECT_TRUE(t.contains(201));
  EXPECT_TRUE(t.contains(200));
  EXPECT_FALSE(t.contains(1)) << "init is nobody's prover";
  EXPECT_FALSE(t.contains(999));
  x.pid = 300;
  x.parent_pid = 0;  // the parent not known: nothing learned
  t.noteExit(x);
  EXPECT_EQ(t.parents.count(300), 0u);
  // A loop in the parents (pid reuse) ends at the depth bound.
  t.parents[500] = 501;
  t.parents[501] = 500;
  EXPECT_FALSE(t.contains(500));
}

// The OOM domain is the prover's cgroup and the kernel's report came: the margin learns from the
// overhead at the kill (page tables, slab, shmem nobody maps), not from a sample seconds old.
TEST(Verdict, TheKillsOwnBreakdownIsTheOverheadWhenTheDomainIsTheProvers) {
  AttemptEvidence ev = evidence(kKilled);
  ev.oom_kills_after = 3;
  OomEvent e = killOf(kChild, "prover", "/jobs/prover");
  e.from_kmsg = true;
  e.domain_cgroup = "/jobs/prover";
  e.kernel_memcg = testing::memcgReport(768 * kMiB,
                                        {{"anon", 700 * kMiB},
                                         {"file", 20 * kMiB},
                                         {"shmem", 16 * kMiB},
                                         {"file_mapped", 0},
                                         {"kernel", 48 * kMiB},
                                         {"pagetables", 30 * kMiB},
                                         {"slab_unreclaimable", 10 * kMiB},
                                         {"kernel_stack", 2 * kMiB}},
                                        768 * kMiB);
  ev.ooms.push_back(e);
  Verdict v = classifyAttempt(ev);
  ASSERT_TRUE(v.kill);
  EXPECT_EQ(v.kill->charge, 768 * kMiB) << "the domain's charge at the kill";
  EXPECT_EQ(v.kill->page_tables, 30 * kMiB) << "the report's, not the victim's 6 MiB";
  EXPECT_EQ(v.kill->kernel, 16 * kMiB + 10 * kMiB + 2 * kMiB + 6 * kMiB)
      << "shmem nobody maps, slab, stacks and the rest of the kernel's charge";
  EXPECT_THAT(v.kill->what, HasSubstr("overhead at the kill from the kernel's OOM report"));
  // A wider domain holds neighbours: its overhead is not the prover's.
  ev.ooms.back().domain_cgroup = "/jobs";
  v = classifyAttempt(ev);
  ASSERT_TRUE(v.kill);
  EXPECT_EQ(v.kill->page_tables, 6 * kMiB);
  EXPECT_EQ(v.kill->kernel, 2 * kMiB);
}

}  // namespace
}  // namespace headroom
