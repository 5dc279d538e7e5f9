#include "headroom/journal/journal.h"
#include "headroom/journal/flight_recorder.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <gtest/gtest.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace headroom {
namespace {

using nlohmann::json;

struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "headroom-journal-XXXXXX").string();
    char* p = ::mkdtemp(tmpl.data());
    if (p == nullptr) throw std::runtime_error("mkdtemp failed");
    path = p;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void spit(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

json sample(int n) {
  return {
      {"version", 1},
      {"seq", n},
      {"time", 1700000000.25 + n},
      {"event", {{"victims", json::array({{{"pid", 100 + n}, {"comm", "cuzk"}}})}, {"constraint", "CONSTRAINT_MEMCG"}}},
      {"note", "line one\nline two\ttabbed \"quoted\" é"},
      {"budget", nullptr}};
}

// A frame with a given body, bypassing frameRecord, for damage that a writer would never make.
std::string rawFrame(std::string_view body, std::optional<std::uint64_t> length = std::nullopt,
                     std::optional<std::uint32_t> crc = std::nullopt) {
  std::uint32_t c = crc ? *crc
                        : static_cast<std::uint32_t>(
                              ::crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size())));
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", c);
  return "HRJ1 " + std::to_string(length.value_or(body.size())) + " " + hex + " " + std::string(body) + "\n";
}

// ---- framing ----

TEST(JournalFraming, OneLineWithLengthAndCrcOfTheJson) {
  json rec = sample(1);
  std::string f = frameRecord(rec);
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f.back(), '\n');
  EXPECT_EQ(f.find('\n'), f.size() - 1) << "the embedded newline is escaped: one line per record";
  ASSERT_EQ(f.rfind("HRJ1 ", 0), 0u);
  // "HRJ1 <length> <crc> <json>\n"
  std::istringstream in(f.substr(5));
  std::uint64_t length = 0;
  std::string crc;
  in >> length >> crc;
  std::string body = f.substr(f.find(' ', f.find(' ', 5) + 1) + 1);
  body.pop_back();
  EXPECT_EQ(length, body.size());
  ASSERT_EQ(crc.size(), 8u);
  char expect[9];
  std::snprintf(expect, sizeof expect, "%08lx",
                ::crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size())));
  EXPECT_EQ(crc, expect);
  EXPECT_EQ(json::parse(body), rec);
  // Known answer: the body of that JSON string is the 11 bytes "\"123456789\"", whose
  // CRC-32 (zlib, IEEE) is 83593021.
  EXPECT_EQ(frameRecord(json("123456789")), "HRJ1 11 83593021 \"123456789\"\n");
}

