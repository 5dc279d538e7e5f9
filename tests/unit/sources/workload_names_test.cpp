// Workload names: the engines' inspect answers (hand-made in the shapes Docker's Engine API and
// Podman's compatible and libpod APIs give, trimmed to what matters and named so), the client
// over a real unix socket served by the test, and the resolver's cache, retries and choice of
// source, on hand-made cgroup paths and /var/log/containers entries.
#include "headroom/sources/workload_names.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "testing/fixture_tree.h"

namespace headroom {
namespace {

constexpr const char* kId = "4f7d1c2b9a8e6d5c3b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c";
constexpr const char* kUid = "0c1f6c1e-5b7d-4c1a-9f2e-6a8b8d3c4e21";

// Docker's `GET /containers/<id>/json`, hand-made and trimmed (Podman's compatible API answers
// the same shape).
const std::string kDockerInspect =
    std::string(R"({"Id":")") + kId +
    R"(","Created":"2026-12-05T01:02:03.456Z","Path":"/bin/sh","State":{"Status":"running","OOMKilled":false,"Pid":4242},"Name":"/prover-web","HostConfig":{"Memory":67108864},"Config":{"Labels":{}}})";

TEST(EngineAnswer, TheNameLosesItsSlash) {
  auto n = parseEngineContainerName(kDockerInspect);
  ASSERT_TRUE(n) << n.error().describe();
  EXPECT_EQ(*n, "prover-web");
  // Podman's libpod API names it without the slash.
  auto p = parseEngineContainerName(R"({"Id":"x","Name":"hog","State":{}})");
  ASSERT_TRUE(p);
  EXPECT_EQ(*p, "hog");
}

TEST(EngineAnswer, AnythingElseIsAnErrorAndALongNameIsCut) {
  for (const char* bad : {"", "[]", "{", R"({"Name":7})", R"({"Name":"/"})", R"({"message":"No such container"})"})
    EXPECT_FALSE(parseEngineContainerName(bad)) << bad;
  auto n = parseEngineContainerName(R"({"Name":"/)" + std::string(1000, 'x') + R"("})");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->size(), kMaxWorkloadName);
}

// A unix-socket HTTP server on a thread: answers each connection with `response` (after reading
// the request's head), or holds it unanswered while `stall`.
class SocketServer {
 public:
  SocketServer(std::string path, std::string response, bool stall = false)
      : path_(std::move(path)), response_(std::move(response)), stall_(stall) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    path_.copy(a.sun_path, sizeof(a.sun_path) - 1);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << path_;
    EXPECT_EQ(::listen(fd_, 8), 0);
    thread_ = std::thread([this] { serve(); });
  }
  ~SocketServer() {
    done_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  int requests() const { return requests_; }
  std::string lastRequest() const { return last_; }

 private:
  void serve() {
    while (!done_) {
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      std::string req;
      char buf[4096];
      while (req.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = ::read(c, buf, sizeof(buf));
        if (n <= 0) break;
        req.append(buf, static_cast<std::size_t>(n));
      }
      last_ = req;
      ++requests_;
      if (stall_) {
        while (!done_) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      } else {
        (void)::write(c, response_.data(), response_.size());
      }
      ::close(c);
    }
  }
  std::string path_, response_;
  bool stall_;
  int fd_ = -1;
  std::atomic<bool> done_{false};
  std::atomic<int> requests_{0};
  std::string last_;
  std::thread thread_;
};

std::string httpResponse(int status, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) + (status == 200 ? " OK" : " Not Found") +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

TEST(EngineQuery, AsksTheSocketForTheContainer) {
  testing::FixtureTree dir;
  SocketServer server(dir.root() + "/docker.sock", httpResponse(200, kDockerInspect));
  auto r = queryEngine(dir.root() + "/docker.sock", kId, std::chrono::milliseconds(2000));
  ASSERT_TRUE(r) << r.error().describe();
  ASSERT_TRUE(*r);
  EXPECT_EQ(**r, "prover-web");
  EXPECT_NE(server.lastRequest().find(std::string("GET /containers/") + kId + "/json HTTP/1.1"), std::string::npos)
      << server.lastRequest();
}

TEST(EngineQuery, NotFoundIsNoNameAndTheRestAreErrors) {
  testing::FixtureTree dir;
  {
    SocketServer server(dir.root() + "/a.sock", httpResponse(404, R"({"message":"No such container: x"})"));
    auto r = queryEngine(dir.root() + "/a.sock", kId, std::chrono::milliseconds(2000));
    ASSERT_TRUE(r) << r.error().describe();
    EXPECT_FALSE(*r);
  }
  auto none = queryEngine(dir.root() + "/missing.sock", kId, std::chrono::milliseconds(2000));
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().describe().find("missing.sock"), std::string::npos) << none.error().describe();
  {
    SocketServer server(dir.root() + "/b.sock", httpResponse(200, "<html>not an engine</html>"));
    EXPECT_FALSE(queryEngine(dir.root() + "/b.sock", kId, std::chrono::milliseconds(2000)));
  }
  {
    SocketServer server(dir.root() + "/c.sock", "", /*stall=*/true);
    auto t0 = std::chrono::steady_clock::now();
    auto slow = queryEngine(dir.root() + "/c.sock", kId, std::chrono::milliseconds(200));
    auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_FALSE(slow);
    EXPECT_LT(took, std::chrono::seconds(5)) << "bounded by the timeout";
  }
}

