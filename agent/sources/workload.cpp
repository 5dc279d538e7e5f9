#include "headroom/sources/workload.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace headroom {
namespace {

bool isHex64(std::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return std::isdigit(static_cast<unsigned char>(c)) != 0 || (c >= 'a' && c <= 'f');
         });
}

bool endsWith(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// "<prefix><64 hex>.scope" (the systemd driver) or "<prefix><64 hex>" (cgroupfs): the id.
std::string_view scopedId(std::string_view name, std::string_view prefix) {
  if (name.substr(0, prefix.size()) != prefix) return {};
  std::string_view rest = name.substr(prefix.size());
  if (endsWith(rest, ".scope")) rest.remove_suffix(std::string_view(".scope").size());
  return isHex64(rest) ? rest : std::string_view{};
}

// A component naming a container: its runtime and id.
bool containerOf(std::string_view name, bool in_docker_dir, bool in_pod, WorkloadIdentity& out) {
  struct Prefix {
    std::string_view prefix, runtime;
  };
  static constexpr Prefix kPrefixes[] = {
      {"docker-", "docker"}, {"libpod-", "podman"}, {"cri-containerd-", "containerd"}, {"crio-", "crio"}};
  for (const auto& [prefix, runtime] : kPrefixes) {
    if (auto id = scopedId(name, prefix); !id.empty()) {
      out.runtime = runtime;
      out.container_id = id;
      return true;
    }
  }
  // cgroupfs drivers: the bare id, under /docker/ or a pod's directory.
  if (isHex64(name) && (in_docker_dir || in_pod)) {
    out.runtime = in_docker_dir ? "docker" : "";
    out.container_id = name;
    return true;
  }
  return false;
}

// "kubepods-burstable-pod<uid with _>.slice" (systemd driver) or "pod<uid>" (cgroupfs).
bool podOf(std::string_view name, WorkloadIdentity& out) {
  std::string_view uid;
  if (endsWith(name, ".slice")) {
    auto at = name.rfind("-pod");
    if (name.substr(0, 8) != "kubepods" || at == std::string_view::npos) return false;
    uid = name.substr(at + 4, name.size() - at - 4 - std::string_view(".slice").size());
  } else if (name.substr(0, 3) == "pod") {
    uid = name.substr(3);
  } else {
    return false;
  }
  if (uid.size() != 36) return false;
  std::string u(uid);
  std::replace(u.begin(), u.end(), '_', '-');
  for (std::size_t i = 0; i < u.size(); ++i) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? u[i] != '-' : std::isxdigit(static_cast<unsigned char>(u[i])) == 0) return false;
  }
  out.pod_uid = std::move(u);
  return true;
}

}  // namespace

WorkloadIdentity identifyCgroup(std::string_view path) {
  std::vector<std::string_view> parts;
  for (std::size_t at = 0; at <= path.size();) {
    auto slash = path.find('/', at);
    if (slash == std::string_view::npos) slash = path.size();
    if (slash > at) parts.push_back(path.substr(at, slash - at));
    at = slash + 1;
  }
  WorkloadIdentity out;
  bool kube = false;
  std::string_view unit, slice;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    std::string_view p = parts[i];
    if (p == "kubepods" || p == "kubepods.slice") kube = true;
    if (kube && out.qos.empty()) {
      for (std::string_view q : {"burstable", "besteffort"})
        if (p == q || p == "kubepods-" + std::string(q) + ".slice") out.qos = q;
    }
    if (kube && out.pod_uid.empty() && podOf(p, out)) {
      if (out.qos.empty()) out.qos = "guaranteed";
      continue;
    }
    if (out.container_id.empty() && p.find("conmon") == std::string_view::npos)
      containerOf(p, i > 0 && parts[i - 1] == "docker", !out.pod_uid.empty(), out);
    if (endsWith(p, ".service") || endsWith(p, ".scope")) unit = p;
    if (endsWith(p, ".slice")) slice = p;
  }
  if (out.pod_uid.empty()) out.qos.clear();  // a QoS class is a pod's
  out.unit = std::string(!unit.empty() ? unit : slice);
  return out;
}

std::string describeWorkload(const Workload& w) {
  std::string out;
  auto add = [&out](std::string_view part) {
    if (!out.empty()) out += ", ";
    out += part;
  };
  const WorkloadIdentity& id = w.identity;
  if (!w.pod.empty() || !id.pod_uid.empty()) {
    std::string pod = w.pod.empty() ? "uid " + id.pod_uid : w.pod_namespace + "/" + w.pod;
    add("pod " + pod + (id.qos.empty() ? "" : " (" + id.qos + ")"));
  }
  if (!w.container.empty() || !id.container_id.empty()) {
    std::string what = id.runtime.empty() ? "" : id.runtime + " ";
    what += id.container_id.substr(0, 12);
    add(w.container.empty() ? "container " + what : "container " + w.container + " (" + what + ")");
  }
  if (out.empty() && !id.unit.empty()) add("unit " + id.unit);  // a container's scope says nothing more
  return out;
}

}  // namespace headroom