TEST(JournalFraming, RoundTripsThroughTheScan) {
  std::string bytes;
  for (int i = 0; i < 3; ++i) bytes += frameRecord(sample(i));
  ScanResult s = scanJournal(bytes);
  ASSERT_EQ(s.records.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(s.records[static_cast<std::size_t>(i)], sample(i));
  EXPECT_TRUE(s.damage.empty());
  EXPECT_FALSE(s.torn_tail);
  EXPECT_EQ(s.good_bytes, bytes.size());
  EXPECT_EQ(s.tail_offset, bytes.size());
  EXPECT_EQ(s.offsets, (std::vector<std::uint64_t>{0, frameRecord(sample(0)).size(),
                                                   frameRecord(sample(0)).size() + frameRecord(sample(1)).size()}));
  EXPECT_TRUE(scanJournal("").records.empty());
  EXPECT_FALSE(scanJournal("").torn_tail);
}

TEST(JournalFraming, BytesThatAreNotUtf8NeverThrow) {
  json rec = {{"comm", std::string("cu\xff\xfezk")}};
  std::string f;
  ASSERT_NO_THROW(f = frameRecord(rec));
  ScanResult s = scanJournal(f);
  ASSERT_EQ(s.records.size(), 1u);
  EXPECT_EQ(s.records[0]["comm"], "cu\xEF\xBF\xBD\xEF\xBF\xBDzk") << "replaced, not dropped";
}

// ---- scan: torn tails ----

TEST(JournalScan, TruncatedAnywhereInTheLastRecordIsATornTail) {
  std::string a = frameRecord(sample(1)), b = frameRecord(sample(2)), c = frameRecord(sample(3));
  std::string whole = a + b + c;
  for (std::size_t cut = a.size() + b.size() + 1; cut < whole.size(); ++cut) {
    SCOPED_TRACE(cut);
    ScanResult s = scanJournal(std::string_view(whole).substr(0, cut));
    ASSERT_EQ(s.records.size(), 2u) << "every intact record reads";
    EXPECT_EQ(s.records[1], sample(2));
    EXPECT_TRUE(s.torn_tail);
    EXPECT_EQ(s.tail_offset, a.size() + b.size());
    ASSERT_EQ(s.damage.size(), 1u);
    EXPECT_EQ(s.damage[0].offset, a.size() + b.size());
    EXPECT_EQ(s.damage[0].length, cut - a.size() - b.size());
    EXPECT_EQ(s.damage[0].what, "truncated (no newline)");
    EXPECT_EQ(s.good_bytes, a.size() + b.size());
  }
}

TEST(JournalScan, LastLineCutShortOfItsLengthIsATornTail) {
  std::string a = frameRecord(sample(1)), c = frameRecord(sample(3));
  // The frame's header says more bytes than the line holds, and a newline follows (a crash
  // that kept the start of the write and a later newline).
  std::string cut = c.substr(0, c.size() / 2) + "\n";
  ScanResult s = scanJournal(a + cut);
  ASSERT_EQ(s.records.size(), 1u);
  EXPECT_TRUE(s.torn_tail);
  EXPECT_EQ(s.tail_offset, a.size());
  ASSERT_EQ(s.damage.size(), 1u);
  EXPECT_NE(s.damage[0].what.find("truncated"), std::string::npos) << s.damage[0].what;
  // Only the header, cut: torn as well.
  s = scanJournal(a + "HRJ1 12\n");
  EXPECT_TRUE(s.torn_tail);
}

// ---- scan: damage in the middle ----

struct Corruption {
  const char* name;
  std::string (*make)(const std::string& good_frame);
  const char* what;
};

class JournalScanCorrupt : public ::testing::TestWithParam<Corruption> {};

TEST_P(JournalScanCorrupt, MiddleRecordSkippedCountedAndLaterRecordsRead) {
  std::string a = frameRecord(sample(1)), b = frameRecord(sample(2)), c = frameRecord(sample(3));
  std::string bad = GetParam().make(b);
  ASSERT_EQ(bad.back(), '\n');
  std::string bytes = a + bad + c;
  ScanResult s = scanJournal(bytes);
  ASSERT_EQ(s.records.size(), 2u);
  EXPECT_EQ(s.records[0], sample(1));
  EXPECT_EQ(s.records[1], sample(3)) << "reading goes on after the damaged line";
  EXPECT_FALSE(s.torn_tail) << "damage in the middle is not a torn tail";
  EXPECT_EQ(s.tail_offset, bytes.size());
  ASSERT_EQ(s.damage.size(), 1u);
  EXPECT_EQ(s.damage[0].offset, a.size());
  EXPECT_EQ(s.damage[0].length, bad.size());
  EXPECT_NE(s.damage[0].what.find(GetParam().what), std::string::npos) << s.damage[0].what;
  EXPECT_EQ(s.good_bytes + s.damage[0].length, bytes.size());
  // The same line last, but whole (newline, full length): damage, still not torn.
  if (std::string(GetParam().name) != "cut_short") {
    ScanResult last = scanJournal(a + bad);
    EXPECT_FALSE(last.torn_tail);
    EXPECT_EQ(last.records.size(), 1u);
    EXPECT_EQ(last.damage.size(), 1u);
  }
}

std::string body(const std::string& frame) {
  std::size_t s1 = frame.find(' ', 5);
  std::size_t s2 = frame.find(' ', s1 + 1);
  return frame.substr(s2 + 1, frame.size() - s2 - 2);
}

INSTANTIATE_TEST_SUITE_P(
    Damage, JournalScanCorrupt,
    ::testing::Values(
        Corruption{"crc_flipped",
                   [](const std::string& f) {
                     std::string x = f;
                     std::size_t at = x.find(' ', 5) + 1;  // first CRC digit
                     x[at] = x[at] == '0' ? '1' : '0';
                     return x;
                   },
                   "CRC mismatch"},
        Corruption{"payload_flipped",
                   [](const std::string& f) {
                     std::string x = f;
                     x[x.size() - 5] ^= 0x01;
                     return x;
                   },
                   "CRC mismatch"},
        Corruption{"length_too_small", [](const std::string& f) { return rawFrame(body(f), body(f).size() - 3); },
                   "bad length"},
        Corruption{"cut_short", [](const std::string& f) { return rawFrame(body(f), body(f).size() + 40); },
                   "truncated"},
        Corruption{"not_json", [](const std::string&) { return rawFrame("{\"id\": 2, oops"); }, "not JSON"},
        Corruption{"not_an_object", [](const std::string&) { return rawFrame("[1,2,3]"); }, "not a JSON object"},
        Corruption{"bad_magic", [](const std::string& f) { return "XRJ1" + f.substr(4); }, "bad magic"},
        Corruption{"garbage", [](const std::string&) { return std::string("\x00\x00\x00garbage\n", 11); }, "bad magic"},
        Corruption{"empty_line", [](const std::string&) { return std::string("\n"); }, "empty line"},
        Corruption{"bad_crc_field",
                   [](const std::string& f) {
                     std::string x = f;
                     x[x.find(' ', 5) + 1] = 'Z';
                     return x;
                   },
                   "bad checksum field"}),
    [](const ::testing::TestParamInfo<Corruption>& i) { return std::string(i.param.name); });

TEST(JournalScan, TornFrameGluedToAWholeOneKeepsTheWholeOne) {
  // A torn write that nobody cut off, then a whole frame appended after it on the same line.
  std::string a = frameRecord(sample(1)), b = frameRecord(sample(2)), c = frameRecord(sample(3));
  std::string torn = b.substr(0, b.size() / 3);
  ScanResult s = scanJournal(a + torn + c);
  ASSERT_EQ(s.records.size(), 2u);
  EXPECT_EQ(s.records[1], sample(3));
  ASSERT_EQ(s.damage.size(), 1u);
  EXPECT_EQ(s.damage[0].offset, a.size());
  EXPECT_EQ(s.damage[0].length, torn.size());
  EXPECT_EQ(s.offsets[1], a.size() + torn.size());
  EXPECT_FALSE(s.torn_tail);
}

// ---- the writer ----

JournalOptions optsIn(const TempDir& d, std::uint64_t max_bytes = 64ULL << 20) {
  JournalOptions o;
  o.path = d.path + "/var/lib/headroom/oom-journal.hrj";  // parents missing: open creates them
  o.max_bytes = max_bytes;
  return o;
}

// A sample record with its id, framed.
std::string framed(int id) {
  json r = sample(id);
  r["id"] = id;
  return frameRecord(r);
}

std::vector<std::uint64_t> idsOf(const std::vector<json>& records) {
  std::vector<std::uint64_t> ids;
  ids.reserve(records.size());
  for (const json& r : records) ids.push_back(r.at("id").get<std::uint64_t>());
  return ids;
}

TEST(JournalWriter, AppendAssignsIdsAndTheRecordIsOnDisk) {
  TempDir d;
  JournalOptions o = optsIn(d);
  auto w = JournalWriter::open(o);
  ASSERT_TRUE(w) << w.error().describe();
  for (int i = 1; i <= 3; ++i) {
    auto id = (*w)->append(sample(i));
    ASSERT_TRUE(id) << id.error().describe();
    EXPECT_EQ(*id, static_cast<std::uint64_t>(i));
    // Read back by another reader right after append returned: nothing buffered in the writer.
    auto c = readJournal(o.path);
    ASSERT_TRUE(c) << c.error().describe();
    ASSERT_EQ(c->records.size(), static_cast<std::size_t>(i));
    json expect = sample(i);
    expect["id"] = i;
    EXPECT_EQ(c->records.back(), expect) << "the record reads back as written, id added";
  }
  EXPECT_EQ((*w)->stats().records_written, 3u);
  EXPECT_EQ((*w)->stats().bytes, std::filesystem::file_size(o.path));
  EXPECT_EQ((*w)->stats().damaged_records, 0u);
  EXPECT_EQ((*w)->path(), o.path);
  struct stat st {};
  ASSERT_EQ(::stat(o.path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
}

TEST(JournalWriter, ReopenContinuesTheIds) {
  TempDir d;
  JournalOptions o = optsIn(d);
  {
    auto w = JournalWriter::open(o);
    ASSERT_TRUE(w);
    ASSERT_TRUE((*w)->append(sample(1)));
    ASSERT_TRUE((*w)->append(sample(2)));
  }
  auto w = JournalWriter::open(o);
  ASSERT_TRUE(w) << w.error().describe();
  EXPECT_EQ((*w)->stats().bytes, std::filesystem::file_size(o.path));
  auto id = (*w)->append(sample(3));
  ASSERT_TRUE(id);
  EXPECT_EQ(*id, 3u);
  EXPECT_EQ(idsOf(readJournal(o.path)->records), (std::vector<std::uint64_t>{1, 2, 3}));
}

TEST(JournalWriter, TornTailIsSetAsideCutOffAndAppendingGoesOn) {
  for (bool with_newline : {false, true}) {
    SCOPED_TRACE(with_newline);
    TempDir d;
    JournalOptions o = optsIn(d);
    {
      auto w = JournalWriter::open(o);
      ASSERT_TRUE(w);
      ASSERT_TRUE((*w)->append(sample(1)));
      ASSERT_TRUE((*w)->append(sample(2)));
    }
    const std::string clean = slurp(o.path);
    json third = sample(3);
    third["id"] = 3;
    std::string torn = frameRecord(third).substr(0, 40) + (with_newline ? "\n" : "");
    spit(o.path, clean + torn);

    auto w = JournalWriter::open(o);
    ASSERT_TRUE(w) << w.error().describe();
    EXPECT_EQ((*w)->stats().damaged_records, 1u);
    const std::string aside = (*w)->stats().torn_file;
    ASSERT_FALSE(aside.empty());
    EXPECT_EQ(aside.rfind(o.path + ".torn-", 0), 0u) << aside;
    EXPECT_EQ(slurp(aside), torn) << "the torn bytes are kept, not lost";
    EXPECT_EQ(slurp(o.path), clean) << "cut back to the last whole record";
    EXPECT_EQ((*w)->stats().bytes, clean.size());
    auto id = (*w)->append(sample(4));
    ASSERT_TRUE(id);
    EXPECT_EQ(*id, 3u) << "the torn record never got its id";
    auto c = readJournal(o.path);
    ASSERT_TRUE(c);
    EXPECT_EQ(idsOf(c->records), (std::vector<std::uint64_t>{1, 2, 3}));
    EXPECT_TRUE(c->damage.empty()) << "the new record starts on a clean line";
    EXPECT_EQ(c->records.back()["seq"], 4);
  }
}

TEST(JournalWriter, DamagedMiddleRecordStaysAndIsCounted) {
  TempDir d;
  JournalOptions o = optsIn(d);
  std::uint64_t second_at = 0;
  {
    auto w = JournalWriter::open(o);
    ASSERT_TRUE(w);
    ASSERT_TRUE((*w)->append(sample(1)));
    second_at = (*w)->stats().bytes;
    ASSERT_TRUE((*w)->append(sample(2)));
    ASSERT_TRUE((*w)->append(sample(3)));
  }
  std::string bytes = slurp(o.path);
  bytes[second_at + 60] ^= 0x20;  // inside the JSON of record 2
  spit(o.path, bytes);

  auto c = readJournal(o.path);
  ASSERT_TRUE(c);
  EXPECT_EQ(idsOf(c->records), (std::vector<std::uint64_t>{1, 3}));
  ASSERT_EQ(c->damage.size(), 1u);
  EXPECT_EQ(c->damage[0], o.path + ": byte " + std::to_string(second_at) + ": CRC mismatch");

  auto w = JournalWriter::open(o);
  ASSERT_TRUE(w);
  EXPECT_EQ((*w)->stats().damaged_records, 1u);
  EXPECT_TRUE((*w)->stats().torn_file.empty());
  EXPECT_EQ(slurp(o.path), bytes) << "a damaged middle record is left where it is";
  auto id = (*w)->append(sample(4));
  ASSERT_TRUE(id);
  EXPECT_EQ(*id, 4u);
  EXPECT_EQ(idsOf(readJournal(o.path)->records), (std::vector<std::uint64_t>{1, 3, 4}));
}

TEST(JournalWriter, IdsComeFromTopLevelIdsOfWholeRecordsOnly) {
  TempDir d;
  JournalOptions o = optsIn(d);
  std::filesystem::create_directories(std::filesystem::path(o.path).parent_path());
  json one = sample(1), seven = sample(7), named = sample(8);
  one["id"] = 1;
  seven["id"] = 7;
  seven["event"]["id"] = 99;                          // nested: not the record's id
  seven["list"] = json::array({json{{"id", 1000}}});  // nor in an array
  named["id"] = "twelve";                             // not a number: no id
  json bad = sample(50);
  bad["id"] = 50;
  std::string bad_frame = frameRecord(bad);
  bad_frame[bad_frame.size() - 3] ^= 0x01;  // CRC mismatch: its id does not count
  spit(o.path, frameRecord(one) + rawFrame(R"({"id": 40, oops)") + rawFrame("[41]") + frameRecord(seven) +
                   frameRecord(named) + bad_frame);
  auto w = JournalWriter::open(o);
  ASSERT_TRUE(w) << w.error().describe();
  EXPECT_EQ((*w)->stats().damaged_records, 3u);
  EXPECT_TRUE((*w)->stats().torn_file.empty());
  auto id = (*w)->append(sample(9));
  ASSERT_TRUE(id);
  EXPECT_EQ(*id, 8u);
  auto c = readJournal(o.path);
  ASSERT_TRUE(c);
  ASSERT_EQ(c->records.size(), 4u) << "1, 7, the one named \"twelve\", and the new one";
  EXPECT_EQ(c->damage.size(), 3u);
}

TEST(JournalWriter, RotationUnderTheCapKeepsTheNewest) {
  TempDir d;
  const std::uint64_t frame = frameRecord([] {
                                json r = sample(10);
                                r["id"] = 10;
                                return r;
                              }())
                                  .size();
  JournalOptions o = optsIn(d, frame * 3 + frame / 2);  // three records per file
  auto w = JournalWriter::open(o);
  ASSERT_TRUE(w);
  for (int i = 1; i <= 20; ++i) {
    auto id = (*w)->append(sample(i));
    ASSERT_TRUE(id) << id.error().describe();
    EXPECT_EQ(*id, static_cast<std::uint64_t>(i)) << "ids rise across rotations";
    EXPECT_LE(std::filesystem::file_size(o.path), o.max_bytes);
  }
  EXPECT_GE((*w)->stats().rotations, 5u);
  EXPECT_LE(std::filesystem::file_size(o.path + ".1"), o.max_bytes);
  auto c = readJournal(o.path);
  ASSERT_TRUE(c);
  std::vector<std::uint64_t> ids = idsOf(c->records);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.back(), 20u) << "the newest is kept";
  EXPECT_GT(ids.front(), 1u) << "the oldest went";
  for (std::size_t i = 1; i < ids.size(); ++i) EXPECT_EQ(ids[i], ids[i - 1] + 1) << "oldest first, no gap";
  EXPECT_GE(ids.size(), 4u) << "the file and <path>.1 are both read";
  EXPECT_TRUE(c->damage.empty());
  // A crash between a rotation's rename and the new file leaves only <path>.1: the ids go on
  // from it.
  w->reset();
  std::filesystem::rename(o.path, o.path + ".1");
  auto w2 = JournalWriter::open(o);
  ASSERT_TRUE(w2);
  EXPECT_EQ(*(*w2)->append(sample(21)), 21u);
}

TEST(JournalWriter, RecordLargerThanTheCapIsRefusedAndNothingIsLost) {
  TempDir d;
  JournalOptions o = optsIn(d, 4096);
  auto w = JournalWriter::open(o);
  ASSERT_TRUE(w);
  ASSERT_TRUE((*w)->append(sample(1)));
  json big = sample(2);
  big["pad"] = std::string(8192, 'x');
  auto r = (*w)->append(big);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().describe().find("max_bytes"), std::string::npos) << r.error().describe();
  EXPECT_NE(r.error().describe().find(o.path), std::string::npos);
  EXPECT_EQ((*w)->stats().write_failures, 1u);
  EXPECT_EQ((*w)->stats().rotations, 0u) << "nothing rotated away for a record that cannot fit";
  auto id = (*w)->append(sample(3));
  ASSERT_TRUE(id);
  EXPECT_EQ(*id, 2u) << "the refused record used no id";
  EXPECT_EQ(idsOf(readJournal(o.path)->records), (std::vector<std::uint64_t>{1, 2}));
  EXPECT_FALSE((*w)->append(json::array({1, 2}))) << "a record is an object";
}

TEST(JournalWriter, UnwritableLocationIsAClearErrorNamingThePath) {
  TempDir d;
  const std::string file = d.path + "/plain-file";
  spit(file, "not a directory");
  // Under a regular file (root cannot write there either), under /proc, and a directory.
  const std::string dir_path = d.path + "/a-directory";
  std::filesystem::create_directories(dir_path);
  for (const std::string& path : {file + "/journal.hrj", file + "/sub/journal.hrj",
                                  std::string("/proc/headroom-no-such-dir/journal.hrj"), dir_path}) {
    SCOPED_TRACE(path);
    JournalOptions o;
    o.path = path;
    auto w = JournalWriter::open(o);
    ASSERT_FALSE(w);
    EXPECT_NE(w.error().describe().find(path), std::string::npos) << w.error().describe();
    EXPECT_NE(w.error().code, 0) << w.error().describe();
  }
  JournalOptions none;
  none.path = "";
  EXPECT_FALSE(JournalWriter::open(none));
}

TEST(JournalWriter, ASecondWriterOnTheSameJournalIsRefused) {
  TempDir d;
  JournalOptions o = optsIn(d);
  auto w = JournalWriter::open(o);
  ASSERT_TRUE(w);
  auto w2 = JournalWriter::open(o);
  ASSERT_FALSE(w2);
  EXPECT_NE(w2.error().describe().find(o.path), std::string::npos);
  EXPECT_NE(w2.error().describe().find("another process"), std::string::npos) << w2.error().describe();
  w->reset();
  EXPECT_TRUE(JournalWriter::open(o)) << "the lock goes with the writer";
}

// Killed while writing, hundreds of times, restarted after each: tests/unit/incidents/journal_kill_test.cpp.

// ---- the reader ----

TEST(JournalRead, MissingFilesAreEmptyAndUnreadableOnesAnError) {
  TempDir d;
  auto c = readJournal(d.path + "/nothing.hrj");
  ASSERT_TRUE(c) << c.error().describe();
  EXPECT_TRUE(c->records.empty());
  EXPECT_TRUE(c->damage.empty());
  // A directory where the file should be: an error naming it.
  std::filesystem::create_directories(d.path + "/dir.hrj");
  auto e = readJournal(d.path + "/dir.hrj");
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().describe().find(d.path + "/dir.hrj"), std::string::npos) << e.error().describe();
}

