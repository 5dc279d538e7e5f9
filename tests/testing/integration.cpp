#include "testing/integration.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>

#include "headroom/sources/parse.h"

namespace headroom::testing {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

TempDir::TempDir(const char* parent, const char* prefix) {
  std::string tmpl = fmt::format("{}/{}-XXXXXX", parent, prefix);
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp " + tmpl + " failed");
  path = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

std::string TempDir::file(const std::string& name) const { return (path / name).string(); }

std::string TempDir::file(const std::string& name, const std::string& content) const {
  auto p = path / name;
  std::ofstream(p) << content;
  return p.string();
}

int freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  (void)::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  (void)::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

HttpResponse httpGet(int port, const std::string& path, const HttpParams& params) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(2, 0);
  c.set_read_timeout(10, 0);
  auto r = params.empty() ? c.Get(path) : c.Get(path, params, httplib::Headers{});
  if (!r) return {};
  return {r->status, r->body};
}

HttpResponse httpPost(int port, const std::string& path) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(2, 0);
  c.set_read_timeout(120, 0);
  auto r = c.Post(path);
  if (!r) return {};
  return {r->status, r->body};
}

nlohmann::json promQuery(int port, const std::string& query) {
  auto r = httpGet(port, "/api/v1/query", {{"query", query}});
  if (r.status != 200) return nlohmann::json::array();
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_discarded() || j["status"] != "success") return nlohmann::json::array();
  return j["data"]["result"];
}

std::optional<double> metric(const std::string& text, const std::string& name,
                             const std::map<std::string, std::string>& want) {
  static const std::regex kLabel(R"re(([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)")re");
  for (auto line : splitLines(text)) {
    if (line.empty() || line[0] == '#') continue;
    if (line.substr(0, name.size()) != name) continue;
    std::string_view rest = line.substr(name.size());
    std::map<std::string, std::string> labels;
    if (!rest.empty() && rest[0] == '{') {
      auto close = rest.rfind('}');
      std::string inner(rest.substr(1, close - 1));
      for (std::sregex_iterator it(inner.begin(), inner.end(), kLabel), end; it != end; ++it)
        labels[(*it)[1]] = (*it)[2];
      rest = rest.substr(close + 1);
    } else if (!rest.empty() && rest[0] != ' ') {
      continue;  // a longer name with this prefix
    }
    bool match = true;
    for (const auto& [k, v] : want) match = match && labels.count(k) && labels[k] == v;
    if (!match) continue;
    return std::strtod(std::string(trim(rest)).c_str(), nullptr);
  }
  return std::nullopt;
}

ChildProcess spawnReady(const std::vector<std::string>& args, const std::string& procs) {
  auto c = ChildProcess::spawn(args, procs);
  if (!c) throw std::runtime_error(c.error().describe());
  auto line = c->readLine();
  if (!line || line->rfind("ready", 0) != 0) throw std::runtime_error("workload did not get ready");
  return std::move(*c);
}

namespace {
AgentProcess::Options withEnv(std::map<std::string, std::string> env) {
  AgentProcess::Options o;
  o.env = std::move(env);
  return o;
}
}  // namespace

AgentProcess::Options infoLogOptions(std::string cgroup_procs) {
  AgentProcess::Options o;
  o.global_args = {"--log-level", "info"};
  o.cgroup_procs = std::move(cgroup_procs);
  return o;
}

AgentProcess::AgentProcess(std::vector<std::string> args, std::map<std::string, std::string> env)
    : AgentProcess(std::move(args), withEnv(std::move(env))) {}

