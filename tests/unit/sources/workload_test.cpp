// A cgroup's workload identity from its path: the layouts of systemd, Docker, Podman, containerd
// and CRI-O under the kubelet's two drivers. The paths are hand-made in each tool's format,
// except the first test's, read from a capture (tests/fixtures/v2-6.12-kubepods/PROVENANCE).
#include "headroom/sources/workload.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace headroom {
namespace {

constexpr const char* kId = "4f7d1c2b9a8e6d5c3b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c";
constexpr const char* kUid = "0c1f6c1e-5b7d-4c1a-9f2e-6a8b8d3c4e21";

WorkloadIdentity id(std::string unit, std::string runtime, std::string container, std::string pod = "",
                    std::string qos = "") {
  return WorkloadIdentity{std::move(unit), std::move(runtime), std::move(container), std::move(pod), std::move(qos)};
}

TEST(WorkloadIdentity, AKubernetesContainerOfTheCaptureIsItsPodAndContainer) {
  std::ifstream f(std::string(HEADROOM_FIXTURE_DIR) + "/v2-6.12-kubepods/proc/193/cgroup");
  std::string line;
  ASSERT_TRUE(std::getline(f, line));
  ASSERT_EQ(line.substr(0, 3), "0::");
  WorkloadIdentity w = identifyCgroup(line.substr(3));
  EXPECT_EQ(w, id(std::string("cri-containerd-") + kId + ".scope", "containerd", kId, kUid, "burstable"));
}

TEST(WorkloadIdentity, SystemdUnitsAndSlices) {
  EXPECT_EQ(identifyCgroup("/system.slice/curio.service"), id("curio.service", "", ""));
  EXPECT_EQ(identifyCgroup("/system.slice/cuzk.service/prover"), id("cuzk.service", "", "")) << "inside a unit";
  EXPECT_EQ(identifyCgroup("/user.slice/user-1000.slice/session-2.scope"), id("session-2.scope", "", ""));
  EXPECT_EQ(identifyCgroup("/user.slice/user-1000.slice"), id("user-1000.slice", "", "")) << "no unit: its slice";
  EXPECT_EQ(identifyCgroup("/"), id("", "", ""));
  EXPECT_EQ(identifyCgroup("/jobs/batch"), id("", "", ""));
}

TEST(WorkloadIdentity, DockerAndPodmanContainers) {
  std::string i = kId;
  EXPECT_EQ(identifyCgroup("/system.slice/docker-" + i + ".scope"), id("docker-" + i + ".scope", "docker", i));
  EXPECT_EQ(identifyCgroup("/docker/" + i), id("", "docker", i)) << "cgroupfs driver";
  EXPECT_EQ(identifyCgroup("/machine.slice/libpod-" + i + ".scope/container"),
            id("libpod-" + i + ".scope", "podman", i))
      << "podman on v2 puts the processes one level down";
  EXPECT_EQ(identifyCgroup("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + i + ".scope"),
            id("libpod-" + i + ".scope", "podman", i))
      << "rootless";
  EXPECT_EQ(identifyCgroup("/machine.slice/libpod-conmon-" + i + ".scope"), id("libpod-conmon-" + i + ".scope", "", ""))
      << "conmon is not the container";
  EXPECT_EQ(identifyCgroup("/system.slice/docker-1234.scope").container_id, "") << "not an id";
  EXPECT_EQ(identifyCgroup("/" + i).container_id, "") << "a bare id outside docker/ or a pod";
}

TEST(WorkloadIdentity, KubernetesPodsUnderBothDriversAndRuntimes) {
  std::string i = kId, u = kUid, under = "0c1f6c1e_5b7d_4c1a_9f2e_6a8b8d3c4e21";
  EXPECT_EQ(identifyCgroup("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + under +
                           ".slice/crio-" + i + ".scope"),
            id("crio-" + i + ".scope", "crio", i, u, "besteffort"));
  EXPECT_EQ(identifyCgroup("/kubepods.slice/kubepods-pod" + under + ".slice/cri-containerd-" + i + ".scope"),
            id("cri-containerd-" + i + ".scope", "containerd", i, u, "guaranteed"));
  EXPECT_EQ(identifyCgroup("/kubepods/burstable/pod" + u + "/" + i), id("", "", i, u, "burstable"))
      << "cgroupfs driver: the runtime is not in the path";
  EXPECT_EQ(identifyCgroup("/kubepods/pod" + u + "/crio-" + i), id("", "crio", i, u, "guaranteed"));
  EXPECT_EQ(identifyCgroup("/kubepods/besteffort/pod" + u), id("", "", "", u, "besteffort")) << "the pod itself";
  EXPECT_EQ(identifyCgroup("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + under +
                           ".slice/crio-conmon-" + i + ".scope")
                .container_id,
            "");
  EXPECT_EQ(identifyCgroup("/kubepods/burstable/podnot-a-uid").pod_uid, "");
  EXPECT_EQ(identifyCgroup("/kubepods.slice/kubepods-burstable.slice"), id("kubepods-burstable.slice", "", ""))
      << "a QoS class is a pod's";
  EXPECT_EQ(identifyCgroup("/pod" + u).pod_uid, "") << "a pod directory only under kubepods";
}

}  // namespace
}  // namespace headroom

namespace headroom {
namespace {

TEST(WorkloadDescription, NamesWhatIsKnownAndTheUnitOnlyAlone) {
  Workload pod;
  pod.identity = id("cri-containerd-x.scope", "containerd", kId, kUid, "burstable");
  pod.container = "cuzk";
  pod.pod = "prover-0";
  pod.pod_namespace = "proving";
  EXPECT_EQ(describeWorkload(pod), "pod proving/prover-0 (burstable), container cuzk (containerd 4f7d1c2b9a8e)");
  Workload unnamed;
  unnamed.identity = id("libpod-x.scope", "podman", kId);
  EXPECT_EQ(describeWorkload(unnamed), "container podman 4f7d1c2b9a8e");
  Workload pod_only;
  pod_only.identity = id("kubepods-pod.slice", "", "", kUid, "guaranteed");
  EXPECT_EQ(describeWorkload(pod_only), std::string("pod uid ") + kUid + " (guaranteed)");
  Workload unit;
  unit.identity.unit = "curio.service";
  EXPECT_EQ(describeWorkload(unit), "unit curio.service");
  EXPECT_EQ(describeWorkload(Workload{}), "");
}

}  // namespace
}  // namespace headroom
