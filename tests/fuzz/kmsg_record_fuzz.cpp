// One record of /dev/kmsg as a read() returns it ("pri,seq,ts,flags;message\n KEY=VALUE..."):
// parsed or refused, the message its first line alone, the level a syslog level.
#include "fuzz_support.h"
#include "headroom/sources/kmsg.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace headroom;
  auto r = parseKmsgRecord(fuzz::text(data, size));
  if (!r) return 0;
  fuzz::require(r->priority >= 0 && r->priority <= 7, "the priority is a syslog level");
  fuzz::require(r->facility >= 0, "the facility is not negative");
  fuzz::require(r->message.find('\n') == std::string::npos, "the message is one line");
  return 0;
}
