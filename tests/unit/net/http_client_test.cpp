// The HTTP client against real servers on loopback: headroom's own HttpServer (plain, with basic
// auth, and with TLS that asks for a client certificate, from certificates the openssl command
// makes), and raw servers that answer too much or a byte at a time. (Over a unix socket:
// sources/workload_names_test.cpp, the container engines' client.)
#include "headroom/net/http_client.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>

#include "headroom/net/http_server.h"
#include "testing/fixture_tree.h"
#include "testing/pki.h"
#include "testing/raw_http.h"

namespace headroom {
namespace {

using namespace std::chrono_literals;
using testing::RawServer;

std::unique_ptr<HttpServer> serve(const std::optional<WebConfig>& web = std::nullopt) {
  std::map<std::string, HttpHandler> routes;
  routes["/v1/budget"] = [](const HttpQuery& q) {
    return HttpResponse{200, "application/json", fmt::format(R"({{"asked":"{}"}})", q.count("x") ? q.at("x") : "")};
  };
  routes["/big"] = [](const HttpQuery&) { return HttpResponse{200, "text/plain", std::string(64 * 1024, 'x')}; };
  auto s = HttpServer::start(ListenAddress{"127.0.0.1", 0}, routes, {}, web);
  EXPECT_TRUE(s) << s.error().describe();
  return s ? std::move(*s) : nullptr;
}

std::string base(const HttpServer& s, const char* scheme = "http") {
  return fmt::format("{}://127.0.0.1:{}", scheme, s.port());
}

TEST(HttpClient, AnyStatusIsAnAnswerWithItsTypeAndBody) {
  auto server = serve();
  ASSERT_TRUE(server);
  auto r = httpGet(base(*server) + "/v1/budget?x=1", 5s);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->content_type, "application/json");
  EXPECT_EQ(r->body, R"({"asked":"1"})");
  auto missing = httpGet(base(*server) + "/nope", 5s);
  ASSERT_TRUE(missing) << missing.error().describe();
  EXPECT_EQ(missing->status, 404);
  auto root = httpGet(base(*server), 5s);  // no path: "/"
  ASSERT_TRUE(root) << root.error().describe();
  EXPECT_EQ(root->status, 404);
}

TEST(HttpClient, AUrlThatIsNotOneIsBadInputAndNoAnswerIsIo) {
  for (const char* bad : {"127.0.0.1:9464/v1/budget", "ftp://127.0.0.1/x", "http://", "http:///v1/budget",
                          "http://127.0.0.1:99999999/"}) {
    auto r = httpGet(bad, 1s);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().kind, ErrorKind::kBadInput) << r.error().describe();
    EXPECT_NE(r.error().describe().find(bad), std::string::npos) << r.error().describe();
  }
  int port = 0;
  {
    RawServer gone([](int, const RawServer&) {});
    port = gone.port();
  }
  const std::string url = fmt::format("http://127.0.0.1:{}/v1/budget", port);  // nobody listens now
  auto refused = httpGet(url, 2s);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().kind, ErrorKind::kIo) << refused.error().describe();
  EXPECT_EQ(refused.error().describe().rfind("GET " + url + ": ", 0), 0u) << refused.error().describe();
}

TEST(HttpClient, ABodyOverTheCapIsRefusedAnnouncedOrNot) {
  auto server = serve();
  ASSERT_TRUE(server);
  HttpGetOptions small;
  small.timeout = 5s;
  small.max_body_bytes = 1024;
  auto announced = httpGet(base(*server) + "/big", small);
  ASSERT_FALSE(announced);
  EXPECT_EQ(announced.error().kind, ErrorKind::kBadData);
  EXPECT_NE(announced.error().describe().find("larger than"), std::string::npos) << announced.error().describe();
  // Without a length: a body that never ends is cut at the cap, not read to the end.
  RawServer endless([](int fd, const RawServer& s) {
    const std::string head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n";
    (void)::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
    const std::string chunk(4096, 'y');
    while (!s.stopping() && ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL) > 0) {
    }
  });
  auto t0 = std::chrono::steady_clock::now();
  auto streamed = httpGet(endless.url("/metrics"), small);
  ASSERT_FALSE(streamed);
  EXPECT_EQ(streamed.error().kind, ErrorKind::kBadData) << streamed.error().describe();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  small.max_body_bytes = 64 * 1024;
  auto fits = httpGet(base(*server) + "/big", small);
  ASSERT_TRUE(fits) << fits.error().describe();
  EXPECT_EQ(fits->body.size(), 64u * 1024);
}

