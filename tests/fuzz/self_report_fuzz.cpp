// The prover's self-report: its source spec (a file, or a URL with #json:FIELD or #metric:NAME)
// and the number taken from what the file or the HTTP endpoint answered. The input: the spec, a
// NUL, the body; without a NUL, the whole input is a body read by each kind of source.
#include "fuzz_support.h"
#include "headroom/sources/self_report.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace headroom;
  std::string_view text = fuzz::text(data, size);
  auto nul = text.find('\0');
  if (nul != std::string_view::npos) {
    auto src = parseSelfReportSource(text.substr(0, nul));
    if (!src) return 0;
    // What a source says of itself is a spec that names the same source.
    auto again = parseSelfReportSource(src->text());
    fuzz::require(again.has_value(), "a source's text parses");
    fuzz::require(again->kind == src->kind && again->location == src->location && again->field == src->field,
                  "a source's text names the same source");
    (void)extractSelfReport(*src, text.substr(nul + 1));
    return 0;
  }
  for (const char* spec : {"/run/prover/used", "http://127.0.0.1:9000/status#json:mem.used_bytes",
                           "http://127.0.0.1:9000/metrics#metric:cuzk_memory_used_bytes{pool=\"all\"}"}) {
    auto src = parseSelfReportSource(spec);
    fuzz::require(src.has_value(), "the fixed specs parse");
    (void)extractSelfReport(*src, text);
  }
  return 0;
}
