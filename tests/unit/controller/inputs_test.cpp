// One tick's controller inputs from a snapshot of a fixture tree (v1 and v2): who the prover is
// and what it is charged, every bound with its neighbours, and the cache a bound can give back.
// Every expected number is worked out by hand from the fixture's files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <set>

#include "headroom/controller/controller.h"
#include "headroom/model/roles.h"
#include "headroom/model/snapshot.h"
#include "headroom/sources/collector.h"
#include "testing/fixture_tree.h"

namespace headroom {
namespace {

using testing::FakeProcess;
using testing::FixtureTree;
using ::testing::HasSubstr;

constexpr std::uint64_t kKiB = 1ULL << 10;
constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::uint64_t kGiB = 1ULL << 30;

// Collects the tree as it stands and builds the snapshot; `touch` may add what the sensors
// would (GPU memory, pinned residency) before the model sees it.
std::shared_ptr<const Snapshot> snapshotOf(const FixtureTree& t, const std::vector<std::string>& rules,
                                           const std::function<void(SensorReadings&)>& touch = {}) {
  auto fs = t.fs();
  auto c = Collector::create(fs);
  if (!c) throw std::runtime_error(c.error().describe());
  auto raw = c->collect({});
  if (!raw) throw std::runtime_error(raw.error().describe());
  SensorReadings sensors;
  if (touch) touch(sensors);
  std::vector<RoleRule> parsed;
  for (const auto& r : rules) parsed.push_back(*parseRoleRule(r));
  return buildSnapshot(std::move(*raw), RoleMatcher(std::move(parsed)), std::move(sensors));
}

const BudgetBound* findBound(const BudgetInputs& in, std::string_view name, std::string_view kind) {
  for (const auto& b : in.bounds) {
    if (b.name == name && b.kind == kind) return &b;
  }
  return nullptr;
}

// ---------------------------------------------------------------- v1: the proving host
//
// provingHostV1: /proving (8 GiB limit, 5 GiB used, 900 MiB clean page cache) holds
// /proving/prover (cuzk: 3900 MiB PSS, 8 MiB page tables, 18 threads; the cgroup's kernel
// memory is 50 MiB) and /proving/curio (curio: 100 MiB anon + 256 MiB shmem PSS; 50 MiB kernel
// memory); the host has 16 GiB, 8 GiB available.
//
// cuzk is alone in its cgroup, so its share of the cgroup's kernel memory is all of it: its
// charge is 3900 + 50 = 3950 MiB.

TEST(BudgetInputs, V1ProverUsageBoundsAndNeighbours) {
  FixtureTree t;
  auto snap = testing::provingSnapshot(t, {"prover=comm:cuzk", "colocated=cmdline:^curio run"});
  auto in = budgetInputs(*snap, ProverScope{"/proving/prover", std::nullopt});
  ASSERT_TRUE(in) << in.error().describe();
  EXPECT_EQ(in->cgroup, "/proving/prover");
  EXPECT_EQ(in->time_ns, snap->monotonic_time_ns);
  EXPECT_EQ(in->prover_processes, 1u);
  EXPECT_EQ(in->prover_usage, 3950 * kMiB);
  EXPECT_EQ(in->overhead, 50 * kMiB) << "the prover cgroup's kernel memory, invisible to RSS";
  EXPECT_FALSE(in->self_reported.has_value());
  EXPECT_FALSE(in->probe.has_value());

  // Its own cgroup has no limit: /proving, then the host, last.
  ASSERT_EQ(in->bounds.size(), 2u);
  const BudgetBound& proving = in->bounds[0];
  EXPECT_EQ(proving.name, "/proving");
  EXPECT_EQ(proving.limit, 8 * kGiB);
  EXPECT_EQ(proving.usage, 5 * kGiB);
  EXPECT_EQ(proving.reclaimable, 900 * kMiB) << "total_inactive_file, nothing dirty, written back or mapped";
  EXPECT_EQ(proving.neighbours, 270 * kMiB) << "5120 - 900 - 3950 MiB: curio and the rest";
  EXPECT_EQ(proving.room(), 3 * kGiB + 900 * kMiB);

  const BudgetBound& host = in->bounds[1];
  EXPECT_EQ(host.name, "host");
  EXPECT_EQ(host.kind, "MemAvailable");
  EXPECT_EQ(host.limit, 16 * kGiB);
  EXPECT_EQ(host.usage, 8 * kGiB) << "MemTotal - MemAvailable";
  EXPECT_EQ(host.reclaimable, 0u) << "MemAvailable already counts what can be reclaimed";
  EXPECT_EQ(host.neighbours, 8192 * kMiB - 3950 * kMiB);
  EXPECT_EQ(host.room(), 8 * kGiB) << "MemAvailable, never MemTotal";
}

TEST(BudgetInputs, TheCgroupPathIsNormalised) {
  FixtureTree t;
  auto snap = testing::provingSnapshot(t, {"prover=comm:cuzk"});
  auto in = budgetInputs(*snap, ProverScope{"proving/prover/", std::nullopt});
  ASSERT_TRUE(in) << in.error().describe();
  EXPECT_EQ(in->cgroup, "/proving/prover");
  EXPECT_EQ(in->prover_usage, 3950 * kMiB);
}

TEST(BudgetInputs, WithoutAProverEverythingUnderABoundIsNeighbours) {
  FixtureTree t;
  auto snap = testing::provingSnapshot(t);  // no role rules: nobody is the prover
  auto in = budgetInputs(*snap, ProverScope{"/proving/prover", std::nullopt});
  ASSERT_TRUE(in) << in.error().describe();
  EXPECT_EQ(in->prover_processes, 0u);
  EXPECT_EQ(in->prover_usage, 0u);
  ASSERT_EQ(in->bounds.size(), 2u);
  EXPECT_EQ(in->bounds[0].neighbours, 5120 * kMiB - 900 * kMiB);
  EXPECT_EQ(in->bounds[1].neighbours, 8 * kGiB);
}

TEST(BudgetInputs, AnExplicitPidSetIsTheProverWhateverTheRoles) {
  FixtureTree t;
  auto snap = testing::provingSnapshot(t);  // no rules: everyone is "system"
  // Scope "/" holds everyone; the supervisor says cuzk and curio are its prover tree. curio's
  // charge: 356 MiB PSS + all of /proving/curio's 50 MiB kernel memory = 406 MiB.
  auto in = budgetInputs(*snap, ProverScope{"/", std::set<pid_t>{100, 101}});
  ASSERT_TRUE(in) << in.error().describe();
  EXPECT_EQ(in->prover_processes, 2u);
  EXPECT_EQ(in->prover_usage, 3950 * kMiB + 406 * kMiB);
  ASSERT_FALSE(in->bounds.empty());
  EXPECT_EQ(in->bounds.back().name, "host");

  // And a pid set leaves out a process the rules would call the prover.
  FixtureTree t2;
  auto snap2 = testing::provingSnapshot(t2, {"prover=comm:cuzk", "prover=comm:sshd"});
  auto only = budgetInputs(*snap2, ProverScope{"/", std::set<pid_t>{100}});
  ASSERT_TRUE(only) << only.error().describe();
  EXPECT_EQ(only->prover_processes, 1u);
  EXPECT_EQ(only->prover_usage, 3950 * kMiB);
  auto by_rule = budgetInputs(*snap2, ProverScope{"/", std::nullopt});
  ASSERT_TRUE(by_rule);
  EXPECT_EQ(by_rule->prover_processes, 2u) << "cuzk and sshd by the rules";
  EXPECT_EQ(by_rule->prover_usage, 3950 * kMiB + 4 * kMiB + 4 * kKiB)
      << "sshd in / (a v1 root: no kernel memory split out) adds its 4 MiB PSS and 4 KiB of page tables";
}

TEST(BudgetInputs, HeadroomItselfIsNeverTheProver) {
  FixtureTree t;
  testing::provingHostV1(t);
  FakeProcess self;
  self.pid = 300;
  self.comm = "headroom";
  self.memory_cgroup = "/proving/prover";
  self.rss_anon = self.pss_anon = 40 * kMiB;
  t.process(self);
  t.self(300);
  auto snap = snapshotOf(t, {"prover=comm:cuzk", "prover=comm:headroom"});
  ASSERT_EQ(snap->findProcess(300)->role, Role::kSelf);

  auto by_rule = budgetInputs(*snap, ProverScope{"/proving/prover", std::nullopt});
  auto cuzk_only = budgetInputs(*snap, ProverScope{"/proving/prover", std::set<pid_t>{100}});
  auto with_self = budgetInputs(*snap, ProverScope{"/proving/prover", std::set<pid_t>{100, 300}});
  ASSERT_TRUE(by_rule && cuzk_only && with_self);
  EXPECT_EQ(by_rule->prover_processes, 1u) << "a rule matching headroom does not make it the prover";
  EXPECT_EQ(with_self->prover_processes, 1u) << "nor does naming its pid";
  EXPECT_EQ(by_rule->prover_usage, cuzk_only->prover_usage);
  EXPECT_EQ(with_self->prover_usage, cuzk_only->prover_usage);
  EXPECT_GE(cuzk_only->prover_usage, 3900 * kMiB);
  EXPECT_LT(cuzk_only->prover_usage, 3950 * kMiB) << "headroom now takes a share of the cgroup's kernel memory";
  // headroom counts among the neighbours under the prover's bounds.
  EXPECT_EQ(cuzk_only->bounds[0].neighbours, 5120 * kMiB - 900 * kMiB - cuzk_only->prover_usage);
}

TEST(BudgetInputs, PinnedMemoryOutsideRssIsChargedOnce) {
  auto usageWith = [](std::optional<bool> inside) {
    FixtureTree t;
    testing::provingHostV1(t);
    auto snap = snapshotOf(t, {"prover=comm:cuzk"}, [&](SensorReadings& raw) {
      GpuMemory g;
      g.pinned_live = 1 * kGiB;
      g.pinned_peak = 2 * kGiB;
      raw.gpu[100] = g;
      if (inside) raw.pinned_inside_rss[100] = *inside;
    });
    auto in = budgetInputs(*snap, ProverScope{"/proving/prover", std::nullopt});
    if (!in) throw std::runtime_error(in.error().describe());
    return in->prover_usage;
  };
  EXPECT_EQ(usageWith(false), 3950 * kMiB + 1 * kGiB) << "pinned pages outside RSS are charged on top";
  EXPECT_EQ(usageWith(true), 3950 * kMiB) << "inside RSS: already in its PSS";
  EXPECT_EQ(usageWith(std::nullopt), 3950 * kMiB) << "unknown residency is not guessed twice";
}

TEST(BudgetInputs, AMissingCgroupIsAnErrorNamingIt) {
  FixtureTree t;
  auto snap = testing::provingSnapshot(t, {"prover=comm:cuzk"});
  auto in = budgetInputs(*snap, ProverScope{"/proving/gone", std::nullopt});
  ASSERT_FALSE(in);
  EXPECT_THAT(in.error().describe(), HasSubstr("/proving/gone"));
  // /proving is only an ancestor (a bound), not a watched cgroup with processes of its own.
  auto ancestor = budgetInputs(*snap, ProverScope{"/proving", std::nullopt});
  ASSERT_FALSE(ancestor);
  EXPECT_THAT(ancestor.error().describe(), HasSubstr("/proving"));
}

// ---------------------------------------------------------------- v2
//
// /proving: memory.max 24 GiB, 20 GiB current; file 4 GiB of which 256 MiB dirty and 768 MiB
// mapped: 3 GiB clean and droppable.
// /proving/prover: memory.max "max", 12 GiB current; file LRUs 1 GiB, 256 MiB mapped: 768 MiB
// droppable. Kernel: "kernel" 256 MiB (page tables 64, slab 150, stacks 6, the rest 36) plus
// sock 4 MiB charged apart: 260 MiB invisible. cuzk (10 GiB anon, 64 MiB VmPTE, 4 threads) is
// alone there and so takes all of it: its charge is 10240 + 260 = 10500 MiB.
// /proving/curio: curio, 2 GiB anon + 3 GiB shmem. Host: 64 GiB, 40 GiB available.

void v2ProvingHost(const FixtureTree& t, std::string_view prover_max = "max") {
  t.mountV2();
  t.meminfo(64 * kGiB, 40 * kGiB);
  t.write("/sys/fs/cgroup/memory.stat", "anon 1\n");  // the v2 root: no memory.current
  t.cgroupV2("/proving", 20 * kGiB, "25769803776",
             "anon 16106127360\nfile 4294967296\nshmem 3221225472\ninactive_file 3221225472\n"
             "active_file 1073741824\nfile_dirty 268435456\nfile_writeback 0\nfile_mapped 805306368\n");
  t.cgroupV2("/proving/prover", 12 * kGiB, prover_max,
             "anon 10737418240\nfile 1073741824\nshmem 0\ninactive_file 536870912\nactive_file 536870912\n"
             "file_dirty 0\nfile_writeback 0\nfile_mapped 268435456\npagetables 67108864\n"
             "slab_reclaimable 104857600\nslab_unreclaimable 52428800\nkernel_stack 6291456\nsock 4194304\n"
             "kernel 268435456\n");
  t.cgroupV2("/proving/curio", 6 * kGiB, "max",
             "anon 2147483648\nfile 3221225472\nshmem 3221225472\ninactive_file 0\nactive_file 0\n"
             "file_mapped 3221225472\nkernel 0\n");
  FakeProcess cuzk;
  cuzk.pid = 200;
  cuzk.comm = "cuzk";
  cuzk.memory_version = 2;
  cuzk.memory_cgroup = "/proving/prover";
  cuzk.rss_anon = cuzk.pss_anon = 10 * kGiB;
  cuzk.vm_pte = 64 * kMiB;
  cuzk.threads = 4;
  t.process(cuzk);
  FakeProcess curio;
  curio.pid = 201;
  curio.comm = "curio";
  curio.memory_version = 2;
  curio.memory_cgroup = "/proving/curio";
  curio.rss_anon = curio.pss_anon = 2 * kGiB;
  curio.rss_shmem = curio.pss_shmem = 3 * kGiB;
  t.process(curio);
}

TEST(BudgetInputs, V2ProverUsageOverheadAndBounds) {
  FixtureTree t;
  v2ProvingHost(t);
  auto snap = snapshotOf(t, {"prover=comm:cuzk"});
  auto in = budgetInputs(*snap, ProverScope{"/proving/prover", std::nullopt});
  ASSERT_TRUE(in) << in.error().describe();
  EXPECT_EQ(in->prover_processes, 1u);
  EXPECT_EQ(in->prover_usage, 10500 * kMiB);
  EXPECT_EQ(in->overhead, 260 * kMiB);
  ASSERT_EQ(in->bounds.size(), 2u) << "memory.max is max: /proving and the host";
  const BudgetBound& proving = in->bounds[0];
  EXPECT_EQ(proving.name, "/proving");
  EXPECT_EQ(proving.kind, "limit");
  EXPECT_EQ(proving.limit, 24 * kGiB);
  EXPECT_EQ(proving.usage, 20 * kGiB);
  EXPECT_EQ(proving.reclaimable, 3 * kGiB);
  EXPECT_EQ(proving.neighbours, 20480 * kMiB - 3072 * kMiB - 10500 * kMiB);
  const BudgetBound& host = in->bounds[1];
  EXPECT_EQ(host.kind, "MemAvailable");
  EXPECT_EQ(host.usage, 24 * kGiB);
  EXPECT_EQ(host.neighbours, 24576 * kMiB - 10500 * kMiB);
}

TEST(BudgetInputs, V2MemoryHighIsABoundTheProverFeelsFirst) {
  FixtureTree t;
  v2ProvingHost(t);
  t.write("/sys/fs/cgroup/proving/prover/memory.high", "15032385536\n");  // 14 GiB
  auto snap = snapshotOf(t, {"prover=comm:cuzk"});
  auto in = budgetInputs(*snap, ProverScope{"/proving/prover", std::nullopt});
  ASSERT_TRUE(in) << in.error().describe();
  ASSERT_EQ(in->bounds.size(), 3u);
  const BudgetBound& high = in->bounds[0];
  EXPECT_EQ(high.name, "/proving/prover");
  EXPECT_EQ(high.kind, "memory.high");
  EXPECT_EQ(high.limit, 14 * kGiB);
  EXPECT_EQ(high.usage, 12 * kGiB);
  EXPECT_EQ(high.reclaimable, 768 * kMiB);
  EXPECT_EQ(high.neighbours, 12288 * kMiB - 768 * kMiB - 10500 * kMiB);
  EXPECT_EQ(in->bounds[1].name, "/proving");
  EXPECT_EQ(in->bounds[2].name, "host");

  // Into the controller: rooms 14 - 12 + 0.75 = 2.75 GiB (memory.high), 24 - 20 + 3 = 7 GiB,
  // 40 GiB; margin the 1 GiB floor (260 MiB of overhead is less); budget 10500 + 2816 - 1024.
  BudgetController c(BudgetPolicy{});
  BudgetDecision d = c.decide(*in);
  ASSERT_TRUE(d.valid) << d.reason;
  EXPECT_EQ(d.tightest, "/proving/prover");
  EXPECT_EQ(d.room, 2816 * kMiB);
  EXPECT_EQ(d.budget, 12292 * kMiB);
  EXPECT_THAT(d.reason, HasSubstr("memory.high"));
}

TEST(BudgetInputs, V2MemoryHighAndMaxBothBoundWhenHighIsLower) {
  FixtureTree t;
  v2ProvingHost(t, "17179869184");                                        // memory.max 16 GiB
  t.write("/sys/fs/cgroup/proving/prover/memory.high", "15032385536\n");  // memory.high 14 GiB
  auto snap = snapshotOf(t, {"prover=comm:cuzk"});
  auto in = budgetInputs(*snap, ProverScope{"/proving/prover", std::nullopt});
  ASSERT_TRUE(in) << in.error().describe();
  ASSERT_EQ(in->bounds.size(), 4u);
  EXPECT_EQ(in->bounds[0].kind, "memory.high");
  EXPECT_EQ(in->bounds[0].limit, 14 * kGiB);
  EXPECT_EQ(in->bounds[1].name, "/proving/prover");
  EXPECT_EQ(in->bounds[1].kind, "limit");
  EXPECT_EQ(in->bounds[1].limit, 16 * kGiB);
  EXPECT_EQ(in->bounds[1].reclaimable, 768 * kMiB);
  EXPECT_EQ(in->bounds[2].name, "/proving");
  EXPECT_EQ(in->bounds[3].name, "host");
}

TEST(BudgetInputs, V2MemoryHighAboveMaxAddsNothing) {
  FixtureTree t;
  v2ProvingHost(t, "17179869184");                                        // memory.max 16 GiB
  t.write("/sys/fs/cgroup/proving/prover/memory.high", "21474836480\n");  // memory.high 20 GiB
  auto snap = snapshotOf(t, {"prover=comm:cuzk"});
  auto in = budgetInputs(*snap, ProverScope{"/proving/prover", std::nullopt});
  ASSERT_TRUE(in) << in.error().describe();
  ASSERT_EQ(in->bounds.size(), 3u);
  EXPECT_EQ(findBound(*in, "/proving/prover", "memory.high"), nullptr);
  EXPECT_NE(findBound(*in, "/proving/prover", "limit"), nullptr);
}

// ---------------------------------------------------------------- reclaimableBytes

CgroupMemory withStat(int version, const std::vector<std::pair<std::string, std::uint64_t>>& stat) {
  CgroupMemory cg;
  cg.version = version;
  cg.path = "/x";
  for (const auto& [k, v] : stat) cg.stat.set(k, v);
  return cg;
}

TEST(ReclaimableBytes, V1UsesTheHierarchicalTotals) {
  // The file LRUs (3 + 1 GiB) less dirty 128, writeback 64 and mapped 320 MiB = 3.5 GiB. The
  // local keys (this cgroup alone) are not the hierarchy's and must not be read.
  CgroupMemory cg = withStat(1, {{"inactive_file", 99 * kGiB},
                                 {"active_file", 99 * kGiB},
                                 {"dirty", 0},
                                 {"mapped_file", 0},
                                 {"total_inactive_file", 3 * kGiB},
                                 {"total_active_file", 1 * kGiB},
                                 {"total_dirty", 128 * kMiB},
                                 {"total_writeback", 64 * kMiB},
                                 {"total_mapped_file", 320 * kMiB}});
  EXPECT_EQ(reclaimableBytes(cg), 3 * kGiB + 512 * kMiB);
}

TEST(ReclaimableBytes, V2UsesItsOwnKeys) {
  // 2 + 1 GiB of file LRUs less 100 MiB dirty, 28 MiB writeback, 896 MiB mapped = 2 GiB.
  CgroupMemory cg = withStat(2, {{"inactive_file", 2 * kGiB},
                                 {"active_file", 1 * kGiB},
                                 {"file_dirty", 100 * kMiB},
                                 {"file_writeback", 28 * kMiB},
                                 {"file_mapped", 896 * kMiB},
                                 {"total_inactive_file", 50 * kGiB},
                                 {"total_dirty", 0}});
  EXPECT_EQ(reclaimableBytes(cg), 2 * kGiB);
}

TEST(ReclaimableBytes, ClampedAtZeroAndZeroWithoutKeys) {
  // Mapped pages can exceed the file LRUs (counters sampled apart, shmem mapped): never wrap.
  EXPECT_EQ(reclaimableBytes(withStat(2, {{"inactive_file", 100 * kMiB}, {"file_mapped", 300 * kMiB}})), 0u);
  EXPECT_EQ(reclaimableBytes(withStat(1, {{"total_inactive_file", 4 * kKiB}, {"total_dirty", 8 * kKiB}})), 0u);
  EXPECT_EQ(reclaimableBytes(withStat(1, {})), 0u);
  EXPECT_EQ(reclaimableBytes(withStat(2, {})), 0u);
  EXPECT_EQ(reclaimableBytes(withStat(2, {{"active_file", 5 * kMiB}})), 5 * kMiB);
}

}  // namespace
}  // namespace headroom
