// Saved kernel log text of any form (sources/log_text.h) made into lines and assembled into OOM
// reports (sources/oom_log.h): whatever the bytes, every kill is proven by a line with a pid,
// and nothing holds more than the text could give.
#include "fuzz_support.h"
#include "headroom/sources/log_text.h"
#include "headroom/sources/oom_log.h"
#include "headroom/sources/parse.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace headroom;
  std::string_view text = fuzz::text(data, size);
  LogText lt = readLogText(text);
  // A line of text may hold several of the kernel's (escaped newlines, a journal entry's MESSAGE).
  std::size_t bound = splitLines(text).size() + 1;
  for (std::string_view esc : {"\\x0a", "#012", "\\n"}) {
    for (auto at = text.find(esc); at != std::string_view::npos; at = text.find(esc, at + 1)) ++bound;
  }
  fuzz::require(lt.lines.size() <= bound, "no more lines than the text holds");
  auto reports = parseOomLog(lt);
  fuzz::require(reports.size() <= lt.lines.size(), "no more reports than lines");
  for (const KernelOomReport& r : reports) {
    fuzz::require(r.proof == KillProof::kNone || r.victim.pid > 0, "a kill names its pid");
    fuzz::require(!r.memcg || r.memcg->stats.size() <= lt.lines.size() * 64, "no more statistics than the text");
    if (r.machine) (void)r.machine->nodeSum("kernel_stack");
    (void)r.victim.charge();
  }
  return 0;
}
