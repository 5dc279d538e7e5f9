// The evidence of one OOM kill for the controller, as the agent and `headroom run` both assemble
// it: the prover's victims before its neighbours, the kernel's figures before the last sample's,
// page tables counted once, and the kill's own overhead when its domain is the prover's cgroup.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "headroom/controller/kill_evidence.h"
#include "testing/kernel_report.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

constexpr std::uint64_t kMiB = 1ULL << 20;

OomVictim victim(pid_t pid, std::optional<std::uint64_t> anon) {
  OomVictim v;
  v.pid = v.tgid = pid;
  v.comm = "cuzk";
  v.cgroup = "/jobs/prover";
  v.anon_rss = anon;
  v.file_rss = 10 * kMiB;
  v.shmem_rss = 0;
  v.pgtables = 6 * kMiB;
  return v;
}

ChargedFigures sampled(std::uint64_t charge) { return ChargedFigures{charge, 64 * kMiB, 4 * kMiB, 2 * kMiB, 1}; }

TEST(KillEvidence, TheKernelsFiguresAtTheKillBeforeTheLastSamples) {
  const OomVictim v = victim(7, 700 * kMiB);
  const KillVictim kv{&v, true, sampled(600 * kMiB)};
  KillEvidence k = killEvidence(std::span(&kv, 1), nullptr, "/jobs/prover", 42, "mark_victim: pid 7");
  EXPECT_TRUE(k.prover_victim);
  EXPECT_EQ(k.time_ns, 42);
  EXPECT_EQ(k.charge, 716 * kMiB) << "anon + file + shmem + page tables at the kill";
  EXPECT_EQ(k.page_tables, 6 * kMiB);
  EXPECT_EQ(k.pinned, 64 * kMiB) << "pinned memory: the last sample's";
  EXPECT_EQ(k.kernel, 2 * kMiB);
  EXPECT_EQ(k.what, "mark_victim: pid 7");

  const OomVictim bare = victim(7, std::nullopt);  // a report without figures (a pid-only mark)
  const KillVictim sampled_only{&bare, true, sampled(600 * kMiB)};
  k = killEvidence(std::span(&sampled_only, 1), nullptr, "/jobs/prover", 42, "");
  EXPECT_EQ(k.charge, 600 * kMiB);
  EXPECT_EQ(k.page_tables, 4 * kMiB);
}

TEST(KillEvidence, TheProversOwnVictimsBeforeItsNeighbours) {
  const OomVictim neighbour = victim(8, 100 * kMiB);
  const OomVictim prover = victim(7, 700 * kMiB);
  const std::vector<KillVictim> both = {{&neighbour, false, sampled(90 * kMiB)}, {&prover, true, sampled(600 * kMiB)}};
  KillEvidence k = killEvidence(both, nullptr, "/jobs/prover", 0, "");
  EXPECT_TRUE(k.prover_victim);
  EXPECT_EQ(k.charge, 716 * kMiB) << "the neighbour's charge is not the prover's";

  const std::vector<KillVictim> beside = {{&neighbour, false, sampled(90 * kMiB)}};
  k = killEvidence(beside, nullptr, "/jobs/prover", 0, "");
  EXPECT_FALSE(k.prover_victim);
  EXPECT_EQ(k.charge, 116 * kMiB);

  // The group's victims (memory.oom.group) are summed.
  const OomVictim second = victim(9, 300 * kMiB);
  const std::vector<KillVictim> group = {{&prover, true, sampled(600 * kMiB)}, {&second, true, sampled(0)}};
  k = killEvidence(group, nullptr, "/jobs/prover", 0, "");
  EXPECT_EQ(k.charge, 716 * kMiB + 316 * kMiB);
  EXPECT_EQ(k.page_tables, 12 * kMiB);
  EXPECT_EQ(k.pinned, 128 * kMiB);
}

