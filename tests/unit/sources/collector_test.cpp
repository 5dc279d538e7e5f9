#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>

#include "headroom/model/snapshot.h"
#include "headroom/sources/collector.h"
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
  t.write("/proc/pressure/memory",
          "some avg10=0.10 avg60=0.00 avg300=0.00 total=10\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=5\n");
  t.write("/sys/fs/cgroup/memory.stat", "anon 1\n");  // the v2 root has no memory.current
  t.cgroupV2("/system.slice", 2 * kGiB, "max", "anon 1073741824\nfile 0\nshmem 0\n");
  t.cgroupV2("/system.slice/prover.service", 1 * kGiB, "2147483648", "anon 1073741824\nfile 0\nshmem 0\n");
  FakeProcess p;
  p.pid = 400;
  p.memory_version = 2;
  p.memory_cgroup = "/system.slice/prover.service";
  p.rss_anon = p.pss_anon = 1 * kGiB;
  t.process(p);
  FakeProcess init;  // pid 1 and whatever else a bare v2 machine starts in the root cgroup
  init.pid = 1;
  init.comm = "init";
  init.memory_version = 2;
  init.memory_cgroup = "/";
  t.process(init);
  auto fs = t.fs();
  auto c = Collector::create(fs);
  ASSERT_TRUE(c) << c.error().describe();
  auto raw = c->collect({});
  ASSERT_TRUE(raw) << raw.error().describe();
  EXPECT_EQ(raw->memory_version, 2);
  ASSERT_TRUE(raw->host_pressure.has_value());
  EXPECT_EQ(paths(*raw), (std::vector<std::string>{"/", "/system.slice/prover.service"}));
  EXPECT_EQ(raw->processes.size(), 2u) << "the root's processes are read like any other";
  EXPECT_EQ(raw->ancestors.count("/system.slice"), 1u);
  EXPECT_TRUE(raw->stats.warnings.empty()) << raw->stats.warnings.front();
  auto snap = buildSnapshot(std::move(*raw), RoleMatcher());
  const CgroupSnapshot* root = snap->findCgroup("/");
  ASSERT_NE(root, nullptr);
  EXPECT_TRUE(root->memory.usage_from_stat);
  EXPECT_NE(snap->findProcess(1), nullptr);
  const CgroupSnapshot* prover = snap->findCgroup("/system.slice/prover.service");
  ASSERT_NE(prover, nullptr);
  ASSERT_TRUE(prover->tightest.has_value());
  EXPECT_EQ(prover->tightest->name, "/system.slice/prover.service") << "the root bounds nothing";
}

TEST(Collector, NoMemoryControllerIsAnError) {
  FixtureTree t;
  t.write("/proc/self/mountinfo", "22 26 0:21 / /sys rw,relatime - sysfs sysfs rw\n");
  auto fs = t.fs();
  auto c = Collector::create(fs);
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("no memory cgroup controller"), std::string::npos);
}

// --- A pod with its own cgroup namespace on a Kubernetes node ---
// The agent (pid 500) sits in /kubepods.slice/pod-a/agent.scope, its namespace's root, so its
// /proc/self/cgroup reads "/"; the others read relative to that root: the prover (600) in
// pod-b, containerd (700) in /system.slice, and one (800) whose path climbs above the root.
constexpr const char* kPodStat = "anon 1048576\nfile 0\nshmem 0\n";

const ProcessSample* findPid(const RawSample& raw, pid_t pid) {
  for (const auto& p : raw.processes) {
    if (p.pid == pid) return &p;
  }
  return nullptr;
}

// The memory cgroup the sample places `pid` in, or "(pid N not sampled)".
std::string cgroupOfPid(const RawSample& raw, pid_t pid) {
  const ProcessSample* p = findPid(raw, pid);
  return p != nullptr ? std::string(p->memory_cgroup) : fmt::format("(pid {} not sampled)", pid);
}

