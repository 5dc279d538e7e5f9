// `headroom budget`: the real binary against fixture trees (computed locally) and against a
// stand-in agent on a loopback socket (asked first), no root.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "headroom/controller/controller.h"
#include "testing/child_process.h"
#include "testing/fixture_tree.h"

namespace headroom {
namespace {

using testing::runCommand;

constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::uint64_t kGiB = 1ULL << 30;

std::size_t lines(const std::string& s) { return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n')); }

// A loopback port nobody listens on right now.
int freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// An HTTP server that answers every request with one status and body, and records the paths
// asked for: the agent as `headroom budget` sees it.
class FakeAgent {
 public:
  FakeAgent(int status, std::string body) : status_(status), body_(std::move(body)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 8) != 0)
      throw std::runtime_error("FakeAgent: bind/listen");
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeAgent() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  std::string url() const { return fmt::format("http://127.0.0.1:{}", port_); }
  std::vector<std::string> paths() {
    std::lock_guard lock(mu_);
    return paths_;
  }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      std::string req;
      char buf[4096];
      while (req.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = ::read(c, buf, sizeof buf);
        if (n <= 0) break;
        req.append(buf, static_cast<std::size_t>(n));
      }
      std::istringstream first(req.substr(0, req.find("\r\n")));
      std::string method, path;
      first >> method >> path;
      {
        std::lock_guard lock(mu_);
        paths_.push_back(path);
      }
      std::string resp = fmt::format(
          "HTTP/1.1 {} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
          status_, body_.size(), body_);
      (void)!::write(c, resp.data(), resp.size());
      ::close(c);
    }
  }
  int status_;
  std::string body_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> paths_;
};

// The proving fixture (the prover cuzk in /proving/prover under /proving's 8 GiB) and a
// nobody-listens agent URL, so that every run without --local falls back to computing here.
struct Host {
  testing::FixtureTree t;
  std::string no_agent = fmt::format("http://127.0.0.1:{}", freePort());
  Host() { testing::provingHostV1(t); }

  std::vector<std::string> cmd(std::vector<std::string> args, const std::string& log_level = "warn") const {
    std::vector<std::string> v = {HEADROOM_BINARY, "--root", t.root(), "--log-level", log_level, "budget"};
    v.insert(v.end(), args.begin(), args.end());
    return v;
  }
  std::vector<std::string> local(std::vector<std::string> extra = {}) const {
    std::vector<std::string> args = {"--local",
                                     "--cgroup",
                                     "/proving/prover",
                                     "--role-rule",
                                     "prover=comm:cuzk",
                                     "--state-file",
                                     t.root() + "/state/budget.json"};
    args.insert(args.end(), extra.begin(), extra.end());
    return cmd(args);
  }
};

std::uint64_t bytesOf(const testing::CommandResult& r) {
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(lines(r.out), 1u) << r.out;
  return std::stoull(r.out);
}

TEST(BudgetCli, LocalIsTheControllersDecisionOnTheSample) {
  Host h;
  auto r = runCommand(h.local());
  std::uint64_t budget = bytesOf(r);
  EXPECT_TRUE(r.err.empty()) << "stderr stays quiet at the default log level: " << r.err;

  // The same inputs through the library: the binary adds no arithmetic of its own.
  testing::FixtureTree same;
  auto snap = testing::provingSnapshot(same, {"prover=comm:cuzk"});
  auto in = budgetInputs(*snap, ProverScope{"/proving/prover", std::nullopt});
  ASSERT_TRUE(in) << in.error().describe();
  BudgetController c(BudgetPolicy{});
  BudgetDecision d = c.decide(*in);
  ASSERT_TRUE(d.valid) << d.reason;
  EXPECT_EQ(budget, d.budget);
  // What the fixture says: the prover holds ~3.9 GiB, /proving has 3 GiB of room, the margin is
  // the 1 GiB floor, so the budget is more than it holds and less than the limit.
  EXPECT_GT(budget, 3900 * kMiB);
  EXPECT_LT(budget, 8 * kGiB - 1 * kGiB);
  EXPECT_EQ(d.tightest, "/proving");
}

