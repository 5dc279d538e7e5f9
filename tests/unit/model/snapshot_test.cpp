#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <utility>

#include "headroom/model/snapshot.h"
#include "headroom/model/snapshot_json.h"
#include "headroom/sources/collector.h"
#include "headroom/sources/process_cache.h"
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

// provingHostV1 walked once by a collector with a process cache, the prover's rule in force.
struct WalkedHost {
  testing::FixtureTree t;
  FsRoot fs;
  std::optional<Collector> c;
  RoleMatcher roles{std::vector<RoleRule>{*parseRoleRule("prover=comm:cuzk")}};
  ProcessCache cache;
  CollectOptions walk;
  std::shared_ptr<const Snapshot> walked;

  WalkedHost() : fs((testing::provingHostV1(t), t.fs())) {
    auto made = Collector::create(fs);
    if (!made) throw std::runtime_error(made.error().describe());
    c.emplace(std::move(*made));
    walk.cache = &cache;
    auto raw = c->collect(walk);
    if (!raw) throw std::runtime_error(raw.error().describe());
    walked = buildSnapshot(std::move(*raw), roles);
  }
};

// Between two walks the collector reads the prover's processes alone: the snapshot carries the
// others from the walk (the same objects, shared), the prover's figures are this sample's, a
// process asked for and gone is gone, and the counts are the walk's.
TEST(Snapshot, BetweenWalksTheOthersAreCarriedAndTheProverReadAgain) {
  WalkedHost h;
  auto& [t, fs, c, roles, cache, walk, walked] = h;
  Result<RawSample> raw = RawSample{};
  ASSERT_EQ(walked->processes.size(), 3u);
  EXPECT_FALSE(walked->stats.processes_carried);
  EXPECT_GT(walked->stats.processes_walked_ns, 0);

  // The prover shrank below curio, and curio grew: only the prover's change is read before the
  // next walk.
  t.process(testing::provingProver(50 * kMiB));
  t.process(testing::provingCurio(300 * kMiB));
  CollectOptions between = walk;
  between.walk = false;
  between.refresh = {100};
  for (const CgroupSnapshot& cg : walked->cgroups) between.carried_cgroups.push_back(cg.memory.path);
  raw = c->collect(between);
  ASSERT_TRUE(raw.has_value()) << raw.error().describe();
  EXPECT_EQ(raw->processes.size(), 1u) << "the prover's alone";
  EXPECT_EQ(raw->cgroups.size(), walked->cgroups.size()) << "the walk's cgroups, read again";
  EXPECT_TRUE(raw->stats.warnings.empty()) << raw->stats.warnings.front();
  auto carried = buildSnapshot(std::move(*raw), roles, {}, walked.get());
  ASSERT_EQ(carried->processes.size(), 3u);
  EXPECT_TRUE(carried->stats.processes_carried);
  EXPECT_EQ(carried->stats.processes_refreshed, 1u);
  EXPECT_EQ(carried->stats.processes_read, walked->stats.processes_read) << "the walk's counts";
  EXPECT_EQ(carried->stats.processes_walked_ns, walked->stats.processes_walked_ns);
  for (std::size_t i = 0; i < carried->processes.size(); ++i) {
    const pid_t pid = carried->processes[i].sample.pid;
    EXPECT_EQ(carried->processes.shared(i) == walked->processes.shared(i), pid != 100)
        << "pid " << pid << ": carried as it was (no copy), the prover made anew";
  }
  EXPECT_EQ(carried->findProcess(100)->attribution.rss_anon, 50 * kMiB) << "read again";
  EXPECT_EQ(carried->findProcess(100)->role, Role::kProver);
  EXPECT_EQ(carried->findProcess(100)->cgroup, "/proving/prover");
  EXPECT_GT(carried->findProcess(100)->attribution.overhead_share, 0u);
  EXPECT_EQ(carried->findProcess(101)->attribution.rss_anon, 100 * kMiB) << "carried: the walk's figure";
  const CgroupSnapshot* curio_cg = carried->findCgroup("/proving/curio");
  ASSERT_NE(curio_cg, nullptr);
  EXPECT_EQ(curio_cg->processes.size(), 1u);
  auto pidsBySize = [](const Snapshot& s, const std::string& cgroup) {
    std::vector<pid_t> pids;
    for (std::size_t i : s.findCgroup(cgroup)->processes) pids.push_back(s.processes[i].sample.pid);
    return pids;
  };
  EXPECT_EQ(pidsBySize(*walked, "/"), (std::vector<pid_t>{100, 101, 102}));
  EXPECT_EQ(pidsBySize(*carried, "/"), (std::vector<pid_t>{101, 100, 102})) << "the prover moved to its new place";
  EXPECT_EQ(walked->findProcess(100)->attribution.rss_anon, 3900 * kMiB) << "the published walk never changes";

  // A process started since the walk in a cgroup read again whole (its cgroup.procs): added,
  // after the carried ones.
  testing::FakeProcess helper = testing::provingProver(2 * kMiB);
  helper.pid = 104;
  helper.comm = "helper";
  t.process(helper);
  t.cgroupProcs(1, "/proving/prover", {100, 104});
  CollectOptions whole = between;
  whole.refresh_cgroups = {"/proving/prover"};
  raw = c->collect(whole);
  ASSERT_TRUE(raw.has_value()) << raw.error().describe();
  auto grown = buildSnapshot(std::move(*raw), roles, {}, carried.get());
  EXPECT_TRUE(grown->stats.processes_carried);
  ASSERT_EQ(grown->processes.size(), 4u);
  EXPECT_EQ(grown->processes.back().sample.pid, 104);
  EXPECT_EQ(grown->findCgroup("/proving/prover")->processes.size(), 2u);
  // More to read again than a walk would cost: the collector walks instead.
  whole.refresh_at_most = 1;
  raw = c->collect(whole);
  ASSERT_TRUE(raw.has_value()) << raw.error().describe();
  EXPECT_FALSE(raw->stats.processes_carried);
  EXPECT_EQ(raw->processes.size(), 4u);
  t.remove("/proc/104");
  t.cgroupProcs(1, "/proving/prover", {100});

  // The prover gone before the next walk: dropped, the rest still carried.
  t.remove("/proc/100");
  raw = c->collect(between);
  ASSERT_TRUE(raw.has_value()) << raw.error().describe();
  auto after = buildSnapshot(std::move(*raw), roles, {}, carried.get());
  EXPECT_EQ(after->findProcess(100), nullptr);
  EXPECT_EQ(after->processes.size(), 2u);
  // The next walk sees curio as it is now.
  raw = c->collect(walk);
  ASSERT_TRUE(raw.has_value()) << raw.error().describe();
  auto next = buildSnapshot(std::move(*raw), roles, {}, after.get());
  EXPECT_FALSE(next->stats.processes_carried);
  EXPECT_EQ(next->findProcess(101)->attribution.rss_anon, 300 * kMiB);
}