// An engine the test answers for (on the resolver's thread): the sockets asked, in order.
struct FakeEngines {
  std::mutex mu;
  std::vector<std::string> asked_;
  std::map<std::string, std::optional<std::string>> answers;  // by socket; any other refuses
  std::chrono::milliseconds delay{0};                         // before each answer
  std::vector<std::string> asked() {
    std::lock_guard<std::mutex> lock(mu);
    return asked_;
  }
  EngineQuery query() {
    return [this](const std::string& socket, const std::string&,
                  std::chrono::milliseconds) -> Result<std::optional<std::string>> {
      std::this_thread::sleep_for(delay);
      std::lock_guard<std::mutex> lock(mu);
      asked_.push_back(socket);
      auto it = answers.find(socket);
      if (it == answers.end()) return makeError(ErrorKind::kIo, "refused");
      return it->second;
    };
  }
};

TEST(WorkloadResolver, AUnitNeedsNoLookup) {
  testing::FixtureTree t;
  FakeEngines engines;
  const FsRoot fs_r = t.fs();
  WorkloadResolver r(fs_r, WorkloadLookup{}, engines.query());
  Workload w = r.resolve("/system.slice/curio.service");
  EXPECT_EQ(w.identity.unit, "curio.service");
  EXPECT_TRUE(engines.asked().empty());
}

TEST(WorkloadResolver, APodmanContainerIsAskedOfPodmanOnceAndCached) {
  testing::FixtureTree t;
  FakeEngines engines;
  engines.answers[t.root() + "/run/podman/podman.sock"] = "hog";
  const FsRoot fs_r = t.fs();
  WorkloadResolver r(fs_r, WorkloadLookup{}, engines.query());
  const std::string path = std::string("/machine.slice/libpod-") + kId + ".scope/container";
  Workload first = r.resolve(path);
  EXPECT_EQ(first.identity.runtime, "podman") << "the identity at once, the name when the engine answered";
  ASSERT_TRUE(r.idle(std::chrono::seconds(10)));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(r.resolve(path).container, "hog");
  EXPECT_EQ(engines.asked(), (std::vector<std::string>{t.root() + "/run/podman/podman.sock"}))
      << "asked once, under the root";
  // Its scope (the OOM domain of a v2 Podman container) is the same container: no new question.
  EXPECT_EQ(r.resolve(std::string("/machine.slice/libpod-") + kId + ".scope").container, "hog");
  EXPECT_EQ(engines.asked().size(), 1u);
}

TEST(WorkloadResolver, ARootlessContainerIsAskedOfItsUsersSocketThenDockers) {
  testing::FixtureTree t;
  FakeEngines engines;
  const FsRoot fs_r = t.fs();
  WorkloadResolver r(fs_r, WorkloadLookup{}, engines.query());
  const std::string path =
      std::string("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-") + kId + ".scope";
  EXPECT_EQ(r.resolve(path).identity.runtime, "podman");
  ASSERT_TRUE(r.idle(std::chrono::seconds(10)));
  EXPECT_EQ(r.resolve(path).container, "") << "no engine knew it";
  EXPECT_EQ(engines.asked(),
            (std::vector<std::string>{t.root() + "/run/user/1000/podman/podman.sock", t.root() + "/run/docker.sock"}));
}

TEST(WorkloadResolver, AnEngineThatFailedIsNotAskedAgainAtOnce) {
  testing::FixtureTree t;
  FakeEngines engines;  // every socket refuses
  const FsRoot fs_r = t.fs();
  WorkloadResolver r(fs_r, WorkloadLookup{}, engines.query());
  const std::string other = std::string(63, 'a') + "b";
  r.resolve(std::string("/system.slice/docker-") + kId + ".scope");
  ASSERT_TRUE(r.idle(std::chrono::seconds(10)));
  r.resolve(std::string("/system.slice/docker-") + kId + ".scope");  // a miss: not asked again yet
  r.resolve("/system.slice/docker-" + other + ".scope");             // another: the socket is down
  ASSERT_TRUE(r.idle(std::chrono::seconds(10)));
  EXPECT_EQ(engines.asked(), (std::vector<std::string>{t.root() + "/run/docker.sock"}));
  EXPECT_EQ(r.stats().engine_failures, 1u);
}