void podOnANode(const FixtureTree& t, int version, std::string_view mount_root) {
  if (version == 1) {
    t.mountV1();
    t.write("/proc/self/mountinfo",
            fmt::format("25 30 0:22 / /sys rw - sysfs sysfs rw\n"
                        "34 30 0:31 {} /sys/fs/cgroup/memory ro,relatime - cgroup cgroup rw,memory\n",
                        mount_root));
  } else {
    t.mountV2();
    t.write("/proc/self/mountinfo",
            fmt::format("30 25 0:26 {} /sys/fs/cgroup ro,relatime - cgroup2 cgroup2 rw\n", mount_root));
  }
  t.meminfo();
  struct Cg {
    const char* path;
    std::uint64_t usage;
  };
  for (const Cg& c : {Cg{"/", 8 * kGiB}, Cg{"/kubepods.slice", 3 * kGiB}, Cg{"/kubepods.slice/pod-a", 64 * kMiB},
                      Cg{"/kubepods.slice/pod-a/agent.scope", 60 * kMiB}, Cg{"/kubepods.slice/pod-b", 2 * kGiB},
                      Cg{"/kubepods.slice/pod-b/prover.scope", 2 * kGiB}, Cg{"/system.slice", 512 * kMiB}}) {
    if (version == 1)
      t.cgroupV1(c.path, c.usage, 16 * kGiB, c.usage, 0, 0, 0);
    else if (std::string_view(c.path) != "/")
      t.cgroupV2(c.path, c.usage, "max", kPodStat);
    t.cgroupProcs(version, c.path, {});
  }
  if (version == 2) t.write("/sys/fs/cgroup/memory.stat", "anon 1\n");
  t.cgroupProcs(version, "/", {1});
  t.cgroupProcs(version, "/system.slice", {700});
  t.cgroupProcs(version, "/kubepods.slice/pod-a/agent.scope", {500});
  t.cgroupProcs(version, "/kubepods.slice/pod-b/prover.scope", {600});
  auto proc = [&](pid_t pid, const char* comm, const char* cgroup) {
    FakeProcess p;
    p.pid = pid;
    p.comm = comm;
    p.memory_version = version;
    p.memory_cgroup = cgroup;
    p.rss_anon = p.pss_anon = 16 * kMiB;
    t.process(p);
  };
  proc(500, "headroom", "/");
  proc(600, "cuzk", "/../../pod-b/prover.scope");
  proc(700, "containerd", "/../../../system.slice");
  proc(800, "escapee", "/../../../../x");
  t.self(500);
}

void expectPodAttribution(const RawSample& raw) {
  EXPECT_EQ(paths(raw), (std::vector<std::string>{"/kubepods.slice/pod-a/agent.scope",
                                                  "/kubepods.slice/pod-b/prover.scope", "/system.slice"}));
  EXPECT_EQ(cgroupOfPid(raw, 500), "/kubepods.slice/pod-a/agent.scope");
  EXPECT_EQ(cgroupOfPid(raw, 600), "/kubepods.slice/pod-b/prover.scope");
  EXPECT_EQ(cgroupOfPid(raw, 700), "/system.slice");
  EXPECT_EQ(findPid(raw, 800), nullptr) << "above the hierarchy's root: not clamped onto /x";
  EXPECT_EQ(raw.stats.processes_outside_mount, 1u);
  for (const auto& c : raw.cgroups) {
    if (c.path == "/kubepods.slice/pod-b/prover.scope") {
      EXPECT_EQ(c.usage, 2 * kGiB) << "its own memory files";
    }
  }
  EXPECT_EQ(raw.ancestors.count("/kubepods.slice/pod-b"), 1u);
  EXPECT_EQ(raw.ancestors.count("/kubepods.slice"), 1u);
  ASSERT_EQ(raw.stats.warnings.size(), 1u) << raw.stats.warnings.front();
  EXPECT_NE(raw.stats.warnings[0].find("1 process(es) in cgroups outside"), std::string::npos) << raw.stats.warnings[0];
  EXPECT_NE(raw.stats.warnings[0].find("pid 800 in /../../../../x"), std::string::npos) << raw.stats.warnings[0];
}

TEST(CollectorInACgroupNamespace, V2HostTreeAttributesOtherPods) {
  FixtureTree t;
  podOnANode(t, 2, "/");  // a root field that says nothing: found by walking
  auto fs = t.fs();
  auto c = Collector::create(fs);
  ASSERT_TRUE(c) << c.error().describe();
  EXPECT_EQ(c->hierarchy().nsMap().ns_root, "/kubepods.slice/pod-a/agent.scope") << c->hierarchy().nsDescription();
  auto raw = c->collect({});
  ASSERT_TRUE(raw) << raw.error().describe();
  expectPodAttribution(*raw);
  if (raw->ancestors.count("/") != 0) {
    EXPECT_FALSE(raw->ancestors.at("/").limit.has_value()) << "the v2 root bounds nothing";
  }
}

TEST(CollectorInACgroupNamespace, V1HostTreeAsTheKernelShowsIt) {
  FixtureTree t;
  podOnANode(t, 1, "/../../..");
  auto fs = t.fs();
  auto c = Collector::create(fs);
  ASSERT_TRUE(c) << c.error().describe();
  EXPECT_NE(c->hierarchy().nsDescription().find("found by walking"), std::string::npos);
  auto raw = c->collect({});
  ASSERT_TRUE(raw) << raw.error().describe();
  expectPodAttribution(*raw);
  EXPECT_EQ(raw->ancestors.count("/"), 1u);
}