// Between two walks, with none gone and none come, the snapshot is the last one with the
// processes read again taken out and put back: each cgroup's processes, order, totals and split,
// and the overhead shares of those read, are what a walk of the same processes makes of them,
// a process that moved to another cgroup included.
TEST(Snapshot, BetweenWalksTheProcessesReadAgainArePlacedAsAWalkPlacesThem) {
  WalkedHost h;
  auto& [t, fs, c, roles, cache, walk, walked] = h;
  Result<RawSample> raw = RawSample{};

  // The prover shrinks below curio, and curio moves into the prover's cgroup and grows.
  t.process(testing::provingProver(50 * kMiB));
  testing::FakeProcess curio = testing::provingCurio(300 * kMiB);
  curio.memory_cgroup = "/proving/prover";
  t.process(curio);
  t.cgroupProcs(1, "/proving/prover", {100, 101});
  t.cgroupProcs(1, "/proving/curio", {});
  // And the two cgroups change places by usage: the cgroups' order is not the last snapshot's.
  t.cgroupV1("/proving/prover", 512 * kMiB, 9223372036854771712ULL, 400 * kMiB, 50 * kMiB, 0, 50 * kMiB);
  CollectOptions between = walk;
  between.walk = false;
  between.refresh = {100, 101};
  for (const CgroupSnapshot& cg : walked->cgroups) between.carried_cgroups.push_back(cg.memory.path);
  raw = c->collect(between);
  ASSERT_TRUE(raw.has_value()) << raw.error().describe();
  ASSERT_EQ(raw->processes.size(), 2u);
  auto carried = buildSnapshot(std::move(*raw), roles, {}, walked.get());
  ASSERT_TRUE(carried->stats.processes_carried);
  EXPECT_EQ(carried->processes.shared(2), walked->processes.shared(2)) << "sshd carried as it was";
  auto rank = [](const Snapshot& s, std::string_view path) { return s.findCgroup(path) - s.cgroups.data(); };
  ASSERT_LT(rank(*walked, "/proving/prover"), rank(*walked, "/proving/curio"));
  ASSERT_GT(rank(*carried, "/proving/prover"), rank(*carried, "/proving/curio"));
  raw = c->collect(walk);
  ASSERT_TRUE(raw.has_value()) << raw.error().describe();
  auto rewalked = buildSnapshot(std::move(*raw), roles, {}, carried.get());
  ASSERT_FALSE(rewalked->stats.processes_carried);

  auto pidsOf = [](const Snapshot& s, const std::vector<std::size_t>& indices) {
    std::vector<pid_t> pids;
    for (std::size_t i : indices) pids.push_back(s.processes[i].sample.pid);
    return pids;
  };
  EXPECT_EQ(pidsOf(*carried, *carried->by_size), (std::vector<pid_t>{101, 100, 102}));
  EXPECT_EQ(pidsOf(*carried, *carried->by_size), pidsOf(*rewalked, *rewalked->by_size));
  for (const CgroupSnapshot& w : rewalked->cgroups) {
    SCOPED_TRACE(w.memory.path);
    const CgroupSnapshot* b = carried->findCgroup(w.memory.path);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(pidsOf(*carried, b->processes), pidsOf(*rewalked, w.processes));
    EXPECT_EQ(b->totals, w.totals);
    EXPECT_EQ(b->attribution.unattributed, w.attribution.unattributed);
    ASSERT_EQ(b->attribution.parts.size(), w.attribution.parts.size());
    for (std::size_t k = 0; k < w.attribution.parts.size(); ++k)
      EXPECT_EQ(b->attribution.parts[k].bytes, w.attribution.parts[k].bytes) << toString(w.attribution.parts[k].kind);
    EXPECT_EQ(b->name, w.memory.path);
  }
  EXPECT_EQ(pidsOf(*carried, carried->findCgroup("/proving/prover")->processes), (std::vector<pid_t>{101, 100}));
  if (const CgroupSnapshot* left = carried->findCgroup("/proving/curio"); left != nullptr) {
    EXPECT_TRUE(left->processes.empty()) << "curio moved out";
    EXPECT_EQ(left->totals, ProcessTotals{});
  }
  for (pid_t pid : {100, 101}) {
    SCOPED_TRACE(pid);
    EXPECT_EQ(carried->findProcess(pid)->cgroup, "/proving/prover");
    EXPECT_EQ(carried->findProcess(pid)->attribution.overhead_share,
              rewalked->findProcess(pid)->attribution.overhead_share);
  }
  EXPECT_EQ(walked->findProcess(101)->cgroup, "/proving/curio") << "the published walk never changes";

  // The columns the passes over every process read say what the processes do.
  for (const Snapshot* s : {walked.get(), carried.get(), rewalked.get()}) {
    ASSERT_NE(s->columns, nullptr);
    const Snapshot::ProcessColumns& col = *s->columns;
    ASSERT_EQ(col.pids.size(), s->processes.size());
    EXPECT_TRUE(col.pid_order);
    for (std::size_t i = 0; i < s->processes.size(); ++i) {
      const ProcessSnapshot& p = s->processes[i];
      SCOPED_TRACE(p.sample.pid);
      EXPECT_EQ(col.pids[i], p.sample.pid);
      EXPECT_EQ(col.rss[i], p.attribution.rss);
      EXPECT_EQ(col.sizes[i], p.attribution.pss.value_or(p.attribution.rss));
      EXPECT_EQ(col.roles[i], p.role);
      ASSERT_LT(col.cgroup[i], s->cgroups.size());
      EXPECT_EQ(s->cgroups[col.cgroup[i]].memory.path, p.cgroup.str());
    }
    EXPECT_EQ(columnsOf(*s), s->columns) << "its own";
  }
  Snapshot handmade = *carried;
  handmade.columns.reset();
  const auto made = columnsOf(handmade);
  EXPECT_EQ(made->pids, carried->columns->pids);
  EXPECT_EQ(made->cgroup, carried->columns->cgroup);
  EXPECT_EQ(made->sizes, carried->columns->sizes);
}

