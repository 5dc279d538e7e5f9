// What `headroom report --from-json` reads (docs/events.md): JSON lines, arrays and the wrappers
// of log stores. Every record read is an object that goes out as an envelope line and reads back
// the same, and its journald fields are well named.
#include "fuzz_support.h"
#include "headroom/report/events.h"
#include "headroom/util/json.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace headroom;
  auto r = readEvents(fuzz::text(data, size), "fuzz");
  if (!r) {
    fuzz::require(r.error().describe().rfind("fuzz", 0) == 0, "an error names its source");
    return 0;
  }
  for (const nlohmann::json& rec : r->records) {
    fuzz::require(rec.is_object(), "a record is a JSON object");
    auto again = readEvents(eventLine(rec), "again");
    fuzz::require(again && again->records.size() == 1 && again->skipped == 0, "a record written reads back");
    fuzz::require(dumpJson(again->records[0]) == dumpJson(rec), "a record written reads back the same");
    for (const std::string& f : journaldFields(rec)) {
      const auto eq = f.find('=');
      fuzz::require(eq != std::string::npos && eq > 0 && eq <= 64, "a journald field is NAME=value");
      fuzz::require(f.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") == eq && f[0] != '_',
                    "a journald field's name is [A-Z0-9_], not starting with _");
    }
  }
  return 0;
}
