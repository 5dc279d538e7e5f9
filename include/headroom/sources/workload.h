// What operators call a cgroup. From its path alone: the systemd unit, the container (its
// runtime and id) and the Kubernetes pod (its UID and QoS class), in the layouts systemd,
// Docker, Podman, containerd and CRI-O write, with the kubelet's systemd and cgroupfs drivers;
// this part does no I/O. The names (a container's, a pod's and its namespace) need a lookup
// beyond the path: sources/workload_names.h.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace headroom {

struct WorkloadIdentity {
  std::string unit;          // the nearest systemd unit: "curio.service", "session-2.scope"; else its slice
  std::string runtime;       // "docker", "podman", "containerd", "crio"; "" when no container
  std::string container_id;  // 64 hex digits; "" when no container
  std::string pod_uid;       // Kubernetes pod UID, with dashes; "" outside a pod
  std::string qos;           // Kubernetes QoS class: "guaranteed", "burstable", "besteffort"
  bool operator==(const WorkloadIdentity&) const = default;
};

// The identity of the cgroup at `path` (a path inside the hierarchy, "/a/b"), found from its
// deepest component outwards: a container's own sub-cgroups ("/.../libpod-<id>.scope/container")
// belong to the container. Conmon's scopes (libpod-conmon-<id>, crio-conmon-<id>) are not
// containers.
WorkloadIdentity identifyCgroup(std::string_view path);

// A cgroup's identity and the names a lookup found for it: the labels `unit`, `container`,
// `pod` and `namespace` of its series (cAdvisor's names), "" when unknown.
struct Workload {
  WorkloadIdentity identity;
  std::string container;      // Docker/Podman: the container's name; Kubernetes: the container's name in its pod
  std::string pod;            // Kubernetes: the pod's name
  std::string pod_namespace;  // Kubernetes: the pod's namespace
  bool operator==(const Workload&) const = default;
  bool empty() const { return *this == Workload{}; }
};

// The longest name a label carries (Kubernetes' longest name, a DNS subdomain): anything longer
// is cut, so that no lookup can make a series' labels grow without bound.
inline constexpr std::size_t kMaxWorkloadName = 253;

// One line for people: "pod default/web-0 (burstable), container nginx (containerd 4f7d1c2b9a8e)",
// "container web (podman 4f7d1c2b9a8e)", "unit curio.service" (the unit only without a pod or a
// container); "" when there is nothing to say.
std::string describeWorkload(const Workload& w);

}  // namespace headroom
