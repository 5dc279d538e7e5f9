// What operators call a cgroup, read from its path alone: the systemd unit, the container
// (its runtime and id) and the Kubernetes pod (its UID and QoS class), in the layouts systemd,
// Docker, Podman, containerd and CRI-O write, with the kubelet's systemd and cgroupfs drivers.
// Names (a container's, a pod's and its namespace) need a lookup beyond the path; this is the
// part every lookup starts from, and it does no I/O.
#pragma once

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

}  // namespace headroom
