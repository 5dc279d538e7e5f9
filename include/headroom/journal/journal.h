// The OOM journal: one durable, checksummed record per OOM kill (append-only, fsync'd, a torn
// or corrupt tail set aside and counted, rotation under a size cap), the flight recorder that
// keeps the last seconds of per-cgroup samples, and the record's contents built from the model.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/controller/controller.h"
#include "headroom/sensors/oom_event.h"
#include "headroom/util/result.h"
#include "headroom/model/snapshot.h"

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
  std::vector<Damage> damage;       // in file order; the torn tail, when there is one, is the last
  bool torn_tail = false;           // the file ends inside a record
  std::uint64_t tail_offset = 0;    // where that last, incomplete record starts (== size when none)
};
ScanResult scanJournal(std::string_view bytes);

// ---- the file (I/O) ----
struct JournalOptions {
  std::string path = "/var/lib/headroom/oom-journal.hrj";
  std::uint64_t max_bytes = 64ULL << 20;  // beyond: rotate to <path>.1 (the older .1 is dropped)
};

struct JournalStats {
  std::uint64_t records_written = 0;
  std::uint64_t write_failures = 0;    // appends that returned an error (the record is not in the journal)
  std::uint64_t damaged_records = 0;   // damaged regions found at open in the file and <path>.1 (torn tail included)
  std::uint64_t rotations = 0;
  std::uint64_t bytes = 0;             // current file size
  std::string torn_file;               // where open() set a torn tail aside; empty when there was none
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
  // the id is not used. Never throws.
  Result<std::uint64_t> append(nlohmann::json record);
  const JournalStats& stats() const { return stats_; }
  const std::string& path() const { return opts_.path; }

 private:
  JournalWriter(JournalOptions o, int fd, std::uint64_t next_id, JournalStats st)
      : opts_(std::move(o)), fd_(fd), next_id_(next_id), stats_(std::move(st)) {}
  Status rotate();
  Status reopen();              // after a rotation that could not create the new file
  Status cutBack();             // truncates to stats_.bytes after a failed append
  JournalOptions opts_;
  int fd_ = -1;
  std::uint64_t next_id_ = 1;
  JournalStats stats_;
  bool dirty_ = false;          // a failed append left bytes that cutBack() could not remove yet
};

struct JournalContents {
  std::vector<nlohmann::json> records;  // oldest first: <path>.1, then <path>
  std::vector<std::string> damage;      // "<file>: byte N: <what>", one per damaged region
};
// Reads the journal and its rotated file (missing files are empty; an unreadable one is an
// error naming it). Never modifies anything: safe on a copy from another machine, and on a
// journal being written (a rotation between the two reads yields no record twice).
Result<JournalContents> readJournal(const std::string& path);

// ---- the flight recorder (pure) ----
// One cgroup at one sample, compact: what the report draws.
struct FlightPoint {
  std::int64_t wall_time_ns = 0;
  std::int64_t completed_monotonic_ns = 0;  // the sample's last read (0: unknown); not serialised
  std::uint64_t usage = 0;
  std::optional<std::uint64_t> limit;  // the tightest bound's limit
  std::map<std::string, std::uint64_t> parts;  // PartKind name -> bytes (see snapshot.h)
  std::optional<std::uint64_t> self_reported;   // what the prover said it used, when known
};
// {time (unix seconds, float), usage_bytes, limit_bytes, parts, self_reported_bytes}: null when absent.
nlohmann::json toJson(const FlightPoint& p);

class FlightRecorder {
 public:
  FlightRecorder(std::int64_t window_ns = 60'000'000'000, std::size_t max_cgroups = 256)
      : window_ns_(window_ns), max_cgroups_(max_cgroups) {}
  // Records every cgroup of the snapshot (the largest max_cgroups of them, in the snapshot's
  // order); drops points older than the window and cgroups not seen for a whole window. Beyond
  // max_cgroups, the cgroups seen longest ago are dropped first. Age is measured on the
  // snapshot's monotonic clock (wall clock when it has none), so a wall-clock step cannot keep
  // or drop points. `self_reported`: by cgroup, what the prover said it used.
  void record(const Snapshot& snap, const std::map<std::string, std::uint64_t>& self_reported = {});
  // The points kept for a cgroup (oldest first); empty when unknown.
  std::vector<FlightPoint> points(const std::string& cgroup) const;
  // Takes effect at the next record().
  void setWindow(std::int64_t window_ns) { window_ns_ = window_ns; }
  std::int64_t window() const { return window_ns_; }
  std::size_t cgroups() const { return rings_.size(); }

 private:
  struct Entry {
    std::int64_t age_ns;  // the snapshot's monotonic time (wall when it has none)
    FlightPoint point;
  };
  std::int64_t window_ns_;
  std::size_t max_cgroups_;
  std::map<std::string, std::deque<Entry>> rings_;
};

// ---- the record (pure) ----
struct HostInfo {
  std::string hostname, kernel, agent_version;
};
// The cgroup a record is about, normalised like snapshot paths: the OOM domain when the kernel
// named one, else the (first) victim's cgroup, else the trigger's. With the last sample: the
// domain when that sample holds it (the agent samples the cgroups its processes live in, which
// the domain, often an ancestor holding the limit, need not be), else the victim's cgroup or
// its nearest sampled ancestor inside the domain; when none was sampled, the path as above.
// Use it for RecordContext::cgroup and FlightRecorder::points.
std::string oomRecordCgroup(const OomEvent& e, const Snapshot* last = nullptr);

struct RecordContext {
  const OomEvent* event = nullptr;                 // required
  const Snapshot* last = nullptr;                  // the last sample before the kill (may be null)
  std::vector<FlightPoint> flight;                 // for the cgroup that died
  std::int64_t flight_window_ns = 60'000'000'000;  // the recorder's window (flight.window_seconds)
  std::string cgroup;                              // that cgroup; empty: oomRecordCgroup(*event, last)
  const BudgetDecision* budget = nullptr;          // the budget in force (an invalid one is recorded as null)
  std::optional<std::uint64_t> self_reported;      // what the prover believed it used at the kill
  std::vector<SensorStatus> sensors;               // empty: the last sample's
  HostInfo host;
  std::size_t top_per_role = 10;
};
// The record's JSON (schema in docs/journal.md): version, time, event (with the kernel's task
// dump), cgroup (memory, attribution, bounds at the last sample), processes (top per role with
// RSS/PSS parts, page tables, pinned, device), budget, self_reported vs charged, sensors, host,
// flight (the recorder's points).
nlohmann::json makeOomRecord(const RecordContext& ctx);

}  // namespace headroom
