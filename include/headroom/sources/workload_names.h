// The names of a cgroup's workload: the container's name from its engine (Docker's Engine API
// on its unix socket, or Podman's compatible one: GET /containers/<id>/json), the pod's name,
// namespace and container from the node's /var/log/containers entries (kube_names.h). Each
// answer is cached; a miss asks again, at most so often; every lookup is optional: an engine
// that is not there, slow or refusing costs one bounded try, off the caller's thread, and leaves
// the name empty.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "headroom/sources/collector.h"
#include "headroom/sources/fs_root.h"
#include "headroom/sources/kube_names.h"
#include "headroom/sources/workload.h"
#include "headroom/util/result.h"

namespace headroom {

// [workloads] in the agent's configuration.
struct WorkloadLookup {
  // Docker's API socket (host path); "": never asked. Podman's Docker-compatible socket may be
  // named here too (the podman-docker package links it there).
  std::string docker_socket = "/run/docker.sock";
  // Podman's rootful API socket; a rootless container (under user@<uid>.service) is asked at
  // /run/user/<uid>/podman/podman.sock. "": Podman is never asked.
  std::string podman_socket = "/run/podman/podman.sock";
  bool kubernetes_logs = true;  // read /var/log/containers for pod, namespace and container names
  std::chrono::milliseconds engine_timeout{2000};
  bool operator==(const WorkloadLookup&) const = default;
};

// A container's name from an engine's inspect answer (Docker's `GET /containers/<id>/json`,
// Podman's compatible one and its own libpod answer): "Name", its leading '/' dropped.
Result<std::string> parseEngineContainerName(std::string_view body);

// Asks the engine at unix socket `socket` for container `id`: its name; nullopt when the engine
// says it has no such container (404); an error when it cannot be asked (no socket, refused,
// slow past `timeout`, an answer that is not an inspect).
using EngineQuery = std::function<Result<std::optional<std::string>>(const std::string& socket, const std::string& id,
                                                                     std::chrono::milliseconds timeout)>;
Result<std::optional<std::string>> queryEngine(const std::string& socket, const std::string& id,
                                               std::chrono::milliseconds timeout);

struct WorkloadLookupStats {
  std::uint64_t engine_queries = 0;   // containers asked of an engine
  std::uint64_t engine_failures = 0;  // of them, the engine could not be asked
  std::uint64_t engine_dropped = 0;   // questions not asked: more new containers at once than kMaxQueued
  std::uint64_t kube_reads = 0;       // /var/log/containers read
  std::uint64_t kube_failures = 0;
  std::size_t cached = 0;  // cgroups whose workload is cached now
};

// Engines are asked on a thread of the resolver's own (started at the first question), so that
// no caller ever waits for one unless it asks to: a cgroup whose container is not named yet is
// answered at once without the name, which the next call has once the engine answered.
class WorkloadResolver {
 public:
  using Clock = std::chrono::steady_clock;
  // Sockets and directories are read under `fs` (the host's / in a container), which must
  // outlive the resolver.
  WorkloadResolver(const FsRoot& fs, WorkloadLookup lookup, EngineQuery query = queryEngine);
  ~WorkloadResolver();
  WorkloadResolver(const WorkloadResolver&) = delete;
  WorkloadResolver& operator=(const WorkloadResolver&) = delete;

  // The workload of the cgroup at `path` (inside the hierarchy). Safe from any thread. `wait`:
  // how long to wait for an engine's answer about its container when one is being asked (an OOM
  // kill's record, of a container the agent may not have seen before; 0 for a sample).
  Workload resolve(std::string_view path, std::chrono::milliseconds wait = std::chrono::milliseconds(0)) {
    return resolveBy(path, Clock::now() + wait);
  }
  // The same, waiting until `deadline` at the latest: one deadline for several cgroups.
  Workload resolveBy(std::string_view path, Clock::time_point deadline);
  // The workload of each watched cgroup of a sample, into raw.workloads (never waits): the names
  // reach the model with the sample.
  void name(RawSample& raw);
  // Waits until no engine is being asked (at most `wait`): true when none is. For a one-shot
  // reader (`headroom snapshot`): resolve every cgroup, wait, resolve again.
  bool idle(std::chrono::milliseconds wait);
  // Forgets cgroups not resolved for `idle` (their names stay through a kill's record: a
  // container removed at its OOM kill is still named by what was learnt while it ran). Cheap to
  // call at every sample: it looks once a minute.
  void forgetIdle(std::chrono::seconds idle = std::chrono::minutes(10));

  WorkloadLookupStats stats() const;
  const WorkloadLookup& lookup() const { return lookup_; }

  // How long a container no engine knew, and an engine that failed, wait before they are asked
  // again; how often /var/log/containers is looked at on a miss; the bounds.
  static constexpr std::chrono::seconds kRetryAfter{30};
  static constexpr std::chrono::milliseconds kKubeCheck{250};
  static constexpr std::size_t kMaxCached = 8192;
  static constexpr std::size_t kMaxQueued = 256;

 private:
  struct Entry {
    Workload workload;
    bool complete = false;  // every name its identity can have was found
    Clock::time_point used;
  };
  struct Question {
    std::string id;                    // the container's
    std::vector<std::string> sockets;  // in the order to ask them
  };
  bool lookUpNames(Workload& w, std::string_view path, Clock::time_point now);
  bool fromKube(Workload& w, Clock::time_point now);
  std::optional<std::string> fromEngine(const Workload& w, std::string_view path, Clock::time_point now);
  std::vector<std::string> socketsFor(const Workload& w, std::string_view path) const;
  std::optional<std::pair<std::int64_t, std::int64_t>> containersDirTime() const;
  void askEngines();  // the worker thread
  void evictOver(std::size_t cap);

  const FsRoot& fs_;
  WorkloadLookup lookup_;
  EngineQuery query_;
  mutable std::mutex mu_;
  std::condition_variable work_;                                         // a question came, or stopping
  std::condition_variable answered_;                                     // an engine answered (or could not)
  std::map<std::string, Entry, std::less<>> cache_;                      // by cgroup path
  std::map<std::string, std::string, std::less<>> engine_names_;         // container id -> name
  std::map<std::string, Clock::time_point, std::less<>> engine_missed_;  // no engine knew it: ask again after
  std::map<std::string, Clock::time_point, std::less<>> engine_down_;    // socket -> ask again after
  std::set<std::string, std::less<>> pending_;                           // container ids being asked about
  std::deque<Question> queue_;
  bool stopping_ = false;
  std::optional<KubeNames> kube_;
  Clock::time_point kube_read_at_{}, kube_checked_at_{};
  std::optional<std::pair<std::int64_t, std::int64_t>> kube_dir_time_;  // /var/log/containers' mtime when read
  Clock::time_point swept_at_{};
  WorkloadLookupStats stats_;
  std::thread worker_;  // last: it stops before the rest goes
};

}  // namespace headroom
