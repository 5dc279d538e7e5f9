// /proc/<pid>/status: "Key:\tvalue kB" lines mixed with text ones.
#include "fuzz_support.h"
#include "headroom/sources/procfs.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace headroom;
  std::string_view text = fuzz::text(data, size);
  auto s = parseProcStatus(text);
  if (s)
    fuzz::require(s->kernel_thread || s->vm_rss == parseColonKbLines(text).getOr("VmRSS"), "VmRSS as the file says");
  // /proc/meminfo is the same format, read through its own named fields.
  (void)parseMeminfo(text);
  return 0;
}
