#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "headroom/sources/kmsg.h"
#include "headroom/sources/oom_log.h"
#include "headroom/sources/parse.h"
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

// Found by the kmsg_record fuzz target: a priority beyond (255 << 3) | 7 was cut to an int and
// gave a negative facility. The kernel keeps the facility in a byte, so such a prefix is no record's.
TEST(KmsgRecord, APriorityBeyondAByteOfFacilityIsRefused) {
  auto last = parseKmsgRecord("2047,1,2,-;the last facility");
  ASSERT_TRUE(last);
  EXPECT_EQ(last->facility, 255);
  EXPECT_EQ(last->priority, 7);
  for (const char* raw : {"2048,1,2,-;x", "7777388884888888,3,87;\n", "18446744073709551615,1,2,-;x"}) {
    auto r = parseKmsgRecord(raw);
    ASSERT_FALSE(r) << raw;
    EXPECT_NE(r.error().message.find("out of range"), std::string::npos) << r.error().message;
  }
}

TEST(KmsgOom, Linux618MemcgV1Live) {
  auto reports = parseOomLog(fixture("linux-6.18-memcg-v1.txt"));
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
  // v1's counters and its memory.stat keys, as the kernel printed them.
  ASSERT_TRUE(r.memcg.has_value());
  EXPECT_FALSE(r.memcg->memsw->limit.has_value()) << "9007199254740988kB is the kernel's \"no limit\"";
  EXPECT_EQ(r.memcg->kmem->usage.value(), 200 * kKiB);
  EXPECT_FALSE(r.memcg->swap.has_value());
  EXPECT_EQ(r.memcg->stats_cgroup, r.oom_memcg.value());
  EXPECT_EQ(r.memcg->stats.get("rss").value(), 66904064u);
  EXPECT_EQ(r.memcg->stats.get("total_rss").value(), 66904064u);
  EXPECT_EQ(r.memcg->stats.get("hierarchical_memory_limit").value(), 64u << 20);
  EXPECT_EQ(r.memcg->stats.get("rss").value() + r.memcg->stats.get("cache").value() + r.memcg->kmem->usage.value(),
            r.memcg_usage_bytes.value())
      << "rss + cache + kmem is the charge, to the byte";
  EXPECT_FALSE(r.machine.has_value());
}

// Hand-made in the shape of Ubuntu 22.04's 5.15 (no such kernel in the matrix to capture from).
TEST(KmsgOom, HandMade515OlderTaskDumpAndCommsWithSpaces) {
  auto reports = parseOomLog(fixture("handmade-linux-5.15-memcg-v2.txt"));
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
  auto reports = parseOomLog(fixture("handmade-linux-6.1-global.txt"));
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
  auto reports = parseOomLog(fixture("handmade-linux-6.8-memcg-v2-oom-group.txt"));
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
  auto reports = parseOomLog(fixture(file));
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
  // The domain as the kernel saw it: memory.stat whole, and its parts add up to the charge.
  ASSERT_TRUE(r.memcg.has_value());
  EXPECT_EQ(r.memcg->memory.usage, r.memcg_usage_bytes);
  EXPECT_EQ(r.memcg->memory.failcnt.value(), 79u);
  ASSERT_TRUE(r.memcg->swap.has_value()) << "v2 prints \"swap:\"";
  EXPECT_EQ(r.memcg->swap->usage.value(), 0u);
  EXPECT_FALSE(r.memcg->swap->limit.has_value()) << "no swap limit";
  EXPECT_FALSE(r.memcg->memsw.has_value());
  EXPECT_FALSE(r.memcg->kmem.has_value());
  EXPECT_EQ(r.memcg->stats_cgroup, r.oom_memcg.value());
  EXPECT_FALSE(r.memcg->stats_cut);
  const StatMap& st = r.memcg->stats;
  EXPECT_GE(st.size(), 40u);
  EXPECT_EQ(st.entries().front().first, "anon") << "in the kernel's order";
  EXPECT_EQ(st.get("anon").value() + st.get("file").value() + st.get("kernel").value(), 64u << 20)
      << "anon + file + kernel is the charge, to the byte";
  EXPECT_GT(st.get("pagetables").value(), 0u);
  EXPECT_TRUE(st.contains("slab_unreclaimable"));
  EXPECT_TRUE(st.contains("thp_collapse_alloc")) << "the block's last key (6.1) is whole";
}