TEST(WorkloadResolver, ACallerNeverWaitsForASlowEngineUnlessItAsks) {
  testing::FixtureTree t;
  FakeEngines engines;
  engines.delay = std::chrono::milliseconds(300);
  engines.answers[t.root() + "/run/docker.sock"] = "slow-one";
  const FsRoot fs = t.fs();
  WorkloadResolver r(fs, WorkloadLookup{}, engines.query());
  const std::string path = std::string("/system.slice/docker-") + kId + ".scope";
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(r.resolve(path).container, "") << "a sample does not wait";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(250));
  // An OOM kill's record waits for the answer being asked.
  EXPECT_EQ(r.resolve(path, std::chrono::seconds(10)).container, "slow-one");
  EXPECT_EQ(engines.asked().size(), 1u);
}

TEST(WorkloadResolver, AWaitThatRunsOutAnswersWithoutTheNameAndTheEndWaitsForOneQuestionAtMost) {
  testing::FixtureTree t;
  FakeEngines engines;
  engines.delay = std::chrono::milliseconds(1500);
  engines.answers[t.root() + "/run/docker.sock"] = "late";
  const FsRoot fs = t.fs();
  auto r = std::make_unique<WorkloadResolver>(fs, WorkloadLookup{}, engines.query());
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(r->resolve(std::string("/docker/") + kId, std::chrono::milliseconds(200)).container, "");
  auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(waited, std::chrono::milliseconds(190));
  EXPECT_LT(waited, std::chrono::milliseconds(1400)) << "not the engine's whole answer";
  t0 = std::chrono::steady_clock::now();
  r.reset();  // while the question is being asked
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << "one question's time at most";
}

TEST(WorkloadResolver, ADockerContainerWithNoSocketConfiguredIsNotAsked) {
  testing::FixtureTree t;
  FakeEngines engines;
  WorkloadLookup lookup;
  lookup.docker_socket = "";
  const FsRoot fs_r = t.fs();
  WorkloadResolver r(fs_r, lookup, engines.query());
  Workload w = r.resolve(std::string("/docker/") + kId);
  EXPECT_EQ(w.identity.runtime, "docker");
  EXPECT_EQ(w.identity.container_id, kId);
  EXPECT_TRUE(engines.asked().empty());
}

TEST(WorkloadResolver, KubernetesNamesComeFromTheNodesLogEntriesUnderBothDrivers) {
  testing::FixtureTree t;
  const std::string uid = kUid;
  t.write("/var/log/pods/proving_cuzk-prover-0_" + uid + "/cuzk/0.log", "");
  FakeEngines engines;
  const FsRoot fs_r = t.fs();
  WorkloadResolver r(fs_r, WorkloadLookup{}, engines.query());
  // systemd driver, containerd: the container's entry is not there yet (a miss, cached) ...
  const std::string systemd = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" +
                              std::string("0c1f6c1e_5b7d_4c1a_9f2e_6a8b8d3c4e21") + ".slice/cri-containerd-" + kId +
                              ".scope";
  EXPECT_EQ(r.resolve(systemd).pod, "");
  t.symlink("/var/log/pods/proving_cuzk-prover-0_" + uid + "/cuzk/0.log",
            std::string("/var/log/containers/cuzk-prover-0_proving_cuzk-") + kId + ".log");
  // ... and is found once it is (the directory changed; looked at every kKubeCheck at most).
  const std::string cgroupfs = std::string("/kubepods/burstable/pod") + kUid + "/" + kId;
  Workload w;
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       w.pod.empty() && std::chrono::steady_clock::now() < until;
       std::this_thread::sleep_for(std::chrono::milliseconds(20)))
    w = r.resolve(cgroupfs);
  EXPECT_EQ(r.resolve(systemd).pod, "cuzk-prover-0") << "the same container under the other driver's path";
  EXPECT_EQ(w.container, "cuzk");
  EXPECT_EQ(w.pod, "cuzk-prover-0");
  EXPECT_EQ(w.pod_namespace, "proving");
  EXPECT_EQ(w.identity.qos, "burstable");
  // The pod's own cgroup (cgroupfs: its UID only) is named by the entry's link target.
  Workload pod = r.resolve(std::string("/kubepods/burstable/pod") + kUid);
  EXPECT_EQ(pod.pod, "cuzk-prover-0");
  EXPECT_EQ(pod.pod_namespace, "proving");
  EXPECT_EQ(pod.container, "");
  EXPECT_TRUE(engines.asked().empty()) << "a kubelet's containers are not asked of an engine";

  WorkloadLookup off;
  off.kubernetes_logs = false;
  const FsRoot fs_quiet = t.fs();
  WorkloadResolver quiet(fs_quiet, off, engines.query());
  EXPECT_EQ(quiet.resolve(cgroupfs).pod, "");
}

}  // namespace
}  // namespace headroom
