/* Drives a CUDA driver library (the fake one in tests, or a real libcuda.so.1) through the
 * calls headroom counts, then waits: "ready" after the allocations; a line "ctx" on stdin
 * destroys the context ("destroyed"); a line "grow" touches anonymous memory 4 MiB at a time
 * until the OOM killer (or a limit) stops it; EOF exits with whatever is still allocated.
 *   cuda-client LIBRARY */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct {
  unsigned int type;
  unsigned int requestedHandleTypes;
  struct {
    unsigned int type;
    int id;
  } location;
  void* win32HandleMetaData;
  unsigned long long reserved;
} CUmemAllocationProp;

#define MiB (1024UL * 1024UL)

static void* lib;
static void* sym(const char* name) {
  void* f = dlsym(lib, name);
  if (!f) {
    fprintf(stderr, "cuda-client: %s missing\n", name);
    exit(2);
  }
  return f;
}

#define CHECK(call, want)                                          \
  do {                                                             \
    CUresult r_ = (call);                                          \
    if ((r_ == 0) != (want)) {                                     \
      fprintf(stderr, "cuda-client: %s returned %d\n", #call, r_); \
      exit(3);                                                     \
    }                                                              \
  } while (0)

int main(int argc, char** argv) {
  CUresult (*host_alloc)(void**, size_t, unsigned);
  CUresult (*alloc_host)(void**, size_t);
  CUresult (*free_host)(void*);
  CUresult (*host_register)(void*, size_t, unsigned);
  CUresult (*host_unregister)(void*);
  CUresult (*dev_alloc)(CUdeviceptr*, size_t);
  CUresult (*dev_pitch)(CUdeviceptr*, size_t*, size_t, size_t, unsigned);
  CUresult (*dev_free)(CUdeviceptr);
  CUresult (*vmm_create)(unsigned long long*, size_t, const CUmemAllocationProp*, unsigned long long);
  CUresult (*vmm_release)(unsigned long long);
  CUresult (*ctx_destroy)(void*);
  void *a, *b, *c, *fail = NULL, *reg;
  CUdeviceptr d1, d2, d3;
  size_t pitch = 0;
  unsigned long long h;
  CUmemAllocationProp prop;
  char line[64];

  if (argc != 2) {
    fprintf(stderr, "usage: cuda-client LIBRARY\n");
    return 2;
  }
  lib = dlopen(argv[1], RTLD_NOW);
  if (!lib) {
    fprintf(stderr, "cuda-client: %s\n", dlerror());
    return 2;
  }
  host_alloc = sym("cuMemHostAlloc");
  alloc_host = sym("cuMemAllocHost_v2");
  free_host = sym("cuMemFreeHost");
  host_register = sym("cuMemHostRegister_v2");
  host_unregister = sym("cuMemHostUnregister");
  dev_alloc = sym("cuMemAlloc_v2");
  dev_pitch = sym("cuMemAllocPitch_v2");
  dev_free = sym("cuMemFree_v2");
  vmm_create = sym("cuMemCreate");
  vmm_release = sym("cuMemRelease");
  ctx_destroy = sym("cuCtxDestroy_v2");

  /* Pinned: three allocations and one free; one call that fails; register + unregister. */
  CHECK(host_alloc(&a, 1 * MiB, 0), 1);
  CHECK(alloc_host(&b, 2 * MiB), 1);
  CHECK(host_alloc(&c, 4 * MiB, 0), 1);
  CHECK(free_host(b), 1);
  CHECK(host_alloc(&fail, 1ULL << 40, 0), 0);
  reg = malloc(1 * MiB);
  CHECK(host_register(reg, 1 * MiB, 0), 1);
  CHECK(host_unregister(reg), 1);
  /* Device: 8 MiB, a pitched 1000 x 100 (pitch 1024), 16 MiB freed again, a VMM 2 MiB. */
  CHECK(dev_alloc(&d1, 8 * MiB), 1);
  CHECK(dev_pitch(&d2, &pitch, 1000, 100, 4), 1);
  CHECK(dev_alloc(&d3, 16 * MiB), 1);
  CHECK(dev_free(d3), 1);
  memset(&prop, 0, sizeof(prop));
  prop.location.type = 1;
  CHECK(vmm_create(&h, 2 * MiB, &prop, 0), 1);
  CHECK(vmm_release(h), 1);
  CHECK(dev_alloc(&d3, 1ULL << 40), 0);

  printf("ready %d\n", (int)getpid());
  fflush(stdout);
  while (fgets(line, sizeof(line), stdin)) {
    if (strncmp(line, "ctx", 3) == 0) {
      CHECK(ctx_destroy(NULL), 1);
      printf("destroyed\n");
      fflush(stdout);
    } else if (strncmp(line, "grow", 4) == 0) {
      for (;;) {
        char* p = malloc(4 * MiB);
        if (!p) return 4;
        memset(p, 1, 4 * MiB);
      }
    }
  }
  (void)a;
  (void)c;
  (void)d1;
  (void)d2;
  return 0;
}
