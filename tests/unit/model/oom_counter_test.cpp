// OOM kills from the cgroups' counters: samples built in code (v2 memory.events.local, v1
// memory.oom_control), rises, baselines, recreated cgroups and the inferred victims.
#include <gtest/gtest.h>

#include "headroom/model/oom_counter.h"

namespace headroom {
namespace {

constexpr std::uint64_t kMiB = 1ULL << 20;

struct Proc {
  pid_t pid;
  std::uint64_t start;
  const char* comm;
  const char* cgroup;
  std::uint64_t rss;
};

struct Group {
  const char* path;
  std::optional<std::uint64_t> local_kills;                // v2 memory.events.local / v1 oom_control
  std::optional<std::uint64_t> tree_kills = std::nullopt;  // v2 memory.events (hierarchical)
};

std::shared_ptr<const Snapshot> sample(int version, std::int64_t t, const std::vector<Group>& groups,
                                       const std::vector<Proc>& procs) {
  RawSample raw;
  raw.wall_time_ns = 1'700'000'000'000'000'000 + t;
  raw.monotonic_time_ns = t;
  raw.completed_monotonic_ns = t + 1000;
  raw.memory_version = version;
  for (const Group& g : groups) {
    CgroupMemory cg;
    cg.version = version;
    cg.path = g.path;
    cg.usage = 100 * kMiB;
    cg.limit = 512 * kMiB;
    if (version == 2) {
      if (g.local_kills) cg.events_local.set("oom_kill", *g.local_kills);
      if (g.tree_kills) cg.events.set("oom_kill", *g.tree_kills);
    } else {
      cg.oom_kills = g.local_kills;
    }
    raw.cgroups.push_back(cg);
  }
  for (const Proc& p : procs) {
    ProcessSample s;
    s.pid = p.pid;
    s.start_time_ticks = p.start;
    s.comm = p.comm;
    s.memory_cgroup = p.cgroup;
    s.status.tgid = p.pid;
    s.status.vm_rss = s.status.rss_anon = p.rss;
    s.status.vm_pte = 4096;
    raw.processes.push_back(s);
  }
  return buildSnapshot(std::move(raw), RoleMatcher());
}

TEST(OomCounterWatch, ARiseIsOneEventWithTheLargestGoneProcessAsItsInferredVictim) {
  OomCounterWatch w;
  auto a = sample(2, 1000, {{"/ctr", 0}},
                  {{10, 1, "prover", "/ctr", 400 * kMiB},
                   {11, 1, "helper", "/ctr", 20 * kMiB},
                   {12, 1, "sidecar", "/ctr", 30 * kMiB}});
  EXPECT_TRUE(w.update(nullptr, *a).empty()) << "the first sample is the baseline";
  // The prover and the helper are gone (the helper exited on its own); one kill counted.
  auto b = sample(2, 2000, {{"/ctr", 1}}, {{12, 1, "sidecar", "/ctr", 30 * kMiB}});
  auto ev = w.update(a.get(), *b);
  ASSERT_EQ(ev.size(), 1u);
  const OomEvent& e = ev[0];
  EXPECT_TRUE(e.from_counter);
  EXPECT_FALSE(e.from_bpf);
  EXPECT_FALSE(e.from_kmsg);
  EXPECT_EQ(e.counter_cgroup, "/ctr");
  EXPECT_EQ(e.counted_kills, 1u);
  EXPECT_FALSE(e.domain_cgroup.has_value()) << "which limit was hit, the counter does not say";
  EXPECT_EQ(e.monotonic_time_ns, 2000) << "seen at the sample after the kill: the last one before is a";
  ASSERT_EQ(e.victims.size(), 1u) << "one kill, one victim: the largest of those gone";
  EXPECT_EQ(e.victims[0].tgid, 10);
  EXPECT_EQ(e.victims[0].comm, "prover");
  EXPECT_TRUE(e.victims[0].inferred);
  EXPECT_EQ(e.victims[0].anon_rss.value(), 400 * kMiB);
  EXPECT_EQ(e.victims[0].cgroup, "/ctr");
  // Nothing new: nothing more.
  auto c = sample(2, 3000, {{"/ctr", 1}}, {{12, 1, "sidecar", "/ctr", 30 * kMiB}});
  EXPECT_TRUE(w.update(b.get(), *c).empty());
}

TEST(OomCounterWatch, AReusedPidIsNotTakenForTheProcessThatDied) {
  OomCounterWatch w;
  auto a = sample(1, 1000, {{"/ctr", 5}}, {{10, 100, "prover", "/ctr", 400 * kMiB}});
  (void)w.update(nullptr, *a);
  // pid 10 is another process now (another start time): the prover is gone all the same.
  auto b = sample(1, 2000, {{"/ctr", 7}}, {{10, 900, "sh", "/ctr", 1 * kMiB}});
  auto ev = w.update(a.get(), *b);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].counted_kills, 2u) << "v1 memory.oom_control oom_kill 5 -> 7";
  ASSERT_EQ(ev[0].victims.size(), 1u) << "two kills, but only one process went";
  EXPECT_EQ(ev[0].victims[0].comm, "prover");
}

