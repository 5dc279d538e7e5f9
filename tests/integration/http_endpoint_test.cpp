// The agent's HTTP endpoint under abuse, and over TLS with basic auth: the real `headroom
// agent` (sensors off: none of this touches the kernel's BPF, so these run beside the other
// suites), real sockets on 127.0.0.1, a real Prometheus and curl.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "testing/integration.h"
#include "testing/pki.h"
#include "testing/raw_http.h"

using namespace std::chrono_literals;
using headroom::testing::bcrypt;
using headroom::testing::ChildProcess;
using headroom::testing::connectLoopback;
using headroom::testing::freePort;
using headroom::testing::httpGet;
using headroom::testing::metric;
using headroom::testing::rawRequest;
using headroom::testing::runCommand;
using headroom::testing::statusLine;
using headroom::testing::TempDir;
using Agent = headroom::testing::AgentProcess;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::uint64_t kMiB = 1ULL << 20;

// The agent with nothing but its HTTP endpoint of interest: no sensors, no journal.
std::vector<std::string> quietAgent(std::vector<std::string> more = {}) {
  std::vector<std::string> args = {"--interval",     "500ms", "--sensors.bpf",     "false",
                                   "--sensors.kmsg", "false", "--journal.enabled", "false"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

}  // namespace

TEST(HttpEndpoint, MalformedOversizedAndUnknownRequestsAreRefusedAndTheAgentServesOn) {
  SKIP_WITHOUT_ROOT();
  Agent agent(quietAgent({"--probe.enabled", "true"}));
  ASSERT_TRUE(agent.waitHealthy());
  int port = agent.port();
  EXPECT_EQ(statusLine(rawRequest(port, "GARBAGE\r\n\r\n")), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(statusLine(rawRequest(port, "GET /metrics HTTP/9.9\r\n\r\n")), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(statusLine(rawRequest(port, "BREW /metrics HTTP/1.1\r\nHost: x\r\n\r\n")), "HTTP/1.1 400 Bad Request");
  // What follows a malformed request line is not read as a request of its own.
  std::string two = rawRequest(port, "BREW / HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(two.find("HTTP/1.1", 1), std::string::npos) << two;
  EXPECT_EQ(statusLine(rawRequest(
                port, "PUT /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi")),
            "HTTP/1.1 405 Method Not Allowed");
  EXPECT_EQ(statusLine(rawRequest(port, "DELETE /v1/ooms HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")),
            "HTTP/1.1 405 Method Not Allowed");
  // Headers beyond 16 KiB: 431, and the connection closed.
  std::string big = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n";
  EXPECT_EQ(statusLine(rawRequest(port, big)), "HTTP/1.1 431 Request Header Fields Too Large");
  std::string many = "GET /metrics HTTP/1.1\r\n";
  for (int i = 0; i < 2000; ++i) many += fmt::format("X-{}: y\r\n", i);
  EXPECT_EQ(statusLine(rawRequest(port, many + "\r\n")), "HTTP/1.1 431 Request Header Fields Too Large");
  // A body over 64 KiB is refused when announced, before it is sent.
  auto t0 = Clock::now();
  EXPECT_EQ(statusLine(rawRequest(port, "POST /v1/probe HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n")),
            "HTTP/1.1 413 Payload Too Large");
  EXPECT_LT(Clock::now() - t0, 5s) << "the 413 came only at a deadline";
  EXPECT_EQ(statusLine(rawRequest(port, "POST /v1/probe HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n")),
            "HTTP/1.1 400 Bad Request");
  // The API's own bad parameters.
  EXPECT_EQ(httpGet(port, "/v1/ooms", {{"limit", "many"}}).status, 400);
  EXPECT_EQ(httpGet(port, "/v1/ooms", {{"limit", "-1"}}).status, 400);
  EXPECT_EQ(httpGet(port, "/nope/" + std::string(3000, 'x')).status, 404);
  EXPECT_EQ(httpGet(port, "/v1/ooms", {{"lmit", "5"}}).status, 400) << "a misspelt parameter is not ignored";
  EXPECT_EQ(httpGet(port, "/metrics").status, 200);
  EXPECT_TRUE(agent.waitMetrics([](const std::string& m) {
    return metric(m, "headroom_http_refused_total", {{"reason", "too_large"}}).value_or(0) >= 2;
  }));
  EXPECT_TRUE(agent.child().running());
}

// The probe's own refusals: parameters it does not know or cannot use (each said, none holding
// the next probe off), and a second probe while one runs.
TEST(HttpEndpoint, ProbeRequestsWithMistakesOrWhileOneRunsAreRefused) {
  SKIP_WITHOUT_ROOT();
  auto sb = headroom::testing::CgroupSandbox::create("http-probe");
  ASSERT_TRUE(sb) << sb.error().describe();
  ASSERT_TRUE(sb->setLimit(256 * kMiB));
  Agent agent(quietAgent({"--cgroup", sb->path(), "--probe.enabled", "--probe.min-interval", "1h"}));
  ASSERT_TRUE(agent.waitHealthy());
  int port = agent.port();
  auto post = [&](const std::string& path) { return headroom::testing::httpPost(port, path); };
  auto r = post("/v1/probe");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("which cgroup?"), std::string::npos) << r.body;
  r = post("/v1/probe?cgroup=" + sb->path() + "&size=lots");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("unknown parameter size"), std::string::npos) << r.body;
  r = post("/v1/probe?cgroup=/headroom-no-such-cgroup");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("not a cgroup"), std::string::npos) << r.body;
  r = post("/v1/probe?cgroup=" + sb->path() + "&chunk=lots");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("--chunk"), std::string::npos) << r.body;
  // A value is a value: one that looks like a flag is not read as one.
  r = post("/v1/probe?cgroup=" + sb->path() + "&max=--cgroup");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("--max"), std::string::npos) << r.body;

  // A probe held (its process stopped by the test), and a second request meanwhile.
  headroom::testing::HttpResponse first;
  std::thread t([&] { first = post("/v1/probe?cgroup=" + sb->path()); });
  pid_t probe = -1;
  for (auto end = Clock::now() + 30s; probe < 0 && Clock::now() < end; std::this_thread::sleep_for(20ms)) {
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      std::string name = e.path().filename();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream stat(e.path() / "stat");
      std::string line;
      std::getline(stat, line);
      auto close = line.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream rest(line.substr(close + 2));
      std::string state;
      pid_t ppid = 0;
      rest >> state >> ppid;
      if (ppid == agent.child().pid()) probe = std::stoi(name);
    }
  }
  ASSERT_GT(probe, 0) << "the probe process never appeared";
  ::kill(probe, SIGSTOP);
  auto second = post("/v1/probe?cgroup=" + sb->path());
  ::kill(probe, SIGCONT);
  t.join();
  EXPECT_EQ(second.status, 409) << second.body;
  EXPECT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(post("/v1/probe?cgroup=" + sb->path()).status, 429) << "only the probe that ran counts for min_interval";
}