TEST(CollectorInACgroupNamespace, ScopesAndPidsAreMountPaths) {
  FixtureTree t;
  podOnANode(t, 2, "/../../..");
  auto fs = t.fs();
  auto c = Collector::create(fs);
  ASSERT_TRUE(c) << c.error().describe();
  CollectOptions o;
  o.cgroups = {"/kubepods.slice/pod-b"};
  auto raw = c->collect(o);
  ASSERT_TRUE(raw) << raw.error().describe();
  ASSERT_EQ(raw->processes.size(), 1u);
  EXPECT_EQ(raw->processes[0].pid, 600);
  CollectOptions p;
  p.pid = 600;
  auto rp = c->collect(p);
  ASSERT_TRUE(rp) << rp.error().describe();
  EXPECT_EQ(paths(*rp), (std::vector<std::string>{"/kubepods.slice/pod-b/prover.scope"}));
  CollectOptions escapee;
  escapee.pid = 800;
  auto re = c->collect(escapee);
  ASSERT_FALSE(re);
  EXPECT_NE(re.error().message.find("outside what the v2 hierarchy"), std::string::npos) << re.error().message;
  EXPECT_EQ(callersMemoryCgroup(fs, c->hierarchy()).value(), "/kubepods.slice/pod-a/agent.scope");
}

TEST(CollectorInACgroupNamespace, TheNamespacesOwnMountShowsOnlyItsSubtree) {
  // The default cgroupns mount: /sys/fs/cgroup shows the namespace's root, where the agent is.
  FixtureTree t;
  t.mountV2();
  t.meminfo();
  t.cgroupV2("/", 128 * kMiB, "max", kPodStat);  // the namespace's root: a real cgroup with memory files
  t.cgroupV2("/app", 64 * kMiB, "max", kPodStat);
  t.cgroupV2("/system.slice", 64 * kMiB, "max", kPodStat);  // a namesake of the host's
  t.cgroupProcs(2, "/", {500});
  FakeProcess agent;
  agent.pid = 500;
  agent.memory_version = 2;
  agent.memory_cgroup = "/";
  t.process(agent);
  FakeProcess app = agent;
  app.pid = 501;
  app.memory_cgroup = "/app";
  t.process(app);
  FakeProcess host = agent;
  host.pid = 700;
  host.memory_cgroup = "/../../../system.slice";
  t.process(host);
  t.self(500);
  auto fs = t.fs();
  auto c = Collector::create(fs);
  ASSERT_TRUE(c) << c.error().describe();
  EXPECT_EQ(c->hierarchy().nsMap(), CgroupNsMap{}) << c->hierarchy().nsDescription();
  EXPECT_NE(c->hierarchy().nsDescription().find("confirmed"), std::string::npos);
  auto raw = c->collect({});
  ASSERT_TRUE(raw) << raw.error().describe();
  EXPECT_EQ(cgroupOfPid(*raw, 501), "/app");
  EXPECT_EQ(findPid(*raw, 700), nullptr) << "not the namespace's own /system.slice";
  EXPECT_EQ(raw->stats.processes_outside_mount, 1u);
  ASSERT_EQ(raw->stats.warnings.size(), 1u);
  EXPECT_NE(raw->stats.warnings[0].find("mount the host's cgroup tree"), std::string::npos);
}

TEST(CollectorInACgroupNamespace, NotLocatedWarnsAndFallsBack) {
  FixtureTree t;
  podOnANode(t, 2, "/");
  t.cgroupProcs(2, "/kubepods.slice/pod-a/agent.scope", {});  // the agent in no cgroup.procs
  auto fs = t.fs();
  auto c = Collector::create(fs);
  ASSERT_TRUE(c) << c.error().describe();
  ASSERT_TRUE(c->hierarchy().nsWarning().has_value());
  auto raw = c->collect({});
  ASSERT_TRUE(raw) << raw.error().describe();
  ASSERT_FALSE(raw->stats.warnings.empty());
  EXPECT_NE(raw->stats.warnings[0].find("cgroup namespace root not located"), std::string::npos)
      << raw->stats.warnings[0];
  EXPECT_NE(raw->stats.warnings[0].find("pid 500"), std::string::npos) << raw->stats.warnings[0];
  // As before the fix for what maps at all: the agent's "/" is the mount's root.
  EXPECT_EQ(cgroupOfPid(*raw, 500), "/");
  EXPECT_EQ(raw->stats.processes_outside_mount, 3u) << "the paths that climb cannot be placed";
  for (const auto& w : raw->stats.warnings) EXPECT_EQ(w.find("fs/cgroup/.."), std::string::npos) << w;
}