// The list a snapshot's processes are held in: copied on write, never under another's readers.
TEST(ProcessList, AWriteCopiesAnItemSharedWithAnotherList) {
  ProcessList a;
  a.emplace_back().sample.pid = 1;
  a.emplace_back().sample.pid = 2;
  ProcessList b;
  b.push_shared(a.shared(0));
  b.push_shared(a.shared(1));
  b[1].sample.pid = 3;  // written: copied first
  EXPECT_EQ(a[1].sample.pid, 2);
  EXPECT_EQ(b[1].sample.pid, 3);
  EXPECT_EQ(a.shared(0), b.shared(0));
  EXPECT_NE(a.shared(1), b.shared(1));
  const ProcessSnapshot* before = &a[0];
  b = ProcessList{};
  a[0].sample.pid = 4;  // held by `a` alone now: written in place
  EXPECT_EQ(&std::as_const(a)[0], before);
  std::vector<pid_t> pids;
  for (const ProcessSnapshot& p : a) pids.push_back(p.sample.pid);
  EXPECT_EQ(pids, (std::vector<pid_t>{4, 2}));
  a.erase(a.begin());
  EXPECT_EQ(a.size(), 1u);
  EXPECT_EQ(a.front().sample.pid, 2);
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

// Past one chunk of pointers: a copy shares every chunk, a write copies the one it lands in, and
// what changed between two lists is found chunk by chunk.
TEST(ProcessList, ACopySharesItsChunksAndAWriteCopiesOneChunk) {
  ProcessList a;
  for (pid_t pid = 1; pid <= 200; ++pid) a.emplace_back().sample.pid = pid;
  ProcessList b = a;
  EXPECT_EQ(b.changedFrom(a, 10), std::vector<std::size_t>{});
  auto replaced = std::make_shared<ProcessSnapshot>();
  replaced->sample.pid = 1000;
  b.set_shared(130, replaced);
  b[5].sample.pid = 2000;
  EXPECT_EQ(a[130].sample.pid, 131);
  EXPECT_EQ(a[5].sample.pid, 6);
  EXPECT_EQ(b[130].sample.pid, 1000);
  EXPECT_EQ(b[5].sample.pid, 2000);
  EXPECT_EQ(b.shared(6), a.shared(6)) << "the rest of the written chunk still shared, item by item";
  EXPECT_EQ(b.changedFrom(a, 10), (std::vector<std::size_t>{5, 130}));
  EXPECT_EQ(b.changedFrom(a, 1), std::nullopt) << "more changed than asked for";
  b.push_back(ProcessSnapshot{});
  EXPECT_EQ(b.changedFrom(a, 10), std::nullopt) << "another size";
  EXPECT_EQ(b.eraseIf([](const ProcessSnapshot& p) { return p.sample.pid % 2 == 0 || p.sample.pid == 0; }), 102u);
  ASSERT_EQ(b.size(), 99u);
  EXPECT_EQ(b.back().sample.pid, 199);
  EXPECT_EQ(std::as_const(b)[64].sample.pid, 129);
  EXPECT_EQ(std::count_if(b.begin(), b.end(), [](const ProcessSnapshot& p) { return p.sample.pid > 100; }), 49);
  b.resize(70);
  EXPECT_EQ(b.size(), 70u);
  ProcessList c = std::move(b);
  EXPECT_EQ(c.size(), 70u);
  EXPECT_TRUE(b.empty()) << "moved from: empty, as a vector";  // NOLINT(bugprone-use-after-move)
  b.push_back(ProcessSnapshot{});                              // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.size(), 1u);
  EXPECT_EQ(a.size(), 200u);
  EXPECT_EQ(a.back().sample.pid, 200);
}

}  // namespace
}  // namespace headroom