AgentProcess::AgentProcess(std::vector<std::string> args, Options options) {
  std::string envs;
  for (const auto& [k, v] : options.env) envs += fmt::format("{}='{}' ", k, v);
  std::string script = envs.empty() ? "exec \"$0\" \"$@\" 2>&1" : "exec env " + envs + "\"$0\" \"$@\" 2>&1";
  script = options.prelude + script;
  std::vector<std::string> argv = options.launcher;
  argv.insert(argv.end(), {"/bin/sh", "-c", script, HEADROOM_BINARY});
  argv.insert(argv.end(), options.global_args.begin(), options.global_args.end());
  argv.insert(argv.end(), {"agent", "--listen", "127.0.0.1:0"});
  argv.insert(argv.end(), args.begin(), args.end());
  if (options.own_state_file && std::find(args.begin(), args.end(), "--budget.state-file") == args.end()) {
    static int n = 0;
    state_file_ = fmt::format("/tmp/headroom-agent-test-{}-{}.json", ::getpid(), n++);
    argv.insert(argv.end(), {"--budget.state-file", state_file_});
  }
  const auto given = [&](std::string_view flag) { return std::find(args.begin(), args.end(), flag) != args.end(); };
  if (options.own_journal && !given("--journal.path") && !given("--journal.enabled") && !given("--config")) {
    static int journals = 0;
    journal_dir_ = fmt::format("/tmp/headroom-agent-test-journal-{}-{}", ::getpid(), journals++);
    std::error_code ec;
    std::filesystem::create_directories(journal_dir_, ec);
    argv.insert(argv.end(), {"--journal.path", journal_dir_});
  }
  if (!options.catch_up.empty() && std::find(args.begin(), args.end(), "--journal.catch-up") == args.end())
    argv.insert(argv.end(), {"--journal.catch-up", options.catch_up});
  auto c = ChildProcess::spawn(argv, options.cgroup_procs);
  if (!c) throw std::runtime_error(c.error().describe());
  child_.emplace(std::move(*c));
  // 127.0.0.1, or every address (0.0.0.0: the test reaches it on 127.0.0.1 all the same).
  static const std::regex kServing(R"(serving on https?://(?:127\.0\.0\.1|0\.0\.0\.0):([0-9]+)(?: \(([^)]*)\))?)");
  // Up to a minute and a half between two lines: a first start in a cold, slow guest (the binary
  // paged in over 9p, the BPF verifier under emulation) says nothing for half a minute or more.
  while (auto line = child_->readLine(90s)) {
    log_.push_back(*line);
    std::smatch m;
    if (std::regex_search(*line, m, kServing)) {
      port_ = std::stoi(m[1]);
      paths_ = m[2];
      return;
    }
  }
  throw std::runtime_error("the agent never said where it serves: " + logText());
}

AgentProcess::~AgentProcess() {
  child_.reset();
  if (!state_file_.empty()) {
    std::error_code ec;
    std::filesystem::remove(state_file_, ec);
  }
  if (!journal_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(journal_dir_, ec);
  }
}

std::string AgentProcess::url() const { return fmt::format("http://127.0.0.1:{}", port_); }

std::string AgentProcess::logText() const {
  std::string text;
  for (const auto& line : log_) text += line + "\n";
  return text;
}

std::optional<std::string> AgentProcess::waitLog(const std::string& needle, std::chrono::milliseconds limit) {
  for (; searched_ < log_.size(); ++searched_) {
    if (log_[searched_].find(needle) != std::string::npos) return log_[searched_++];
  }
  auto end = Clock::now() + limit;
  while (Clock::now() < end) {
    auto line = child_->readLine(std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()));
    if (!line) return std::nullopt;
    log_.push_back(*line);
    searched_ = log_.size();
    if (line->find(needle) != std::string::npos) return *line;
  }
  return std::nullopt;
}

bool AgentProcess::waitHealthy(std::chrono::milliseconds limit) {
  auto end = Clock::now() + limit;
  while (Clock::now() < end) {
    if (httpGet(port_, "/healthz").status == 200) return true;
    std::this_thread::sleep_for(100ms);
  }
  return false;
}

std::string AgentProcess::metrics() { return httpGet(port_, "/metrics").body; }

nlohmann::json AgentProcess::getJson(const std::string& path) {
  HttpResponse r = httpGet(port_, path);
  if (r.status == 0) return nullptr;
  return nlohmann::json::parse(r.body, nullptr, false);
}

std::string AgentProcess::stop() {
  child_->kill(SIGTERM);
  while (auto line = child_->readLine(20s)) log_.push_back(*line);
  (void)child_->wait(20s);
  return logText();
}

}  // namespace headroom::testing
