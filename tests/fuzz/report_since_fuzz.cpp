// `headroom report --since`: a date and time, a unix time or an age, as people type them.
#include <cmath>

#include "fuzz_support.h"
#include "headroom/report/report.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace headroom;
  constexpr double kNow = 1'796'000'000.0;  // late 2026
  auto t = parseSinceTime(fuzz::text(data, size), kNow);
  // A time a date could say: 0000-01-01 .. 9999-12-31 (a date's offset may take it a day past).
  if (t)
    fuzz::require(std::isfinite(*t) && *t >= -62167219200.0 - 86400 && *t <= 253402300799.0 + 86400,
                  "a time to compare records with is a finite time of the years 0 to 9999");
  return 0;
}
