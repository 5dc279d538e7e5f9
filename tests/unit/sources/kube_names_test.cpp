// Kubernetes names from a node's /var/log/containers: hand-made entries in the kubelet's layout
// (file names and link targets as the kubelet writes them; ids and UIDs invented).
#include "headroom/sources/kube_names.h"

#include <gtest/gtest.h>

#include <string>

#include "testing/fixture_tree.h"

namespace headroom {
namespace {

constexpr const char* kId = "4f7d1c2b9a8e6d5c3b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c";
constexpr const char* kUid = "0c1f6c1e-5b7d-4c1a-9f2e-6a8b8d3c4e21";

TEST(KubeNames, AContainerLogNameGivesPodNamespaceContainerAndId) {
  auto c = parseContainerLogName(std::string("cuzk-prover-7d9f8b6c4-x2x9z_proving_cuzk-") + kId + ".log");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->pod, "cuzk-prover-7d9f8b6c4-x2x9z");
  EXPECT_EQ(c->pod_namespace, "proving");
  EXPECT_EQ(c->container, "cuzk");
  EXPECT_EQ(c->container_id, kId);
  EXPECT_EQ(c->pod_uid, "");
  // A container name with dashes: the id is the last 64 characters, whatever comes before.
  auto dashed = parseContainerLogName(std::string("curio-0_fil_curio-sidecar-") + kId + ".log");
  ASSERT_TRUE(dashed);
  EXPECT_EQ(dashed->container, "curio-sidecar");
}

TEST(KubeNames, AnythingElseIsNoName) {
  std::string id = kId;
  for (const std::string& n : {std::string("pod_ns_c-") + id + ".txt", std::string("pod_ns_c-") + id.substr(1) + ".log",
                               std::string("pod_ns_c") + id + ".log", std::string("pod_c-") + id + ".log",
                               std::string("pod_ns_c_x-") + id + ".log", std::string("Pod_ns_c-") + id + ".log",
                               std::string("_ns_c-") + id + ".log", std::string(".log"), std::string("")}) {
    EXPECT_FALSE(parseContainerLogName(n)) << n;
  }
}

TEST(KubeNames, TheLinkTargetGivesThePodUid) {
  EXPECT_EQ(podUidFromLogTarget(std::string("/var/log/pods/proving_cuzk-prover-0_") + kUid + "/cuzk/0.log"), kUid);
  EXPECT_EQ(podUidFromLogTarget(std::string("../../pods/proving_cuzk-prover-0_") + kUid + "/cuzk/3.log"), kUid);
  EXPECT_FALSE(podUidFromLogTarget("/var/log/pods/proving_cuzk-prover-0_not-a-uid/cuzk/0.log"));
  EXPECT_FALSE(podUidFromLogTarget("0.log"));
  EXPECT_FALSE(podUidFromLogTarget(""));
}

TEST(KubeNames, ANodesDirectoryIsReadByContainerAndByPod) {
  testing::FixtureTree t;
  std::string id = kId, uid = kUid;
  std::string other = std::string(63, 'a') + "b";
  t.write("/var/log/pods/proving_cuzk-prover-0_" + uid + "/cuzk/0.log", "");
  t.symlink("/var/log/pods/proving_cuzk-prover-0_" + uid + "/cuzk/0.log",
            "/var/log/containers/cuzk-prover-0_proving_cuzk-" + id + ".log");
  t.symlink("/nowhere/0.log", "/var/log/containers/curio-0_fil_curio-" + other + ".log");
  t.write("/var/log/containers/README", "not a container");
  auto names = readKubeNames(t.fs());
  ASSERT_TRUE(names) << names.error().describe();
  ASSERT_EQ(names->by_container.size(), 2u);
  const KubeContainerName& c = names->by_container.at(id);
  EXPECT_EQ(c.pod, "cuzk-prover-0");
  EXPECT_EQ(c.pod_namespace, "proving");
  EXPECT_EQ(c.container, "cuzk");
  EXPECT_EQ(c.pod_uid, uid);
  EXPECT_EQ(names->by_container.at(other).pod_uid, "") << "a target that names no pod directory";
  ASSERT_EQ(names->by_pod_uid.size(), 1u);
  EXPECT_EQ(names->by_pod_uid.at(uid).pod, "cuzk-prover-0");
  EXPECT_EQ(names->by_pod_uid.at(uid).container, "");
}

TEST(KubeNames, NoDirectoryIsNoNode) {
  testing::FixtureTree t;
  auto names = readKubeNames(t.fs());
  ASSERT_TRUE(names) << names.error().describe();
  EXPECT_TRUE(names->by_container.empty());
}

}  // namespace
}  // namespace headroom
