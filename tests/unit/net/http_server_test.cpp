// The HTTP server's limits, in process with small values: the longest-waiting connection closed
// for a newcomer, 503 when too many whole requests wait, a request closed at its deadline, the
// header and body caps. (The real agent under the default limits: integration/http_endpoint_test.)
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "headroom/net/http_server.h"
#include "testing/eventually.h"
#include "testing/raw_http.h"

namespace headroom {
namespace {

using namespace std::chrono_literals;
using testing::connectLoopback;
using testing::eventually;
using testing::rawRequest;
using testing::statusLine;

constexpr const char* kGet = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

std::unique_ptr<HttpServer> serve(HttpLimits limits, std::chrono::milliseconds handler_time = 0ms) {
  std::map<std::string, HttpHandler> routes;
  routes["/metrics"] = [handler_time](const HttpQuery&) {
    std::this_thread::sleep_for(handler_time);
    return HttpResponse{200, "text/plain", "up 1\n"};
  };
  auto s = HttpServer::start(ListenAddress{"127.0.0.1", 0}, routes, {}, std::nullopt, limits);
  EXPECT_TRUE(s) << s.error().describe();
  return s ? std::move(*s) : nullptr;
}

TEST(HttpServerLimits, TheLongestWaitingConnectionIsClosedForANewcomer) {
  HttpLimits limits;
  limits.max_connections = 8;
  auto server = serve(limits);
  ASSERT_TRUE(server);
  std::vector<int> idle;
  for (int i = 0; i < 8; ++i) idle.push_back(connectLoopback(server->port()));
  ASSERT_TRUE(eventually([&] { return server->stats().open == 8; }));
  // A ninth: the first (the longest waiting) goes, and the scrape is answered.
  EXPECT_EQ(statusLine(rawRequest(server->port(), kGet)), "HTTP/1.1 200 OK");
  char c = 0;
  EXPECT_TRUE(eventually([&] { return ::recv(idle[0], &c, 1, MSG_DONTWAIT) == 0; })) << "the oldest was closed";
  EXPECT_EQ(::recv(idle[7], &c, 1, MSG_DONTWAIT), -1) << "the newest was not";
  EXPECT_GE(server->stats().evicted, 1u);
  // Twenty more idle ones: never more than eight wait, and scrapes still come through.
  for (int i = 0; i < 20; ++i) idle.push_back(connectLoopback(server->port()));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(statusLine(rawRequest(server->port(), kGet)), "HTTP/1.1 200 OK");
  EXPECT_TRUE(eventually([&] { return server->stats().open <= 8; }));
  EXPECT_GE(server->stats().evicted, 20u);
  for (int fd : idle) ::close(fd);
}

TEST(HttpServerLimits, TooManyWholeRequestsWaitingAre503AtOnce) {
  HttpLimits limits;
  limits.workers = 1;
  limits.max_pending = 2;
  auto server = serve(limits, 300ms);
  ASSERT_TRUE(server);
  std::vector<std::string> answers(8);
  std::vector<std::thread> clients;
  for (auto& a : answers) clients.emplace_back([&] { a = statusLine(rawRequest(server->port(), kGet, 10s)); });
  for (auto& t : clients) t.join();
  int ok = 0, busy = 0;
  for (const auto& a : answers) {
    ok += a == "HTTP/1.1 200 OK";
    busy += a == "HTTP/1.1 503 Service Unavailable";
  }
  EXPECT_EQ(ok + busy, 8);
  EXPECT_GE(ok, 2);
  EXPECT_GE(busy, 1);
  EXPECT_EQ(server->stats().busy, static_cast<std::uint64_t>(busy));
}

TEST(HttpServerLimits, ARequestIsClosedAtItsDeadlineWhateverItsPace) {
  HttpLimits limits;
  limits.request_timeout = 400ms;
  auto server = serve(limits);
  ASSERT_TRUE(server);
  int fd = connectLoopback(server->port());
  ASSERT_GE(fd, 0);
  // A byte every 100 ms: each read is quick, the request never ends.
  const std::string start = "GET /metrics HTTP/1.1\r\nX: ";
  auto t0 = std::chrono::steady_clock::now();
  bool closed = false;
  for (std::size_t i = 0; i < 40 && !closed; ++i) {
    char c = i < start.size() ? start[i] : 'a';
    closed = ::send(fd, &c, 1, MSG_NOSIGNAL) != 1 || ::recv(fd, &c, 1, MSG_DONTWAIT) == 0;
    std::this_thread::sleep_for(100ms);
  }
  auto took = std::chrono::steady_clock::now() - t0;
  ::close(fd);
  EXPECT_TRUE(closed);
  EXPECT_LT(took, 2s);
  EXPECT_TRUE(eventually([&] { return server->stats().timeouts >= 1; }));
  // A connection that never sends a byte goes the same way.
  EXPECT_EQ(rawRequest(server->port(), "", 3s), "");
  EXPECT_TRUE(eventually([&] { return server->stats().timeouts >= 2; }));
}

TEST(HttpServerLimits, HeadersAndBodiesOverTheirCapsAreRefused) {
  HttpLimits limits;
  limits.max_header_bytes = 1024;
  limits.max_body_bytes = 100;
  auto server = serve(limits);
  ASSERT_TRUE(server);
  const std::string big = fmt::format("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", std::string(2000, 'a'));
  EXPECT_EQ(statusLine(rawRequest(server->port(), big)), "HTTP/1.1 431 Request Header Fields Too Large");
  // Headers that never end are refused once past the cap, not at the deadline.
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(
      statusLine(rawRequest(server->port(), fmt::format("GET /metrics HTTP/1.1\r\nX: {}", std::string(2000, 'a')))),
      "HTTP/1.1 431 Request Header Fields Too Large");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_EQ(statusLine(rawRequest(server->port(), "POST /metrics HTTP/1.1\r\nContent-Length: 101\r\n\r\n")),
            "HTTP/1.1 413 Payload Too Large");
  EXPECT_EQ(server->stats().too_large, 2u);
  // Within the caps, and a request pipelined behind another on one connection.
  EXPECT_EQ(statusLine(rawRequest(server->port(), kGet)), "HTTP/1.1 200 OK");
  std::string two = rawRequest(server->port(), "GET /metrics HTTP/1.1\r\n\r\n" + std::string(kGet));
  EXPECT_NE(two.find("HTTP/1.1 200 OK", 10), std::string::npos) << two;
}

// Requests whose end is ambiguous (request smuggling: a proxy in front reading the other header
// forwards a second request inside the first): 400 at once, the connection closed after it, the
// request behind never served; each counted. A good request before one of them is answered.
TEST(HttpServerFraming, AmbiguousLengthsAndBareLineFeedsAre400AndCloseTheConnection) {
  auto server = serve(HttpLimits{});
  ASSERT_TRUE(server);
  const std::string behind = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  auto count = [](const std::string& all, std::string_view what) {
    std::size_t n = 0;
    for (auto at = all.find(what); at != std::string::npos; at = all.find(what, at + 1)) ++n;
    return n;
  };
  // A Transfer-Encoding (chunked or any other: never decoded here).
  for (const char* te : {"chunked", "gzip, chunked", "identity"}) {
    std::string got = rawRequest(
        server->port(), fmt::format("GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: {}\r\n\r\n{}", te, behind));
    EXPECT_EQ(statusLine(got), "HTTP/1.1 400 Bad Request") << te;
    EXPECT_EQ(count(got, "HTTP/1.1 "), 1u) << "the request behind it was served: " << got;
    EXPECT_NE(got.find("Transfer-Encoding is not accepted"), std::string::npos) << got;
  }
  // Two Content-Lengths, the same or not.
  for (const char* two : {"Content-Length: 0\r\nContent-Length: 35", "Content-Length: 0\r\ncontent-length: 0"}) {
    std::string got =
        rawRequest(server->port(), fmt::format("POST /metrics HTTP/1.1\r\nHost: x\r\n{}\r\n\r\n{}", two, behind));
    EXPECT_EQ(statusLine(got), "HTTP/1.1 400 Bad Request") << two;
    EXPECT_EQ(count(got, "HTTP/1.1 "), 1u) << got;
  }
  // Lines ending in a bare LF: answered at once, not at the request's deadline.
  for (const char* bare :
       {"GET /metrics HTTP/1.1\nHost: x\n\n", "GET /metrics HTTP/1.1\r\nHost: x\n\r\n", "GET /metrics HTTP/1.1\n"}) {
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(statusLine(rawRequest(server->port(), bare)), "HTTP/1.1 400 Bad Request") << bare;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << bare;
  }
  // Behind a good request on one connection: the good one answered, the ambiguous one refused,
  // the third never read.
  std::string got =
      rawRequest(server->port(),
                 "GET /metrics HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + behind);
  EXPECT_EQ(statusLine(got), "HTTP/1.1 200 OK");
  EXPECT_EQ(count(got, "HTTP/1.1 200 OK"), 1u) << got;
  EXPECT_EQ(count(got, "HTTP/1.1 400 Bad Request"), 1u) << got;
  EXPECT_EQ(server->stats().malformed, 3u + 2u + 3u + 1u);
  // A body with a bare LF in it is the body's business: the request is judged on its merits.
  EXPECT_NE(statusLine(rawRequest(server->port(), "POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\na\nb")),
            "HTTP/1.1 400 Bad Request");
}

}  // namespace
}  // namespace headroom
