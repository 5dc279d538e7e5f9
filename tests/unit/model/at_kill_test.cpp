// The breakdown at the kill from the kernel's own reports (real captures of the kernel matrix),
// from files read at the kill where no report came, and the machine's at a global OOM.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "headroom/model/at_kill.h"
#include "headroom/model/snapshot_json.h"
#include "headroom/sensors/oom_joiner.h"
#include "headroom/sources/kmsg.h"
#include "headroom/sources/oom_log.h"
#include "testing/fixture_tree.h"

namespace headroom {
namespace {

constexpr std::uint64_t kMiB = 1ULL << 20;

// The incident the agent would make of a captured report (kmsg alone).
OomEvent eventOf(const std::string& name) {
  std::ifstream f(testing::fixturePath("kmsg/" + name));
  std::stringstream ss;
  ss << f.rdbuf();
  auto reports = parseOomLog(ss.str());
  EXPECT_FALSE(reports.empty()) << name;
  OomJoiner::Options o;
  o.expect_bpf = false;
  OomJoiner j(o);
  for (const auto& r : reports) j.addReport(r, static_cast<std::int64_t>(r.ts_us) * 1000, 1);
  auto events = j.takeReady(std::int64_t{1} << 50, 1);
  EXPECT_EQ(events.size(), 1u);
  return events.empty() ? OomEvent{} : events.front();
}

std::uint64_t bytesOf(const KillBreakdown& b, PartKind k) { return b.attribution.bytesOf(k).value_or(0); }
Accuracy accuracyOf(const KillBreakdown& b, PartKind k) {
  for (const Part& p : b.attribution.parts) {
    if (p.kind == k) return p.accuracy;
  }
  ADD_FAILURE() << toString(k) << " missing";
  return Accuracy::kEstimated;
}

void expectV2(const std::string& name) {
  SCOPED_TRACE(name);
  OomEvent e = eventOf(name);
  auto b = breakdownAtKill(e);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->source, KillBreakdown::Source::kKernelReport);
  EXPECT_EQ(b->usage, 64 * kMiB);
  EXPECT_EQ(b->limit.value(), 64 * kMiB);
  EXPECT_EQ(b->cgroup, *e.domain_cgroup);
  EXPECT_TRUE(b->adds_up);
  EXPECT_EQ(b->attribution.unattributed, 0) << "the kernel's parts add up to its charge, to the byte";
  EXPECT_GT(bytesOf(*b, PartKind::kAnon), 63 * kMiB);
  EXPECT_EQ(accuracyOf(*b, PartKind::kAnon), Accuracy::kExact);
  EXPECT_GT(bytesOf(*b, PartKind::kPageTables), 0u);
  EXPECT_EQ(accuracyOf(*b, PartKind::kPageTables), Accuracy::kExact);
  EXPECT_EQ(accuracyOf(*b, PartKind::kKernelOther), Accuracy::kDerived);
  EXPECT_EQ(accuracyOf(*b, PartKind::kShmemUnmapped), Accuracy::kEstimated) << "the mapped part is an upper bound";
}

TEST(AtKill, Linux61MemcgV2FromTheKernelsReport) { expectV2("linux-6.1-memcg-v2.txt"); }
TEST(AtKill, Linux612MemcgV2FromTheKernelsReport) { expectV2("linux-6.12-memcg-v2.txt"); }

TEST(AtKill, Linux618MemcgV1SplitsKmemWithTheTaskDumpsPageTables) {
  OomEvent e = eventOf("linux-6.18-memcg-v1.txt");
  auto b = breakdownAtKill(e);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->usage, 64 * kMiB);
  EXPECT_EQ(b->failcnt.value(), 23u);
  EXPECT_TRUE(b->adds_up);
  EXPECT_EQ(b->attribution.unattributed, 0);
  EXPECT_EQ(bytesOf(*b, PartKind::kAnon), 66904064u) << "v1 rss";
  EXPECT_EQ(bytesOf(*b, PartKind::kPageTables), 180224u) << "the task dump's pgtables_bytes";
  EXPECT_EQ(accuracyOf(*b, PartKind::kPageTables), Accuracy::kDerived);
  EXPECT_EQ(bytesOf(*b, PartKind::kKernelOther), 200u * 1024 - 180224) << "kmem less page tables";
  EXPECT_FALSE(b->attribution.bytesOf(PartKind::kKernelStack)) << "the task dump has no thread counts";
}

TEST(AtKill, GlobalOomOnLinux612IsTheMachinesBreakdown) {
  OomEvent e = eventOf("linux-6.12-global.txt");
  ASSERT_TRUE(e.global);
  auto b = breakdownAtKill(e);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->source, KillBreakdown::Source::kMachine);
  EXPECT_TRUE(b->cgroup.empty());
  EXPECT_GT(bytesOf(*b, PartKind::kAnon), 2048 * kMiB) << "the workload that filled the guest";
  EXPECT_GT(bytesOf(*b, PartKind::kKernelStack), 0u);
  EXPECT_GT(bytesOf(*b, PartKind::kSlabUnreclaimable), 0u);
  EXPECT_GT(b->ram_bytes.value(), 2048 * kMiB);
  EXPECT_GT(b->free_bytes.value(), 0u);
  EXPECT_FALSE(b->adds_up) << "kernel_other is the rest by definition: nothing to check";
  EXPECT_EQ(b->attribution.unattributed, 0);
  EXPECT_LT(b->usage, b->ram_bytes.value());
}

