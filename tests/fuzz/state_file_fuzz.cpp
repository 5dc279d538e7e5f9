// The controller's state file (JSON): parsed or refused with an error, and what parses is saved
// and read back the same.
#include "fuzz_support.h"
#include "headroom/controller/controller.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace headroom;
  auto s = parseState(fuzz::text(data, size), "fuzz");
  if (!s) return 0;
  fuzz::require(s->history.size() <= ControllerState::kHistory, "the history is bounded");
  auto again = parseState(serialiseState(*s), "fuzz (saved)");
  fuzz::require(again.has_value(), "a state saved reads back");
  fuzz::require(*again == *s, "a state saved reads back the same");
  return 0;
}
