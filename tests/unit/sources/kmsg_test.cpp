#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "headroom/sources/kmsg.h"
#include "testing/fixture_tree.h"

namespace headroom {
namespace {

std::string fixture(const std::string& name) {
  std::ifstream f(testing::fixturePath("kmsg/" + name));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

constexpr std::uint64_t kKiB = 1024;

TEST(KmsgRecord, PrefixAndMessage) {
  auto r = parseKmsgRecord("6,418,1902226877,-;oom-kill:constraint=CONSTRAINT_MEMCG\n SUBSYSTEM=x\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->priority, 6);
  EXPECT_EQ(r->seq, 418u);
  EXPECT_EQ(r->ts_us, 1902226877u);
  EXPECT_EQ(r->message, "oom-kill:constraint=CONSTRAINT_MEMCG");
  EXPECT_FALSE(parseKmsgRecord("no semicolon"));
  EXPECT_FALSE(parseKmsgRecord("a,b,c;msg"));
  auto fac = parseKmsgRecord("14,1,2,-;user message");
  ASSERT_TRUE(fac);
  EXPECT_EQ(fac->facility, 1);
  EXPECT_EQ(fac->priority, 6);
}

TEST(KmsgOom, Linux618MemcgV1Live) {
  auto reports = parseKmsgOomReports(fixture("linux-6.18-memcg-v1.txt"));
  ASSERT_EQ(reports.size(), 1u);
  const KernelOomReport& r = reports[0];
  EXPECT_EQ(r.trigger_comm, "headroom-worklo");
  EXPECT_EQ(r.trigger_pid.value(), 7060);
  EXPECT_EQ(r.gfp_mask, "0xcc0(GFP_KERNEL)");
  EXPECT_EQ(r.constraint, "CONSTRAINT_MEMCG");
  EXPECT_EQ(r.oom_memcg.value(), "/process_api/af0b72475b5c28304e0fe4991b22fafa/oomtest");
  EXPECT_EQ(r.memcg_limit_bytes.value(), 65536 * kKiB) << "the domain's limit, named as such";
  EXPECT_EQ(r.memcg_usage_bytes.value(), 65536 * kKiB);
  EXPECT_EQ(r.memcg_failcnt.value(), 23u);
  EXPECT_TRUE(r.memcg_report);
  EXPECT_EQ(r.victim.pid, 7060);
  EXPECT_EQ(r.victim.comm, "headroom-worklo");
  EXPECT_EQ(r.victim.anon_rss.value(), 65280 * kKiB);
  EXPECT_EQ(r.victim.file_rss.value(), 2332 * kKiB);
  EXPECT_EQ(r.victim.pgtables.value(), 176 * kKiB);
  EXPECT_EQ(r.victim.total_vm.value(), 210472 * kKiB);
  EXPECT_EQ(r.victim.uid.value(), 0u);
  EXPECT_EQ(r.victim.cgroup, r.oom_memcg.value());
  ASSERT_EQ(r.tasks.size(), 1u);
  EXPECT_EQ(r.tasks[0].rss_anon_bytes.value(), 16320u * 4096);
  EXPECT_EQ(r.tasks[0].pgtables_bytes, 180224u);
  EXPECT_EQ(r.tasks[0].name, "headroom-worklo");
}

// Hand-made in the shape of Ubuntu 22.04's 5.15 (no such kernel in the matrix to capture from).
TEST(KmsgOom, HandMade515OlderTaskDumpAndCommsWithSpaces) {
  auto reports = parseKmsgOomReports(fixture("handmade-linux-5.15-memcg-v2.txt"));
  ASSERT_EQ(reports.size(), 1u);
  const KernelOomReport& r = reports[0];
  EXPECT_EQ(r.trigger_pid.value(), 4321);
  EXPECT_EQ(r.victim.pid, 4300);
  EXPECT_EQ(r.victim.comm, "cuzk daemon");
  EXPECT_EQ(r.victim.uid.value(), 1000u);
  EXPECT_EQ(r.oom_memcg.value(), "/system.slice/prover.service");
  ASSERT_EQ(r.tasks.size(), 3u);
  EXPECT_FALSE(r.tasks[0].rss_anon_bytes.has_value()) << "5.15 has no rss_anon column";
  EXPECT_EQ(r.tasks[0].name, "cuzk daemon");
  EXPECT_EQ(r.tasks[1].tgid, 4300) << "a thread row names its process";
  EXPECT_EQ(r.tasks[2].oom_score_adj, -100);
  EXPECT_EQ(r.tasks[2].swap_bytes, 12u * 4096);
}

// Hand-made: a systemd session's victim, a two-task dump (the real 6.1 capture below has others).
TEST(KmsgOom, HandMadeGlobalOomInASession) {
  auto reports = parseKmsgOomReports(fixture("handmade-linux-6.1-global.txt"));
  ASSERT_EQ(reports.size(), 1u);
  const KernelOomReport& r = reports[0];
  EXPECT_TRUE(r.global_oom);
  EXPECT_FALSE(r.memcg_report);
  EXPECT_EQ(r.constraint, "CONSTRAINT_NONE");
  EXPECT_FALSE(r.oom_memcg.has_value());
  EXPECT_FALSE(r.memcg_limit_bytes.has_value());
  EXPECT_EQ(r.victim.cgroup, "/user.slice/user-1000.slice/session-1.scope");
  EXPECT_EQ(r.victim.anon_rss.value(), 15600000 * kKiB);
  EXPECT_EQ(r.tasks.size(), 2u);
}

// Hand-made in the shape of Ubuntu 24.04's 6.8, shmem in the victims' figures.
TEST(KmsgOom, HandMade68OomGroupKillsSeveral) {
  auto reports = parseKmsgOomReports(fixture("handmade-linux-6.8-memcg-v2-oom-group.txt"));
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].victim.pid, 9001);
  EXPECT_FALSE(reports[0].oom_group);
  EXPECT_EQ(reports[1].victim.pid, 9012);
  EXPECT_TRUE(reports[1].oom_group);
  EXPECT_EQ(reports[1].first_seq, reports[0].first_seq) << "one incident";
  EXPECT_EQ(reports[1].oom_memcg.value(), "/kubepods.slice/pod-a");
  EXPECT_EQ(reports[1].victim.shmem_rss.value(), 2000 * kKiB);
  ASSERT_EQ(reports[0].tasks.size(), 2u);
  EXPECT_EQ(reports[0].tasks[1].rss_shmem_bytes.value(), 500u * 4096);
}

// Real captures from the kernel matrix's guests (make capture-fixtures; provenance beside
// each): Debian 12's 6.1 and Debian 13's 6.12, cgroup v2, the systemd/Kubernetes layout.
constexpr const char* kPod =
    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0c1f6c1e_5b7d_4c1a_9f2e_6a8b8d3c4e21.slice/"
    "cri-containerd-4f7d1c2b9a8e6d5c3b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c.scope";

// The capture's one report, and whether it is a memcg or a global OOM as expected.
void expectOneReport(const std::string& file, bool global, KernelOomReport& r) {
  auto reports = parseKmsgOomReports(fixture(file));
  ASSERT_EQ(reports.size(), 1u);
  r = reports[0];
  EXPECT_EQ(r.global_oom, global);
  EXPECT_EQ(r.memcg_report, !global);
  EXPECT_EQ(r.constraint, global ? "CONSTRAINT_NONE" : "CONSTRAINT_MEMCG");
}

void expectMemcgV2(const std::string& file, bool rss_parts) {
  SCOPED_TRACE(file);
  KernelOomReport r;
  ASSERT_NO_FATAL_FAILURE(expectOneReport(file, false, r));
  EXPECT_EQ(r.trigger_comm, "headroom-worklo");
  EXPECT_EQ(r.memcg_limit_bytes.value(), 64u << 20) << "the capture's 64 MiB cgroup";
  EXPECT_EQ(r.memcg_usage_bytes.value(), 64u << 20);
  ASSERT_TRUE(r.oom_memcg.has_value());
  EXPECT_EQ(r.oom_memcg->rfind(std::string(kPod) + "/capture-oom-", 0), 0u) << *r.oom_memcg;
  EXPECT_EQ(r.task_memcg, r.oom_memcg);
  EXPECT_EQ(r.victim.comm, "headroom-worklo");
  EXPECT_GT(r.victim.anon_rss.value(), 60u << 20);
  EXPECT_LE(r.victim.anon_rss.value(), 64u << 20);
  ASSERT_FALSE(r.tasks.empty());
  // The dump's rss_anon/rss_file/rss_shmem columns came with 6.2: 6.1 has rss alone.
  EXPECT_EQ(r.tasks.back().rss_anon_bytes.has_value(), rss_parts);
  EXPECT_GT(r.tasks.back().rss_bytes, 60u << 20);
  bool victim_in_dump = false;
  for (const auto& t : r.tasks) victim_in_dump = victim_in_dump || t.pid == r.victim.pid;
  EXPECT_TRUE(victim_in_dump);
}

// 6.1 prints the cgroup's memory.stat as one record with escaped newlines ("anon 66899968\x0afile
// 0\x0a..."), 6.12 one record a line; neither disturbs the report.
TEST(KmsgOom, Linux61MemcgV2) { expectMemcgV2("linux-6.1-memcg-v2.txt", false); }
TEST(KmsgOom, Linux612MemcgV2) { expectMemcgV2("linux-6.12-memcg-v2.txt", true); }

// memory.oom.group: the kernel kills the victim, then every member of the group (the victim
// among them, again): one incident, each process once.
void expectOomGroup(const std::string& file) {
  SCOPED_TRACE(file);
  auto reports = parseKmsgOomReports(fixture(file));
  ASSERT_GE(reports.size(), 2u);
  std::set<pid_t> killed;
  for (const auto& r : reports) {
    EXPECT_EQ(r.first_seq, reports[0].first_seq) << "one incident";
    EXPECT_EQ(r.constraint, "CONSTRAINT_MEMCG");
    killed.insert(r.victim.pid);
  }
  EXPECT_FALSE(reports[0].oom_group) << "the OOM killer's own pick";
  EXPECT_TRUE(reports.back().oom_group);
  EXPECT_EQ(killed.size(), 2u) << "the holder and the grower";
}

TEST(KmsgOom, Linux61OomGroupKillsTheGroup) { expectOomGroup("linux-6.1-memcg-v2-oom-group.txt"); }
TEST(KmsgOom, Linux612OomGroupKillsTheGroup) { expectOomGroup("linux-6.12-memcg-v2-oom-group.txt"); }

void expectGlobal(const std::string& file) {
  SCOPED_TRACE(file);
  KernelOomReport r;
  ASSERT_NO_FATAL_FAILURE(expectOneReport(file, true, r));
  EXPECT_FALSE(r.oom_memcg.has_value());
  EXPECT_FALSE(r.memcg_limit_bytes.has_value());
  EXPECT_EQ(r.task_memcg.value().rfind("/capture-global-oom-", 0), 0u) << *r.task_memcg;
  EXPECT_EQ(r.victim.oom_score_adj.value(), 1000);
  EXPECT_GT(r.victim.anon_rss.value(), 2u << 30) << "most of the guest's 3 GiB";
  EXPECT_GT(r.tasks.size(), 1u) << "a global dump lists every task of the machine";
}

TEST(KmsgOom, Linux61Global) { expectGlobal("linux-6.1-global.txt"); }
TEST(KmsgOom, Linux612Global) { expectGlobal("linux-6.12-global.txt"); }

TEST(KmsgOom, CutShortReportIsAbandonedAndCounted) {
  KmsgOomParser p;
  auto feed = [&](const char* raw) { return p.feed(*parseKmsgRecord(raw)); };
  EXPECT_FALSE(feed("4,1,1,-;a invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0"));
  EXPECT_FALSE(feed("6,2,2,-;Tasks state (memory values in pages):"));
  EXPECT_FALSE(feed("4,3,3,-;b invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0"));
  EXPECT_EQ(p.abandoned(), 1u);
  auto r = feed(
      "3,4,4,-;Out of memory: Killed process 5 (b) total-vm:4kB, anon-rss:4kB, file-rss:0kB, shmem-rss:0kB, UID:0 "
      "pgtables:4kB oom_score_adj:0");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->trigger_comm, "b");
  // Garbage in between is ignored; a "Killed process" with no report around it is not one.
  EXPECT_FALSE(feed("3,5,5,-;Out of memory: Killed process 6 (c) total-vm:4kB"));
}

TEST(KmsgOom, TruncatedKilledLineKeepsWhatItHas) {
  auto reports = parseKmsgOomReports(
      "4,1,1,-;x invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0\n"
      "3,2,2,-;Memory cgroup out of memory: Killed process 77 (x) total-vm:100kB, anon-rss:5");
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].victim.pid, 77);
  EXPECT_EQ(reports[0].victim.total_vm.value(), 100 * kKiB);
  EXPECT_FALSE(reports[0].victim.anon_rss.has_value()) << "\"5\" without kB is no number here";
}

}  // namespace
}  // namespace headroom