// Hand-made: a global OOM whose RAM went to a hugetlb pool: said, and not taken for vmalloc or a
// driver's in kernel_other.
TEST(AtKill, HandMadeGlobalOomSaysWhatTheHugetlbPoolsHold) {
  OomEvent e;
  e.global = true;
  OomMachineState m;
  m.counters.set("active_anon", 100 * kMiB);
  m.counters.set("free", 50 * kMiB);
  m.ram_bytes = 1024 * kMiB;
  m.reserved_bytes = 24 * kMiB;
  m.hugepages.push_back({0, 2 * kMiB, 400, 400, 0});
  e.kernel_machine = m;
  auto b = breakdownAtKill(e);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->usage, 950 * kMiB) << "RAM less reserved less free";
  EXPECT_EQ(b->hugetlb_bytes.value(), 800 * kMiB);
  EXPECT_EQ(bytesOf(*b, PartKind::kKernelOther), 50 * kMiB) << "the rest, without the pool";
  EXPECT_EQ(b->attribution.unattributed, 0);
  EXPECT_FALSE(b->adds_up);
  bool said = false;
  for (const auto& n : b->attribution.notes) said = said || n.find("hugetlb pools") != std::string::npos;
  EXPECT_TRUE(said);
  EXPECT_TRUE(toJson(*b)["adds_up"].is_null());
}

// No kernel report (no CAP_SYSLOG): the files read when BPF's mark came, nearest limit first.
TEST(AtKill, WithoutAReportTheFilesReadAtTheKillAreTheBreakdownMarkedDerived) {
  OomEvent e;
  e.monotonic_time_ns = 1'000'000'000;
  e.read_at_kill_ns = 1'002'500'000;
  CgroupMemory victim;
  victim.version = 2;
  victim.path = "/jobs/prover/step";
  victim.usage = 10 * kMiB;
  victim.stat.set("anon", 10 * kMiB);
  CgroupMemory domain;
  domain.version = 2;
  domain.path = "/jobs/prover";
  domain.limit = 100 * kMiB;
  domain.usage = 99 * kMiB;
  domain.peak = 100 * kMiB;
  for (auto [k, v] : {std::pair{"anon", 90 * kMiB},
                      {"file", 5 * kMiB},
                      {"shmem", 4 * kMiB},
                      {"kernel", 4 * kMiB},
                      {"pagetables", 3 * kMiB},
                      {"file_mapped", 1 * kMiB}})
    domain.stat.set(k, v);
  e.read_at_kill = {victim, domain};
  auto b = breakdownAtKill(e);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->source, KillBreakdown::Source::kFilesRead);
  EXPECT_EQ(b->cgroup, "/jobs/prover") << "the nearest cgroup with a limit";
  EXPECT_TRUE(b->domain_inferred);
  EXPECT_EQ(b->read_after_ns.value(), 2'500'000);
  EXPECT_EQ(b->peak.value(), 100 * kMiB);
  EXPECT_EQ(bytesOf(*b, PartKind::kShmemUnmapped), 3 * kMiB) << "shmem beyond what is mapped at all";
  EXPECT_EQ(accuracyOf(*b, PartKind::kAnon), Accuracy::kDerived) << "a moment after the kill, not at it";
  EXPECT_TRUE(b->adds_up);
  // Named by the kernel: that one, not the nearest limit.
  e.domain_cgroup = "/jobs/prover/step";
  b = breakdownAtKill(e);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->cgroup, "/jobs/prover/step");
  EXPECT_FALSE(b->domain_inferred);
}

TEST(AtKill, ACounterAloneHasNoBreakdownAndTheJsonSaysNull) {
  OomEvent e;
  e.from_counter = true;
  EXPECT_FALSE(breakdownAtKill(e).has_value());
  auto j = toJson(e);
  EXPECT_TRUE(j["at_kill"].is_null());
  EXPECT_TRUE(j["kernel_report"].is_null());
}

TEST(AtKill, TheEventsJsonCarriesEveryKernelKeyAndTheBreakdown) {
  auto j = toJson(eventOf("linux-6.12-memcg-v2.txt"));
  EXPECT_EQ(j["kernel_report"]["memcg"]["stats"]["pagetables"], 188416);
  EXPECT_EQ(j["kernel_report"]["memcg"]["stats"]["pgscan"], 0) << "event counters too, as reported";
  EXPECT_EQ(j["kernel_report"]["memcg"]["memory"]["failcnt"], 79);
  EXPECT_EQ(j["at_kill"]["source"], "kernel report");
  EXPECT_EQ(j["at_kill"]["adds_up"], true);
  EXPECT_EQ(j["at_kill"]["usage_bytes"], 64 * kMiB);
  EXPECT_FALSE(j["at_kill"]["parts"].empty());
}

}  // namespace
}  // namespace headroom
