// A /var/log/containers entry's name and its link's target: Kubernetes names without the API;
// and a container engine's inspect answer (Docker's, Podman's): a container's name.
#include "fuzz_support.h"
#include "headroom/sources/kube_names.h"
#include "headroom/sources/workload_names.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace headroom;
  std::string_view text = fuzz::text(data, size);
  if (auto c = parseContainerLogName(text)) {
    fuzz::require(c->container_id.size() == 64, "a container id is 64 hex digits");
    fuzz::require(!c->pod.empty() && !c->pod_namespace.empty() && !c->container.empty(), "every name is there");
    fuzz::require(text == c->pod + "_" + c->pod_namespace + "_" + c->container + "-" + c->container_id + ".log",
                  "the parts make the name again");
  }
  if (auto uid = podUidFromLogTarget(text)) {
    fuzz::require(uid->size() == 36, "a pod UID is 36 characters");
    fuzz::require(text.find(*uid) != std::string_view::npos, "the UID is in the target");
  }
  if (auto name = parseEngineContainerName(text)) {
    fuzz::require(!name->empty() && name->size() <= kMaxWorkloadName, "a name is 1 to 253 bytes");
    fuzz::require(name->front() != '/', "the engine's leading slash is gone");
  }
  return 0;
}
