#include <gtest/gtest.h>

#include "headroom/sources/cgroup.h"
#include "testing/fixture_tree.h"

namespace headroom {
namespace {

using testing::FixtureTree;

TEST(Mountinfo, V1Only) {
  auto m = parseMountinfo(
      "34 30 0:31 / /sys/fs/cgroup/memory rw,nosuid shared:15 - cgroup cgroup rw,memory\n"
      "31 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n");
  ASSERT_TRUE(m) << m.error().describe();
  EXPECT_EQ(m->mode(), CgroupMode::kV1);
  EXPECT_EQ(m->memoryVersion(), 1);
  EXPECT_EQ(m->v1_memory->mount_point, "/sys/fs/cgroup/memory");
}

TEST(Mountinfo, V2OnlyNeedsTheControllerList) {
  auto m = parseMountinfo("30 25 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->mode(), CgroupMode::kV2);
  EXPECT_EQ(m->memoryVersion(), 0) << "memory is unknown until cgroup.controllers is read";
  m->v2_has_memory = true;
  EXPECT_EQ(m->memoryVersion(), 2);
}

TEST(Mountinfo, HybridKeepsMemoryOnV1) {
  auto m = parseMountinfo(
      "34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
      "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->mode(), CgroupMode::kHybrid);
  EXPECT_EQ(m->memoryVersion(), 1);
  EXPECT_EQ(m->v2->mount_point, "/sys/fs/cgroup/unified");
}

TEST(Mountinfo, EscapedPathsAndBindMountsOfASubtree) {
  auto m = parseMountinfo(
      "50 30 0:31 /kubepods/pod1 /host\\040cg/memory rw - cgroup cgroup rw,memory\n"
      "34 30 0:31 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->v1_memory->mount_point, "/sys/fs/cgroup/memory") << "the whole hierarchy wins over a subtree";
  auto only_sub = parseMountinfo("50 30 0:31 /kubepods/pod1 /host\\040cg/memory rw - cgroup cgroup rw,memory\n");
  ASSERT_TRUE(only_sub);
  EXPECT_EQ(only_sub->v1_memory->mount_point, "/host cg/memory");
  EXPECT_EQ(only_sub->v1_memory->root, "/kubepods/pod1");
}

TEST(Mountinfo, TheMountShowingMostWins) {
  // Inside a cgroup namespace the root field climbs ("/../..") for a mount of the host's tree.
  auto v1 = parseMountinfo(
      "34 30 0:31 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
      "60 30 0:31 /../.. /host/sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n"
      "61 30 0:31 /../a /elsewhere ro - cgroup cgroup rw,memory\n");
  ASSERT_TRUE(v1);
  EXPECT_EQ(v1->v1_memory->mount_point, "/host/sys/fs/cgroup/memory");
  EXPECT_EQ(v1->v1_memory->root, "/../..");
  auto v2 = parseMountinfo(
      "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
      "70 25 0:26 /../../.. /host/cgroup ro - cgroup2 cgroup2 rw\n"
      "71 25 0:26 /../.. /host/other ro - cgroup2 cgroup2 rw\n");
  ASSERT_TRUE(v2);
  EXPECT_EQ(v2->v2->mount_point, "/host/cgroup");
  auto same = parseMountinfo(
      "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
      "70 25 0:26 / /again rw - cgroup2 cgroup2 rw\n"
      "71 25 0:26 /sub /sub rw - cgroup2 cgroup2 rw\n");
  ASSERT_TRUE(same);
  EXPECT_EQ(same->v2->mount_point, "/sys/fs/cgroup") << "of equals, the first";
}

TEST(Mountinfo, MalformedLineIsAnError) {
  auto m = parseMountinfo("34 30 0:31 / /sys/fs/cgroup/memory\n");
  ASSERT_FALSE(m);
  EXPECT_NE(m.error().message.find("line 1"), std::string::npos);
  EXPECT_EQ(parseMountinfo("")->mode(), CgroupMode::kNone);
}

// Found by the mountinfo fuzz target: a line that ends after the file system type and its source
// was read one field past its end for the super options.
TEST(Mountinfo, ALineCutAfterTheSeparatorIsAnErrorNotAReadPastIt) {
  for (const char* line : {"1 2 / p g : - cgroup c\n", "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2\n",
                           "30 25 0:26 / /sys/fs/cgroup rw - cgroup2\n", "30 25 0:26 / /sys/fs/cgroup rw -\n",
                           "- - - - - - cgroup2 cgroup2 rw\n"}) {
    auto m = parseMountinfo(line);
    EXPECT_FALSE(m) << line;
  }
  // The separator is the first "-" after the six fixed fields (the optional fields hold none).
  auto m = parseMountinfo("30 25 0:26 / /sys/fs/cgroup rw shared:4 - cgroup2 - rw\n");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->v2->mount_point, "/sys/fs/cgroup");
}

TEST(ProcCgroup, V1V2AndHybrid) {
  auto h = parseProcCgroup("9:pids:/a\n4:memory:/process_api/x\n1:cpu,cpuacct:/\n0::/init.scope\n");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->memoryPath(1).value(), "/process_api/x");
  EXPECT_EQ(h->memoryPath(2).value(), "/init.scope");
  auto v2 = parseProcCgroup("0::/system.slice/prover.service\n");
  ASSERT_TRUE(v2);
  EXPECT_FALSE(v2->v1_memory.has_value());
  EXPECT_EQ(v2->v2.value(), "/system.slice/prover.service");
  EXPECT_FALSE(parseProcCgroup("garbage\n"));
  EXPECT_FALSE(parseProcCgroup("4:memory:relative\n"));
}

TEST(CgroupPaths, NormaliseParentWithin) {
  EXPECT_EQ(normaliseCgroupPath("a//b/"), "/a/b");
  EXPECT_EQ(normaliseCgroupPath(""), "/");
  EXPECT_EQ(parentCgroup("/a/b").value(), "/a");
  EXPECT_EQ(parentCgroup("/a").value(), "/");
  EXPECT_FALSE(parentCgroup("/").has_value());
  EXPECT_TRUE(cgroupIsWithin("/a/b", "/a"));
  EXPECT_TRUE(cgroupIsWithin("/a", "/a"));
  EXPECT_FALSE(cgroupIsWithin("/ab", "/a"));
  EXPECT_TRUE(cgroupIsWithin("/x", "/"));
}

TEST(ReadCgroupMemory, V1AllFiles) {
  FixtureTree t;
  t.mountV1();
  t.cgroupV1("/prover", 600ULL << 20, 1ULL << 30, 400ULL << 20, 150ULL << 20, 50ULL << 20, 40ULL << 20);
  t.write("/sys/fs/cgroup/memory/prover/memory.oom_control", "oom_kill_disable 0\nunder_oom 1\noom_kill 3\n");
  auto fs = t.fs();
  auto dir = fs.openDir("/sys/fs/cgroup/memory/prover");
  ASSERT_TRUE(dir);
  auto cg = readCgroupMemory(*dir, 1, "/prover");
  ASSERT_TRUE(cg) << cg.error().describe();
  EXPECT_EQ(cg->usage, 600ULL << 20);
  EXPECT_EQ(cg->limit.value(), 1ULL << 30);
  EXPECT_EQ(cg->kmem_usage.value(), 40ULL << 20);
  EXPECT_EQ(cg->oom_kills.value(), 3u);
  EXPECT_TRUE(cg->under_oom);
  EXPECT_EQ(cg->stat.get("total_rss").value(), 400ULL << 20);
  EXPECT_EQ(cg->effectiveLimitHint().value(), 1ULL << 30);
  EXPECT_TRUE(cg->warnings.empty());
}

TEST(ReadCgroupMemory, V1UnlimitedAndMissingOptionalFiles) {
  FixtureTree t;
  t.mountV1();
  t.cgroupV1("/free", 1 << 20, 9223372036854771712ULL, 1 << 20, 0, 0, 0);
  t.remove("/sys/fs/cgroup/memory/free/memory.kmem.usage_in_bytes");
  t.remove("/sys/fs/cgroup/memory/free/memory.oom_control");
  auto fs = t.fs();
  auto cg = readCgroupMemory(*fs.openDir("/sys/fs/cgroup/memory/free"), 1, "/free");
  ASSERT_TRUE(cg) << cg.error().describe();
  EXPECT_FALSE(cg->limit.has_value());
  EXPECT_FALSE(cg->effectiveLimitHint().has_value());
  EXPECT_FALSE(cg->kmem_usage.has_value());
  EXPECT_FALSE(cg->oom_kills.has_value());
  EXPECT_TRUE(cg->warnings.empty()) << "a missing optional file is not a warning";
}

constexpr const char* kV2Stat =
    "anon 419430400\nfile 209715200\nkernel 62914560\nkernel_stack 1048576\npagetables 20971520\n"
    "sec_pagetables 0\npercpu 524288\nsock 0\nvmalloc 0\nshmem 52428800\nfile_mapped 10485760\n"
    "slab_reclaimable 20971520\nslab_unreclaimable 10485760\nslab 31457280\nzswap 0\n";

TEST(ReadCgroupMemory, V2AllFiles) {
  FixtureTree t;
  t.mountV2();
  t.cgroupV2("/prover.slice", 700ULL << 20, "1073741824", kV2Stat);
  auto fs = t.fs();
  auto cg = readCgroupMemory(*fs.openDir("/sys/fs/cgroup/prover.slice"), 2, "/prover.slice");
  ASSERT_TRUE(cg) << cg.error().describe();
  EXPECT_EQ(cg->limit.value(), 1ULL << 30);
  EXPECT_FALSE(cg->high.has_value());
  EXPECT_EQ(cg->peak.value(), (700ULL << 20) + 8192);
  EXPECT_EQ(cg->oom_events.value(), 1u);
  EXPECT_EQ(cg->oom_kills.value(), 1u);
  EXPECT_EQ(cg->events_local.get("max").value(), 3u);
  ASSERT_TRUE(cg->pressure.has_value());
  EXPECT_DOUBLE_EQ(cg->pressure->some.avg10, 1.5);
  EXPECT_EQ(cg->stat.get("pagetables").value(), 20971520u);
  EXPECT_TRUE(cg->swap_events.empty()) << "no memory.swap.events: none read, nothing said";
}

// Between two walks a cgroup far from its bounds is read lightly: three files, the usage, the
// limit and the OOM counters as they are now, the rest as the whole read before found it.
TEST(ReadCgroupMemory, ALightReadTakesUsageLimitAndOomCountersAnewAndTheRestFromTheLastWholeRead) {
  for (const int version : {1, 2}) {
    SCOPED_TRACE(version);
    FixtureTree t;
    std::string dir;
    if (version == 1) {
      t.mountV1();
      t.cgroupV1("/jobs", 300ULL << 20, 1ULL << 30, 200ULL << 20, 100ULL << 20, 0, 0);
      dir = "/sys/fs/cgroup/memory/jobs";
    } else {
      t.mountV2();
      t.cgroupV2("/jobs", 300ULL << 20, "1073741824", kV2Stat);
      dir = "/sys/fs/cgroup/jobs";
    }
    auto fs = t.fs();
    auto d = fs.openDir(dir);
    ASSERT_TRUE(d) << d.error().describe();
    std::vector<std::string> read;
    CgroupFileReader reader = [&](const char* name) {
      read.emplace_back(name);
      return d->readFile(name);
    };
    auto whole = readCgroupMemory(reader, dir, version, "/jobs");
    ASSERT_TRUE(whole) << whole.error().describe();
    EXPECT_FALSE(whole->light);
    const std::size_t whole_files = read.size();

    // Since: more used, a lower limit, a kill, another breakdown.
    t.write(dir + (version == 1 ? "/memory.usage_in_bytes" : "/memory.current"), std::to_string(400ULL << 20) + "\n");
    t.write(dir + (version == 1 ? "/memory.limit_in_bytes" : "/memory.max"), std::to_string(512ULL << 20) + "\n");
    if (version == 1)
      t.write(dir + "/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 4\n");
    else
      t.write(dir + "/memory.events", "low 0\nhigh 0\nmax 9\noom 5\noom_kill 4\n");
    t.write(dir + "/memory.stat", version == 1 ? "total_rss 1\n" : "anon 1\n");
    read.clear();
    auto light = readCgroupMemoryLight(reader, dir, *whole);
    ASSERT_TRUE(light) << light.error().describe();
    EXPECT_EQ(read.size(), 3U) << "of " << whole_files;
    EXPECT_TRUE(light->light);
    EXPECT_EQ(light->usage, 400ULL << 20);
    EXPECT_EQ(light->limit.value(), 512ULL << 20);
    EXPECT_EQ(light->oom_kills.value(), 4U);
    EXPECT_EQ(light->stat.size(), whole->stat.size()) << "memory.stat not read: the whole read's";
    EXPECT_EQ(light->peak, whole->peak);
    EXPECT_EQ(light->path, "/jobs");

    // A required file gone (the cgroup removed): an error, as a whole read's.
    t.remove(dir + (version == 1 ? "/memory.usage_in_bytes" : "/memory.current"));
    EXPECT_FALSE(readCgroupMemoryLight(reader, dir, *whole));
  }
}

// Hand-made: memory.swap.events as 6.1 writes it (high, max, fail), and memory.events with the
// oom_group_kill line of 5.17+.
TEST(ReadCgroupMemory, V2SwapEventsAndGroupKills) {
  FixtureTree t;
  t.mountV2();
  t.cgroupV2("/prover.slice", 700ULL << 20, "1073741824", kV2Stat);
  t.write("/sys/fs/cgroup/prover.slice/memory.swap.events", "high 0\nmax 4\nfail 2\n");
  t.write("/sys/fs/cgroup/prover.slice/memory.events", "low 0\nhigh 7\nmax 3\noom 1\noom_kill 1\noom_group_kill 1\n");
  auto fs = t.fs();
  auto cg = readCgroupMemory(*fs.openDir("/sys/fs/cgroup/prover.slice"), 2, "/prover.slice");
  ASSERT_TRUE(cg) << cg.error().describe();
  EXPECT_EQ(cg->swap_events.get("max").value(), 4u);
  EXPECT_EQ(cg->swap_events.get("fail").value(), 2u);
  EXPECT_EQ(cg->events.get("oom_group_kill").value(), 1u);
  EXPECT_EQ(cg->events.get("high").value(), 7u);
}

// Hand-made in the shape of a 6.1 guest's root (tests/fixtures/v2-6.1-*): memory.stat and
// memory.pressure, no memory.current, memory.max, memory.peak or memory.events.
TEST(ReadCgroupMemory, V2RootHasNoCurrentItsUsageIsItsStat) {
  FixtureTree t;
  t.mountV2();
  t.write("/sys/fs/cgroup/memory.stat", kV2Stat);
  t.write("/sys/fs/cgroup/memory.pressure",
          "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
  auto fs = t.fs();
  auto cg = readCgroupMemory(*fs.openDir("/sys/fs/cgroup"), 2, "/");
  ASSERT_TRUE(cg) << cg.error().describe();
  EXPECT_TRUE(cg->usage_from_stat);
  // anon 400 MiB + file 200 MiB + kernel 60 MiB + sock 0 + zswap 0.
  EXPECT_EQ(cg->usage, (400ULL + 200 + 60) << 20);
  EXPECT_FALSE(cg->limit.has_value()) << "the root bounds nothing but the host";
  EXPECT_TRUE(cg->warnings.empty());
  // Before 5.18 there is no "kernel" key: its parts are added up.
  StatMap old;
  for (auto [k, v] : {std::pair{"anon", 100},
                      {"file", 50},
                      {"pagetables", 5},
                      {"slab_reclaimable", 3},
                      {"slab_unreclaimable", 2},
                      {"kernel_stack", 1},
                      {"percpu", 1},
                      {"sock", 7}})
    old.set(k, static_cast<std::uint64_t>(v));
  EXPECT_EQ(v2RootUsage(old), 100u + 50 + 5 + 3 + 2 + 1 + 1 + 7);
  // A non-root v2 cgroup without memory.current is still an error.
  t.cgroupV2("/b", 1 << 20, "max", kV2Stat);
  t.remove("/sys/fs/cgroup/b/memory.current");
  EXPECT_FALSE(readCgroupMemory(*fs.openDir("/sys/fs/cgroup/b"), 2, "/b"));
}

// Hand-made: inside a container with its own cgroup namespace, "/" is the container's cgroup,
// which the kernel gives memory.current and memory.max: its limit is the container's bound.
TEST(ReadCgroupMemory, ACgroupNamespaceRootIsReadWithItsLimit) {
  FixtureTree t;
  t.mountV2();
  t.cgroupV2("/", 300ULL << 20, "536870912", kV2Stat);
  auto fs = t.fs();
  auto cg = readCgroupMemory(*fs.openDir("/sys/fs/cgroup"), 2, "/");
  ASSERT_TRUE(cg) << cg.error().describe();
  EXPECT_FALSE(cg->usage_from_stat);
  EXPECT_EQ(cg->usage, 300ULL << 20);
  EXPECT_EQ(cg->limit.value(), 512ULL << 20);
  EXPECT_TRUE(cg->warnings.empty());
}

TEST(ReadCgroupMemory, V2MaxEmptyGarbageAndMissingOptional) {
  FixtureTree t;
  t.mountV2();
  t.cgroupV2("/a", 1 << 20, "max", kV2Stat);
  t.remove("/sys/fs/cgroup/a/memory.peak");             // kernels before 5.19
  t.remove("/sys/fs/cgroup/a/memory.pressure");         // PSI off
  t.write("/sys/fs/cgroup/a/memory.swap.current", "");  // empty: a warning, not a failure
  t.write("/sys/fs/cgroup/a/memory.high", "lots\n");    // garbage in an optional file
  auto fs = t.fs();
  auto cg = readCgroupMemory(*fs.openDir("/sys/fs/cgroup/a"), 2, "/a");
  ASSERT_TRUE(cg) << cg.error().describe();
  EXPECT_FALSE(cg->limit.has_value());
  EXPECT_FALSE(cg->peak.has_value());
  EXPECT_FALSE(cg->pressure.has_value());
  ASSERT_EQ(cg->warnings.size(), 2u);
  EXPECT_NE(cg->warnings[0].find("memory.high"), std::string::npos);
  EXPECT_NE(cg->warnings[0].find("lots"), std::string::npos);
  EXPECT_NE(cg->warnings[1].find("memory.swap.current"), std::string::npos);
}

TEST(ReadCgroupMemory, RequiredFileGarbageOrMissingIsAnErrorNamingIt) {
  FixtureTree t;
  t.mountV2();
  t.cgroupV2("/a", 1 << 20, "max", kV2Stat);
  t.write("/sys/fs/cgroup/a/memory.max", "12GB\n");
  auto fs = t.fs();
  auto cg = readCgroupMemory(*fs.openDir("/sys/fs/cgroup/a"), 2, "/a");
  ASSERT_FALSE(cg);
  EXPECT_NE(cg.error().message.find("memory.max"), std::string::npos);
  EXPECT_NE(cg.error().message.find("12GB"), std::string::npos);

  t.cgroupV2("/b", 1 << 20, "max", kV2Stat);
  t.remove("/sys/fs/cgroup/b/memory.current");
  auto b = readCgroupMemory(*fs.openDir("/sys/fs/cgroup/b"), 2, "/b");
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().code, ENOENT);
  EXPECT_NE(b.error().message.find("memory.current"), std::string::npos);

  t.cgroupV2("/c", 1 << 20, "max", "");
  auto c = readCgroupMemory(*fs.openDir("/sys/fs/cgroup/c"), 2, "/c");
  ASSERT_FALSE(c) << "an empty memory.stat is not a memory cgroup";
}

TEST(ReadCgroupMemory, TruncatedStatKeepsWhatIsWholeAndWarns) {
  FixtureTree t;
  t.mountV2();
  t.cgroupV2("/a", 1 << 20, "max", "anon 4096\nfile 8192\npagetab");
  auto fs = t.fs();
  auto cg = readCgroupMemory(*fs.openDir("/sys/fs/cgroup/a"), 2, "/a");
  ASSERT_TRUE(cg);
  EXPECT_EQ(cg->stat.get("file").value(), 8192u);
  ASSERT_EQ(cg->warnings.size(), 1u);
  EXPECT_NE(cg->warnings[0].find("pagetab"), std::string::npos);
}

TEST(CgroupHierarchy, PathsRelativeToTheMount) {
  FixtureTree t;
  auto fs = t.fs();
  CgroupHierarchy h(fs, 1, CgroupMount{"/sys/fs/cgroup/memory", "/kubepods"});
  EXPECT_EQ(h.toMountRelative("/kubepods/pod1").value(), "/pod1");
  EXPECT_EQ(h.toMountRelative("/kubepods").value(), "/");
  auto elsewhere = h.toMountRelative("/elsewhere");
  ASSERT_FALSE(elsewhere) << "the bind mount of /kubepods does not show /elsewhere";
  EXPECT_NE(elsewhere.error().message.find("/elsewhere lies outside"), std::string::npos) << elsewhere.error().message;
  EXPECT_EQ(h.directoryOf("/pod1"), "/sys/fs/cgroup/memory/pod1");
  EXPECT_EQ(h.directoryOf("/"), "/sys/fs/cgroup/memory");
}

TEST(CgroupHierarchy, OpenRefusesPathsThatClimb) {
  FixtureTree t;
  t.mountV1();
  t.cgroupV1("/a", 1 << 20, 1 << 30, 0, 0, 0, 0);
  auto fs = t.fs();
  CgroupHierarchy h(fs, 1, CgroupMount{"/sys/fs/cgroup/memory", "/"});
  EXPECT_TRUE(h.open("/a"));
  auto up = h.open("/../memory/a");
  ASSERT_FALSE(up) << "openat would follow \"..\" out of the mount";
  EXPECT_EQ(up.error().kind, ErrorKind::kBadInput);
  EXPECT_NE(up.error().message.find("climbs"), std::string::npos);
  EXPECT_FALSE(h.open("/a/./."));
}

TEST(DiscoverCgroupMounts, RealHybridSnapshot) {
  auto fs = FsRoot::open(testing::fixturePath("hybrid-real"));
  ASSERT_TRUE(fs);
  auto m = discoverCgroupMounts(*fs);
  ASSERT_TRUE(m) << m.error().describe();
  EXPECT_EQ(m->mode(), CgroupMode::kHybrid);
  EXPECT_EQ(m->memoryVersion(), 1);
  EXPECT_FALSE(m->v2_has_memory);
}

TEST(DiscoverCgroupMounts, V2ControllersDecideMemory) {
  FixtureTree t;
  t.mountV2();
  auto fs = t.fs();
  EXPECT_EQ(discoverCgroupMounts(fs)->memoryVersion(), 2);
  t.write("/sys/fs/cgroup/cgroup.controllers", "cpu io pids\n");
  EXPECT_EQ(discoverCgroupMounts(fs)->memoryVersion(), 0);
}

}  // namespace
}  // namespace headroom
