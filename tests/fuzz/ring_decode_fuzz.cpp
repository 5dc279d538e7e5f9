// The BPF rings' and the task iterator's records (bpf/events.h) as events: bytes in, events out,
// a short, torn or unknown record refused and never read past.
#include <unordered_map>

#include "fuzz_support.h"
#include "headroom/sensors/ring_decode.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace headroom;
  auto bytes = fuzz::bytes(data, size);
  (void)decodeOomRecord(bytes);
  (void)decodeExitRecord(bytes);
  // As the sensors call it: USER_HZ and the page size of x86-64, with and without the counters.
  std::unordered_map<pid_t, TaskCounters> counters;
  auto tasks = decodeTaskRecords(bytes, 100, 4096, true, &counters);
  if (tasks) {
    for (std::size_t i = 1; i < tasks->size(); ++i)
      fuzz::require((*tasks)[i - 1].pid <= (*tasks)[i].pid, "processes come sorted by pid");
  }
  (void)decodeTaskRecords(bytes, 100, 4096, false);
  return 0;
}
