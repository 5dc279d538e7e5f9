// Fault-heavy workload for `make bench`: THREADS threads each map CHUNK bytes of fresh
// anonymous memory (MADV_NOHUGEPAGE, so one fault per 4 KiB page), touch every page, unmap,
// ROUNDS times. Prints the wall time and the number of pages touched as one JSON line.
//   fault-bench THREADS CHUNK_BYTES ROUNDS
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: fault-bench THREADS CHUNK_BYTES ROUNDS\n");
    return 2;
  }
  int threads = std::atoi(argv[1]);
  std::size_t chunk = std::strtoull(argv[2], nullptr, 10);
  int rounds = std::atoi(argv[3]);
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&] {
      for (int r = 0; r < rounds; ++r) {
        void* p = ::mmap(nullptr, chunk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) std::abort();
        ::madvise(p, chunk, MADV_NOHUGEPAGE);
        auto* c = static_cast<volatile char*>(p);
        for (std::size_t off = 0; off < chunk; off += 4096) c[off] = 1;
        ::munmap(p, chunk);
      }
    });
  }
  for (auto& t : ts) t.join();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  unsigned long long pages = static_cast<unsigned long long>(threads) * rounds * (chunk / 4096);
  std::printf("{\"seconds\": %.6f, \"pages\": %llu}\n", secs, pages);
  return 0;
}
