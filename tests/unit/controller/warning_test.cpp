// The warning's settings and the prover's hook: every form parsed or refused with what is allowed,
// and each fired for real: a command through the shell with the situation on its stdin and in
// $HEADROOM_WARNING, a signal to a process, a POST to a local listener; never waited for.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "headroom/controller/warning.h"
#include "testing/eventually.h"

extern char** environ;  // NOLINT: POSIX

namespace headroom {
namespace {

using namespace std::chrono_literals;

TEST(WarningHook, ParsesTheThreeFormsAndRefusesWhatWouldHarm) {
  auto none = parseWarningHook("");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->kind, WarningHook::Kind::kNone);
  auto cmd = parseWarningHook("kill -USR2 $(cat /run/prover.pid)");
  ASSERT_TRUE(cmd);
  EXPECT_EQ(cmd->kind, WarningHook::Kind::kCommand);
  for (const char* s : {"signal:USR1", "signal:SIGUSR1", "signal:usr1", "signal:10"}) {
    auto h = parseWarningHook(s);
    ASSERT_TRUE(h) << s;
    EXPECT_EQ(h->kind, WarningHook::Kind::kSignal) << s;
    EXPECT_EQ(h->signal, SIGUSR1) << s;
  }
  auto url = parseWarningHook("http://127.0.0.1:8080/warn");
  ASSERT_TRUE(url);
  EXPECT_EQ(url->kind, WarningHook::Kind::kUrl);
  for (const char* s : {"signal:KILL", "signal:9", "signal:STOP", "signal:NOPE", "signal:", "ftp://x/y"}) {
    auto h = parseWarningHook(s);
    ASSERT_FALSE(h) << s;
    EXPECT_EQ(h.error().kind, ErrorKind::kBadInput) << s;
  }
  EXPECT_NE(parseWarningHook("signal:KILL").error().message.find("never stops or kills"), std::string::npos);
}

TEST(WarningSettings, ValidateNamesTheKeyAndTheValue) {
  WarningSettings s;
  EXPECT_TRUE(validate(s));
  s.eta = 500ms;
  EXPECT_NE(validate(s).error().message.find("warning.eta"), std::string::npos);
  s = {};
  s.window = 1s;
  EXPECT_NE(validate(s).error().message.find("warning.window"), std::string::npos);
  s = {};
  s.on_warning = "signal:STOP";
  EXPECT_NE(validate(s).error().message.find("warning.on_warning = \"signal:STOP\""), std::string::npos);
  ForecastPolicy p = forecastPolicyOf(WarningSettings{});
  EXPECT_EQ(p.warn_eta_ns, 30'000'000'000);
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<HookRunner::Outcome> waitOutcomes(HookRunner& r, std::size_t n) {
  std::vector<HookRunner::Outcome> got;
  testing::eventually(
      [&] {
        for (auto& o : r.poll()) got.push_back(std::move(o));
        return got.size() >= n;
      },
      10s);
  return got;
}

TEST(HookRunner, ACommandGetsTheSituationOnStdinAndInItsEnvironment) {
  char dir[] = "/tmp/headroom-hook-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string out = std::string(dir) + "/stdin", env = std::string(dir) + "/env";
  auto h = parseWarningHook(fmt::format("cat > {} && printf '%s' \"$HEADROOM_WARNING\" > {}", out, env));
  ASSERT_TRUE(h);
  HookRunner r;
  const nlohmann::json situation = {{"bound", "/job"}, {"state", "started"}};
  const auto t0 = std::chrono::steady_clock::now();
  r.fire(*h, situation, {});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s) << "never waited for";
  auto got = waitOutcomes(r, 1);
  ASSERT_EQ(got.size(), 1U);
  EXPECT_TRUE(got[0].ok) << got[0].detail;
  EXPECT_NE(got[0].detail.find("exited 0"), std::string::npos) << got[0].detail;
  EXPECT_EQ(nlohmann::json::parse(slurp(out)), situation);
  EXPECT_EQ(nlohmann::json::parse(slurp(env)), situation);
  std::filesystem::remove_all(dir);
}

TEST(HookRunner, AFailingOrStuckCommandIsSaidAndEnded) {
  HookRunner r(std::chrono::milliseconds(300));
  r.fire(*parseWarningHook("exit 3"), {}, {});
  r.fire(*parseWarningHook("sleep 30"), {}, {});
  auto got = waitOutcomes(r, 2);
  ASSERT_EQ(got.size(), 2U);
  EXPECT_FALSE(got[0].ok);
  EXPECT_FALSE(got[1].ok);
  std::string details = got[0].detail + " | " + got[1].detail;
  EXPECT_NE(details.find("exited 3"), std::string::npos) << details;
  EXPECT_NE(details.find("killed"), std::string::npos) << details;
  EXPECT_EQ(r.running(), 0U);
}

TEST(HookRunner, ASignalReachesTheProcess) {
  pid_t child = 0;
  std::string sleep_bin = "/bin/sleep", secs = "30";
  std::array<char*, 3> argv{sleep_bin.data(), secs.data(), nullptr};
  ASSERT_EQ(::posix_spawn(&child, "/bin/sleep", nullptr, nullptr, argv.data(), environ), 0);
  HookRunner r;
  r.fire(*parseWarningHook("signal:TERM"), {}, {child});
  auto got = waitOutcomes(r, 1);
  ASSERT_EQ(got.size(), 1U);
  EXPECT_TRUE(got[0].ok) << got[0].detail;
  int st = 0;
  ASSERT_EQ(::waitpid(child, &st, 0), child);
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM);
  // No process to tell: said, not ignored.
  r.fire(*parseWarningHook("signal:USR1"), {}, {});
  got = waitOutcomes(r, 1);
  ASSERT_EQ(got.size(), 1U);
  EXPECT_FALSE(got[0].ok);
  EXPECT_NE(got[0].detail.find("no prover process"), std::string::npos);
}

TEST(HookRunner, AUrlIsPostedTheSituationAsJson) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 1), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  std::string request;
  std::thread server([&] {
    const int c = ::accept(listener, nullptr, nullptr);
    if (c < 0) return;
    std::array<char, 4096> buf{};
    // Headers, then as much body as Content-Length says.
    for (;;) {
      const ssize_t n = ::read(c, buf.data(), buf.size());
      if (n <= 0) break;
      request.append(buf.data(), static_cast<std::size_t>(n));
      const auto end = request.find("\r\n\r\n");
      if (end == std::string::npos) continue;
      const auto cl = request.find("Content-Length: ");
      const std::size_t body = cl == std::string::npos ? 0 : std::stoul(request.substr(cl + 16));
      if (request.size() >= end + 4 + body) break;
    }
    const std::string answer = "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n";
    (void)!::write(c, answer.data(), answer.size());
    ::close(c);
  });
  HookRunner r;
  const nlohmann::json situation = {{"bound", "/job"}, {"eta_at_start_seconds", 12.5}};
  r.fire(*parseWarningHook(fmt::format("http://127.0.0.1:{}/warn", ntohs(addr.sin_port))), situation, {});
  auto got = waitOutcomes(r, 1);
  server.join();
  ::close(listener);
  ASSERT_EQ(got.size(), 1U);
  EXPECT_TRUE(got[0].ok) << got[0].detail;
  EXPECT_EQ(got[0].detail, "POST answered 204");
  EXPECT_EQ(request.rfind("POST /warn HTTP/1.1", 0), 0U) << request;
  EXPECT_NE(request.find("Content-Type: application/json"), std::string::npos) << request;
  EXPECT_EQ(nlohmann::json::parse(request.substr(request.find("\r\n\r\n") + 4)), situation);
}

}  // namespace
}  // namespace headroom
