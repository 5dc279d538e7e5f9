// The OOM journal's file: one durable, checksummed record per OOM kill (append-only, fsync'd, a
// torn or corrupt tail set aside and counted, rotation under a size cap), and its reader.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/util/result.h"

namespace headroom {

// ---- framing (pure) ----
// One record per line: "HRJ1 <length> <crc32 as 8 hex digits> <json>\n". The length and CRC
// (zlib crc32) cover the JSON bytes; JSON is dumped on one line (no raw newlines in it).
std::string frameRecord(const nlohmann::json& record);

struct ScanResult {
  std::vector<nlohmann::json> records;  // every intact record (a JSON object), in file order
  std::vector<std::uint64_t> offsets;   // where each of them starts, in the same order
  std::uint64_t good_bytes = 0;         // bytes of intact frames: good_bytes + every damage length == size
  // Damage: a line that is not a whole, well-formed frame with a matching CRC. A damaged line
  // in the middle is skipped (reading goes on after its '\n'); a last line without a newline,
  // or whose frame is cut short (fewer bytes than its length says), is a torn write: the
  // "tail". Each damaged region is counted with its byte offset and length (its '\n' included).
  // A torn frame glued to a whole one on the same line (a crash nobody cleaned up, then an
  // append): the torn part is damage, the whole frame a record.
  struct Damage {
    std::uint64_t offset = 0;
    std::uint64_t length = 0;
    std::string what;  // "CRC mismatch", "truncated (no newline)", "bad length", "not JSON", ...
  };
  std::vector<Damage> damage;     // in file order; the torn tail, when there is one, is the last
  bool torn_tail = false;         // the file ends inside a record
  std::uint64_t tail_offset = 0;  // where that last, incomplete record starts (== size when none)
};
ScanResult scanJournal(std::string_view bytes);
namespace detail {
// The writer's scan (JournalWriter::open): the same damage as scanJournal, and the largest
// top-level unsigned "id" of its records (max_id when larger), without building the documents.
ScanResult scanJournalIds(std::string_view bytes, std::uint64_t& max_id);
}  // namespace detail

// ---- the file (I/O) ----
// The journal's file name inside a directory given as the journal.
inline constexpr std::string_view kJournalFileName = "oom-journal.hrj";
// The file a journal path names: the path itself, or <path>/oom-journal.hrj when it is a
// directory (the agent writes there, and `headroom report` reads there).
std::string journalFileOf(const std::string& path);

struct JournalOptions {
  std::string path = "/var/lib/headroom/oom-journal.hrj";
  std::uint64_t max_bytes = 64ULL << 20;  // beyond: rotate to <path>.1 (the older .1 is dropped)
};

struct JournalStats {
  std::uint64_t records_written = 0;
  std::uint64_t write_failures = 0;   // appends that returned an error (the record is not in the journal)
  std::uint64_t damaged_records = 0;  // damaged regions found at open in the file and <path>.1 (torn tail included)
  std::uint64_t rotations = 0;
  std::uint64_t bytes = 0;  // current file size
  std::string torn_file;    // where open() set a torn tail aside; empty when there was none
};

class JournalWriter {
 public:
  // Opens (creating the directory and file when missing) for appending. A torn tail left by a
  // crash is moved to "<path>.torn-<unix time>" and cut off, so new records start on a clean
  // line; damaged middle records stay where they are (readers skip and count them). The file is
  // locked (flock) while open: a second writer on the same journal is refused, since two would
  // hand out the same ids. Errors (unwritable location, in use, ...) name the path.
  static Result<std::unique_ptr<JournalWriter>> open(const JournalOptions& opts);
  ~JournalWriter();
  JournalWriter(const JournalWriter&) = delete;
  JournalWriter& operator=(const JournalWriter&) = delete;

  // Assigns record["id"] (one more than the largest id in the journal and its rotated file),
  // appends the frame with one write(), and fsyncs before returning: when this returns the id,
  // the record is on disk. A record must be a JSON object whose frame fits in max_bytes (else
  // an error, and nothing is written). When the frame would take the file past max_bytes, the
  // file is rotated first. On a failed write or fsync the partial frame is cut off again and
  // the id is not used, and the file is opened again at the next append (a file system
  // remounted or given space back is then written). Never throws.
  Result<std::uint64_t> append(nlohmann::json record);
  const JournalStats& stats() const { return stats_; }
  const std::string& path() const { return opts_.path; }

 private:
  JournalWriter(JournalOptions o, int fd, std::uint64_t next_id, JournalStats st)
      : opts_(std::move(o)), fd_(fd), next_id_(next_id), stats_(std::move(st)) {}
  Status rotate();
  Status reopen();   // after a rotation that could not create the new file
  Status cutBack();  // truncates to stats_.bytes after a failed append
  JournalOptions opts_;
  int fd_ = -1;
  std::uint64_t next_id_ = 1;
  JournalStats stats_;
  bool dirty_ = false;  // a failed append left bytes that cutBack() could not remove yet
};

struct JournalContents {
  std::vector<nlohmann::json> records;  // oldest first: <path>.1, then <path>
  std::vector<std::string> damage;      // "<file>: byte N: <what>", one per damaged region
};
// Reads the journal and its rotated file (missing files are empty; an unreadable one is an
// error naming it). Never modifies anything: safe on a copy from another machine, and on a
// journal being written (a rotation between the two reads yields no record twice).
Result<JournalContents> readJournal(const std::string& path);
// Each intact record of the rotated file and then the file, one at a time (a journal of 64 MiB is
// never held as documents all at once), for the writer's owner at its opening: no rotation may
// come between the two reads. Damage is skipped; an unreadable file is an error naming it.
Status forEachJournalRecord(const std::string& path, const std::function<void(const nlohmann::json&)>& each);

}  // namespace headroom
