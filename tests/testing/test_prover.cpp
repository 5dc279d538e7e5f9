// headroom-test-prover: a stand-in prover for the budget controller's tests. It reads its
// budget, first takes memory its budget does not cover (an mlock'd pool, like pinned buffers,
// and page tables from a sparse mapping), then allocates its budget 4 MiB at a time, writing
// after each step how much it believes it uses, holds, and ends as told.
//   --budget SIZE          the budget ("123", "512MiB", "2GiB"); wins over the two below
//   --budget-env NAME      read it from $NAME (default HEADROOM_BUDGET_BYTES)
//   --budget-file PATH     read it from a file
//   --pool N               bytes locked with mlock before the budget (outside it)
//   --sparse N             touch one page per 2 MiB over N bytes of address space (page tables)
//   --fraction F           use this fraction of the budget (default 1)
//   --grab N               then allocate N more bytes, whatever the budget says
//   --report PATH          after each step write the bytes of budget in use (the self-report)
//   --hold MS              hold everything this long before ending (default 100)
//   --then exit:N|kill:SIG how it ends (default exit:0); kill:9 is a SIGKILL of itself
//   --early                end as told before allocating anything
//   --pid-file PATH        write its pid first
//   --grow-rate N          the --grab climbs at N bytes a second (a steady climb toward a limit)
//   --shed-on-usr1         on SIGUSR1 (a warning hook), give back everything --grab took and stop
//                          grabbing: prints "shed N", then holds and ends as told
//   --leave-child N:MS     first start a child that holds N bytes for MS milliseconds, and
//                          outlives the prover if the prover dies first (slow reclaim)
// Prints "budget N", "allocated N", then ends.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

volatile sig_atomic_t g_shed = 0;
extern "C" void onUsr1(int /*sig*/) { g_shed = 1; }

constexpr std::size_t kPage = 4096;
constexpr std::size_t kStep = 4u << 20;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "headroom-test-prover: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(2);
}

std::uint64_t size(const std::string& s) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end == s.c_str() || v < 0) {
    std::fprintf(stderr, "headroom-test-prover: bad size \"%s\"\n", s.c_str());
    std::exit(2);
  }
  std::string unit = end;
  double mult = 1;
  if (unit == "KiB" || unit == "K")
    mult = 1024.0;
  else if (unit == "MiB" || unit == "M")
    mult = 1024.0 * 1024;
  else if (unit == "GiB" || unit == "G")
    mult = 1024.0 * 1024 * 1024;
  else if (!unit.empty() && unit != "B") {
    std::fprintf(stderr, "headroom-test-prover: bad unit in \"%s\"\n", s.c_str());
    std::exit(2);
  }
  return static_cast<std::uint64_t>(v * mult);
}

void* mapAnon(std::size_t n) {
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) die("mmap");
  // Page counts must not depend on THP settings.
  ::madvise(p, n, MADV_NOHUGEPAGE);
  return p;
}

void touch(void* p, std::size_t n) {
  auto* c = static_cast<volatile char*>(p);
  for (std::size_t i = 0; i < n; i += kPage) c[i] = 1;
}

void report(const std::string& path, std::uint64_t used) {
  if (path.empty()) return;
  // Written in place (not renamed): the supervisor reads it after the prover is gone.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) die("opening " + path);
  std::string s = std::to_string(used) + "\n";
  if (::write(fd, s.data(), s.size()) != static_cast<ssize_t>(s.size())) die("writing " + path);
  ::close(fd);
}

