// /proc/<pid>/stat (a comm in parentheses that may hold spaces and ')') and /proc/<pid>/statm.
#include "fuzz_support.h"
#include "headroom/sources/procfs.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace headroom;
  std::string_view text = fuzz::text(data, size);
  if (auto s = parseProcStat(text)) {
    fuzz::require(s->comm.size() <= text.size(), "the comm is a part of the text");
    fuzz::require(text.find(s->comm) != std::string_view::npos, "the comm is as the text has it");
  }
  (void)parseStatmResidentBytes(text, 4096);
  return 0;
}