// The timeout is the whole exchange's: an endpoint that drips its answer, each byte well within
// it, ends at it all the same.
TEST(HttpClient, TheTimeoutBoundsAWholeAnswerThatDrips) {
  RawServer drip([](int fd, const RawServer& s) {
    const std::string answer = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n123";
    for (char c : std::string(answer + std::string(1000, ' '))) {
      if (s.stopping() || ::send(fd, &c, 1, MSG_NOSIGNAL) != 1) return;
      std::this_thread::sleep_for(50ms);
    }
  });
  auto t0 = std::chrono::steady_clock::now();
  auto r = httpGet(drip.url("/used"), 300ms);
  auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::kIo) << r.error().describe();
  EXPECT_NE(r.error().describe().find("no answer for 300 ms"), std::string::npos) << r.error().describe();
  EXPECT_LT(took, 2s) << "bounded by the timeout, not by the answer";
}

TEST(HttpClient, BasicAuthIsSentWhenAUserIsGiven) {
  WebConfig web;
  web.path = "/etc/headroom/web.yml";
  web.basic_auth_users["prometheus"] = testing::bcrypt("s3cret scrape", 4);
  ASSERT_FALSE(web.basic_auth_users["prometheus"].empty());
  auto server = serve(web);
  ASSERT_TRUE(server);
  const std::string url = base(*server) + "/v1/budget";
  auto none = httpGet(url, 5s);
  ASSERT_TRUE(none) << none.error().describe();
  EXPECT_EQ(none->status, 401);
  auto wrong = httpGet(url, 5s, HttpClientAuth{"", "", "", "prometheus", "guess"});
  ASSERT_TRUE(wrong) << wrong.error().describe();
  EXPECT_EQ(wrong->status, 401);
  auto right = httpGet(url, 5s, HttpClientAuth{"", "", "", "prometheus", "s3cret scrape"});
  ASSERT_TRUE(right) << right.error().describe();
  EXPECT_EQ(right->status, 200);
}

TEST(HttpClient, TlsIsVerifiedAgainstTheCaAndAClientCertificateIsShown) {
  testing::FixtureTree dir;
  testing::Pki pki;
  ASSERT_NO_FATAL_FAILURE(pki.make(dir.root()));
  WebConfig web;
  web.path = dir.root() + "/web.yml";
  web.tls = WebTlsConfig{};
  web.tls->cert_file = pki.server_crt;
  web.tls->key_file = pki.server_key;
  web.tls->client_auth = ClientAuth::kRequireAndVerify;
  web.tls->client_ca_file = pki.client_ca;
  auto server = serve(web);
  ASSERT_TRUE(server);
  const std::string url = base(*server, "https") + "/v1/budget";
  auto ok = httpGet(url, 5s, HttpClientAuth{pki.ca, pki.client_crt, pki.client_key, "", ""});
  ASSERT_TRUE(ok) << ok.error().describe();
  EXPECT_EQ(ok->status, 200);
  // No client certificate, a stranger's, or a server the CA did not sign: no answer.
  auto bare = httpGet(url, 5s, HttpClientAuth{pki.ca, "", "", "", ""});
  ASSERT_FALSE(bare);
  EXPECT_EQ(bare.error().kind, ErrorKind::kIo) << bare.error().describe();
  EXPECT_FALSE(httpGet(url, 5s, HttpClientAuth{pki.ca, pki.stranger_crt, pki.stranger_key, "", ""}));
  auto unverified = httpGet(url, 5s, HttpClientAuth{pki.client_ca, pki.client_crt, pki.client_key, "", ""});
  ASSERT_FALSE(unverified);
  EXPECT_EQ(unverified.error().kind, ErrorKind::kIo) << unverified.error().describe();
  // A CA file that is not there is the caller's to fix.
  auto no_ca = httpGet(url, 5s, HttpClientAuth{dir.root() + "/missing.crt", pki.client_crt, pki.client_key, "", ""});
  ASSERT_FALSE(no_ca);
  EXPECT_EQ(no_ca.error().kind, ErrorKind::kBadInput) << no_ca.error().describe();
}

}  // namespace
}  // namespace headroom
