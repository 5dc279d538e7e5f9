// The warning's settings and its hook. See controller/warning.h.
#include "headroom/controller/warning.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "headroom/net/http_client.h"
#include "headroom/sources/fs_root.h"
#include "headroom/util/numbers.h"

extern char** environ;  // NOLINT: POSIX

namespace headroom {
namespace {

using Clock = std::chrono::steady_clock;

std::int64_t ns(std::chrono::milliseconds d) { return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(); }

const char* signalName(int sig) { return sigabbrev_np(sig) != nullptr ? sigabbrev_np(sig) : "?"; }

// The largest situation a command gets on its stdin without waiting (a pipe's buffer is 64 KiB).
constexpr std::size_t kMaxStdin = 60 * 1024;

// Starts `/bin/sh -c cmd` in a process group of its own with default signal handling, `situation`
// (and a newline) on its stdin, which is closed after, and in $HEADROOM_WARNING.
Result<pid_t> spawnShell(const std::string& cmd, const std::string& situation) {
  std::array<int, 2> pipefd{};
  if (::pipe2(pipefd.data(), O_CLOEXEC) != 0) return errnoError("pipe");
  Fd read_end(pipefd[0]), write_end(pipefd[1]);
  // Written before the command starts, while this end still reads too: it fits the pipe's buffer,
  // and a command that never reads it (or has ended) cannot raise SIGPIPE here.
  ::fcntl(write_end.get(), F_SETFL, O_NONBLOCK);
  const std::string line = situation + "\n";
  if (line.size() <= kMaxStdin) (void)!::write(write_end.get(), line.data(), line.size());
  write_end = Fd();
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, read_end.get(), 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // A group of its own: a timeout ends whatever the command started too.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e)
    if (!std::string_view(*e).starts_with("HEADROOM_WARNING=")) env.emplace_back(*e);
  env.push_back("HEADROOM_WARNING=" + situation);
  std::vector<char*> envp;
  envp.reserve(env.size() + 1);
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string sh = "/bin/sh", dash_c = "-c", command = cmd;
  std::array<char*, 4> argv{sh.data(), dash_c.data(), command.data(), nullptr};
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, "/bin/sh", &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return sysError(rc, "starting /bin/sh");
  return pid;
}

}  // namespace

ForecastPolicy forecastPolicyOf(const WarningSettings& s) {
  ForecastPolicy p;
  p.warn_eta_ns = ns(s.eta);
  p.window_ns = ns(s.window);
  return p;
}

Status validate(const WarningSettings& s) {
  if (s.eta < std::chrono::seconds(1))
    return badInput(
        fmt::format("warning.eta = {} ms: must be at least 1s (a shorter warning cannot be acted on)", s.eta.count()));
  if (s.window < std::chrono::seconds(5) || s.window > std::chrono::minutes(10))
    return badInput(fmt::format("warning.window = {} ms: must be between 5s and 10m", s.window.count()));
  if (s.fast_interval < std::chrono::milliseconds(100) || s.fast_interval > std::chrono::seconds(10))
    return badInput(
        fmt::format("warning.fast_interval = {} ms: must be between 100ms and 10s", s.fast_interval.count()));
  if (auto h = parseWarningHook(s.on_warning); !h)
    return badInput(fmt::format("warning.on_warning = \"{}\": {}", s.on_warning.substr(0, 64), h.error().message));
  return ok();
}

Result<WarningHook> parseWarningHook(std::string_view spec) {
  WarningHook h;
  h.text = std::string(spec);
  const std::string_view trimmed = trim(spec);
  if (trimmed.empty()) return h;
  if (trimmed.starts_with("http://") || trimmed.starts_with("https://")) {
    h.kind = WarningHook::Kind::kUrl;
    h.text = std::string(trimmed);
    return h;
  }
  if (trimmed.starts_with("signal:")) {
    std::string name(trimmed.substr(7));
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::toupper(c); });
    if (name.starts_with("SIG")) name = name.substr(3);
    int sig = 0;
    if (auto n = parseU64(name); n && *n > 0 && *n < 65) {
      sig = static_cast<int>(*n);
    } else {
      for (int s = 1; s < 65; ++s)
        if (sigabbrev_np(s) != nullptr && name == sigabbrev_np(s)) sig = s;
    }
    if (sig == 0) return badInput("must name a signal (signal:USR1, signal:SIGUSR2, signal:10)");
    if (sig == SIGKILL || sig == SIGSTOP)
      return badInput("must not be KILL or STOP: a warning never stops or kills the prover (USR1, USR2, ...)");
    h.kind = WarningHook::Kind::kSignal;
    h.signal = sig;
    return h;
  }
  if (trimmed.find("://") != std::string_view::npos)
    return badInput("must be an http:// or https:// URL when it names one (only those are posted to)");
  h.kind = WarningHook::Kind::kCommand;
  return h;
}