TEST(BudgetCli, FormatsAreOneLineEach) {
  Host h;
  std::uint64_t bytes = bytesOf(runCommand(h.local()));
  auto mib = runCommand(h.local({"--format", "mib"}));
  EXPECT_EQ(mib.out, fmt::format("{}\n", bytes >> 20));
  auto gib = runCommand(h.local({"--format", "gib"}));
  EXPECT_EQ(gib.out, fmt::format("{}\n", bytes >> 30));
  auto env = runCommand(h.local({"--format", "env"}));
  ASSERT_EQ(env.exit_code, 0) << env.err;
  std::smatch m;
  static const std::regex kEnv(
      "^HEADROOM_BUDGET_BYTES=([0-9]+) HEADROOM_MARGIN_BYTES=([0-9]+) HEADROOM_BUDGET_GENERATION=([0-9]+) "
      "HEADROOM_BUDGET_SOURCE=local\n$");
  ASSERT_TRUE(std::regex_match(env.out, m, kEnv)) << env.out;
  EXPECT_EQ(std::stoull(m[1]), bytes);
  EXPECT_EQ(std::stoull(m[2]), BudgetPolicy{}.margin_floor);
  EXPECT_GE(std::stoull(m[3]), 1u);
  // Shell-safe: a shell that evaluates the line gets exactly those values.
  auto sh =
      runCommand({"/bin/sh", "-c", "eval \"$0\"; echo \"$HEADROOM_BUDGET_BYTES/$HEADROOM_BUDGET_SOURCE\"", env.out});
  EXPECT_EQ(sh.out, fmt::format("{}/local\n", bytes));
  auto json = runCommand(h.local({"--format", "json"}));
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_EQ(lines(json.out), 1u);
  auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["budget_bytes"], bytes);
  EXPECT_EQ(j["source"], "local");
  EXPECT_EQ(j["cgroup"], "/proving/prover");
  EXPECT_EQ(j["inputs"]["prover_processes"], 1);
  EXPECT_FALSE(j["inputs"]["bounds"].empty());
}

TEST(BudgetCli, PolicyFlagsAndTheStateFileMoveTheMargin) {
  Host h;
  std::uint64_t base = bytesOf(runCommand(h.local()));
  // The margin here is the floor (the prover cgroup's overhead is far below 1 GiB): one more
  // GiB of floor is one GiB less budget.
  EXPECT_EQ(bytesOf(runCommand(h.local({"--margin-floor", "2GiB"}))), base - 1 * kGiB);

  // A learned margin of 3 GiB in the state file: 2 GiB less than the floor's budget. The file
  // is only read.
  ControllerState learned;
  learned.learned_margin = 3 * kGiB;
  learned.oom_kills = 2;
  learned.generation = 7;
  const std::string state = h.t.root() + "/state/budget.json";
  ASSERT_TRUE(saveState(state, learned));
  std::string before = serialiseState(learned);
  auto env = runCommand(h.local({"--format", "env"}));
  EXPECT_NE(env.out.find(fmt::format("HEADROOM_BUDGET_BYTES={} ", base - 2 * kGiB)), std::string::npos) << env.out;
  EXPECT_NE(env.out.find(fmt::format("HEADROOM_MARGIN_BYTES={} ", 3 * kGiB)), std::string::npos) << env.out;
  std::ifstream in(state);
  std::stringstream after;
  after << in.rdbuf();
  EXPECT_EQ(after.str(), before) << "headroom budget never writes the state";

  // A corrupt state file: said on stderr, the fresh state used, the file left alone.
  std::ofstream(state) << "{\"version\": 1, \"learned_margin_bytes\": \"lots\"";
  auto corrupt = runCommand(h.local());
  EXPECT_EQ(bytesOf(corrupt), base);
  EXPECT_NE(corrupt.err.find(state), std::string::npos) << corrupt.err;
  EXPECT_NE(corrupt.err.find("fresh state"), std::string::npos) << corrupt.err;
  std::ifstream again(state);
  std::stringstream kept;
  kept << again.rdbuf();
  EXPECT_EQ(kept.str(), "{\"version\": 1, \"learned_margin_bytes\": \"lots\"");
}

TEST(BudgetCli, NoAgentFallsBackToLocalAndSaysSoAtInfo) {
  Host h;
  std::uint64_t local = bytesOf(runCommand(h.local()));
  std::vector<std::string> args = {
      "--agent",     h.no_agent,         "--cgroup",     "/proving/prover",
      "--role-rule", "prover=comm:cuzk", "--state-file", h.t.root() + "/state/budget.json"};
  auto quiet = runCommand(h.cmd(args));
  EXPECT_EQ(bytesOf(quiet), local);
  EXPECT_TRUE(quiet.err.empty()) << quiet.err;
  auto told = runCommand(h.cmd(args, "info"));
  EXPECT_EQ(bytesOf(told), local);
  EXPECT_NE(told.err.find("computing it here"), std::string::npos) << told.err;
  EXPECT_NE(told.err.find(h.no_agent), std::string::npos) << told.err;
  EXPECT_NE(told.err.find("computed here"), std::string::npos) << told.err;
}

