#include <gtest/gtest.h>

#include <chrono>

#include "headroom/sources/cgroup.h"
#include "testing/fixture_tree.h"

namespace headroom {
namespace {

using testing::FixtureTree;

TEST(JoinCgroupPath, Table) {
  struct Case {
    const char* base;
    const char* rel;
    const char* path;
    bool clamped;
  };
  const Case cases[] = {
      {"/", "", "/", false},
      {"", "", "/", false},
      {"/", "/", "/", false},
      {"/", "//", "/", false},
      {"/a/b", "", "/a/b", false},
      {"/a/b/", "/", "/a/b", false},
      {"/a/b", "/..", "/a", false},
      {"/a/b", "/../..", "/", false},
      {"/a/b", "/../../..", "/", true},
      {"/", "/..", "/", true},
      {"/", "/../..", "/", true},
      {"/a/b", "/../../../x", "/x", true},
      {"/a/b/", "/../c/", "/a/c", false},
      {"/a/b", "/..//c//d/", "/a/c/d", false},
      {"", "/x", "/x", false},
      {"/a", "//x//y/", "/a/x/y", false},
      {"/a", "/./x/.", "/a/x", false},
      {"/a", "/x/../y", "/a/y", false},
      {"/a", "/x/../../..", "/", true},
      {"/k/p/agent.scope", "/../pod-b/prover.scope", "/k/p/pod-b/prover.scope", false},
      {"/k/p/agent.scope", "/../../../..", "/", true},
      {"/a/../b", "/c", "/b/c", false},
      {"/", "/...", "/...", false},  // a name, not a climb
  };
  for (const Case& c : cases) {
    JoinedCgroupPath j = joinCgroupPath(c.base, c.rel);
    EXPECT_EQ(j.path, c.path) << "joinCgroupPath(\"" << c.base << "\", \"" << c.rel << "\")";
    EXPECT_EQ(j.clamped, c.clamped) << "joinCgroupPath(\"" << c.base << "\", \"" << c.rel << "\")";
  }
}

TEST(NsMap, FromMountRoot) {
  EXPECT_EQ(nsMapFromMountRoot("/"), (CgroupNsMap{"/", "/"}));
  EXPECT_EQ(nsMapFromMountRoot(""), (CgroupNsMap{"/", "/"}));
  EXPECT_EQ(nsMapFromMountRoot("/kubepods/pod1/"), (CgroupNsMap{"/", "/kubepods/pod1"}));
  EXPECT_EQ(nsMapFromMountRoot("/../.."), (CgroupNsMap{"/", "/"})) << "mountinfo cannot say where the root lies";
  EXPECT_EQ(nsMapFromMountRoot("/../a"), (CgroupNsMap{"/", "/"}));
}

TEST(NsMap, FromAnchor) {
  // The agent at its namespace's root, found deep in a host tree.
  EXPECT_EQ(nsMapFromAnchor("/", "/kubepods.slice/pod-a/agent.scope"),
            (CgroupNsMap{"/kubepods.slice/pod-a/agent.scope", "/"}));
  // The agent one below its namespace's root.
  EXPECT_EQ(nsMapFromAnchor("/agent", "/k/pod-a/agent"), (CgroupNsMap{"/k/pod-a", "/"}));
  // Plain host.
  EXPECT_EQ(nsMapFromAnchor("/system.slice/x.service", "/system.slice/x.service"), (CgroupNsMap{"/", "/"}));
  // A bind mount of a subtree: the mount root is below the namespace's root.
  EXPECT_EQ(nsMapFromAnchor("/kubepods/pod1/agent", "/pod1/agent"), (CgroupNsMap{"/", "/kubepods"}));
  EXPECT_EQ(nsMapFromAnchor("/kubepods/pod1", "/"), (CgroupNsMap{"/", "/kubepods/pod1"}));
  EXPECT_FALSE(nsMapFromAnchor("/a/b", "/c/d")) << "neither a suffix of the other";
  EXPECT_FALSE(nsMapFromAnchor("/../x", "/k/x")) << "an own path that climbs anchors nothing";
  EXPECT_FALSE(nsMapFromAnchor("/x", "/k/../x"));
}

TEST(NsMap, MapPaths) {
  struct Case {
    CgroupNsMap map;
    const char* proc_path;
    std::optional<std::string> mount_path;
  };
  const CgroupNsMap identity;
  const CgroupNsMap in_host_tree{"/kubepods.slice/pod-a/agent.scope", "/"};
  const CgroupNsMap subtree{"/", "/kubepods"};
  const Case cases[] = {
      {identity, "/", "/"},
      {identity, "/system.slice/x.service", "/system.slice/x.service"},
      {identity, "/a//b/", "/a/b"},
      {identity, "/../pod-b/x", std::nullopt},  // the namespace's own mount: outside it
      {in_host_tree, "/", "/kubepods.slice/pod-a/agent.scope"},
      {in_host_tree, "/sub", "/kubepods.slice/pod-a/agent.scope/sub"},
      {in_host_tree, "/../pod-b/prover.scope", "/kubepods.slice/pod-a/pod-b/prover.scope"},
      {in_host_tree, "/../../pod-b/prover.scope", "/kubepods.slice/pod-b/prover.scope"},
      {in_host_tree, "/../../../system.slice/containerd.service", "/system.slice/containerd.service"},
      {in_host_tree, "/../../..", "/"},
      {in_host_tree, "/../../../..", std::nullopt},  // above the hierarchy's root
      {in_host_tree, "/../../../../x", std::nullopt},
      {subtree, "/kubepods/pod1", "/pod1"},
      {subtree, "/kubepods", "/"},
      {subtree, "/kubepodsx", std::nullopt},
      {subtree, "/elsewhere", std::nullopt},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(mapNsPath(c.map, c.proc_path), c.mount_path)
        << "{" << c.map.ns_root << ", " << c.map.mount_root << "} " << c.proc_path;
  }
}

TEST(CgroupProcs, ListsAPid) {
  EXPECT_TRUE(cgroupProcsLists("1\n22\n333\n", 22));
  EXPECT_FALSE(cgroupProcsLists("1\n22\n333\n", 2));
  EXPECT_FALSE(cgroupProcsLists("1\n22\n333\n", 3333));
  // Hand-made texts: a whole file, an empty cgroup, a read cut inside its last line, odd lines.
  EXPECT_EQ(cgroupProcsPids("1\n22\n333\n"), (std::vector<pid_t>{1, 22, 333}));
  EXPECT_TRUE(cgroupProcsPids("").empty());
  EXPECT_EQ(cgroupProcsPids("4\n5"), (std::vector<pid_t>{4, 5}));
  EXPECT_EQ(cgroupProcsPids("7\n\nx\n-1\n0\n99999999999\n8\n"), (std::vector<pid_t>{7, 8}));
  EXPECT_TRUE(cgroupProcsLists("7", 7)) << "no final newline";
  EXPECT_TRUE(cgroupProcsLists(" 7 \n", 7));
  EXPECT_FALSE(cgroupProcsLists("", 7));
  EXPECT_FALSE(cgroupProcsLists("7x\nseven\n-7\n", 7));
}

// A node's host tree under /sys/fs/cgroup (v2) or /sys/fs/cgroup/memory (v1): this agent (pid
// 500) in /kubepods.slice/pod-a/agent.scope, a prover in /kubepods.slice/pod-b/prover.scope.
void nodeTree(const FixtureTree& t, int version, std::string_view self_cgroup_line) {
  for (const char* path : {"/", "/kubepods.slice", "/kubepods.slice/pod-a", "/kubepods.slice/pod-a/agent.scope",
                           "/kubepods.slice/pod-b", "/kubepods.slice/pod-b/prover.scope", "/system.slice"}) {
    if (version == 1)
      t.cgroupV1(path, 1 << 20, 1ULL << 30, 1 << 20, 0, 0, 0);
    else if (std::string_view(path) != "/")
      t.cgroupV2(path, 1 << 20, "max", "anon 1048576\nfile 0\nshmem 0\n");
    t.cgroupProcs(version, path, {});
  }
  t.cgroupProcs(version, "/", {1, 2});
  t.cgroupProcs(version, "/system.slice", {300});
  t.cgroupProcs(version, "/kubepods.slice/pod-a/agent.scope", {500, 501});
  t.cgroupProcs(version, "/kubepods.slice/pod-b/prover.scope", {600});
  t.write("/proc/500/cgroup", self_cgroup_line);
  t.self(500);
}

TEST(LocateCgroupNamespace, PlainHostCostsOneRead) {
  FixtureTree t;
  t.mountV2();
  nodeTree(t, 2, "0::/system.slice\n");
  t.cgroupProcs(2, "/system.slice", {500});
  auto fs = t.fs();
  auto loc = locateCgroupNamespace(fs, 2, CgroupMount{"/sys/fs/cgroup", "/"}, 500);
  ASSERT_TRUE(loc) << loc.error().describe();
  EXPECT_EQ(loc->source, CgroupNsSource::kMountinfo);
  EXPECT_EQ(loc->map, (CgroupNsMap{"/", "/"}));
  EXPECT_EQ(loc->dirs_walked, 0u);
}

TEST(LocateCgroupNamespace, HostTreeSeenFromANamespaceV2) {
  FixtureTree t;
  t.mountV2();
  nodeTree(t, 2, "0::/\n");
  auto fs = t.fs();
  // As the kernel shows a hostPath mount of the host's tree to a process three levels down.
  auto loc = locateCgroupNamespace(fs, 2, CgroupMount{"/sys/fs/cgroup", "/../../.."}, 500);
  ASSERT_TRUE(loc) << loc.error().describe();
  EXPECT_EQ(loc->source, CgroupNsSource::kSearch);
  EXPECT_EQ(loc->map, (CgroupNsMap{"/kubepods.slice/pod-a/agent.scope", "/"}));
  EXPECT_LE(loc->dirs_walked, 7u) << "only to depth 3, where mountinfo's root puts it";
  // A mountinfo root that says nothing (a fixture, a mount made otherwise): the walk goes anywhere.
  auto any = locateCgroupNamespace(fs, 2, CgroupMount{"/sys/fs/cgroup", "/"}, 500);
  ASSERT_TRUE(any) << any.error().describe();
  EXPECT_EQ(any->map, (CgroupNsMap{"/kubepods.slice/pod-a/agent.scope", "/"}));
  // Wrong depth in mountinfo: the first pass misses, the second finds it.
  auto wrong = locateCgroupNamespace(fs, 2, CgroupMount{"/sys/fs/cgroup", "/.."}, 500);
  ASSERT_TRUE(wrong) << wrong.error().describe();
  EXPECT_EQ(wrong->map.ns_root, "/kubepods.slice/pod-a/agent.scope");
}

TEST(LocateCgroupNamespace, HostTreeSeenFromANamespaceV1) {
  FixtureTree t;
  t.mountV1();
  nodeTree(t, 1, "9:pids:/\n4:memory:/\n1:cpu,cpuacct:/\n0::/\n");
  auto fs = t.fs();
  auto loc = locateCgroupNamespace(fs, 1, CgroupMount{"/sys/fs/cgroup/memory", "/../../.."}, 500);
  ASSERT_TRUE(loc) << loc.error().describe();
  EXPECT_EQ(loc->map, (CgroupNsMap{"/kubepods.slice/pod-a/agent.scope", "/"}));
}

TEST(LocateCgroupNamespace, AgentBelowItsNamespaceRoot) {
  FixtureTree t;
  t.mountV2();
  nodeTree(t, 2, "0::/inner\n");
  t.cgroupProcs(2, "/kubepods.slice/pod-a/agent.scope", {501});
  t.cgroupProcs(2, "/kubepods.slice/pod-a/agent.scope/inner", {500});
  auto fs = t.fs();
  auto loc = locateCgroupNamespace(fs, 2, CgroupMount{"/sys/fs/cgroup", "/../../.."}, 500);
  ASSERT_TRUE(loc) << loc.error().describe();
  EXPECT_EQ(loc->map.ns_root, "/kubepods.slice/pod-a/agent.scope");
}

TEST(LocateCgroupNamespace, NotFoundSaysWhy) {
  FixtureTree t;
  t.mountV2();
  nodeTree(t, 2, "0::/\n");
  auto fs = t.fs();
  auto loc = locateCgroupNamespace(fs, 2, CgroupMount{"/sys/fs/cgroup", "/"}, 999);
  ASSERT_FALSE(loc);
  EXPECT_EQ(loc.error().describe(), loc.error().message) << "no errno to add: the files were there";
  EXPECT_NE(loc.error().message.find("pid 999"), std::string::npos) << loc.error().message;
  EXPECT_NE(loc.error().message.find("walking 7 directories"), std::string::npos) << loc.error().message;

  CgroupNsSearchLimits small;
  small.max_dirs = 2;
  auto limited = locateCgroupNamespace(fs, 2, CgroupMount{"/sys/fs/cgroup", "/"}, 500, small);
  ASSERT_FALSE(limited);
  EXPECT_NE(limited.error().message.find("(the limit)"), std::string::npos) << limited.error().message;
}

TEST(LocateCgroupNamespace, OwnPathThatClimbsIsAnError) {
  FixtureTree t;
  t.mountV2();
  nodeTree(t, 2, "0::/../moved\n");
  auto fs = t.fs();
  auto loc = locateCgroupNamespace(fs, 2, CgroupMount{"/sys/fs/cgroup", "/"}, 500);
  ASSERT_FALSE(loc);
  EXPECT_NE(loc.error().message.find("/../moved"), std::string::npos);
}

TEST(LocateCgroupNamespace, UncheckableKeepsMountinfoUnlessItClimbs) {
  FixtureTree t;
  t.mountV2();
  auto fs = t.fs();
  // No /proc/self/cgroup, no pid: nothing to check with.
  auto loc = locateCgroupNamespace(fs, 2, CgroupMount{"/sys/fs/cgroup", "/"}, 0);
  ASSERT_TRUE(loc) << loc.error().describe();
  EXPECT_EQ(loc->source, CgroupNsSource::kUnchecked);
  EXPECT_EQ(loc->map, (CgroupNsMap{"/", "/"}));
  EXPECT_FALSE(locateCgroupNamespace(fs, 2, CgroupMount{"/sys/fs/cgroup", "/../.."}, 0))
      << "a climbing mount root is a namespace for certain";
  // A capture of the memory files only (no cgroup.procs anywhere).
  t.write("/proc/500/cgroup", "0::/x\n");
  t.self(500);
  t.cgroupV2("/x", 1, "max", "anon 1\n");
  auto capture = locateCgroupNamespace(fs, 2, CgroupMount{"/sys/fs/cgroup", "/"}, 500);
  ASSERT_TRUE(capture) << capture.error().describe();
  EXPECT_EQ(capture->source, CgroupNsSource::kUnchecked);
  EXPECT_NE(capture->unchecked_why.find("cgroup.procs"), std::string::npos);
}

TEST(CgroupHierarchy, CreateLocatesAndRetriesAfterAFailure) {
  FixtureTree t;
  t.mountV2();
  nodeTree(t, 2, "0::/\n");
  t.cgroupProcs(2, "/kubepods.slice/pod-a/agent.scope", {501});  // not (yet) listed
  auto fs = t.fs();
  CgroupHierarchy h = CgroupHierarchy::create(fs, 2, CgroupMount{"/sys/fs/cgroup", "/../../.."});
  ASSERT_TRUE(h.nsWarning().has_value());
  EXPECT_NE(h.nsWarning()->find("not located"), std::string::npos) << *h.nsWarning();
  auto outside = h.toMountRelative("/../pod-b/prover.scope");
  ASSERT_FALSE(outside);
  EXPECT_NE(outside.error().message.find("outside"), std::string::npos);
  EXPECT_EQ(h.toMountRelative("/").value(), "/") << "falls back to mountinfo alone, as before";

  // NOLINTNEXTLINE(performance-unnecessary-copy-initialization): the copy is the point
  const CgroupHierarchy copy = h;  // copies share the mapping
  EXPECT_FALSE(h.retryLocate(std::chrono::hours(1))) << "too soon";
  t.cgroupProcs(2, "/kubepods.slice/pod-a/agent.scope", {500, 501});
  EXPECT_TRUE(h.retryLocate(std::chrono::seconds(0)));
  EXPECT_FALSE(copy.nsWarning().has_value());
  EXPECT_EQ(copy.toMountRelative("/../../pod-b/prover.scope").value(), "/kubepods.slice/pod-b/prover.scope");
  EXPECT_NE(copy.nsDescription().find("/kubepods.slice/pod-a/agent.scope"), std::string::npos) << copy.nsDescription();
}

TEST(CgroupHierarchy, CallersCgroupInANamespace) {
  FixtureTree t;
  t.mountV1();
  nodeTree(t, 1, "4:memory:/\n");
  auto fs = t.fs();
  CgroupHierarchy h = CgroupHierarchy::create(fs, 1, CgroupMount{"/sys/fs/cgroup/memory", "/../../.."});
  EXPECT_EQ(callersMemoryCgroup(fs, h).value(), "/kubepods.slice/pod-a/agent.scope");
}

}  // namespace
}  // namespace headroom
