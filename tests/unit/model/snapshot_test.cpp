#include <gtest/gtest.h>

#include <algorithm>

#include "headroom/model/snapshot.h"
#include "headroom/model/snapshot_json.h"
#include "headroom/sources/collector.h"
#include "testing/fixture_tree.h"

namespace headroom {
namespace {

constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::uint64_t kGiB = 1ULL << 30;

using testing::provingSnapshot;

TEST(Snapshot, TightestBoundIsTheAncestorLimit) {
  testing::FixtureTree t;
  auto snap = provingSnapshot(t);
  const CgroupSnapshot* prover = snap->findCgroup("/proving/prover");
  ASSERT_NE(prover, nullptr);
  ASSERT_EQ(prover->bounds.size(), 2u) << "its own is unlimited: /proving and the host";
  EXPECT_EQ(prover->bounds[0].name, "/proving");
  EXPECT_EQ(prover->bounds[1].name, "host");
  EXPECT_EQ(prover->bounds[1].room(), 8 * kGiB) << "the host bound is MemAvailable, never MemTotal";
  ASSERT_TRUE(prover->tightest.has_value());
  EXPECT_EQ(prover->tightest->name, "/proving");
  EXPECT_EQ(prover->headroom().value(), 3 * kGiB);
  const CgroupSnapshot* root = snap->findCgroup("/");
  ASSERT_NE(root, nullptr);
  EXPECT_EQ(root->tightest->name, "host");
}

// A watched cgroup is also the ancestor that bounds the watched cgroups below it (the agent
// with `--cgroup /proving` watches /proving itself and /proving/prover): the parent's limit
// must reach the child whatever order the two are built in.
TEST(Snapshot, AWatchedParentStillBoundsItsWatchedChild) {
  testing::FixtureTree t;
  testing::provingHostV1(t);
  auto fs = t.fs();  // the collector holds on to it
  auto c = Collector::create(fs);
  ASSERT_TRUE(c.has_value());
  CollectOptions opts;
  opts.cgroups = {"/proving"};
  auto raw = c->collect(opts);
  ASSERT_TRUE(raw.has_value()) << raw.error().describe();
  // Parents first: the order in which a move of the parent would hide its limit.
  std::sort(raw->cgroups.begin(), raw->cgroups.end(),
            [](const CgroupMemory& a, const CgroupMemory& b) { return a.path.size() < b.path.size(); });
  ASSERT_GE(raw->cgroups.size(), 2u);
  EXPECT_EQ(raw->cgroups.front().path, "/proving");
  auto snap = buildSnapshot(std::move(*raw), RoleMatcher(std::vector<RoleRule>{}));
  const CgroupSnapshot* prover = snap->findCgroup("/proving/prover");
  ASSERT_NE(prover, nullptr);
  ASSERT_EQ(prover->bounds.size(), 2u);
  EXPECT_EQ(prover->bounds[0].name, "/proving");
  EXPECT_EQ(prover->tightest->name, "/proving");
  EXPECT_EQ(prover->headroom().value(), 3 * kGiB);
}

TEST(Snapshot, ProcessesAttributedToTheirDeepestCgroupWithRoles) {
  testing::FixtureTree t;
  auto snap = provingSnapshot(t, {"prover=comm:cuzk", "colocated=cmdline:^curio run"});
  const ProcessSnapshot* cuzk = snap->findProcess(100);
  ASSERT_NE(cuzk, nullptr);
  EXPECT_EQ(cuzk->role, Role::kProver);
  EXPECT_EQ(cuzk->cgroup, "/proving/prover");
  EXPECT_EQ(snap->findProcess(101)->role, Role::kColocated);
  EXPECT_EQ(snap->findProcess(102)->role, Role::kSystem);
  EXPECT_EQ(snap->findProcess(102)->cgroup, "/");
  const CgroupSnapshot* root = snap->findCgroup("/");
  EXPECT_EQ(root->processes.size(), 3u) << "usage is hierarchical: the root's subtree holds everyone";
  // Cgroups sorted by usage, biggest first.
  EXPECT_EQ(snap->cgroups.front().memory.path, "/");
}

TEST(Snapshot, OverheadShareFollowsItsRule) {
  testing::FixtureTree t;
  auto snap = provingSnapshot(t);
  const ProcessSnapshot* cuzk = snap->findProcess(100);
  const CgroupSnapshot* cg = snap->findCgroup("/proving/prover");
  // Alone in its cgroup: own page tables + all stacks + all other kernel memory.
  std::uint64_t expect = cuzk->sample.status.vm_pte + cg->attribution.bytesOf(PartKind::kKernelStack).value() +
                         cg->attribution.bytesOf(PartKind::kKernelOther).value();
  EXPECT_EQ(cuzk->attribution.overhead_share, expect);
  EXPECT_EQ(cuzk->attribution.page_tables, 8 * kMiB);
  EXPECT_NE(cuzk->attribution.overhead_rule.find("VmPTE"), std::string::npos);
  // The curio cgroup's 256 MiB shmem is mapped by curio: nothing unmapped there.
  const CgroupSnapshot* curio = snap->findCgroup("/proving/curio");
  EXPECT_EQ(curio->attribution.bytesOf(PartKind::kShmemMapped).value(), 256 * kMiB);
  EXPECT_EQ(curio->attribution.bytesOf(PartKind::kShmemUnmapped).value(), 0u);
}

// The processes summed exactly where the per-process source approximates: the prover first,
// then the processes under a bound near its limit, each largest first; the host is no such bound.
TEST(Snapshot, ExactRssForTheProverAndTheCgroupsNearALimit) {
  testing::FixtureTree t;
  auto snap = provingSnapshot(t, {"prover=comm:cuzk", "colocated=cmdline:^curio run"});
  auto none = [](const Bound&) { return false; };
  EXPECT_EQ(processesToSumExactly(*snap, none, 256), std::vector<pid_t>{100}) << "the prover alone";
  auto proving = [](const Bound& b) { return b.name == "/proving"; };
  EXPECT_EQ(processesToSumExactly(*snap, proving, 256), (std::vector<pid_t>{100, 101}))
      << "curio is under /proving too; pid 102 is under the host bound alone";
  EXPECT_EQ(processesToSumExactly(*snap, proving, 1), std::vector<pid_t>{100}) << "at most `max`, the prover first";
  auto host = [](const Bound& b) { return b.name == "host"; };
  EXPECT_EQ(processesToSumExactly(*snap, host, 256), std::vector<pid_t>{100});
  auto all = [](const Bound&) { return true; };
  auto everyone = processesToSumExactly(*snap, all, 256);
  EXPECT_EQ(everyone.size(), 2u) << "the root cgroup has no bound but the host's";
}

TEST(SnapshotJson, CarriesTheModel) {
  testing::FixtureTree t;
  auto snap = provingSnapshot(t, {"prover=comm:cuzk"});
  nlohmann::json j = toJson(*snap);
  EXPECT_EQ(j["schema_version"], kSnapshotSchemaVersion);
  EXPECT_EQ(j["cgroup_mode"], "v1");
  EXPECT_EQ(j["host"]["meminfo"]["mem_available_bytes"], 8 * kGiB);
  bool found = false;
  for (const auto& c : j["cgroups"]) {
    if (c["memory"]["path"] != "/proving/prover") continue;
    found = true;
    EXPECT_EQ(c["headroom_bytes"], 3 * kGiB);
    EXPECT_EQ(c["tightest_bound"]["name"], "/proving");
    std::int64_t sum = c["attribution"]["unattributed_bytes"];
    for (const auto& p : c["attribution"]["parts"]) sum += p["bytes"].get<std::int64_t>();
    EXPECT_EQ(sum, c["memory"]["usage_bytes"].get<std::int64_t>()) << "parts add up to usage";
  }
  EXPECT_TRUE(found);
  for (const auto& p : j["processes"]) {
    if (p["pid"] == 100) {
      EXPECT_EQ(p["role"], "prover");
    }
  }
  EXPECT_EQ(j["stats"]["processes_vanished"], 1);
}

}  // namespace
}  // namespace headroom