TEST(JournalRead, RotatedFileFirstAndNoRecordTwice) {
  TempDir d;
  const std::string path = d.path + "/j.hrj";
  spit(path + ".1", framed(1) + framed(2) + "HRJ1 zzz\n");
  // As if a rotation ran between the reader's two reads: the file holds what .1 holds now.
  spit(path, framed(1) + framed(2) + framed(3));
  auto c = readJournal(path);
  ASSERT_TRUE(c);
  EXPECT_EQ(idsOf(c->records), (std::vector<std::uint64_t>{1, 2, 3}));
  ASSERT_EQ(c->damage.size(), 1u);
  EXPECT_EQ(c->damage[0].rfind(path + ".1: byte ", 0), 0u) << c->damage[0];
  // Reading never changes the files.
  EXPECT_EQ(slurp(path + ".1"), framed(1) + framed(2) + "HRJ1 zzz\n");
}

TEST(JournalRead, EachRecordOneAtATimeRotatedFileFirstDamageSkipped) {
  TempDir d;
  const std::string path = d.path + "/j.hrj";
  std::vector<std::uint64_t> ids;
  auto each = [&](const json& r) { ids.push_back(r["id"].get<std::uint64_t>()); };
  ASSERT_TRUE(forEachJournalRecord(path, each)) << "no journal yet: nothing";
  EXPECT_TRUE(ids.empty());
  spit(path + ".1", framed(1) + "HRJ1 zzz\n" + framed(2));
  spit(path, framed(2) + framed(3) + framed(4).substr(0, 20));
  ASSERT_TRUE(forEachJournalRecord(path, each));
  EXPECT_EQ(ids, (std::vector<std::uint64_t>{1, 2, 3})) << "damage and a torn tail skipped, no record twice";
  // A file that cannot be read (here a directory where the rotated file goes) is an error naming it.
  const std::string other = d.path + "/k.hrj";
  ASSERT_EQ(::mkdir((other + ".1").c_str(), 0700), 0);
  auto st = forEachJournalRecord(other, each);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find(other + ".1"), std::string::npos) << st.error().message;
}

}  // namespace
}  // namespace headroom
