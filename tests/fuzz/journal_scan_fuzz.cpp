// The OOM journal's file as a reader scans it: intact frames taken, damage (bad magic, length,
// CRC, JSON, a torn tail) counted to the byte, the writer's own scan agreeing, and every record
// framed again reads back the same.
#include <algorithm>

#include "fuzz_support.h"
#include "headroom/journal/journal.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace headroom;
  std::string_view bytes = fuzz::text(data, size);
  ScanResult s = scanJournal(bytes);
  fuzz::require(s.records.size() == s.offsets.size(), "one offset per record");
  std::uint64_t damaged = 0;
  std::uint64_t last_end = 0;
  for (const auto& d : s.damage) {
    fuzz::require(d.length > 0 && d.offset >= last_end && d.offset + d.length <= size, "damage in file order, inside");
    fuzz::require(!d.what.empty(), "damage says what it is");
    last_end = d.offset + d.length;
    damaged += d.length;
  }
  fuzz::require(s.good_bytes + damaged == size, "every byte is a record's or damage");
  fuzz::require(s.torn_tail == (s.tail_offset < size), "a torn tail starts inside the file");
  if (s.torn_tail) {
    fuzz::require(!s.damage.empty() && s.damage.back().offset == s.tail_offset, "the torn tail is the last damage");
    fuzz::require(s.damage.back().offset + s.damage.back().length == size, "the torn tail runs to the end");
  }
  // The writer reads the same file for its ids alone: the same damage, and the same largest id.
  std::uint64_t max_id = 0;
  ScanResult w = detail::scanJournalIds(bytes, max_id);
  fuzz::require(w.damage.size() == s.damage.size() && w.good_bytes == s.good_bytes && w.torn_tail == s.torn_tail &&
                    w.tail_offset == s.tail_offset,
                "the writer's scan finds the damage the reader's does");
  for (std::size_t i = 0; i < s.damage.size(); ++i)
    fuzz::require(w.damage[i].offset == s.damage[i].offset && w.damage[i].length == s.damage[i].length,
                  "the writer's scan finds the damage the reader's does, where it does");
  std::uint64_t reader_max = 0;
  for (const auto& r : s.records) {
    auto id = r.find("id");
    if (id != r.end() && id->is_number_unsigned()) reader_max = std::max(reader_max, id->get<std::uint64_t>());
  }
  fuzz::require(max_id == reader_max, "the writer's next id follows the largest id a reader sees");
  for (std::size_t i = 0; i < s.records.size(); ++i) {
    fuzz::require(s.offsets[i] < size && (i == 0 || s.offsets[i - 1] < s.offsets[i]), "records in file order");
    fuzz::require(s.records[i].is_object(), "a record is a JSON object");
    std::string again = frameRecord(s.records[i]);
    ScanResult one = scanJournal(again);
    fuzz::require(one.records.size() == 1 && one.damage.empty(), "a record framed again is one intact frame");
    fuzz::require(one.records[0] == s.records[i], "a record framed again reads back the same");
  }
  return 0;
}