// 6.1 prints the cgroup's memory.stat as one record with escaped newlines ("anon 66899968\x0afile
// 0\x0a..."), 6.12 one record a line; neither disturbs the report.
TEST(KmsgOom, Linux61MemcgV2) { expectMemcgV2("linux-6.1-memcg-v2.txt", false); }
TEST(KmsgOom, Linux612MemcgV2) { expectMemcgV2("linux-6.12-memcg-v2.txt", true); }

// memory.oom.group: the kernel kills the victim, then every member of the group (the victim
// among them, again): one incident, each process once.
void expectOomGroup(const std::string& file) {
  SCOPED_TRACE(file);
  auto reports = parseOomLog(fixture(file));
  ASSERT_GE(reports.size(), 2u);
  std::set<pid_t> killed;
  for (const auto& r : reports) {
    EXPECT_EQ(r.first_seq, reports[0].first_seq) << "one incident";
    EXPECT_EQ(r.constraint, "CONSTRAINT_MEMCG");
    killed.insert(r.victim.pid);
  }
  EXPECT_FALSE(reports[0].oom_group) << "the OOM killer's own pick";
  for (std::size_t i = 1; i < reports.size(); ++i) EXPECT_EQ(reports[i].lost_records, 0u) << "counted once";
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
  // The machine at the kill (Mem-Info), in bytes.
  EXPECT_FALSE(r.memcg.has_value());
  ASSERT_TRUE(r.machine.has_value());
  const OomMachineState& m = *r.machine;
  EXPECT_GT(m.counters.get("inactive_anon").value(), 2u << 30) << "the workload's anon, in pages x 4096";
  EXPECT_GT(m.counters.get("slab_unreclaimable").value(), 0u);
  EXPECT_GT(m.counters.get("pagetables").value(), 0u);
  EXPECT_GT(m.counters.get("free").value(), 0u);
  ASSERT_EQ(m.nodes.size(), 1u) << "the guest's one node";
  EXPECT_GT(m.nodeSum("kernel_stack").value(), 0u);
  EXPECT_EQ(m.nodeSum("pagetables"), m.counters.get("pagetables")) << "the node's kB and the machine's pages agree";
  ASSERT_EQ(m.hugepages.size(), 2u);
  EXPECT_EQ(m.hugepages[0].page_bytes, 1u << 30);
  EXPECT_EQ(m.hugepages[1].page_bytes, 2u << 20);
  EXPECT_GT(m.ram_bytes.value(), 2u << 30);
  EXPECT_GT(m.reserved_bytes.value(), 0u);
  EXPECT_EQ(m.swap_total_bytes.value(), 0u);
  EXPECT_TRUE(m.pagecache_bytes.has_value());
  EXPECT_TRUE(m.unreclaimable_slab.empty()) << "printed only when slab outweighs the LRU pages";
}

TEST(KmsgOom, Linux61Global) { expectGlobal("linux-6.1-global.txt"); }
TEST(KmsgOom, Linux612Global) { expectGlobal("linux-6.12-global.txt"); }

TEST(KmsgOom, CutShortReportIsAbandonedAndCounted) {
  OomLogAssembler p;
  auto feed = [&](const char* raw) {
    std::vector<KernelOomReport> out;
    for (const auto& l : logLines(*parseKmsgRecord(raw)))
      for (auto& r : p.feed(l)) out.push_back(std::move(r));
    return out;
  };
  EXPECT_TRUE(feed("4,1,1,-;a invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0").empty());
  EXPECT_TRUE(feed("6,2,2,-;Tasks state (memory values in pages):").empty());
  EXPECT_TRUE(feed("4,3,3,-;b invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0").empty());
  EXPECT_EQ(p.abandoned(), 1u);
  auto r = feed(
      "3,4,4,-;Out of memory: Killed process 5 (b) total-vm:4kB, anon-rss:4kB, file-rss:0kB, shmem-rss:0kB, UID:0 "
      "pgtables:4kB oom_score_adj:0");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].trigger_comm, "b");
  EXPECT_TRUE(r[0].header_seen);
  // A second "Killed process" with no memory.oom.group line before it is another kill, whose
  // report the log lost: it proves the kill on its own, and nothing else is made up for it.
  auto second = feed("3,5,5,-;Out of memory: Killed process 6 (c) total-vm:4kB");
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].victim.pid, 6);
  EXPECT_FALSE(second[0].header_seen);
  EXPECT_TRUE(second[0].trigger_comm.empty());
  EXPECT_TRUE(second[0].victim_line_cut);
  EXPECT_NE(second[0].incident, r[0].incident);
}

