#include <gtest/gtest.h>

#include <algorithm>

#include "headroom/collector.h"
#include "testing/fixture_tree.h"

namespace headroom {
namespace {

using testing::FakeProcess;
using testing::FixtureTree;

constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::uint64_t kGiB = 1ULL << 30;
using testing::provingHostV1;

std::vector<std::string> paths(const RawSample& raw) {
  std::vector<std::string> out;
  for (const auto& c : raw.cgroups) out.push_back(c.path);
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Collector, DefaultWatchesEveryCgroupHoldingAProcess) {
  FixtureTree t;
  provingHostV1(t);
  auto fs = t.fs();
  auto c = Collector::create(fs);
  ASSERT_TRUE(c) << c.error().describe();
  auto raw = c->collect({});
  ASSERT_TRUE(raw) << raw.error().describe();
  EXPECT_EQ(raw->memory_version, 1);
  EXPECT_EQ(paths(*raw), (std::vector<std::string>{"/", "/proving/curio", "/proving/prover"}));
  ASSERT_EQ(raw->ancestors.count("/proving"), 1u) << "ancestors are read as bounds";
  EXPECT_EQ(raw->ancestors.at("/proving").limit.value(), 8 * kGiB);
  EXPECT_EQ(raw->processes.size(), 3u);
  EXPECT_EQ(raw->stats.processes_vanished, 1u);
  EXPECT_EQ(raw->stats.kernel_threads, 1u);
  EXPECT_EQ(raw->stats.processes_failed, 0u);
  EXPECT_EQ(raw->meminfo.mem_available, 8 * kGiB);
}

TEST(Collector, CgroupScopeReadsOnlyItsSubtree) {
  FixtureTree t;
  provingHostV1(t);
  auto fs = t.fs();
  auto c = Collector::create(fs);
  CollectOptions o;
  o.cgroups = {"/proving/"};
  auto raw = c->collect(o);
  ASSERT_TRUE(raw) << raw.error().describe();
  EXPECT_EQ(paths(*raw), (std::vector<std::string>{"/proving", "/proving/curio", "/proving/prover"}));
  ASSERT_EQ(raw->processes.size(), 2u);
  for (const auto& p : raw->processes) EXPECT_NE(p.comm, "sshd");
}

TEST(Collector, PidScopeWatchesItsCgroup) {
  FixtureTree t;
  provingHostV1(t);
  auto fs = t.fs();
  auto c = Collector::create(fs);
  CollectOptions o;
  o.pid = 101;
  auto raw = c->collect(o);
  ASSERT_TRUE(raw) << raw.error().describe();
  EXPECT_EQ(paths(*raw), (std::vector<std::string>{"/proving/curio"}));
  EXPECT_EQ(raw->focus_pid.value(), 101);
}

TEST(Collector, BadScopesAreClearErrors) {
  FixtureTree t;
  provingHostV1(t);
  auto fs = t.fs();
  auto c = Collector::create(fs);
  CollectOptions o;
  o.cgroups = {"/nope"};
  auto r = c->collect(o);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("/nope"), std::string::npos);
  EXPECT_NE(r.error().message.find("v1 memory hierarchy"), std::string::npos);
  CollectOptions p;
  p.pid = 99999;
  auto rp = c->collect(p);
  ASSERT_FALSE(rp);
  EXPECT_NE(rp.error().message.find("99999"), std::string::npos);
  CollectOptions both;
  both.cgroups = {"/proving"};
  both.pid = 102;
  EXPECT_FALSE(c->collect(both)) << "sshd is outside /proving";
}

TEST(Collector, V2TreeAndItsRootWithoutMemoryCurrent) {
  FixtureTree t;
  t.mountV2();
  t.meminfo();
  t.write("/proc/pressure/memory", "some avg10=0.10 avg60=0.00 avg300=0.00 total=10\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=5\n");
  t.write("/sys/fs/cgroup/memory.stat", "anon 1\n");  // the v2 root has no memory.current
  t.cgroupV2("/system.slice", 2 * kGiB, "max", "anon 1073741824\nfile 0\nshmem 0\n");
  t.cgroupV2("/system.slice/prover.service", 1 * kGiB, "2147483648", "anon 1073741824\nfile 0\nshmem 0\n");
  FakeProcess p;
  p.pid = 400;
  p.memory_version = 2;
  p.memory_cgroup = "/system.slice/prover.service";
  p.rss_anon = p.pss_anon = 1 * kGiB;
  t.process(p);
  auto fs = t.fs();
  auto c = Collector::create(fs);
  ASSERT_TRUE(c) << c.error().describe();
  auto raw = c->collect({});
  ASSERT_TRUE(raw) << raw.error().describe();
  EXPECT_EQ(raw->memory_version, 2);
  ASSERT_TRUE(raw->host_pressure.has_value());
  EXPECT_EQ(paths(*raw), (std::vector<std::string>{"/system.slice/prover.service"}));
  EXPECT_EQ(raw->ancestors.count("/system.slice"), 1u);
  EXPECT_EQ(raw->ancestors.count("/"), 0u);
  EXPECT_TRUE(raw->stats.warnings.empty()) << raw->stats.warnings.front();
}

TEST(Collector, NoMemoryControllerIsAnError) {
  FixtureTree t;
  t.write("/proc/self/mountinfo", "22 26 0:21 / /sys rw,relatime - sysfs sysfs rw\n");
  auto fs = t.fs();
  auto c = Collector::create(fs);
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("no memory cgroup controller"), std::string::npos);
}

TEST(Collector, RealHybridSnapshot) {
  auto fs = FsRoot::open(testing::fixturePath("hybrid-real"));
  ASSERT_TRUE(fs);
  auto c = Collector::create(*fs);
  ASSERT_TRUE(c) << c.error().describe();
  auto raw = c->collect({});
  ASSERT_TRUE(raw) << raw.error().describe();
  EXPECT_EQ(raw->mounts.mode(), CgroupMode::kHybrid);
  EXPECT_GE(raw->processes.size(), 3u);
  EXPECT_GE(raw->stats.processes_without_pss, 1u) << "pid 1's smaps_rollup was unreadable when captured";
  EXPECT_GT(raw->self_pid, 0);
  for (const auto& cg : raw->cgroups) {
    EXPECT_GT(cg.usage, 0u);
    EXPECT_TRUE(cg.kmem_usage.has_value());
  }
}

}  // namespace
}  // namespace headroom
