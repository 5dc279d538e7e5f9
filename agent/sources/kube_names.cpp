#include "headroom/sources/kube_names.h"

#include <algorithm>
#include <cctype>

namespace headroom {
namespace {

constexpr std::string_view kContainersDir = "/var/log/containers";

bool isHex64(std::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return std::isdigit(static_cast<unsigned char>(c)) != 0 || (c >= 'a' && c <= 'f');
         });
}

// A DNS label or subdomain as Kubernetes names are: lower-case letters, digits, '-' and '.'.
bool isKubeName(std::string_view s) {
  return !s.empty() && s.size() <= 253 && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || std::isdigit(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '.';
  });
}

bool isUid(std::string_view u) {
  if (u.size() != 36) return false;
  for (std::size_t i = 0; i < u.size(); ++i) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? u[i] != '-' : std::isxdigit(static_cast<unsigned char>(u[i])) == 0) return false;
  }
  return true;
}

}  // namespace

std::optional<KubeContainerName> parseContainerLogName(std::string_view name) {
  constexpr std::string_view kLog = ".log";
  if (name.size() < kLog.size() + 65 || name.substr(name.size() - kLog.size()) != kLog) return std::nullopt;
  name.remove_suffix(kLog.size());
  std::string_view id = name.substr(name.size() - 64);
  name.remove_suffix(64);
  if (!isHex64(id) || name.empty() || name.back() != '-') return std::nullopt;
  name.remove_suffix(1);
  auto first = name.find('_'), second = name.find('_', first + 1);
  if (first == std::string_view::npos || second == std::string_view::npos ||
      name.find('_', second + 1) != std::string_view::npos)
    return std::nullopt;
  KubeContainerName out;
  out.pod = name.substr(0, first);
  out.pod_namespace = name.substr(first + 1, second - first - 1);
  out.container = name.substr(second + 1);
  out.container_id = id;
  if (!isKubeName(out.pod) || !isKubeName(out.pod_namespace) || !isKubeName(out.container)) return std::nullopt;
  return out;
}

std::optional<std::string> podUidFromLogTarget(std::string_view target) {
  // .../<namespace>_<pod>_<uid>/<container>/<n>.log
  auto last = target.rfind('/');
  if (last == std::string_view::npos || last == 0) return std::nullopt;
  auto container = target.rfind('/', last - 1);
  if (container == std::string_view::npos || container == 0) return std::nullopt;
  auto pod_dir_start = target.rfind('/', container - 1);
  std::string_view pod_dir =
      target.substr(pod_dir_start == std::string_view::npos ? 0 : pod_dir_start + 1,
                    container - (pod_dir_start == std::string_view::npos ? 0 : pod_dir_start + 1));
  auto underscore = pod_dir.rfind('_');
  if (underscore == std::string_view::npos) return std::nullopt;
  std::string_view uid = pod_dir.substr(underscore + 1);
  if (!isUid(uid)) return std::nullopt;
  return std::string(uid);
}

Result<KubeNames> readKubeNames(const FsRoot& fs) {
  KubeNames out;
  if (!fs.exists(kContainersDir)) return out;
  auto dir = fs.openDir(kContainersDir);
  if (!dir) return dir.error();
  auto names = dir->list();
  if (!names) return names.error();
  for (const std::string& n : *names) {
    auto c = parseContainerLogName(n);
    if (!c) continue;
    if (auto target = fs.readLink(std::string(kContainersDir) + "/" + n))
      if (auto uid = podUidFromLogTarget(*target)) c->pod_uid = *uid;
    if (!c->pod_uid.empty()) {
      KubeContainerName pod = *c;
      pod.container.clear();
      pod.container_id.clear();
      out.by_pod_uid.emplace(c->pod_uid, std::move(pod));
    }
    out.by_container.emplace(c->container_id, std::move(*c));
  }
  return out;
}

}  // namespace headroom
