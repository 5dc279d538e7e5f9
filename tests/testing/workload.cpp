// headroom-workload: allocates known amounts of each kind of memory, prints "ready", then
// holds everything until its stdin closes (or a signal ends it). Sizes are bytes.
//   --anon N             private anonymous memory, every page touched
//   --shm-create PATH N  a tmpfs file of N bytes, mapped shared and touched (shmem)
//   --shm-map PATH       map an existing tmpfs file shared and read every page
//   --sparse N           touch one page per 2 MiB over N bytes of address space (page tables)
//   --tmpfs-file PATH N  write a tmpfs file and close it: charged shmem that nobody maps
//   --mlock N            anonymous memory locked with mlock
//   --anon-slow N        like --anon, but 1 MiB at a time with a pause (a slow climb to a limit)
//   --map-unmap N        mmap N bytes, touch them, munmap them
//   --exit-after-ready   exit right after "ready" instead of waiting
//   --clone-vm           start a second process sharing this one's mm (clone(CLONE_VM)), which
//                        sleeps; its pid is printed as "sharer PID" before "ready"
//   --spawn N MS K       N short-lived children, at most K alive at once, each named "hr-w<i>"
//                        (distinct comms), holding 1 MiB for MS milliseconds; "spawned N" at the end
//   --spawn-seconds S    with --spawn: stop starting children after S seconds (however many
//                        were started by then; "spawned" says how many)
//   --spawn-hold K       before --spawn's churn, K of its children alive at once and held: "holding K",
//                        then they go when a line arrives on stdin (a burst as wide as asked, however
//                        slow the machine)
//   --grow-after-ready N MS  after "ready", grow by N bytes, 1 MiB every MS milliseconds (a busy
//                        neighbour that keeps allocating while something else measures)
//   --grow-on-line       with --grow-after-ready: the growth starts when a line arrives on stdin
//                        (once something else is ready to watch it, however slow the machine)
//   --threads N BYTES    N threads each touch BYTES of fresh anonymous memory and exit, before
//                        "ready" (faults of threads that are gone)
//   --touch-per-line N   after "ready", each line read from stdin touches N more fresh bytes and
//                        answers "touched"
//   --exit-code N        the exit code (after ready and stdin's end, or right away with the above)
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t kPage = 4096;
constexpr std::size_t kPmdSpan = 2u << 20;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "headroom-workload: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

std::size_t size(const char* s) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0') {
    std::fprintf(stderr, "headroom-workload: bad size \"%s\"\n", s);
    std::exit(2);
  }
  return static_cast<std::size_t>(v);
}

void* mapAnon(std::size_t n, bool no_huge) {
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) die("mmap anon");
  // THP would turn one touched byte into 2 MiB: keep page counts exact whatever the setting.
  if (no_huge) ::madvise(p, n, MADV_NOHUGEPAGE);
  return p;
}

void touch(void* p, std::size_t n, std::size_t stride) {
  auto* c = static_cast<volatile char*>(p);
  for (std::size_t off = 0; off < n; off += stride) c[off] = 1;
}

void* mapShared(const char* path, std::size_t n, bool create) {
  int fd = ::open(path, create ? (O_RDWR | O_CREAT | O_TRUNC) : O_RDWR, 0600);
  if (fd < 0) die(std::string("open ") + path);
  if (create && ::ftruncate(fd, static_cast<off_t>(n)) != 0) die("ftruncate");
  if (!create) {
    off_t end = ::lseek(fd, 0, SEEK_END);
    if (end < 0) die("lseek");
    n = static_cast<std::size_t>(end);
  }
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) die("mmap shared");
  ::close(fd);
  if (create) {
    touch(p, n, kPage);
  } else {
    auto* c = static_cast<volatile char*>(p);
    char sum = 0;
    for (std::size_t off = 0; off < n; off += kPage) sum = static_cast<char>(sum + c[off]);
    (void)sum;
  }
  return p;
}

