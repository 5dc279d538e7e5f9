// The probe's child (probe_child.h): allocates and touches on command, releases at the end.
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>
#include <utility>

#include "headroom/probe/probe.h"
#include "headroom/sources/parse.h"
#include "headroom/util/clock.h"
#include "headroom/util/units.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older headers lack it
#endif

#include "probe_child.h"

namespace headroom::detail {
namespace {

constexpr std::size_t kPage = 4096;
constexpr long kMaxErrno = 4095;  // include/linux/err.h

// The child's touching is not instrumented and its mappings bypass the sanitizer's mmap
// interceptor: in a sanitized build (the tests') the shadow memory written for every mapping
// would be charged to the probe's cgroup on top of what it allocates.
#if defined(__SANITIZE_ADDRESS__) || defined(__has_feature)
#define HEADROOM_NO_ASAN __attribute__((no_sanitize("address")))
#else
#define HEADROOM_NO_ASAN
#endif

void* rawMmap(std::size_t n) {
  long r = ::syscall(SYS_mmap, nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r < 0 && r >= -kMaxErrno) {  // a raw syscall returns -errno
    errno = static_cast<int>(-r);
    return MAP_FAILED;
  }
  return reinterpret_cast<void*>(r);  // NOLINT(performance-no-int-to-ptr): the syscall returns the address
}

HEADROOM_NO_ASAN void touchPages(volatile char* p, std::size_t from, std::size_t to) {
  for (std::size_t i = from; i < to; i += kPage) p[i] = 1;
}

HEADROOM_NO_ASAN void fill(volatile char* p, std::size_t n) {
  // memset by hand: the sanitizer's memset would check (and so touch) shadow pages.
  auto* q = reinterpret_cast<volatile std::uint64_t*>(p);
  for (std::size_t i = 0; i < n / sizeof(std::uint64_t); ++i) q[i] = 0x5a5a5a5a5a5a5a5aULL;
}

// Touches [p, p+n) by the chosen mode; returns 0 or an errno.
int touchRange(char* p, std::size_t n, TouchMode mode, unsigned threads, bool& populate_ok) {
  if (mode == TouchMode::kMemset) {
    fill(p, n);
    return 0;
  }
  threads = std::max(1u, threads);
  std::size_t per = (n / threads + kPage - 1) / kPage * kPage;
  std::vector<std::thread> pool;
  std::vector<int> errs(threads, 0);
  for (unsigned t = 0; t < threads; ++t) {
    std::size_t off = per * t;
    if (off >= n) break;
    std::size_t len = std::min(per, n - off);
    pool.emplace_back([&, t, off, len] {
      if (mode == TouchMode::kPopulate && populate_ok) {
        // Unlike MAP_POPULATE, MADV_POPULATE_WRITE says when it could not fault pages in.
        if (::madvise(p + off, len, MADV_POPULATE_WRITE) == 0) return;
        errs[t] = errno;
        if (errno != EINVAL) return;
        errs[t] = 0;  // kernel before 5.14: touch instead
      }
      touchPages(p, off, off + len);
    });
  }
  for (auto& th : pool) th.join();
  for (int e : errs) {
    if (e == EINVAL)
      populate_ok = false;
    else if (e != 0)
      return e;
  }
  return 0;
}

// Writes it all, or gives up quietly: a parent that went away ends the child anyway.
void sendAll(int fd, const std::string& s) {
  std::size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return;
    }
    off += static_cast<std::size_t>(n);
  }
}

// Commands, one per line: "A <bytes>" allocate and touch; "R" release everything; "W" warm up.
[[noreturn]] void childMain(int in, int out, TouchMode mode, unsigned threads) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the parent that watches the bounds
  ::prctl(PR_SET_NAME, "headroom-probe");
  std::vector<std::pair<char*, std::size_t>> chunks;
  bool populate_ok = true;
  std::string buf;
  char tmp[256];
  for (;;) {
    ssize_t n = ::read(in, tmp, sizeof tmp);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      ::_exit(0);
    }
    buf.append(tmp, static_cast<std::size_t>(n));
    std::size_t nl = 0;
    while ((nl = buf.find('\n')) != std::string::npos) {
      std::string cmd = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      if (cmd == "R") {
        for (auto [p, len] : chunks) ::syscall(SYS_munmap, p, len);
        chunks.clear();
        sendAll(out, "RELEASED\n");
        continue;
      }
      if (cmd == "W") {
        // Warm up: every path a chunk takes (the touch threads, the replies), on a page a thread
        // that is given back, so that the child's own footprint is in place before the baseline.
        const std::size_t warm = std::max(1u, threads) * kPage;  // a page for each thread
        void* p = rawMmap(warm);
        if (p != MAP_FAILED) {
          (void)touchRange(static_cast<char*>(p), warm, mode, threads, populate_ok);
          ::syscall(SYS_munmap, p, warm);
        }
        sendAll(out, fmt::format("WARM {}\n", monotonicNs()));
        continue;
      }
      std::size_t bytes = std::strtoull(cmd.c_str() + 2, nullptr, 10);
      auto t0 = monotonicNs();
      void* p = rawMmap(bytes);
      if (p == MAP_FAILED) {
        sendAll(out, fmt::format("ERR {}\n", errno));
        continue;
      }
      int err = touchRange(static_cast<char*>(p), bytes, mode, threads, populate_ok);
      if (err != 0) {
        ::syscall(SYS_munmap, p, bytes);
        sendAll(out, fmt::format("ERR {}\n", err));
        continue;
      }
      chunks.emplace_back(static_cast<char*>(p), bytes);
      sendAll(out, fmt::format("OK {} {} {}\n", bytes, monotonicNs() - t0, populate_ok ? 1 : 0));
    }
  }
}

}  // namespace

Result<ProbeChild> ProbeChild::start(TouchMode mode, unsigned threads) {
  int to[2], from[2];
  if (::pipe2(to, O_CLOEXEC) != 0 || ::pipe2(from, O_CLOEXEC) != 0) return errnoError("pipe for the probe child");
  pid_t pid = ::fork();
  if (pid < 0) return errnoError("fork of the probe child");
  if (pid == 0) {
    ::close(to[1]);
    ::close(from[0]);
    childMain(to[0], from[1], mode, threads);
  }
  ::close(to[0]);
  ::close(from[1]);
  return ProbeChild(pid, to[1], from[0]);
}

ProbeChild::ProbeChild(ProbeChild&& o) noexcept : pid_(o.pid_), to_(o.to_), from_(o.from_), buf_(std::move(o.buf_)) {
  o.pid_ = o.to_ = o.from_ = -1;
}

ProbeChild::~ProbeChild() {
  if (to_ >= 0) ::close(to_);
  if (from_ >= 0) ::close(from_);
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}
void ProbeChild::send(const std::string& line) { sendAll(to_, line + "\n"); }

std::optional<std::string> ProbeChild::reply(std::chrono::milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (auto nl = buf_.find('\n'); nl != std::string::npos) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      return line;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd pfd{from_, POLLIN, 0};
    int r = ::poll(&pfd, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return std::nullopt;
    char tmp[256];
    ssize_t n = ::read(from_, tmp, sizeof tmp);
    if (n <= 0) return std::nullopt;
    buf_.append(tmp, static_cast<std::size_t>(n));
  }
}
int ProbeChild::finish() {
  ::close(to_);
  to_ = -1;
  int st = 0;
  ::waitpid(pid_, &st, 0);
  pid_ = -1;
  return st;
}

}  // namespace headroom::detail
