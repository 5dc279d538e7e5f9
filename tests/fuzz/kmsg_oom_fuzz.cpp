// The kernel's OOM report assembled from a stream of /dev/kmsg records (one a line, as `cat
// /dev/kmsg` prints them): every record through the real parser, whatever order or garbage.
#include "fuzz_support.h"
#include "headroom/sources/kmsg.h"
#include "headroom/sources/parse.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace headroom;
  std::string_view text = fuzz::text(data, size);
  auto reports = parseKmsgOomReports(text);
  std::size_t records = 0;
  for (auto line : splitLines(text)) records += parseKmsgRecord(line).has_value() ? 1 : 0;
  fuzz::require(reports.size() <= records, "no more reports than records");
  // A record's text may hold several lines, joined with escaped newlines (6.1's statistics block).
  std::size_t lines = records;
  for (auto at = text.find("\\x0a"); at != std::string_view::npos; at = text.find("\\x0a", at + 1)) ++lines;
  for (const KernelOomReport& r : reports) {
    fuzz::require(!r.memcg || r.memcg->stats.size() <= lines, "no more statistics than lines");
    if (r.machine) (void)r.machine->nodeSum("kernel_stack");
    (void)r.victim.charge();
  }
  return 0;
}