TEST(CollectorInACgroupNamespace, PlainHostIsUnchanged) {
  FixtureTree t;
  provingHostV1(t);
  t.cgroupProcs(1, "/proving/prover", {100});
  t.self(100);
  auto fs = t.fs();
  auto c = Collector::create(fs);
  ASSERT_TRUE(c) << c.error().describe();
  EXPECT_EQ(c->hierarchy().nsMap(), CgroupNsMap{});
  EXPECT_NE(c->hierarchy().nsDescription().find("from mountinfo, confirmed"), std::string::npos)
      << c->hierarchy().nsDescription();
  auto raw = c->collect({});
  ASSERT_TRUE(raw) << raw.error().describe();
  EXPECT_EQ(paths(*raw), (std::vector<std::string>{"/", "/proving/curio", "/proving/prover"}));
  EXPECT_EQ(raw->stats.processes_outside_mount, 0u);
  EXPECT_TRUE(raw->stats.warnings.empty()) << raw->stats.warnings.front();
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

// Real captures from the kernel matrix's guests (make capture-fixtures, PROVENANCE in each):
// cgroup v2 in the systemd/Kubernetes layout, pid 1 in /init.scope, the workload (64 MiB anon,
// 16 MiB shmem, 1 GiB sparse) in a 512 MiB cgroup inside the pod's container, the pod and the
// kubepods slice limited above it (3/4 and 7/8 of the guest's memory).
void expectRealV2Kubepods(const std::string& tree) {
  SCOPED_TRACE(tree);
  auto fs = FsRoot::open(testing::fixturePath(tree));
  ASSERT_TRUE(fs);
  auto c = Collector::create(*fs);
  ASSERT_TRUE(c) << c.error().describe();
  EXPECT_EQ(c->mounts().mode(), CgroupMode::kV2);
  auto raw = c->collect({});
  ASSERT_TRUE(raw) << raw.error().describe();
  ASSERT_EQ(raw->processes.size(), 3u);
  auto snap = buildSnapshot(std::move(*raw), RoleMatcher());
  const ProcessSnapshot* init = snap->findProcess(1);
  ASSERT_NE(init, nullptr);
  EXPECT_EQ(init->sample.memory_cgroup, "/init.scope");
  const ProcessSnapshot* work = nullptr;
  for (const auto& p : snap->processes)
    if (p.sample.comm == "headroom-worklo") work = &p;
  ASSERT_NE(work, nullptr);
  EXPECT_NEAR(static_cast<double>(work->sample.status.rss_anon), 64.0 * (1 << 20), 4.0 * (1 << 20));
  EXPECT_GE(work->sample.status.vm_pte, 1u << 20) << "1 GiB touched once per 2 MiB: page tables";
  const CgroupSnapshot* cg = snap->findCgroup(work->sample.memory_cgroup);
  ASSERT_NE(cg, nullptr);
  EXPECT_EQ(cg->memory.limit.value(), 512u << 20);
  ASSERT_TRUE(cg->tightest.has_value());
  EXPECT_EQ(cg->tightest->name, work->sample.memory_cgroup) << "its own 512 MiB is the tightest";
  // Every limited ancestor is a bound: the pod's slice and the kubepods slice, then the host.
  std::vector<std::string> names;
  for (const Bound& b : cg->bounds) names.push_back(b.name);
  ASSERT_GE(names.size(), 4u);
  EXPECT_EQ(names.back(), "host");
  EXPECT_NE(std::find(names.begin(), names.end(), "/kubepods.slice"), names.end());
  EXPECT_EQ(std::count_if(names.begin(), names.end(),
                          [](const std::string& n) {
                            return n.substr(n.rfind('/') + 1).rfind("kubepods-burstable-pod", 0) == 0;
                          }),
            1)
      << "the pod's slice";
  // The usage is the kernel's (memory.current), and its parts add up to it.
  std::uint64_t parts = 0;
  for (const Part& p : cg->attribution.parts) parts += p.bytes;
  EXPECT_NEAR(static_cast<double>(parts), static_cast<double>(cg->memory.usage), 2.0 * (1 << 20));
}

TEST(Collector, RealV2KubepodsOnLinux61) { expectRealV2Kubepods("v2-6.1-kubepods"); }
TEST(Collector, RealV2KubepodsOnLinux612) { expectRealV2Kubepods("v2-6.12-kubepods"); }

}  // namespace
}  // namespace headroom