[[noreturn]] void finish(const std::string& how) {
  std::fflush(stdout);
  if (how.rfind("exit:", 0) == 0) std::exit(std::atoi(how.c_str() + 5));
  if (how.rfind("kill:", 0) == 0) {
    int sig = std::atoi(how.c_str() + 5);
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    std::this_thread::sleep_for(std::chrono::seconds(5));
  }
  std::fprintf(stderr, "headroom-test-prover: --then \"%s\": exit:N or kill:SIG\n", how.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string budget_arg, budget_env = "HEADROOM_BUDGET_BYTES", budget_file, report_path, then = "exit:0", pid_file;
  std::uint64_t pool = 0, sparse = 0, grab = 0;
  double fraction = 1.0, grow_rate = 0;
  int hold_ms = 100;
  bool early = false;
  std::string leave_child;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "headroom-test-prover: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a.rfind("--budget=", 0) == 0)
      budget_arg = a.substr(9);
    else if (a == "--budget")
      budget_arg = next();
    else if (a == "--budget-env")
      budget_env = next();
    else if (a == "--budget-file")
      budget_file = next();
    else if (a == "--pool")
      pool = size(next());
    else if (a == "--sparse")
      sparse = size(next());
    else if (a == "--fraction")
      fraction = std::strtod(next().c_str(), nullptr);
    else if (a == "--grab")
      grab = size(next());
    else if (a == "--report")
      report_path = next();
    else if (a == "--hold")
      hold_ms = std::atoi(next().c_str());
    else if (a == "--then")
      then = next();
    else if (a == "--early")
      early = true;
    else if (a == "--pid-file")
      pid_file = next();
    else if (a == "--grow-rate")
      grow_rate = static_cast<double>(size(next()));
    else if (a == "--shed-on-usr1")
      std::signal(SIGUSR1, onUsr1);
    else if (a == "--leave-child")
      leave_child = next();
    else {
      std::fprintf(stderr, "headroom-test-prover: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (!pid_file.empty()) std::ofstream(pid_file) << ::getpid() << "\n";

  std::string text = budget_arg;
  if (text.empty() && !budget_file.empty()) {
    std::ifstream f(budget_file);
    std::getline(f, text);
  }
  if (text.empty()) {
    const char* e = std::getenv(budget_env.c_str());
    if (e != nullptr) text = e;
  }
  if (text.empty()) {
    std::fprintf(stderr, "headroom-test-prover: no budget (--budget, --budget-file or $%s)\n", budget_env.c_str());
    return 2;
  }
  std::uint64_t budget = size(text);
  std::printf("budget %s\n", std::to_string(budget).c_str());
  std::fflush(stdout);
  report(report_path, 0);
  if (early) finish(then);

  if (!leave_child.empty()) {
    auto colon = leave_child.find(':');
    if (colon == std::string::npos) {
      std::fprintf(stderr, "headroom-test-prover: --leave-child N:MS\n");
      return 2;
    }
    std::uint64_t n = size(leave_child.substr(0, colon));
    int ms = std::atoi(leave_child.c_str() + colon + 1);
    pid_t c = ::fork();
    if (c < 0) die("fork");
    if (c == 0) {
      ::prctl(PR_SET_NAME, "prover-child");
      // Not holding the supervisor's output open after the prover is gone.
      int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
      ::dup2(null, STDOUT_FILENO);
      ::dup2(null, STDERR_FILENO);
      // Less likely than the prover to be the OOM victim: it is the one that must outlive it.
      std::ofstream("/proc/self/oom_score_adj") << -500 << "\n";
      touch(mapAnon(n), n);
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      std::_Exit(0);
    }
  }
  if (pool > 0) {
    void* p = mapAnon(pool);
    if (::mlock(p, pool) != 0) die("mlock of the pool");
  }
  if (sparse > 0) {
    constexpr std::size_t kSpan = 2u << 20;
    auto* p = static_cast<char*>(mapAnon(sparse));
    for (std::size_t off = 0; off < sparse; off += kSpan) p[off] = 1;
  }
  auto want = static_cast<std::uint64_t>(static_cast<double>(budget) * fraction);
  std::uint64_t used = 0;
  while (used < want) {
    std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kStep, want - used));
    touch(mapAnon(n), n);
    used += n;
    report(report_path, used);
    // A little pause: the supervisor samples while the prover climbs, as with a real one.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::vector<std::pair<void*, std::size_t>> grabbed;
  std::uint64_t grabbed_bytes = 0;
  auto shed = [&] {
    for (auto& [p, n] : grabbed) ::munmap(p, n);
    std::printf("shed %s\n", std::to_string(grabbed_bytes).c_str());
    std::fflush(stdout);
    grabbed.clear();
    grabbed_bytes = 0;
  };
  const std::size_t grab_step = grow_rate > 0 ? std::size_t{1} << 20 : kStep;
  const auto t0 = std::chrono::steady_clock::now();
  for (std::uint64_t g = 0; g < grab && !g_shed; g += grab_step) {
    std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(grab_step, grab - g));
    void* p = mapAnon(n);
    touch(p, n);
    grabbed.emplace_back(p, n);
    grabbed_bytes += n;
    if (grow_rate > 0) {
      const auto due = t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                std::chrono::duration<double>(static_cast<double>(g + n) / grow_rate));
      std::this_thread::sleep_until(due);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  if (g_shed) shed();
  const std::uint64_t total = used + grabbed_bytes;
  std::printf("allocated %s\n", std::to_string(total).c_str());
  std::fflush(stdout);
  for (auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(hold_ms);
       std::chrono::steady_clock::now() < end;) {
    if (g_shed && grabbed_bytes > 0) shed();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  finish(then);
}
