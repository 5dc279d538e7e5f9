// Kubernetes names without the API server: the node's /var/log/containers entries, the layout
// every log shipper relies on, name each container as
//   /var/log/containers/<pod>_<namespace>_<container>-<container id>.log
//     -> /var/log/pods/<namespace>_<pod>_<pod uid>/<container>/<restart>.log
// so a container id (from the cgroup path, sources/workload.h) or a pod UID (the cgroupfs
// driver's paths carry only that) finds its pod, namespace and container. The DaemonSet
// mounts /var/log/containers read-only: the links are read (their targets as text), no log.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "headroom/sources/fs_root.h"
#include "headroom/util/result.h"

namespace headroom {

struct KubeContainerName {
  std::string pod, pod_namespace, container;
  std::string container_id;  // 64 hex digits
  std::string pod_uid;       // from the link's target; "" when it does not say
  bool operator==(const KubeContainerName&) const = default;
};

// "<pod>_<namespace>_<container>-<64 hex>.log"; nullopt for any other name.
std::optional<KubeContainerName> parseContainerLogName(std::string_view file_name);
// "/var/log/pods/<namespace>_<pod>_<uid>/<container>/<n>.log" (absolute or relative): the UID.
std::optional<std::string> podUidFromLogTarget(std::string_view target);

struct KubeNames {
  std::map<std::string, KubeContainerName, std::less<>> by_container;  // container id ->
  std::map<std::string, KubeContainerName, std::less<>> by_pod_uid;    // pod UID -> (container empty)
};
// Reads /var/log/containers under `fs`: a missing directory is an empty answer (not a node),
// an unreadable one an error naming it.
Result<KubeNames> readKubeNames(const FsRoot& fs);

}  // namespace headroom