HookRunner::~HookRunner() {
  for (const Command& c : commands_) {
    ::kill(-c.pid, SIGKILL);
    ::waitpid(c.pid, nullptr, 0);
  }
  for (std::thread& t : posts_) t.join();
}

void HookRunner::fire(const WarningHook& h, const nlohmann::json& situation, const std::vector<pid_t>& targets) {
  auto done = [&](bool good, std::string detail) {
    std::lock_guard<std::mutex> lock(mu_);
    done_.push_back(Outcome{h.text, good, std::move(detail)});
  };
  switch (h.kind) {
    case WarningHook::Kind::kNone: return;
    case WarningHook::Kind::kSignal: {
      if (targets.empty()) return done(false, fmt::format("SIG{}: no prover process to signal", signalName(h.signal)));
      std::vector<std::string> sent, failed;
      for (pid_t p : targets) (::kill(p, h.signal) == 0 ? sent : failed).push_back(std::to_string(p));
      return done(failed.empty(),
                  fmt::format("SIG{} sent to pid {}{}", signalName(h.signal), fmt::join(sent, ", "),
                              failed.empty() ? "" : fmt::format(" (failed: {})", fmt::join(failed, ", "))));
    }
    case WarningHook::Kind::kCommand: {
      std::string text = situation.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      auto pid = spawnShell(h.text, text);
      if (!pid) return done(false, pid.error().describe());
      auto now = Clock::now();
      commands_.push_back(Command{*pid, now, now + timeout_, h.text});
      return;
    }
    case WarningHook::Kind::kUrl: {
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++posts_running_;
      }
      std::string body = situation.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      posts_.emplace_back([this, url = h.text, body = std::move(body)] {
        HttpGetOptions o;
        o.timeout = timeout_;
        o.max_body_bytes = 64 * 1024;
        auto r = httpPost(url, body, "application/json", o);
        std::lock_guard<std::mutex> lock(mu_);
        --posts_running_;
        if (!r)
          done_.push_back(Outcome{url, false, r.error().describe()});
        else
          done_.push_back(
              Outcome{url, r->status >= 200 && r->status < 300, fmt::format("POST answered {}", r->status)});
      });
      return;
    }
  }
}

std::vector<HookRunner::Outcome> HookRunner::poll() {
  const auto now = Clock::now();
  for (auto it = commands_.begin(); it != commands_.end();) {
    int st = 0;
    const pid_t got = ::waitpid(it->pid, &st, WNOHANG);
    const double took = std::chrono::duration<double>(now - it->started).count();
    if (got == it->pid) {
      const bool good = WIFEXITED(st) && WEXITSTATUS(st) == 0;
      std::string how = WIFEXITED(st) ? fmt::format("exited {}", WEXITSTATUS(st))
                                      : fmt::format("killed by SIG{}", signalName(WTERMSIG(st)));
      std::lock_guard<std::mutex> lock(mu_);
      done_.push_back(Outcome{it->hook, good, fmt::format("{} after {:.2f} s", how, took)});
      it = commands_.erase(it);
    } else if (now >= it->deadline) {
      ::kill(-it->pid, SIGKILL);
      ::waitpid(it->pid, nullptr, 0);
      std::lock_guard<std::mutex> lock(mu_);
      done_.push_back(Outcome{it->hook, false, fmt::format("still running after {:.1f} s: killed", took)});
      it = commands_.erase(it);
    } else {
      ++it;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (posts_running_ == 0) {
    for (std::thread& t : posts_) t.join();
    posts_.clear();
  }
  return std::exchange(done_, {});
}

std::size_t HookRunner::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return commands_.size() + posts_running_;
}

}  // namespace headroom