void writeFile(const char* path, std::size_t n) {
  int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) die(std::string("open ") + path);
  std::vector<char> buf(1 << 20, 'x');
  for (std::size_t done = 0; done < n;) {
    std::size_t chunk = std::min(buf.size(), n - done);
    ssize_t w = ::write(fd, buf.data(), chunk);
    if (w <= 0) die("write");
    done += static_cast<std::size_t>(w);
  }
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  bool exit_after_ready = false;
  std::size_t grow_bytes = 0, grow_ms = 0, touch_per_line = 0, spawn_hold = 0, spawn_seconds = 0;
  bool grow_on_line = false;
  int exit_code = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto need = [&](int n) {
      if (i + n >= argc) {
        std::fprintf(stderr, "headroom-workload: %s needs %d argument(s)\n", a.c_str(), n);
        std::exit(2);
      }
    };
    if (a == "--anon") {
      need(1);
      std::size_t n = size(argv[++i]);
      touch(mapAnon(n, true), n, kPage);
    } else if (a == "--shm-create") {
      need(2);
      const char* path = argv[++i];
      mapShared(path, size(argv[++i]), true);
    } else if (a == "--shm-map") {
      need(1);
      mapShared(argv[++i], 0, false);
    } else if (a == "--sparse") {
      need(1);
      std::size_t n = size(argv[++i]);
      // Align to 2 MiB so each touched page costs exactly one page-table page.
      auto* base = static_cast<char*>(mapAnon(n + kPmdSpan, true));
      std::size_t misalign = reinterpret_cast<std::uintptr_t>(base) % kPmdSpan;
      touch(base + (kPmdSpan - misalign) % kPmdSpan, n, kPmdSpan);
    } else if (a == "--tmpfs-file") {
      need(2);
      const char* path = argv[++i];
      writeFile(path, size(argv[++i]));
    } else if (a == "--mlock") {
      need(1);
      std::size_t n = size(argv[++i]);
      void* p = mapAnon(n, true);
      if (::mlock(p, n) != 0) die("mlock");
    } else if (a == "--anon-slow") {
      need(1);
      std::size_t n = size(argv[++i]);
      auto* p = static_cast<char*>(mapAnon(n, true));
      for (std::size_t off = 0; off < n; off += 1u << 20) {
        touch(p + off, std::min<std::size_t>(1u << 20, n - off), kPage);
        ::usleep(2000);
      }
    } else if (a == "--map-unmap") {
      need(1);
      std::size_t n = size(argv[++i]);
      void* p = mapAnon(n, true);
      touch(p, n, kPage);
      if (::munmap(p, n) != 0) die("munmap");
    } else if (a == "--clone-vm") {
      static char stack[64 * 1024];
      int pid = ::clone(
          [](void*) -> int {
            for (;;) ::pause();
          },
          stack + sizeof stack, CLONE_VM | SIGCHLD, nullptr);
      if (pid < 0) die("clone");
      std::printf("sharer %d\n", pid);
      std::fflush(stdout);
    } else if (a == "--spawn-seconds") {
      need(1);
      spawn_seconds = size(argv[++i]);
    } else if (a == "--spawn-hold") {
      need(1);
      spawn_hold = size(argv[++i]);
    } else if (a == "--spawn") {
      need(3);
      std::size_t total = size(argv[++i]);
      std::size_t ms = size(argv[++i]);
      std::size_t at_once = std::max<std::size_t>(1, size(argv[++i]));
      std::size_t alive = 0;
      std::size_t n = 0;
      if (spawn_hold > 0) {
        int gate[2];
        if (::pipe(gate) != 0) die("pipe");
        for (; n < std::min(spawn_hold, total); ++n) {
          pid_t pid = ::fork();
          if (pid < 0) die("fork");
          if (pid == 0) {
            ::close(gate[1]);
            char name[32];
            std::snprintf(name, sizeof name, "hr-w%zu", n);
            ::prctl(PR_SET_NAME, name);
            touch(mapAnon(1u << 20, true), 1u << 20, kPage);
            char c;
            while (::read(gate[0], &c, 1) < 0 && errno == EINTR) {
            }
            ::_exit(0);
          }
        }
        ::close(gate[0]);
        std::printf("holding %zu\n", n);
        std::fflush(stdout);
        char line[64];
        if (std::fgets(line, sizeof line, stdin) == nullptr) die("stdin closed while holding");
        ::close(gate[1]);  // every held child's read ends
        while (::wait(nullptr) > 0) {
        }
      }
      const auto spawn_end = std::chrono::steady_clock::now() + std::chrono::seconds(spawn_seconds);
      for (; n < total; ++n) {
        if (spawn_seconds > 0 && (n & 15) == 0 && std::chrono::steady_clock::now() >= spawn_end) break;
        if (alive >= at_once) {
          if (::wait(nullptr) > 0) --alive;
        }
        pid_t pid = ::fork();
        if (pid < 0) die("fork");
        if (pid == 0) {
          char name[32];
          std::snprintf(name, sizeof name, "hr-w%zu", n);
          ::prctl(PR_SET_NAME, name);  // the kernel keeps 15 bytes
          touch(mapAnon(1u << 20, true), 1u << 20, kPage);
          ::usleep(static_cast<useconds_t>(ms * 1000));
          ::_exit(0);
        }
        ++alive;
      }
      while (::wait(nullptr) > 0) {
      }
      std::printf("spawned %zu\n", n);
      std::fflush(stdout);
    } else if (a == "--grow-after-ready") {
      need(2);
      grow_bytes = size(argv[++i]);
      grow_ms = size(argv[++i]);
    } else if (a == "--grow-on-line") {
      grow_on_line = true;
    } else if (a == "--threads") {
      need(2);
      std::size_t n = size(argv[++i]);
      std::size_t bytes = size(argv[++i]);
      std::vector<std::thread> threads;
      for (std::size_t t = 0; t < n; ++t) threads.emplace_back([bytes] { touch(mapAnon(bytes, true), bytes, kPage); });
      for (auto& t : threads) t.join();
    } else if (a == "--touch-per-line") {
      need(1);
      touch_per_line = size(argv[++i]);
    } else if (a == "--exit-code") {
      need(1);
      exit_code = static_cast<int>(size(argv[++i]));
    } else if (a == "--exit-after-ready") {
      exit_after_ready = true;
    } else {
      std::fprintf(stderr, "headroom-workload: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  std::printf("ready %d\n", static_cast<int>(::getpid()));
  std::fflush(stdout);
  if (exit_after_ready) return exit_code;
  auto grow = [grow_bytes, grow_ms] {
    std::thread([grow_bytes, grow_ms] {
      auto* p = static_cast<char*>(mapAnon(grow_bytes, true));
      for (std::size_t off = 0; off < grow_bytes; off += 1u << 20) {
        touch(p + off, std::min<std::size_t>(1u << 20, grow_bytes - off), kPage);
        ::usleep(static_cast<useconds_t>(grow_ms * 1000));
      }
    }).detach();
  };
  if (grow_bytes > 0 && !grow_on_line) grow();
  char c;
  while (::read(STDIN_FILENO, &c, 1) > 0) {
    if (c == '\n' && grow_bytes > 0 && grow_on_line) {
      grow();
      grow_on_line = false;
    }
    if (c == '\n' && touch_per_line > 0) {
      touch(mapAnon(touch_per_line, true), touch_per_line, kPage);
      std::printf("touched\n");
      std::fflush(stdout);
    }
  }
  return exit_code;
}
