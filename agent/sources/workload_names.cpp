#include "headroom/sources/workload_names.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "headroom/net/http_client.h"
#include "headroom/util/text.h"

namespace headroom {
namespace {

constexpr std::size_t kMaxEngineAnswer = 4U << 20;  // an inspect is a few kB; more is not one

std::string cut(std::string s) {
  if (s.size() > kMaxWorkloadName) s.resize(kMaxWorkloadName);
  return s;
}

// "user@1000.service" anywhere in the path: that user's uid.
std::optional<std::string> rootlessUid(std::string_view path) {
  auto at = path.find("/user@");
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = path.substr(at + 6);
  auto end = rest.find(".service");
  if (end == std::string_view::npos || end == 0) return std::nullopt;
  std::string_view uid = rest.substr(0, end);
  if (!std::all_of(uid.begin(), uid.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  return std::string(uid);
}

}  // namespace

Result<std::string> parseEngineContainerName(std::string_view body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return makeError(ErrorKind::kBadData, "not a JSON object");
  auto name = j.find("Name");
  if (name == j.end() || !name->is_string()) return makeError(ErrorKind::kBadData, "no \"Name\" string");
  std::string n = name->get<std::string>();
  if (!n.empty() && n.front() == '/') n.erase(0, 1);
  if (n.empty()) return makeError(ErrorKind::kBadData, "an empty \"Name\"");
  return cut(printableText(n));
}

Result<std::optional<std::string>> queryEngine(const std::string& socket, const std::string& id,
                                               std::chrono::milliseconds timeout) {
  HttpGetOptions get;
  get.timeout = timeout;
  get.unix_socket = socket;
  get.max_body_bytes = kMaxEngineAnswer;
  const std::string what = fmt::format("asking the container engine for {}", id.substr(0, 12));
  auto r = httpGet("http://localhost/containers/" + id + "/json", get);  // the error names the socket
  if (!r) return r.error().wrap(what);
  if (r->status == 404) return std::optional<std::string>{};
  const std::string at = fmt::format("asking the container engine at {} for {}", socket, id.substr(0, 12));
  if (r->status != 200) return ioError(fmt::format("{}: HTTP {}", at, r->status));
  auto name = parseEngineContainerName(r->body);
  if (!name) return name.error().wrap(at);
  return std::optional<std::string>(std::move(*name));
}

WorkloadResolver::WorkloadResolver(const FsRoot& fs, WorkloadLookup lookup, EngineQuery query)
    : fs_(fs), lookup_(std::move(lookup)), query_(std::move(query)) {
  initHttpClient();  // here, before the thread that asks starts
}

WorkloadResolver::~WorkloadResolver() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_.notify_all();
  if (worker_.joinable()) worker_.join();
}

Workload WorkloadResolver::resolveBy(std::string_view path, Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  Clock::time_point now = Clock::now();
  auto it = cache_.find(path);
  if (it == cache_.end()) {
    if (cache_.size() >= kMaxCached) evictOver(kMaxCached - 1);
    it = cache_.emplace(std::string(path), Entry{}).first;
    it->second.workload.identity = identifyCgroup(path);
    it->second.complete = it->second.workload.identity.container_id.empty() &&
                          it->second.workload.identity.pod_uid.empty();  // a unit, or nothing: no names to find
  }
  it->second.used = now;
  if (it->second.complete) return it->second.workload;
  Workload w = it->second.workload;
  bool complete = false;
  while (true) {
    complete = lookUpNames(w, path, now);
    if (complete || now >= deadline || !pending_.contains(w.identity.container_id)) break;
    answered_.wait_until(lock, deadline);  // an engine's answer for it may come in time
    now = Clock::now();
  }
  if (auto again = cache_.find(path); again != cache_.end()) {  // the entry may have gone while we waited
    again->second.workload = w;
    again->second.complete = complete;
  }
  return w;
}

bool WorkloadResolver::lookUpNames(Workload& w, std::string_view path, Clock::time_point now) {
  const WorkloadIdentity& id = w.identity;
  // A pod's containers (and Docker under a kubelet) are named by the node's log entries.
  if (!id.pod_uid.empty() || id.runtime == "containerd" || id.runtime == "crio" || id.runtime.empty())
    return fromKube(w, now);
  if (auto name = fromEngine(w, path, now)) {
    w.container = std::move(*name);
    return true;
  }
  return fromKube(w, now) && !w.container.empty();  // Docker containers of a kubelet
}

bool WorkloadResolver::fromKube(Workload& w, Clock::time_point now) {
  if (!lookup_.kubernetes_logs) return false;
  const WorkloadIdentity& id = w.identity;
  auto find = [&]() -> bool {
    if (!kube_) return false;
    if (!id.container_id.empty()) {
      if (auto c = kube_->by_container.find(id.container_id); c != kube_->by_container.end()) {
        w.container = cut(c->second.container);
        w.pod = cut(c->second.pod);
        w.pod_namespace = cut(c->second.pod_namespace);
        return true;
      }
    }
    if (id.container_id.empty() && !id.pod_uid.empty()) {
      if (auto p = kube_->by_pod_uid.find(id.pod_uid); p != kube_->by_pod_uid.end()) {
        w.pod = cut(p->second.pod);
        w.pod_namespace = cut(p->second.pod_namespace);
        return true;
      }
    }
    return false;
  };
  if (find()) return true;
  // A miss reads the entries again when the directory changed (a new container's entry came),
  // and every kRetryAfter in case its time did not move; the directory is looked at no more
  // than every kKubeCheck, however many cgroups miss (a pod's sandbox has no entry).
  if (now - kube_checked_at_ < kKubeCheck) return false;
  kube_checked_at_ = now;
  const std::optional<std::pair<std::int64_t, std::int64_t>> changed = containersDirTime();
  if (kube_ && changed == kube_dir_time_ && now - kube_read_at_ < kRetryAfter) return false;
  kube_read_at_ = now;
  kube_dir_time_ = changed;
  ++stats_.kube_reads;
  auto names = readKubeNames(fs_);
  if (!names) {
    ++stats_.kube_failures;
    kube_ = KubeNames{};  // none: asked again when the directory changes, or in kRetryAfter
    return false;
  }
  kube_ = std::move(*names);
  return find();
}

std::optional<std::pair<std::int64_t, std::int64_t>> WorkloadResolver::containersDirTime() const {
  auto dir = fs_.openDir("/var/log/containers");
  struct stat st {};
  if (!dir || ::fstat(dir->fd(), &st) != 0) return std::nullopt;
  return std::make_pair(static_cast<std::int64_t>(st.st_mtim.tv_sec), static_cast<std::int64_t>(st.st_mtim.tv_nsec));
}

std::vector<std::string> WorkloadResolver::socketsFor(const Workload& w, std::string_view path) const {
  std::vector<std::string> out;
  auto add = [&](const std::string& p) {
    if (!p.empty() && std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  };
  // Podman's own socket first for its containers (a rootless one's under its user's runtime
  // directory), then Docker's: Podman's Docker-compatible socket is often linked there.
  if (w.identity.runtime == "podman" && !lookup_.podman_socket.empty()) {
    if (auto uid = rootlessUid(path))
      add("/run/user/" + *uid + "/podman/podman.sock");
    else
      add(lookup_.podman_socket);
  }
  add(lookup_.docker_socket);
  return out;
}

std::optional<std::string> WorkloadResolver::fromEngine(const Workload& w, std::string_view path,
                                                        Clock::time_point now) {
  const std::string& cid = w.identity.container_id;
  if (auto known = engine_names_.find(cid); known != engine_names_.end()) return known->second;
  if (pending_.contains(cid)) return std::nullopt;
  if (auto miss = engine_missed_.find(cid); miss != engine_missed_.end()) {
    if (now < miss->second) return std::nullopt;  // asked not long ago: no engine knew it
    engine_missed_.erase(miss);
  }
  std::vector<std::string> sockets = socketsFor(w, path);
  if (sockets.empty()) return std::nullopt;
  if (queue_.size() >= kMaxQueued) {
    ++stats_.engine_dropped;  // more new containers at once than the engines can be asked about
    return std::nullopt;
  }
  pending_.insert(cid);
  queue_.push_back(Question{cid, std::move(sockets)});
  if (!worker_.joinable()) worker_ = std::thread([this] { askEngines(); });
  work_.notify_one();
  return std::nullopt;
}

// The engines are asked here, on a thread of the resolver's own, never on a caller's: an engine
// that is slow or stuck costs its timeout to this thread alone.
void WorkloadResolver::askEngines() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    Question q = std::move(queue_.front());
    queue_.pop_front();
    std::optional<std::string> name;
    for (const std::string& socket : q.sockets) {
      if (auto down = engine_down_.find(socket); down != engine_down_.end()) {
        if (Clock::now() < down->second) continue;
        engine_down_.erase(down);
      }
      const std::string at = fs_.isLive() ? socket : fs_.root() + socket;
      ++stats_.engine_queries;
      lock.unlock();
      auto answer = query_(at, q.id, lookup_.engine_timeout);
      lock.lock();
      if (stopping_) return;
      if (!answer) {
        ++stats_.engine_failures;
        engine_down_[socket] = Clock::now() + kRetryAfter;  // one bounded try per socket and period
        continue;
      }
      if (*answer) {
        name = std::move(*answer);
        break;
      }
    }
    if (name) {
      engine_names_[q.id] = std::move(*name);
    } else {
      engine_missed_[q.id] = Clock::now() + kRetryAfter;
    }
    pending_.erase(q.id);
    answered_.notify_all();
  }
}

void WorkloadResolver::name(RawSample& raw) {
  for (const CgroupMemory& cg : raw.cgroups) raw.workloads.insert_or_assign(cg.path, resolve(cg.path));
}

bool WorkloadResolver::idle(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  return answered_.wait_for(lock, wait, [this] { return pending_.empty(); });
}

void WorkloadResolver::evictOver(std::size_t cap) {
  while (cache_.size() > cap) {
    auto oldest = std::min_element(cache_.begin(), cache_.end(),
                                   [](const auto& a, const auto& b) { return a.second.used < b.second.used; });
    cache_.erase(oldest);
  }
}

void WorkloadResolver::forgetIdle(std::chrono::seconds idle) {
  const Clock::time_point now = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  if (now - swept_at_ < std::chrono::minutes(1)) return;  // called at every sample: the work once a minute
  swept_at_ = now;
  std::erase_if(cache_, [&](const auto& kv) { return now - kv.second.used > idle; });
  std::set<std::string_view> ids;
  for (const auto& [path, e] : cache_) ids.insert(e.workload.identity.container_id);
  std::erase_if(engine_names_, [&](const auto& kv) { return !ids.contains(kv.first); });
  std::erase_if(engine_missed_, [&](const auto& kv) { return now >= kv.second; });
}

WorkloadLookupStats WorkloadResolver::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  WorkloadLookupStats s = stats_;
  s.cached = cache_.size();
  return s;
}

}  // namespace headroom
