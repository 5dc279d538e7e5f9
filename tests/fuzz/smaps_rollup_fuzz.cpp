// /proc/<pid>/smaps_rollup: a mapping range line, then "Key:   123 kB" lines.
#include "fuzz_support.h"
#include "headroom/sources/procfs.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace headroom;
  std::string_view text = fuzz::text(data, size);
  (void)parseSmapsRollup(text);
  // /proc/<pid>/smaps, the same lines per mapping, with VmFlags: where pinned memory lives.
  auto vmas = parseSmapsVmas(text);
  (void)pinnedInsideRss(vmas, {0, 4096, 0x7f0000000000ULL, ~0ULL});
  return 0;
}
