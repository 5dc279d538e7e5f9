// The baseline the probe is measured against: a plain single-threaded loop of 1 GiB anonymous
// mmap + memset chunks over the given number of bytes. Prints {"bytes":N,"seconds":S}.
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: memset-loop BYTES\n");
    return 2;
  }
  const std::size_t total = std::strtoull(argv[1], nullptr, 10);
  const std::size_t chunk = 1UL << 30;
  std::vector<std::pair<void*, std::size_t>> maps;
  auto t0 = std::chrono::steady_clock::now();
  for (std::size_t done = 0; done < total;) {
    std::size_t n = total - done < chunk ? total - done : chunk;
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 1;
    std::memset(p, 0x5a, n);
    maps.emplace_back(p, n);
    done += n;
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto [p, n] : maps) ::munmap(p, n);
  std::printf("{\"bytes\":%zu,\"seconds\":%.6f}\n", total, s);
  return 0;
}
