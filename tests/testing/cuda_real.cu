// A real CUDA program (built with nvcc, the runtime linked in statically): it asks for pinned
// host memory and device memory through the CUDA runtime, prints what the calls returned, and
// waits for its stdin to close. Without a driver every call fails (35: no driver).
#include <cuda_runtime.h>

#include <cstdio>

int main() {
  void* host = nullptr;
  cudaError_t e1 = cudaHostAlloc(&host, 1 << 20, cudaHostAllocDefault);
  void* dev = nullptr;
  cudaError_t e2 = cudaMalloc(&dev, 1 << 20);
  void* host2 = nullptr;
  cudaError_t e3 = cudaMallocHost(&host2, 2 << 20);
  std::printf("ready cudaHostAlloc=%d cudaMalloc=%d cudaMallocHost=%d\n", static_cast<int>(e1), static_cast<int>(e2),
              static_cast<int>(e3));
  std::fflush(stdout);
  int c;
  while ((c = std::getchar()) != EOF) {
  }
  if (e1 == cudaSuccess) cudaFreeHost(host);
  if (e3 == cudaSuccess) cudaFreeHost(host2);
  if (e2 == cudaSuccess) cudaFree(dev);
  return 0;
}
