// `headroom agent` refusing bad input before it starts anything: the real binary, no root.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "testing/child_process.h"

namespace headroom {
namespace {

using testing::runCommand;

struct ConfigFile {
  std::string path;
  explicit ConfigFile(const std::string& text) {
    char tmpl[] = "/tmp/headroom-agent-cfg-XXXXXX";
    int fd = ::mkstemp(tmpl);
    ::close(fd);
    path = tmpl;
    std::ofstream(path) << text;
  }
  ~ConfigFile() { std::filesystem::remove(path); }
};

std::size_t lines(const std::string& s) { return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n')); }

TEST(AgentCli, CheckConfigAcceptsAGoodFileAndFlagsWin) {
  ConfigFile f("listen = \"127.0.0.1:9999\"\ninterval = \"2s\"\n[roles]\nrules = [\"prover=comm:cuzk\"]\n");
  auto r = runCommand({HEADROOM_BINARY, "agent", "--config", f.path, "--interval", "250ms", "--check-config"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("config OK"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("listen 127.0.0.1:9999"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("interval 250 ms"), std::string::npos) << "the flag wins over the file: " << r.out;
  EXPECT_NE(r.out.find("1 role rule"), std::string::npos) << r.out;
}

TEST(AgentCli, EachBadKeyOrValueIsOneClearLineAndExitCode2) {
  struct Case {
    std::string file;                // config text ("" = no file)
    std::vector<std::string> flags;  // extra flags
    std::vector<std::string> must_name;
  };
  std::vector<Case> cases = {
      {"intervall = \"5s\"\n", {}, {"intervall"}},
      {"[sensors]\nbfp = true\n", {}, {"bfp"}},
      {"interval = \"fast\"\n", {}, {"interval", "fast"}},
      {"listen = \"127.0.0.1\"\n", {}, {"listen", "127.0.0.1"}},
      {"[sensors]\noom_ring_bytes = 1000\n", {}, {"oom_ring_bytes", "1000"}},
      {"[roles]\nrules = [\"boss=comm:x\"]\n", {}, {"boss"}},
      {"log_format = \"xml\"\n", {}, {"log_format", "xml"}},
      {"smaps = \"yes\"\n", {}, {"smaps", "yes"}},
      {"[metrics\n", {}, {"line"}},
      {"", {"--interval", "fast"}, {"--interval", "fast"}},
      {"", {"--listen", "nope:99999"}, {"--listen", "99999"}},
      {"", {"--log-format", "xml"}, {"--log-format", "xml"}},
      {"", {"--metrics.max-series", "many"}, {"--metrics.max-series", "many"}},
      {"", {"--frobnicate"}, {"--frobnicate"}},
  };
  for (const Case& c : cases) {
    std::optional<ConfigFile> f;
    std::vector<std::string> argv = {HEADROOM_BINARY, "agent", "--check-config"};
    if (!c.file.empty()) {
      f.emplace(c.file);
      argv.insert(argv.end(), {"--config", f->path});
    }
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    auto r = runCommand(argv);
    std::string what = c.file + " " + (c.flags.empty() ? "" : c.flags[0]);
    EXPECT_EQ(r.exit_code, 2) << what << ": " << r.err;
    EXPECT_EQ(lines(r.err), 1u) << what << ": " << r.err;
    for (const auto& n : c.must_name)
      EXPECT_NE(r.err.find(n), std::string::npos) << what << " must name " << n << ": " << r.err;
  }
  auto missing = runCommand({HEADROOM_BINARY, "agent", "--check-config", "--config", "/nonexistent/agent.toml"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("/nonexistent/agent.toml"), std::string::npos) << missing.err;
}

// An explicit journal is never dropped: one the agent cannot open at start is exit 2 naming it
// (before anything is served), not a run with the journal off.
TEST(AgentCli, AnExplicitJournalThatCannotOpenIsExitCode2) {
  ConfigFile file("not a directory\n");
  const std::string journal = file.path + "/oom.hrj";
  for (const std::vector<std::string>& how :
       std::vector<std::vector<std::string>>{{"--journal", journal}, {"--journal.path", journal}}) {
    auto r = runCommand({HEADROOM_BINARY, "agent", "--listen", "127.0.0.1:19687", "--sensors.bpf", "false",
                         "--log-format", "json", how[0], how[1]});
    EXPECT_EQ(r.exit_code, 2) << how[0] << ": " << r.err;
    EXPECT_NE(r.err.find("headroom agent: --journal / journal.path " + journal), std::string::npos) << r.err;
  }
  ConfigFile cfg("[journal]\npath = \"" + journal + "\"\n");
  auto from_file = runCommand(
      {HEADROOM_BINARY, "agent", "--listen", "127.0.0.1:19687", "--sensors.bpf", "false", "--config", cfg.path});
  EXPECT_EQ(from_file.exit_code, 2) << from_file.err;
  EXPECT_NE(from_file.err.find(journal), std::string::npos) << from_file.err;
}

TEST(AgentCli, APortInUseIsExitCode2NamingIt) {
  const int taken = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(taken, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;  // any free port: the kernel's choice, then held by this test
  ASSERT_EQ(::bind(taken, reinterpret_cast<const sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(taken, 1), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(::getsockname(taken, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string listen = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  auto r = runCommand(
      {HEADROOM_BINARY, "agent", "--listen", listen, "--sensors.bpf", "false", "--journal.enabled", "false"});
  ::close(taken);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("headroom agent: --listen: cannot listen on " + listen), std::string::npos) << r.err;
}

TEST(AgentCli, AWebConfigWithAMistakeIsExitCode2NamingTheFileLineAndKey) {
  auto dir = std::filesystem::temp_directory_path() / fmt::format("headroom-web-cli-{}", ::getpid());
  std::filesystem::create_directories(dir);
  std::string web = (dir / "web.yml").string();
  std::ofstream(web) << "# hand-made\nbasic_auth_users:\n  prometheus: hunter2\n";
  auto r = runCommand({HEADROOM_BINARY, "agent", "--web.config.file", web, "--check-config"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("headroom agent: --web.config.file " + web +
                       ": line 3: basic_auth_users.prometheus: must be a bcrypt hash"),
            std::string::npos)
      << r.err;
  // Certificates that cannot be loaded: found when the agent starts, before it serves.
  std::ofstream(web) << "tls_server_config:\n  cert_file: /etc/hostname\n  key_file: /etc/hostname\n";
  auto start = runCommand({HEADROOM_BINARY, "agent", "--web.config.file", web, "--listen", "127.0.0.1:0",
                           "--sensors.bpf", "false", "--journal.enabled", "false"});
  EXPECT_EQ(start.exit_code, 2) << start.err;
  EXPECT_NE(start.err.find("tls_server_config.cert_file /etc/hostname"), std::string::npos) << start.err;
  auto none =
      runCommand({HEADROOM_BINARY, "agent", "--web.config.file", (dir / "absent.yml").string(), "--check-config"});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("absent.yml"), std::string::npos) << none.err;
  std::filesystem::remove_all(dir);
}

TEST(AgentCli, ABoolFlagAloneMeansTrue) {
  auto r = runCommand({HEADROOM_BINARY, "agent", "--sensors.bpf", "--check-config"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto off = runCommand({HEADROOM_BINARY, "agent", "--sensors.bpf", "maybe", "--check-config"});
  EXPECT_EQ(off.exit_code, 2);
  EXPECT_NE(off.err.find("maybe"), std::string::npos) << off.err;
}

}  // namespace
}  // namespace headroom