TEST(KillEvidence, ASampledProcessesPageTablesAreCountedOnce) {
  ProcessSnapshot p;
  p.sample.status.vm_rss = 500 * kMiB;
  p.sample.status.vm_pte = 8 * kMiB;
  p.sample.status.vm_lck = 16 * kMiB;
  p.attribution.overhead_share = 8 * kMiB + 3 * kMiB;  // its own page tables + its share of the rest
  PinnedOverlay pin;
  pin.live_bytes = 32 * kMiB;
  pin.residency = PinnedOverlay::Residency::kOutsideRss;
  p.attribution.pinned = std::make_shared<const PinnedOverlay>(pin);
  const ChargedFigures f = chargedFigures(p);
  EXPECT_EQ(f.charge, 508 * kMiB + 32 * kMiB) << "RSS, page tables, and pinned pages outside RSS";
  EXPECT_EQ(f.page_tables, 8 * kMiB);
  EXPECT_EQ(f.kernel, 3 * kMiB) << "the overhead share without the page tables counted above";
  EXPECT_EQ(f.pinned, 32 * kMiB) << "the larger of VmLck and the live pinned bytes";
  EXPECT_EQ(f.processes, 1U);
  ChargedFigures tree = f;
  tree += f;
  EXPECT_EQ(tree.charge, 2 * f.charge);
  EXPECT_EQ(tree.processes, 2U);
}

TEST(KillEvidence, TheKillsOwnOverheadWhenTheDomainIsTheProvers) {
  OomEvent e;
  e.from_kmsg = true;
  e.domain_cgroup = "/jobs/prover";
  e.kernel_memcg = testing::memcgReport(5 * 1024 * kMiB, {{"anon", 4 * 1024 * kMiB},
                                                          {"file", 0},
                                                          {"shmem", 0},
                                                          {"pagetables", 40 * kMiB},
                                                          {"slab", 300 * kMiB},
                                                          {"kernel", 1024 * kMiB}});
  const OomVictim v = victim(7, 700 * kMiB);
  e.victims.push_back(v);
  const KillVictim kv{&e.victims[0], true, sampled(600 * kMiB)};
  KillEvidence k = killEvidence(std::span(&kv, 1), &e, "/jobs/prover", 0, "kernel OOM report: pid 7");
  EXPECT_EQ(k.charge, 5 * 1024 * kMiB) << "the domain's charge at the kill";
  EXPECT_EQ(k.page_tables, 40 * kMiB);
  EXPECT_GT(k.kernel, 2 * kMiB) << "the kernel's own figure for what no process shows";
  EXPECT_THAT(k.what, HasSubstr("overhead at the kill from the kernel's OOM report"));

  // A wider domain's overhead is its neighbours' too: the victim's own figures stand.
  k = killEvidence(std::span(&kv, 1), &e, "/jobs/prover/inner", 0, "");
  EXPECT_EQ(k.charge, 716 * kMiB);
  EXPECT_EQ(k.what, "");
}

// Before 5.11 memory.stat (and so the report) has no pagetables: the domain's charge still comes
// from the report, the page tables from the victim's own line of the task dump, never 0.
TEST(KillEvidence, AReportWithoutPageTablesKeepsTheVictimsOwn) {
  OomEvent e;
  e.from_kmsg = true;
  e.domain_cgroup = "/jobs/prover";
  e.kernel_memcg = testing::memcgReport(5 * 1024 * kMiB,
                                        {{"anon", 4 * 1024 * kMiB}, {"file", 0}, {"shmem", 0}, {"slab", 300 * kMiB}});
  e.victims.push_back(victim(7, 700 * kMiB));
  const KillVictim kv{&e.victims[0], true, sampled(600 * kMiB)};
  KillEvidence k = killEvidence(std::span(&kv, 1), &e, "/jobs/prover", 0, "");
  EXPECT_EQ(k.charge, 5 * 1024 * kMiB);
  EXPECT_EQ(k.page_tables, 6 * kMiB) << "the victim's pgtables_bytes";
}

}  // namespace
}  // namespace headroom