TEST(BudgetCli, TheCallersOwnCgroupByDefault) {
  Host h;
  testing::FakeProcess entry;
  entry.pid = 104;
  entry.comm = "entrypoint.sh";
  entry.memory_cgroup = "/proving/prover";
  entry.rss_anon = entry.pss_anon = 2 * kMiB;
  h.t.process(entry);
  // Before /proc/self exists the caller's cgroup cannot be found: said, exit 1.
  auto none = runCommand(h.cmd({"--local", "--role-rule", "prover=comm:cuzk"}));
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("--cgroup"), std::string::npos) << none.err;
  h.t.self(104);
  auto own = runCommand(h.cmd({"--local", "--role-rule", "prover=comm:cuzk", "--format", "json"}));
  ASSERT_EQ(own.exit_code, 0) << own.err;
  auto j = nlohmann::json::parse(own.out);
  EXPECT_EQ(j["cgroup"], "/proving/prover");
  EXPECT_EQ(j["inputs"]["prover_processes"], 1) << "the caller itself is not the prover";
  EXPECT_EQ(j["budget_bytes"], bytesOf(runCommand(h.local())));
}

TEST(BudgetCli, TheAgentAnswersFirst) {
  Host h;
  nlohmann::json doc = {{"budget_bytes", 5 * kGiB},
                        {"margin_bytes", 2 * kGiB},
                        {"generation", 42},
                        {"cgroup", "/proving/prover"},
                        {"valid", true}};
  FakeAgent agent(200, doc.dump());
  auto r = runCommand(h.cmd({"--agent", agent.url() + "/", "--format", "env"}, "info"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, fmt::format("HEADROOM_BUDGET_BYTES={} HEADROOM_MARGIN_BYTES={} HEADROOM_BUDGET_GENERATION=42 "
                               "HEADROOM_BUDGET_SOURCE=agent\n",
                               5 * kGiB, 2 * kGiB));
  EXPECT_NE(r.err.find("from the agent"), std::string::npos) << r.err;
  ASSERT_FALSE(agent.paths().empty());
  EXPECT_EQ(agent.paths().front(), "/v1/budget");
  auto bytes = runCommand(h.cmd({"--agent", agent.url()}));
  EXPECT_EQ(bytes.out, fmt::format("{}\n", 5 * kGiB));
  auto json = runCommand(h.cmd({"--agent", agent.url(), "--format", "json"}));
  auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["generation"], 42);
  EXPECT_EQ(j["source"], "agent");
  // The agent budgets for another cgroup than the one asked about: computed here instead.
  std::uint64_t local = bytesOf(runCommand(h.local()));
  auto other =
      runCommand(h.cmd({"--agent", agent.url(), "--cgroup", "/proving/curio", "--role-rule", "prover=comm:curio",
                        "--state-file", h.t.root() + "/state/curio.json", "--format", "json"}));
  ASSERT_EQ(other.exit_code, 0) << other.err;
  EXPECT_EQ(nlohmann::json::parse(other.out)["source"], "local");
  EXPECT_EQ(nlohmann::json::parse(other.out)["cgroup"], "/proving/curio");
  // --local never asks.
  std::size_t asked = agent.paths().size();
  EXPECT_EQ(bytesOf(runCommand(h.local({"--agent", agent.url()}))), local);
  EXPECT_EQ(agent.paths().size(), asked);
}

// An agent that decided there is no room (a 503 with its decision) has the last word: a budget
// computed here, with less history, would hand out what it refused.
TEST(BudgetCli, AnAgentThatFindsNoRoomIsTheLastWord) {
  Host h;
  FakeAgent agent(
      503,
      R"({"error":"no budget for /proving/prover: no room: 64 MiB under /proving","cgroup":"/proving/prover","decision":{"valid":false}})");
  std::vector<std::string> args = {
      "--agent",     agent.url(),        "--cgroup",     "/proving/prover",
      "--role-rule", "prover=comm:cuzk", "--state-file", h.t.root() + "/state/budget.json"};
  ASSERT_GT(bytesOf(runCommand(h.local())), 0u) << "a local budget exists, so a fallback would have printed one";
  auto r = runCommand(h.cmd(args));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("no room: 64 MiB under /proving"), std::string::npos) << r.err;
  // The same refusal for another cgroup than the one asked about is not an answer for this one.
  FakeAgent other(
      503, R"({"error":"no budget for /proving/curio: no room","cgroup":"/proving/curio","decision":{"valid":false}})");
  args[1] = other.url();
  EXPECT_EQ(bytesOf(runCommand(h.cmd(args))), bytesOf(runCommand(h.local())));
}

