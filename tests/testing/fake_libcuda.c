/* A stand-in for libcuda.so.1 in tests: it exports the driver API symbols that headroom's
 * uprobes attach to, with the real signatures, and does what matters to the sensors: host
 * allocations are real pages (mmap + mlock, as the driver pins them), device "pointers" are
 * distinct addresses, and asking for 1 TiB or more fails with CUDA_ERROR_OUT_OF_MEMORY.
 * With HEADROOM_FAKE_GPU_DIR set, the device memory it holds for a process is written to
 * DIR/<pid> at each change, where the stand-in NVML (fake_nvml.c) reads it, as the real driver's
 * NVML reports what the driver allocated for each process. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct {
  unsigned int type;
  unsigned int requestedHandleTypes;
  struct {
    unsigned int type; /* 1 device, 2 host */
    int id;
  } location;
  void* win32HandleMetaData;
  unsigned long long reserved;
} CUmemAllocationProp;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define EXPORT __attribute__((visibility("default"), noinline))
#define TOO_BIG (1ULL << 40)

static struct {
  void* p;
  size_t n;
} host[64];
static CUdeviceptr next_device = 0x7f0000000000ULL;
static struct {
  CUdeviceptr d;
  size_t n;
} device[64];

/* What the stand-in NVML reports for this process: the device bytes it holds now. */
static void publish_device(void) {
  const char* dir = getenv("HEADROOM_FAKE_GPU_DIR");
  unsigned long long live = 0;
  char path[512], tmp[512];
  FILE* f;
  int i;

  if (!dir) return;
  for (i = 0; i < 64; i++) live += device[i].n;
  snprintf(path, sizeof path, "%s/%d", dir, (int)getpid());
  snprintf(tmp, sizeof tmp, "%s/.%d", dir, (int)getpid());
  f = fopen(tmp, "w");
  if (!f) return;
  fprintf(f, "%llu\n", live);
  fclose(f);
  rename(tmp, path);
}

static CUresult host_alloc(void** pp, size_t size) {
  void* p;
  int i;

  if (!pp || size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (size >= TOO_BIG) return CUDA_ERROR_OUT_OF_MEMORY;
  p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  memset(p, 0, size);
  mlock(p, size);
  for (i = 0; i < 64; i++) {
    if (!host[i].p) {
      host[i].p = p;
      host[i].n = size;
      break;
    }
  }
  *pp = p;
  return CUDA_SUCCESS;
}

static CUresult device_alloc(CUdeviceptr* d, size_t size) {
  if (!d || size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (size >= TOO_BIG) return CUDA_ERROR_OUT_OF_MEMORY;
  *d = next_device;
  next_device += (size + 0xfffff) & ~0xfffffULL;
  for (int i = 0; i < 64; i++) {
    if (!device[i].d) {
      device[i].d = *d;
      device[i].n = size;
      break;
    }
  }
  publish_device();
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemHostAlloc(void** pp, size_t size, unsigned int flags) {
  (void)flags;
  return host_alloc(pp, size);
}
EXPORT CUresult cuMemAllocHost_v2(void** pp, size_t size) { return host_alloc(pp, size); }

EXPORT CUresult cuMemFreeHost(void* p) {
  int i;

  for (i = 0; i < 64; i++) {
    if (host[i].p == p) {
      munlock(p, host[i].n);
      munmap(p, host[i].n);
      host[i].p = NULL;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemHostRegister_v2(void* p, size_t size, unsigned int flags) {
  (void)flags;
  return mlock(p, size) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

EXPORT CUresult cuMemHostUnregister(void* p) {
  (void)p;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* d, size_t size) { return device_alloc(d, size); }
EXPORT CUresult cuMemAllocManaged(CUdeviceptr* d, size_t size, unsigned int flags) {
  (void)flags;
  return device_alloc(d, size);
}
EXPORT CUresult cuMemAllocAsync(CUdeviceptr* d, size_t size, void* stream) {
  (void)stream;
  return device_alloc(d, size);
}
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* d, size_t size, void* stream) {
  (void)stream;
  return device_alloc(d, size);
}

EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* d, size_t* pitch, size_t width, size_t height, unsigned int elem) {
  (void)elem;
  if (!pitch) return CUDA_ERROR_INVALID_VALUE;
  *pitch = (width + 511) & ~(size_t)511;
  return device_alloc(d, *pitch * height);
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr d) {
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; i < 64; i++) {
    if (device[i].d == d) {
      device[i].d = 0;
      device[i].n = 0;
      publish_device();
    }
  }
  return CUDA_SUCCESS;
}
EXPORT CUresult cuMemFreeAsync(CUdeviceptr d, void* stream) {
  (void)stream;
  return cuMemFree_v2(d);
}
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr d, void* stream) {
  (void)stream;
  return cuMemFree_v2(d);
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* h, size_t size, const CUmemAllocationProp* prop,
                            unsigned long long flags) {
  (void)flags;
  if (!h || !prop || size == 0) return CUDA_ERROR_INVALID_VALUE;
  *h = next_device++;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
  (void)h;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxDestroy_v2(void* ctx) {
  (void)ctx;
  return CUDA_SUCCESS;
}
