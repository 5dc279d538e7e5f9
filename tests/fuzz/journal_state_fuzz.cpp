// The state beside the OOM journal (JSON): parsed or refused with an error, and what parses is
// written and read back the same.
#include "fuzz_support.h"
#include "headroom/journal/journal_state.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace headroom;
  auto s = parseJournalState(fuzz::text(data, size), "fuzz");
  if (!s) return 0;
  auto again = parseJournalState(serialiseJournalState(*s), "fuzz (saved)");
  fuzz::require(again.has_value(), "a state written reads back");
  fuzz::require(*again == *s, "a state written reads back the same");
  return 0;
}
