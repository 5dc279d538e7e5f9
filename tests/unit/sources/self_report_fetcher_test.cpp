// The prover's self-report fetched from a URL on the fetcher's own thread: the latest answer
// while it is fresh, a stuck endpoint said after the age allowed, a status other than 200 an
// error, and a fetcher that stops without waiting for a fetch in flight.
#include "headroom/sources/self_report_fetcher.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <string>
#include <thread>

#include "testing/eventually.h"
#include "testing/raw_http.h"

namespace headroom {
namespace {

using namespace std::chrono_literals;
using testing::eventually;
using testing::RawServer;

RawServer::Answer answering(std::string status, std::string body) {
  return [status = std::move(status), body = std::move(body)](int fd, const RawServer&) {
    const std::string r = "HTTP/1.1 " + status + "\r\nContent-Length: " + std::to_string(body.size()) +
                          "\r\nConnection: close\r\n\r\n" + body;
    (void)::send(fd, r.data(), r.size(), MSG_NOSIGNAL);
  };
}

// Holds each request unanswered until the server stops.
void stall(int, const RawServer& s) {
  while (!s.stopping()) std::this_thread::sleep_for(5ms);
}

SelfReportSource sourceAt(const RawServer& s, const std::string& spec = "/used") {
  auto src = parseSelfReportSource(s.url(spec));
  EXPECT_TRUE(src) << src.error().describe();
  return src ? *src : SelfReportSource{};
}

TEST(SelfReportFetcher, TheLatestAnswerWhileItIsFresh) {
  RawServer server(answering("200 OK", R"({"mem":{"used":123456789}})"));
  SelfReportSource src = sourceAt(server, "/status#json:mem.used");
  SelfReportFetcher fetcher(src, 50ms);
  EXPECT_EQ(fetcher.period(), 50ms);
  std::optional<Result<std::uint64_t>> got;
  ASSERT_TRUE(eventually([&] {
    got = fetcher.latest(src, 5s);
    return got.has_value();
  }));
  ASSERT_TRUE(*got) << got->error().describe();
  EXPECT_EQ(**got, 123456789u);
  EXPECT_TRUE(eventually([&] { return server.connections() >= 3; })) << "asked again every period";
}

TEST(SelfReportFetcher, AStatusOtherThan200IsAnError) {
  RawServer server(answering("503 Service Unavailable", "starting"));
  auto body = fetchSelfReport(server.url("/used"));
  ASSERT_FALSE(body);
  EXPECT_EQ(body.error().kind, ErrorKind::kIo);
  EXPECT_NE(body.error().describe().find("HTTP 503"), std::string::npos) << body.error().describe();
  SelfReportSource src = sourceAt(server);
  SelfReportFetcher fetcher(src, 50ms);
  std::optional<Result<std::uint64_t>> got;
  ASSERT_TRUE(eventually([&] {
    got = fetcher.latest(src, 5s);
    return got.has_value();
  }));
  EXPECT_FALSE(*got);
}

TEST(SelfReportFetcher, AStuckEndpointIsSaidAfterTheAgeAllowedAndStopDoesNotWaitForIt) {
  RawServer server(stall);
  SelfReportSource src = sourceAt(server);
  auto fetcher = std::make_unique<SelfReportFetcher>(src, 50ms);
  EXPECT_FALSE(fetcher->latest(src, 5s)) << "nothing yet while the first answer is not overdue";
  // The first fetch ends at the client's timeout (500 ms): before that, only its age speaks.
  std::this_thread::sleep_for(150ms);
  auto late = fetcher->latest(src, 100ms);
  ASSERT_TRUE(late);
  ASSERT_FALSE(*late);
  EXPECT_EQ(late->error().kind, ErrorKind::kUnavailable);
  EXPECT_NE(late->error().describe().find("no answer for 100 ms"), std::string::npos) << late->error().describe();
  // A fetch is in flight (the endpoint holds it): stopping returns at once all the same.
  ASSERT_TRUE(eventually([&] { return server.connections() >= 1; }));
  auto t0 = std::chrono::steady_clock::now();
  fetcher.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 100ms);
}

}  // namespace
}  // namespace headroom