TEST(KmsgOom, TruncatedKilledLineKeepsWhatItHas) {
  auto reports = parseOomLog(
      "4,1,1,-;x invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0\n"
      "3,2,2,-;Memory cgroup out of memory: Killed process 77 (x) total-vm:100kB, anon-rss:5");
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].victim.pid, 77);
  EXPECT_EQ(reports[0].victim.total_vm.value(), 100 * kKiB);
  EXPECT_FALSE(reports[0].victim.anon_rss.has_value()) << "\"5\" without kB is no number here";
}

// Hand-made: a global OOM whose unreclaimable slab outweighs the LRU pages, so the kernel names
// its largest caches (dump_unreclaimable_slab's "%-17s %10luKB %10luKB"); no capture has one.
TEST(KmsgOom, HandMadeGlobalOomNamesTheLargestUnreclaimableSlabCaches) {
  auto reports = parseOomLog(
      "4,1,1,-;a invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0\n"
      "4,2,2,-;Mem-Info:\n"
      "4,3,3,-;active_anon:10 inactive_anon:20 isolated_anon:0\\x0a slab_reclaimable:5 slab_unreclaimable:600000\\x0a "
      "free:100 free_pcp:0 free_cma:0\n"
      "4,4,4,-;Node 0 active_anon:40kB inactive_anon:80kB shmem_thp: 0kB kernel_stack:512kB all_unreclaimable? yes\n"
      "4,5,5,-;Node 1 kernel_stack:256kB pagetables:8kB\n"
      "4,6,6,-;Node 0 Normal free:400kB boost:0kB min:100kB\n"
      "4,7,7,-;Node 0 Normal: 1*4kB (U) = 4kB\n"
      "4,8,8,-;Free swap  = 1024kB\n"
      "4,9,9,-;Total swap = 2048kB\n"
      "4,10,10,-;1000 pages RAM\n"
      "6,11,11,-;Unreclaimable slab info:\n"
      "6,12,12,-;Name                      Used          Total\n"
      "6,13,13,-;kmalloc-64               1024KB       2048KB\n"
      "6,14,14,-;task_struct           1048576KB    2097152KB\n"
      "6,15,15,-;Tasks state (memory values in pages):\n"
      "3,16,16,-;Out of memory: Killed process 9 (a) total-vm:4kB, anon-rss:4kB, file-rss:0kB, shmem-rss:0kB, UID:0 "
      "pgtables:4kB oom_score_adj:0\n");
  ASSERT_EQ(reports.size(), 1u);
  ASSERT_TRUE(reports[0].machine.has_value());
  const OomMachineState& m = *reports[0].machine;
  EXPECT_EQ(m.counters.get("slab_unreclaimable").value(), 600000u * 4096);
  EXPECT_EQ(m.counters.get("free").value(), 100u * 4096);
  EXPECT_EQ(m.nodes.size(), 2u) << "the zone and free-list lines are not nodes";
  EXPECT_EQ(m.nodeSum("kernel_stack").value(), 768u * kKiB) << "summed over the nodes";
  EXPECT_EQ(m.nodes[0].second.get("shmem_thp").value(), 0u) << "\"shmem_thp: 0kB\" with its space";
  EXPECT_FALSE(m.nodes[0].second.contains("all_unreclaimable?"));
  EXPECT_EQ(m.swap_free_bytes.value(), 1024 * kKiB);
  EXPECT_EQ(m.swap_total_bytes.value(), 2048 * kKiB);
  EXPECT_EQ(m.ram_bytes.value(), 1000u * 4096);
  ASSERT_EQ(m.unreclaimable_slab.size(), 2u);
  EXPECT_EQ(m.unreclaimable_slab[0].name, "task_struct") << "largest first";
  EXPECT_EQ(m.unreclaimable_slab[0].total_bytes, 2097152 * kKiB);
  EXPECT_EQ(m.unreclaimable_slab[1].used_bytes, 1024 * kKiB);
}

