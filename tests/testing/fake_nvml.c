/* A stand-in for libnvidia-ml.so.1 in tests: the NVML calls headroom makes, with nvml.h's
 * signatures, answering for one GPU. Its processes are those the stand-in libcuda published in
 * HEADROOM_FAKE_GPU_DIR (one file per pid holding the device bytes it holds) that are still
 * alive, as the real NVML lists the processes with a context and the memory the driver gave them.
 * HEADROOM_FAKE_NVML_INIT=<code> makes nvmlInit fail with that code (9: the driver not loaded). */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef struct {
  int unused;
} fake_device;
typedef fake_device* nvmlDevice_t;
typedef struct {
  unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

#define EXPORT __attribute__((visibility("default")))
#define NVML_SUCCESS 0
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define TOTAL (80ULL << 30)
#define RESERVED (512ULL << 20) /* what the driver keeps for itself on the device */

static fake_device gpu0;

EXPORT nvmlReturn_t nvmlInit_v2(void) {
  const char* fail = getenv("HEADROOM_FAKE_NVML_INIT");
  return fail ? atoi(fail) : NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }
EXPORT const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case 0: return "Success";
    case 2: return "Invalid Argument";
    case 7: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    default: return "Unknown Error";
  }
}
EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* v, unsigned int n) {
  snprintf(v, n, "stand-in");
  return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* n) {
  *n = 1;
  return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t* d) {
  if (i != 0 || !d) return NVML_ERROR_INVALID_ARGUMENT;
  *d = &gpu0;
  return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char* name, unsigned int n) {
  (void)d;
  snprintf(name, n, "headroom stand-in GPU");
  return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char* uuid, unsigned int n) {
  (void)d;
  snprintf(uuid, n, "GPU-00000000-0000-0000-0000-0000000000f0");
  return NVML_SUCCESS;
}

/* The live processes the stand-in libcuda published, at most `room`; returns how many there are. */
static unsigned int processes(nvmlProcessInfo_t* out, unsigned int room, unsigned long long* used) {
  const char* dir = getenv("HEADROOM_FAKE_GPU_DIR");
  unsigned int n = 0;
  struct dirent* e;
  DIR* d;

  *used = RESERVED;
  if (!dir || !(d = opendir(dir))) return 0;
  while ((e = readdir(d))) {
    char path[512];
    unsigned long long bytes = 0;
    int pid = atoi(e->d_name);
    FILE* f;

    if (pid <= 0 || kill(pid, 0) != 0) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (!(f = fopen(path, "r"))) continue;
    if (fscanf(f, "%llu", &bytes) != 1) bytes = 0;
    fclose(f);
    *used += bytes;
    if (n < room) {
      out[n].pid = (unsigned int)pid;
      out[n].usedGpuMemory = bytes;
      out[n].gpuInstanceId = out[n].computeInstanceId = 0xFFFFFFFFu;
    }
    n++;
  }
  closedir(d);
  return n;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t* m) {
  unsigned long long used;
  (void)d;
  processes(NULL, 0, &used);
  m->total = TOTAL;
  m->used = used;
  m->free = TOTAL - used;
  return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int* count,
                                                            nvmlProcessInfo_t* infos) {
  unsigned long long used;
  unsigned int room = *count, n;
  (void)d;
  n = processes(infos, room, &used);
  *count = n;
  return n > room ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
}
