// A real CUDA program that holds memory the way a GPU prover does, built with nvcc and the CUDA
// runtime linked in statically (it needs nothing but the driver's libcuda.so.1 to run):
//   --pool N --chunk BYTES  a pinned pool: N chunks from cudaHostAlloc, each touched and used for
//                           a copy to the device, returned to the pool, never freed
//   --device BYTES          device memory from cudaMalloc, set with cudaMemset
//   --srs FILE              an SRS-style load: the file mapped, copied into pinned memory of its
//                           size (for a moment both the page cache and the pinned copy are
//                           charged), then copied to the device when there is room, the map let go
// After the allocations it prints one JSON line: {"ready": true, "pid", "pinned_bytes",
// "device_bytes", "srs_bytes", "chunks"}; a failed call prints {"ready": false, "call", "code",
// "error"} (no driver: 35, a driver and no device: 100) and exits 3 when stdin closes (so that
// what the probes counted of it can be read first). Then it reads stdin: "grow" touches host memory
// 64 MiB at a time until the OOM killer stops it ("growing" first); EOF exits, the pool held.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

bool failed(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return false;
  std::printf("{\"ready\": false, \"call\": \"%s\", \"code\": %d, \"error\": \"%s\"}\n", call, static_cast<int>(e),
              cudaGetErrorName(e));
  std::fflush(stdout);
  while (std::getchar() != EOF) {
  }
  return true;
}

unsigned long long number(const char* flag, const char* v) {
  char* end = nullptr;
  unsigned long long n = std::strtoull(v, &end, 10);
  if (end == v || *end != '\0') {
    std::fprintf(stderr, "headroom-cuda-prover: %s wants a number of bytes, not \"%s\"\n", flag, v);
    std::exit(2);
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  unsigned long long pool = 0, chunk = 64ULL << 20, device = 0;
  const char* srs = nullptr;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "headroom-cuda-prover: %s wants a value\n", a.c_str());
      return 2;
    }
    if (a == "--pool") {
      pool = number("--pool", argv[++i]);
    } else if (a == "--chunk") {
      chunk = number("--chunk", argv[++i]);
    } else if (a == "--device") {
      device = number("--device", argv[++i]);
    } else if (a == "--srs") {
      srs = argv[++i];
    } else {
      std::fprintf(stderr, "headroom-cuda-prover: unknown argument %s\n", a.c_str());
      return 2;
    }
  }

  // Device memory first: the pool's chunks are copied into it.
  void* dev = nullptr;
  if (device > 0) {
    if (failed(cudaMalloc(&dev, device), "cudaMalloc")) return 3;
    if (failed(cudaMemset(dev, 0, device), "cudaMemset")) return 3;
  }
  // The pinned pool: allocated, touched, used, returned; never freed.
  std::vector<void*> free_chunks;
  for (unsigned long long i = 0; i < pool; ++i) {
    void* p = nullptr;
    if (failed(cudaHostAlloc(&p, chunk, cudaHostAllocDefault), "cudaHostAlloc")) return 3;
    std::memset(p, static_cast<int>(i & 0xff), chunk);
    free_chunks.push_back(p);
  }
  for (void* p : free_chunks) {
    if (dev != nullptr &&
        failed(cudaMemcpy(dev, p, chunk < device ? chunk : device, cudaMemcpyHostToDevice), "cudaMemcpy"))
      return 3;
  }
  // The SRS: mapped, copied into pinned memory of its size, onto the device where it fits.
  unsigned long long srs_bytes = 0;
  if (srs != nullptr) {
    int fd = ::open(srs, O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0 || st.st_size <= 0) {
      std::fprintf(stderr, "headroom-cuda-prover: --srs %s: %s\n", srs, std::strerror(errno));
      return 2;
    }
    srs_bytes = static_cast<unsigned long long>(st.st_size);
    void* map = ::mmap(nullptr, srs_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED) {
      std::fprintf(stderr, "headroom-cuda-prover: mapping %s: %s\n", srs, std::strerror(errno));
      return 2;
    }
    void* pinned = nullptr;
    if (failed(cudaHostAlloc(&pinned, srs_bytes, cudaHostAllocDefault), "cudaHostAlloc")) return 3;
    std::memcpy(pinned, map, srs_bytes);
    ::munmap(map, srs_bytes);
    if (dev != nullptr &&
        failed(cudaMemcpy(dev, pinned, srs_bytes < device ? srs_bytes : device, cudaMemcpyHostToDevice), "cudaMemcpy"))
      return 3;
  }
  std::printf(
      "{\"ready\": true, \"pid\": %d, \"pinned_bytes\": %llu, \"device_bytes\": %llu, \"srs_bytes\": %llu, "
      "\"chunks\": %llu}\n",
      static_cast<int>(::getpid()), pool * chunk + srs_bytes, device, srs_bytes, pool);
  std::fflush(stdout);

  char line[64];
  while (std::fgets(line, sizeof line, stdin) != nullptr) {
    if (std::strncmp(line, "grow", 4) != 0) continue;
    std::printf("growing\n");
    std::fflush(stdout);
    for (;;) {
      char* p = static_cast<char*>(std::malloc(64ULL << 20));
      if (p == nullptr) return 4;
      std::memset(p, 1, 64ULL << 20);
    }
  }
  return 0;
}