TEST(BudgetCli, AnAgentWithoutABudgetIsNotTheLastWord) {
  Host h;
  FakeAgent agent(503, R"({"error":"no prover to budget for: add a role rule"})");
  std::vector<std::string> args = {
      "--agent",     agent.url(),        "--cgroup",     "/proving/prover",
      "--role-rule", "prover=comm:cuzk", "--state-file", h.t.root() + "/state/budget.json"};
  auto r = runCommand(h.cmd(args, "info"));
  EXPECT_EQ(bytesOf(r), bytesOf(runCommand(h.local())));
  EXPECT_NE(r.err.find("no prover to budget for"), std::string::npos) << r.err;
  // Neither can give one: exit 1, both reasons in one line, nothing on stdout.
  args.insert(args.end(), {"--margin-floor", "100GiB"});
  auto none = runCommand(h.cmd(args));
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_TRUE(none.out.empty()) << none.out;
  EXPECT_EQ(lines(none.err), 1u) << none.err;
  EXPECT_NE(none.err.find("no budget"), std::string::npos) << none.err;
  EXPECT_NE(none.err.find("no room"), std::string::npos) << none.err;
  EXPECT_NE(none.err.find("no prover to budget for"), std::string::npos) << none.err;
  // An answer that is not a budget document is no answer either.
  FakeAgent garbage(200, R"({"budget_bytes":"five"})");
  args.pop_back();
  args.pop_back();
  args[1] = garbage.url();
  auto g = runCommand(h.cmd(args));
  EXPECT_EQ(bytesOf(g), bytesOf(runCommand(h.local())));
}

TEST(BudgetCli, BadInputIsOneLineAndExitCode2) {
  Host h;
  struct Case {
    std::vector<std::string> args;
    std::string must_name;
  };
  std::vector<Case> cases = {
      {{"--local", "--cgroup", "/does/not/exist"}, "/does/not/exist"},
      {{"--local", "--cgroup", "/proving/prover", "--role-rule", "boss=comm:x"}, "boss"},
      {{"--local", "--cgroup", "/proving/prover", "--margin-growth", "0.5"}, "--margin-growth"},
      {{"--local", "--cgroup", "/proving/prover", "--margin-floor", "lots"}, "--margin-floor"},
      {{"--format", "xml"}, "--format"},
      // Bad input is bad even when an agent would answer.
      {{"--agent", h.no_agent, "--role-rule", "nope"}, "nope"},
  };
  for (const Case& c : cases) {
    auto r = runCommand(h.cmd(c.args));
    EXPECT_EQ(r.exit_code, 2) << c.must_name << ": " << r.err;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find(c.must_name), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  auto root = runCommand({HEADROOM_BINARY, "--root", "/no/such/root", "budget", "--local", "--cgroup", "/x"});
  EXPECT_EQ(root.exit_code, 2);
  EXPECT_NE(root.err.find("/no/such/root"), std::string::npos) << root.err;
}

TEST(BudgetCli, TheAgentsBudgetFlagsComeFromTheConfigTable) {
  auto rule = runCommand({HEADROOM_BINARY, "agent", "--check-config", "--role-rule", "prover=comm:cuzk",
                          "--budget.margin-floor", "16MiB", "--budget.hysteresis", "1MiB"});
  ASSERT_EQ(rule.exit_code, 0) << rule.err;
  EXPECT_NE(rule.out.find("budget for the prover's cgroup"), std::string::npos) << rule.out;
  auto cgroup = runCommand({HEADROOM_BINARY, "agent", "--check-config", "--budget.cgroup", "/prover.slice/"});
  EXPECT_NE(cgroup.out.find("budget for /prover.slice\n"), std::string::npos) << cgroup.out;
  auto none = runCommand({HEADROOM_BINARY, "agent", "--check-config"});
  EXPECT_NE(none.out.find("budget none (no prover rule, no budget.cgroup)"), std::string::npos) << none.out;
  auto off =
      runCommand({HEADROOM_BINARY, "agent", "--check-config", "--budget.enabled", "false", "--budget.cgroup", "/x"});
  EXPECT_NE(off.out.find("budget off"), std::string::npos) << off.out;
  auto bad = runCommand({HEADROOM_BINARY, "agent", "--check-config", "--budget.margin-growth", "0.5"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(lines(bad.err), 1u) << bad.err;
  EXPECT_NE(bad.err.find("--budget.margin-growth 0.5: must be between 1 and 100"), std::string::npos) << bad.err;
  auto help = runCommand({HEADROOM_BINARY, "agent", "--help"});
  for (const char* flag : {"--budget.margin-floor", "--budget.clean-period", "--budget.state-file", "--budget.file"})
    EXPECT_NE(help.out.find(flag), std::string::npos) << flag;
}

}  // namespace
}  // namespace headroom