// The counter was read while the victim was still exiting (in /proc with its memory): the kill
// waits for the next sample, which no longer has it, and names it then; one that never goes is
// told without a victim after two more samples.
TEST(OomCounterWatch, AVictimStillExitingWhenTheCounterRoseIsNamedAtTheNextSample) {
  OomCounterWatch w;
  const std::vector<Proc> both = {{10, 1, "prover", "/ctr", 400 * kMiB}, {12, 1, "sidecar", "/ctr", 30 * kMiB}};
  auto a = sample(2, 1000, {{"/ctr", 0}}, both);
  (void)w.update(nullptr, *a);
  auto b = sample(2, 2000, {{"/ctr", 1}}, both);
  EXPECT_TRUE(w.update(a.get(), *b).empty()) << "nobody went yet: wait";
  auto c = sample(2, 3000, {{"/ctr", 1}}, {{12, 1, "sidecar", "/ctr", 30 * kMiB}});
  auto ev = w.update(b.get(), *c);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].monotonic_time_ns, 2000) << "when the counter rose";
  ASSERT_EQ(ev[0].victims.size(), 1u);
  EXPECT_EQ(ev[0].victims[0].comm, "prover");
  // A rise whose processes all stay: told after two more samples, with no victim.
  auto d = sample(2, 4000, {{"/ctr", 2}}, {{12, 1, "sidecar", "/ctr", 30 * kMiB}});
  EXPECT_TRUE(w.update(c.get(), *d).empty());
  EXPECT_TRUE(w.update(d.get(), *d).empty());
  ev = w.update(d.get(), *d);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_TRUE(ev[0].victims.empty());
  EXPECT_EQ(ev[0].counted_kills, 1u);
}

TEST(OomCounterWatch, NewAndRecreatedCgroupsStartFromTheirCountAndOthersAreApart) {
  OomCounterWatch w;
  auto a = sample(2, 1000, {{"/a", 3}}, {});
  (void)w.update(nullptr, *a);
  // /b appears with kills of its own from before we saw it; /a was removed and made again.
  auto b = sample(2, 2000, {{"/a", 0}, {"/b", 4}}, {});
  EXPECT_TRUE(w.update(a.get(), *b).empty());
  auto c = sample(2, 3000, {{"/a", 1}, {"/b", 4}}, {});
  auto ev = w.update(b.get(), *c);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].counter_cgroup, "/a");
  EXPECT_TRUE(ev[0].victims.empty()) << "nobody of /a went: no victim is made up";
}

TEST(OomCounterWatch, LocalCountsOnlyAndTheHierarchicalOneWithoutALocalFile) {
  // v2: a kill in /pod/ctr counts in /pod's memory.events too, but only /pod/ctr's local count
  // rises: one event, in the right cgroup.
  OomCounterWatch w;
  auto a = sample(2, 1000, {{"/pod", 0, 0}, {"/pod/ctr", 0, 0}}, {});
  (void)w.update(nullptr, *a);
  auto b = sample(2, 2000, {{"/pod", 0, 1}, {"/pod/ctr", 1, 1}}, {});
  auto ev = w.update(a.get(), *b);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].counter_cgroup, "/pod/ctr");
  // Before 5.7 there is no memory.events.local: memory.events is used.
  CgroupMemory old;
  old.version = 2;
  old.events.set("oom_kill", 6);
  EXPECT_EQ(localOomKills(old).value(), 6u);
  CgroupMemory none;
  none.version = 2;
  EXPECT_FALSE(localOomKills(none).has_value());
}

TEST(OomCounterWatch, PrimedWithAnEarlierAgentsCountsTheFirstSampleTellsTheRisesSince) {
  OomCounterWatch w;
  w.prime({{"/ctr", 2}, {"/quiet", 0}});
  // Three more kills in /ctr while no agent ran; /new was not sampled then: its count is its start.
  auto a = sample(2, 1000, {{"/ctr", 5}, {"/quiet", 0}, {"/new", 4}}, {});
  auto ev = w.update(nullptr, *a);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].counter_cgroup, "/ctr");
  EXPECT_EQ(ev[0].counted_kills, 3u);
  EXPECT_TRUE(ev[0].victims.empty()) << "the processes gone were never sampled";
  EXPECT_EQ(w.counts(), (std::map<std::string, std::uint64_t>{{"/ctr", 5}, {"/quiet", 0}, {"/new", 4}}));
  auto b = sample(2, 2000, {{"/ctr", 5}, {"/quiet", 0}, {"/new", 4}}, {});
  EXPECT_TRUE(w.update(a.get(), *b).empty());
}

}  // namespace
}  // namespace headroom