// The real 6.12 report twice in one burst (the OOM killer's lock keeps reports whole, one after
// the other), with a driver's and a user's message inside the first one's statistics block and
// records the log overwrote inside the second: two reports, each with its own figures, the lost
// records counted where they fell.
TEST(KmsgOom, TwoReportsInOneBurstWithOtherMessagesAndLostRecords) {
  std::string one = fixture("linux-6.12-memcg-v2.txt");
  std::vector<std::string> lines;
  for (std::string_view l : splitLines(one)) lines.emplace_back(l);
  std::string burst;
  std::uint64_t seq = 1000;
  auto add = [&](const std::string& line) {
    auto semi = line.find(';');
    auto rec = parseKmsgRecord(line);
    ASSERT_TRUE(rec) << line;
    burst +=
        fmt::format("{},{},{},-;{}\n", rec->priority | (rec->facility << 3), seq++, rec->ts_us, line.substr(semi + 1));
  };
  for (const auto& l : lines) {
    add(l);
    if (l.find(";anon ") != std::string::npos) {
      add("6,0,1,-;e1000e: eth0 NIC Link is Up 1000 Mbps Full Duplex");
      add("14,0,1,-;systemd[1]: Started a unit.");
    }
  }
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find(";slab ") != std::string::npos) seq += 3;  // three records lost
    add(lines[i]);
  }
  auto reports = parseOomLog(burst);
  ASSERT_EQ(reports.size(), 2u);
  for (const auto& r : reports) {
    ASSERT_TRUE(r.memcg.has_value());
    EXPECT_EQ(
        r.memcg->stats.get("anon").value() + r.memcg->stats.get("file").value() + r.memcg->stats.get("kernel").value(),
        64u << 20);
    EXPECT_FALSE(r.memcg->stats_cut) << "a driver's message is not a line of the block";
    EXPECT_FALSE(r.memcg->stats.contains("e1000e:"));
  }
  EXPECT_EQ(reports[0].lost_records, 0u);
  EXPECT_EQ(reports[1].lost_records, 3u);
  EXPECT_NE(reports[0].first_seq, reports[1].first_seq);
}

// A 6.1 statistics record at the log's line limit lost its end: the keys before the cut are
// kept, the line the cut may have shortened is not, and the block says it was cut.
TEST(KmsgOom, AStatisticsRecordAtTheLineLimitIsMarkedCut) {
  // The kernel's text for it (newlines as one byte each) at 981 bytes: past the 975 a record may
  // be cut to, its last number "12" may be what is left of "1234".
  std::string block;
  std::size_t plain = 0;
  for (int i = 0; plain < 970; ++i) {
    std::string line = fmt::format("key_number_{} {}", i, 1000 + i);
    block += line + "\\x0a";
    plain += line.size() + 1;
  }
  block += "last_key 12";
  auto reports = parseOomLog(
      "4,1,1,-;a invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0\n"
      "6,2,2,-;memory: usage 4kB, limit 4kB, failcnt 1\n"
      "6,3,3,-;Memory cgroup stats for /x:\n"
      "6,4,4,-;" +
      block +
      "\n"
      "3,5,5,-;Memory cgroup out of memory: Killed process 9 (a) total-vm:4kB, anon-rss:4kB, file-rss:0kB, "
      "shmem-rss:0kB, UID:0 pgtables:4kB oom_score_adj:0\n");
  ASSERT_EQ(reports.size(), 1u);
  ASSERT_TRUE(reports[0].memcg.has_value());
  EXPECT_TRUE(reports[0].memcg->stats_cut);
  EXPECT_EQ(reports[0].memcg->stats.get("key_number_0").value(), 1000u);
  EXPECT_FALSE(reports[0].memcg->stats.contains("last_key")) << "perhaps cut short: not taken";
  EXPECT_EQ(reports[0].memcg->stats_cgroup, "/x");
}

}  // namespace
}  // namespace headroom