TEST(HttpEndpoint, ARequestThatNeverCompletesIsClosedAtItsDeadline) {
  SKIP_WITHOUT_ROOT();
  Agent agent(quietAgent());
  ASSERT_TRUE(agent.waitHealthy());
  auto t0 = Clock::now();
  // Half a request line, then nothing: each read would be within any per-read timeout.
  std::string got = rawRequest(agent.port(), "GET /metr", 30s);
  auto took = Clock::now() - t0;
  EXPECT_EQ(got, "");
  EXPECT_GE(took, 9s) << "closed before the 10 s request deadline";
  EXPECT_LT(took, 20s) << "not closed at the 10 s request deadline";
  EXPECT_TRUE(agent.waitMetrics([](const std::string& m) {
    return metric(m, "headroom_http_refused_total", {{"reason", "timeout"}}) >= 1;
  }));
}

// 400 connections that send nothing and 400 that send a byte at a time (slowloris), reopened
// as soon as they are closed: the scrapes and health checks are answered all the same. (The
// cap on waiting connections, and the closing of the longest waiting, are the unit tests'.)
TEST(HttpEndpoint, IdleAndByteAtATimeClientsDoNotStarveTheScrapes) {
  SKIP_WITHOUT_ROOT();
  Agent agent(quietAgent());
  ASSERT_TRUE(agent.waitHealthy());
  int port = agent.port();
  constexpr int kIdle = 400, kSlow = 400;
  std::atomic<bool> stop{false};
  std::atomic<int> reopened{0};
  std::thread abuser([&] {
    std::vector<int> idle, slow;
    for (int i = 0; i < kIdle; ++i) idle.push_back(connectLoopback(port));
    for (int i = 0; i < kSlow; ++i) {
      int fd = connectLoopback(port);
      [[maybe_unused]] auto n = ::send(fd, "GET /metrics HTTP/1.1\r\n", 23, MSG_NOSIGNAL);
      slow.push_back(fd);
    }
    while (!stop) {
      for (auto* set : {&idle, &slow}) {
        for (int& fd : *set) {
          // A byte of a header that never ends; a closed connection is opened again.
          char c = 'X';
          if (fd < 0 || (set == &slow && ::send(fd, &c, 1, MSG_NOSIGNAL) != 1) ||
              (set == &idle && ::recv(fd, &c, 1, MSG_DONTWAIT) == 0)) {
            if (fd >= 0) ::close(fd);
            fd = connectLoopback(port);
            if (set == &slow && fd >= 0) [[maybe_unused]]
              auto n = ::send(fd, "GET /metrics HTTP/1.1\r\n", 23, MSG_NOSIGNAL);
            ++reopened;
          }
        }
      }
      std::this_thread::sleep_for(200ms);
    }
    for (int fd : idle) ::close(fd);
    for (int fd : slow) ::close(fd);
  });
  // Let the abusers take every thread first.
  std::this_thread::sleep_for(1s);
  std::vector<double> ms;
  int answered = 0;
  for (int i = 0; i < 30; ++i) {
    auto t0 = Clock::now();
    auto r = httpGet(port, "/metrics");
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    answered += r.status == 200 && r.body.find("headroom_build_info") != std::string::npos;
    auto h = httpGet(port, "/healthz");
    answered += h.status == 200;
  }
  std::string m = agent.metrics();
  stop = true;
  abuser.join();
  std::sort(ms.begin(), ms.end());
  std::cout << fmt::format("scrapes under {} idle + {} slow connections: p50 {:.1f} ms, max {:.1f} ms; {} reopened\n",
                           kIdle, kSlow, ms[ms.size() / 2], ms.back(), reopened.load());
  EXPECT_EQ(answered, 60) << "every /metrics and /healthz answered";
  EXPECT_GE(metric(m, "headroom_http_connections_open").value_or(0), kIdle) << "the abusers were held open";
  EXPECT_TRUE(agent.child().running());
}

TEST(HttpEndpoint, AThousandConcurrentScrapesAreAllAnswered) {
  SKIP_WITHOUT_ROOT();
  Agent agent(quietAgent());
  ASSERT_TRUE(agent.waitHealthy());
  constexpr int kClients = 1000;
  struct Client {
    int fd = -1;
    std::string sent, got;
    std::size_t off = 0;
    bool done = false;
  };
  std::vector<Client> clients(kClients);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(agent.port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (Client& c : clients) {
    c.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ASSERT_GE(c.fd, 0);
    (void)::connect(c.fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    c.sent = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  }
  auto end = Clock::now() + 120s;
  int left = kClients;
  while (left > 0 && Clock::now() < end) {
    std::vector<pollfd> fds;
    std::vector<Client*> who;
    for (Client& c : clients) {
      if (c.done) continue;
      fds.push_back({c.fd, static_cast<short>(c.off < c.sent.size() ? POLLOUT : POLLIN), 0});
      who.push_back(&c);
    }
    if (::poll(fds.data(), fds.size(), 200) <= 0) continue;
    for (std::size_t i = 0; i < fds.size(); ++i) {
      Client& c = *who[i];
      if (fds[i].revents == 0) continue;
      if (c.off < c.sent.size()) {
        auto n = ::send(c.fd, c.sent.data() + c.off, c.sent.size() - c.off, MSG_NOSIGNAL);
        if (n > 0) c.off += static_cast<std::size_t>(n);
        if (n < 0 && errno != EAGAIN) c.done = true, --left;
        continue;
      }
      char buf[65536];
      auto n = ::recv(c.fd, buf, sizeof(buf), 0);
      if (n > 0) {
        c.got.append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EAGAIN) {
        c.done = true;
        --left;
      }
    }
  }
  int ok = 0, busy = 0, other = 0;
  for (Client& c : clients) {
    ::close(c.fd);
    auto status = statusLine(c.got);
    auto body = c.got.find("\r\n\r\n");
    auto len = c.got.find("Content-Length: ");
    bool whole = body != std::string::npos && len != std::string::npos &&
                 std::stoul(c.got.substr(len + 16)) == c.got.size() - body - 4;
    if (status == "HTTP/1.1 200 OK" && whole)
      ++ok;
    else if (status.starts_with("HTTP/1.1 503"))
      ++busy;
    else
      ++other;
  }
  EXPECT_EQ(left, 0) << "clients never finished";
  EXPECT_EQ(ok, kClients) << busy << " answered 503, " << other << " answered otherwise or not at all";
  EXPECT_EQ(httpGet(agent.port(), "/healthz").status, 200);
}

// ---- TLS and basic auth ----------------------------------------------------------------------

namespace {

// Certificates as an operator makes them (testing/pki.h), in a directory of the test's own.
struct Pki : headroom::testing::Pki {
  TempDir dir;
  void make() { headroom::testing::Pki::make(dir.path.string()); }
};

// curl's status code for `url` ("000" when there was no HTTP answer), with `extra` options.
std::string curlStatus(const std::string& url, const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {"/usr/bin/curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back(url);
  return runCommand(argv).out;
}

// Waits until the agent (listening with TLS) answers /healthz 200 to curl.
bool waitHealthyOverTls(int port, const std::vector<std::string>& extra) {
  auto end = Clock::now() + 30s;
  while (Clock::now() < end) {
    if (curlStatus(fmt::format("https://127.0.0.1:{}/healthz", port), extra) == "200") return true;
    std::this_thread::sleep_for(200ms);
  }
  return false;
}

}  // namespace

TEST(HttpEndpoint, PrometheusScrapesOverTlsWithBasicAuthAndFailsWithAWrongPassword) {
  SKIP_WITHOUT_ROOT();
  if (::access("/usr/bin/prometheus", X_OK) != 0) GTEST_SKIP() << "prometheus is not installed";
  Pki pki;
  ASSERT_NO_FATAL_FAILURE(pki.make());
  std::string hash = bcrypt("s3cret scrape");
  ASSERT_FALSE(hash.empty());
  // Relative paths are the web config's own directory's.
  std::string web = pki.dir.file("web.yml", fmt::format(R"(# hand-made, in the Prometheus exporters' format
tls_server_config:
  cert_file: server.crt
  key_file: server.key
  min_version: TLS12
http_server_config:
  headers:
    Strict-Transport-Security: max-age=31536000
basic_auth_users:
  prometheus: {}
)",
                                                        hash));
  auto sb = headroom::testing::CgroupSandbox::create("http-tls");
  ASSERT_TRUE(sb) << sb.error().describe();
  ASSERT_TRUE(sb->setLimit(512 * kMiB));
  Agent agent(quietAgent({"--web.config.file", web, "--budget.cgroup", sb->path(), "--budget.margin-floor", "16MiB"}));
  ASSERT_TRUE(agent.waitLog("serving on https://127.0.0.1:"));
  std::string base = fmt::format("https://127.0.0.1:{}", agent.port());
  std::vector<std::string> ok = {"--cacert", pki.ca, "-u", "prometheus:s3cret scrape"};
  ASSERT_TRUE(waitHealthyOverTls(agent.port(), ok));
  // A launch script asks the agent for the budget over TLS with basic auth; a wrong password
  // is exit 2, not a budget computed elsewhere.
  std::string password = pki.dir.file("password", "s3cret scrape\n");
  std::vector<std::string> budget = {HEADROOM_BINARY,
                                     "budget",
                                     "--format",
                                     "json",
                                     "--agent",
                                     base,
                                     "--agent-ca",
                                     pki.ca,
                                     "--agent-user",
                                     "prometheus",
                                     "--agent-password-file"};
  auto asked = runCommand([&] {
    auto v = budget;
    v.push_back(password);
    return v;
  }());
  EXPECT_EQ(asked.exit_code, 0) << asked.err;
  auto answer = nlohmann::json::parse(asked.out, nullptr, false);
  ASSERT_TRUE(answer.is_object()) << asked.out << asked.err;
  EXPECT_EQ(answer["source"], "agent") << asked.out;
  EXPECT_EQ(answer["cgroup"], sb->path()) << asked.out;
  auto refused = runCommand([&] {
    auto v = budget;
    v.push_back(pki.dir.file("wrong", "guess\n"));
    return v;
  }());
  EXPECT_EQ(refused.exit_code, 2) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("answered 401: the user or password is wrong"), std::string::npos) << refused.err;
  EXPECT_EQ(curlStatus(base + "/metrics", {"--cacert", pki.ca}), "401");
  EXPECT_EQ(curlStatus(base + "/metrics", {"--cacert", pki.ca, "-u", "prometheus:wrong"}), "401");
  EXPECT_EQ(curlStatus(base + "/metrics", {"--cacert", pki.ca, "-u", "nobody:s3cret scrape"}), "401");
  EXPECT_EQ(curlStatus(base + "/nope", {"--cacert", pki.ca}), "401") << "no path is told without auth";
  auto headers = runCommand({"/usr/bin/curl", "-s", "-D", "-", "-o", "/dev/null", "--cacert", pki.ca, "-u",
                             "prometheus:s3cret scrape", base + "/metrics"});
  EXPECT_NE(headers.out.find("Strict-Transport-Security: max-age=31536000"), std::string::npos) << headers.out;
  // Plain HTTP on the TLS port is no answer at all.
  EXPECT_EQ(httpGet(agent.port(), "/metrics").status, 0);

  TempDir tmp;
  int prom_port = freePort();
  std::string cfg = tmp.file("prometheus.yml", fmt::format(R"(global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: headroom
    scheme: https
    tls_config:
      ca_file: {ca}
    basic_auth:
      username: prometheus
      password: s3cret scrape
    static_configs:
      - targets: ["127.0.0.1:{port}"]
  - job_name: wrong-password
    scheme: https
    tls_config:
      ca_file: {ca}
    basic_auth:
      username: prometheus
      password: guess
    static_configs:
      - targets: ["127.0.0.1:{port}"]
)",
                                                           fmt::arg("ca", pki.ca), fmt::arg("port", agent.port())));
  auto prom = ChildProcess::spawn({"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", "/usr/bin/prometheus",
                                   "--config.file=" + cfg, "--storage.tsdb.path=" + (tmp.path / "data").string(),
                                   "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)});
  ASSERT_TRUE(prom) << prom.error().describe();
  auto query = [&](const std::string& q) { return headroom::testing::promQuery(prom_port, q); };
  nlohmann::json up_ok, up_wrong, build;
  auto end = Clock::now() + 60s;
  while (Clock::now() < end) {
    up_ok = query(R"(up{job="headroom"})");
    up_wrong = query(R"(up{job="wrong-password"})");
    build = query(R"(headroom_build_info{job="headroom"})");
    if (up_ok.size() == 1 && up_wrong.size() == 1 && build.size() == 1) break;
    std::this_thread::sleep_for(500ms);
  }
  ASSERT_EQ(up_ok.size(), 1u) << "Prometheus never scraped over TLS";
  EXPECT_EQ(up_ok[0]["value"][1], "1");
  ASSERT_EQ(build.size(), 1u) << "no series came over TLS";
  ASSERT_EQ(up_wrong.size(), 1u);
  EXPECT_EQ(up_wrong[0]["value"][1], "0") << "a wrong password scraped";
  auto unauthorized = query(R"(headroom_http_refused_total{job="headroom",reason="unauthorized"})");
  ASSERT_EQ(unauthorized.size(), 1u);
  EXPECT_GE(std::stod(unauthorized[0]["value"][1].get<std::string>()), 3.0);
}

TEST(HttpEndpoint, AClientCertificateIsRequiredAndVerifiedWhenTheConfigSaysSo) {
  SKIP_WITHOUT_ROOT();
  Pki pki;
  ASSERT_NO_FATAL_FAILURE(pki.make());
  std::string web = pki.dir.file("web.yml", fmt::format(R"(# hand-made
tls_server_config:
  cert_file: {}
  key_file: {}
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: {}
  client_allowed_sans: [prometheus.example]
)",
                                                        pki.server_crt, pki.server_key, pki.client_ca));
  Agent agent(quietAgent({"--web.config.file", web}));
  ASSERT_TRUE(agent.waitLog("serving on https://127.0.0.1:"));
  std::vector<std::string> client = {"--cacert", pki.ca, "--cert", pki.client_crt, "--key", pki.client_key};
  ASSERT_TRUE(waitHealthyOverTls(agent.port(), client));
  std::string url = fmt::format("https://127.0.0.1:{}/metrics", agent.port());
  EXPECT_EQ(curlStatus(url, client), "200");
  EXPECT_EQ(curlStatus(url, {"--cacert", pki.ca}), "000") << "no client certificate";
  EXPECT_EQ(curlStatus(url, {"--cacert", pki.ca, "--cert", pki.stranger_crt, "--key", pki.stranger_key}), "000")
      << "a certificate from a CA the config does not name";
  // The agent's own clients (the CLI) are refused too, and the agent serves on.
  EXPECT_EQ(httpGet(agent.port(), "/metrics").status, 0);
  EXPECT_EQ(curlStatus(url, client), "200");
  // Counted: the missing certificate, the stranger's, and the plain request.
  double refused = 0;
  for (auto end = Clock::now() + 20s; refused < 3 && Clock::now() < end; std::this_thread::sleep_for(200ms)) {
    auto m = runCommand({"/usr/bin/curl", "-s", "--max-time", "10", "--cacert", pki.ca, "--cert", pki.client_crt,
                         "--key", pki.client_key, url});
    refused = metric(m.out, "headroom_http_refused_total", {{"reason", "tls"}}).value_or(0);
  }
  EXPECT_GE(refused, 3);
}

TEST(HttpEndpoint, BasicAuthComesAtAReloadAndANonLoopbackListenWithoutItIsWarned) {
  SKIP_WITHOUT_ROOT();
  TempDir dir;
  std::string web = dir.file("web.yml", "# hand-made: nothing yet\n");
  Agent agent(quietAgent({"--listen", "0.0.0.0:0", "--web.config.file", web}));
  EXPECT_TRUE(agent.waitLog("without TLS or basic auth"));
  ASSERT_TRUE(agent.waitHealthy());
  EXPECT_EQ(httpGet(agent.port(), "/metrics").status, 200);
  dir.file("web.yml", fmt::format("basic_auth_users:\n  ops: {}\n", bcrypt("pw")));
  agent.child().kill(SIGHUP);
  ASSERT_TRUE(agent.waitLog("config reloaded"));
  EXPECT_EQ(httpGet(agent.port(), "/metrics").status, 401);
  EXPECT_EQ(curlStatus(fmt::format("http://127.0.0.1:{}/metrics", agent.port()), {"-u", "ops:pw"}), "200");
  // A reload with a broken file keeps the auth it had.
  dir.file("web.yml", "basic_auth_users:\n  ops: plaintext-password\n");
  agent.child().kill(SIGHUP);
  EXPECT_TRUE(agent.waitLog("config reload failed"));
  EXPECT_EQ(httpGet(agent.port(), "/metrics").status, 401);
  EXPECT_EQ(curlStatus(fmt::format("http://127.0.0.1:{}/metrics", agent.port()), {"-u", "ops:pw"}), "200");
}
