// The OOM journal's file: framing (one checksummed record per line), the scan that tells intact
// records from damage, the writer (append + fsync, torn tail set aside, rotation), the reader.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <fmt/format.h>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <ctime>
#include <set>

#include "headroom/journal/journal.h"
#include "headroom/sources/fs_root.h"
#include "headroom/util/files.h"
#include "headroom/util/json.h"

namespace headroom {
namespace {

using nlohmann::json;

constexpr std::string_view kMagic = "HRJ1 ";
// A length field longer than this is garbage, not a record (64 MiB fits in 8 digits).
constexpr std::size_t kMaxLengthDigits = 12;

std::uint32_t crcOf(std::string_view bytes) {
  uLong c = ::crc32(0L, nullptr, 0);
  // zlib takes a uInt length: feed huge inputs in pieces.
  while (!bytes.empty()) {
    std::size_t n = std::min<std::size_t>(bytes.size(), 1U << 30);
    c = ::crc32(c, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(n));
    bytes.remove_prefix(n);
  }
  return static_cast<std::uint32_t>(c);
}

// One line (without its '\n') checked as a frame: header, length and CRC. `cut_short`: the
// line is shorter than its header says, which at the end of a file means a torn write.
struct FrameCheck {
  std::optional<std::string_view> body;  // the JSON bytes, when the frame is whole and its CRC matches
  std::string what;                      // why not, otherwise
  bool cut_short = false;
};

FrameCheck checkFrame(std::string_view line) {
  FrameCheck r;
  auto fail = [&r](std::string what, bool cut_short = false) {
    r.what = std::move(what);
    r.cut_short = cut_short;
    return r;
  };
  if (line.empty()) return fail("empty line");
  if (line.size() < kMagic.size()) {
    const bool prefix = kMagic.substr(0, line.size()) == line;
    return fail(prefix ? "truncated (header cut short)" : "bad magic", prefix);
  }
  if (line.substr(0, kMagic.size()) != kMagic) return fail("bad magic");
  std::string_view rest = line.substr(kMagic.size());
  // <length>
  std::size_t digits = 0;
  while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
  if (digits == 0 || digits > kMaxLengthDigits) {
    return rest.empty() ? fail("truncated (header cut short)", true) : fail("bad length");
  }
  std::uint64_t length = 0;
  auto [lp, lec] = std::from_chars(rest.data(), rest.data() + digits, length);
  if (lec != std::errc() || lp != rest.data() + digits) return fail("bad length");
  rest.remove_prefix(digits);
  if (rest.empty()) return fail("truncated (header cut short)", true);
  if (rest[0] != ' ') return fail("bad length");
  rest.remove_prefix(1);
  // <crc32>: exactly 8 lowercase hex digits
  constexpr std::string_view kHex = "0123456789abcdef";
  if (rest.size() < 8) {
    return rest.find_first_not_of(kHex) == std::string_view::npos ? fail("truncated (header cut short)", true)
                                                                  : fail("bad checksum field");
  }
  if (rest.substr(0, 8).find_first_not_of(kHex) != std::string_view::npos) return fail("bad checksum field");
  std::uint32_t crc = 0;
  auto [cp, cec] = std::from_chars(rest.data(), rest.data() + 8, crc, 16);
  if (cec != std::errc() || cp != rest.data() + 8) return fail("bad checksum field");
  rest.remove_prefix(8);
  if (rest.empty()) return fail("truncated (header cut short)", true);
  if (rest[0] != ' ') return fail("bad checksum field");
  rest.remove_prefix(1);
  if (rest.size() < length) return fail(fmt::format("truncated ({} of {} bytes)", rest.size(), length), true);
  if (rest.size() > length) return fail(fmt::format("bad length ({} bytes, {} said)", rest.size(), length));
  if (crcOf(rest) != crc) return fail("CRC mismatch");
  r.body = rest;
  return r;
}

// Why a checked body is not a record, or nullptr when it is one.
const char* notARecord(const json& j) {
  if (j.is_discarded()) return "not JSON";
  if (!j.is_object()) return "not a JSON object";
  return nullptr;
}

// Checks that a body is a JSON object and takes its top-level unsigned "id", without building
// the document: the writer's open() reads a whole journal (up to max_bytes, twice) for its ids
// alone, and must not need many times that in memory to do it.
class IdOnly {
 public:
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  // nullptr when the body is a record; its id, when it has one, in id().
  const char* check(std::string_view body) {
    *this = IdOnly();
    if (!json::sax_parse(body.begin(), body.end(), this) || failed_) return "not JSON";
    return object_ ? nullptr : "not a JSON object";
  }
  std::optional<std::uint64_t> id() const { return id_; }

  bool null() { return scalar(std::nullopt); }
  bool boolean(bool) { return scalar(std::nullopt); }
  bool number_integer(number_integer_t) { return scalar(std::nullopt); }
  bool number_unsigned(number_unsigned_t v) { return scalar(v); }
  bool number_float(number_float_t, const string_t&) { return scalar(std::nullopt); }
  bool string(string_t&) { return scalar(std::nullopt); }
  bool binary(binary_t&) { return scalar(std::nullopt); }
  bool start_object(std::size_t) { return open(true); }
  bool end_object() { return close(); }
  bool start_array(std::size_t) { return open(false); }
  bool end_array() { return close(); }
  bool key(string_t& k) {
    at_id_ = depth_ == 1 && k == "id";
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    failed_ = true;
    return false;
  }

 private:
  bool scalar(std::optional<std::uint64_t> v) {
    if (at_id_) id_ = v;  // the last "id" wins, as in the document
    at_id_ = false;
    return true;
  }
  bool open(bool object) {
    if (depth_ == 0) object_ = object;
    if (at_id_) id_.reset();
    at_id_ = false;
    ++depth_;
    return true;
  }
  bool close() {
    --depth_;
    return true;
  }
  int depth_ = 0;
  bool object_ = false, at_id_ = false, failed_ = false;
  std::optional<std::uint64_t> id_;
};

// The scan shared by readers and the writer. `accept(body, offset)`: nullptr when the body is a
// record (and it took it), else why not.
template <typename Accept>
void scanLines(std::string_view bytes, ScanResult& out, Accept&& accept) {
  out.tail_offset = bytes.size();
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    const std::size_t nl = bytes.find('\n', pos);
    const bool last = nl == std::string_view::npos || nl + 1 == bytes.size();
    const std::size_t end = nl == std::string_view::npos ? bytes.size() : nl;
    const std::size_t next = nl == std::string_view::npos ? bytes.size() : nl + 1;
    std::string_view line = bytes.substr(pos, end - pos);
    FrameCheck f = checkFrame(line);
    // A torn write: no newline at the end, or a last line cut short of its length.
    if (nl == std::string_view::npos || (last && f.cut_short)) {
      out.torn_tail = true;
      out.tail_offset = pos;
      out.damage.push_back({pos, bytes.size() - pos, nl == std::string_view::npos ? "truncated (no newline)" : f.what});
      break;
    }
    std::string what = f.what;
    if (f.body) {
      const char* why = accept(*f.body, pos);
      if (why == nullptr) {
        out.good_bytes += next - pos;
        pos = next;
        continue;
      }
      what = why;
    }
    // Damage in the middle. A writer that crashed before this one ran could have left a torn
    // frame glued to the next whole one: when the line ends in a whole frame, keep that.
    bool resynced = false;
    for (std::size_t at = line.find(kMagic, 1); at != std::string_view::npos && !resynced;
         at = line.find(kMagic, at + 1)) {
      FrameCheck g = checkFrame(line.substr(at));
      if (g.body && accept(*g.body, pos + at) == nullptr) {
        resynced = true;
        out.damage.push_back({pos, at, what});
        out.good_bytes += next - (pos + at);
      }
    }
    if (!resynced) out.damage.push_back({pos, next - pos, what});
    pos = next;
  }
}

Result<std::string> readFd(int fd, const std::string& path) {
  // A journal is a file the agent wrote: a FIFO would block, a device never end (/dev/zero).
  struct stat st {};
  if (::fstat(fd, &st) != 0) return unexpected(errnoError(fmt::format("stat of journal {}", path)));
  if (!S_ISREG(st.st_mode))
    return unexpected(badInput(fmt::format("journal {}: {}, not a regular file", path, fileKindText(st.st_mode))));
  std::string text;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return unexpected(errnoError(fmt::format("reading journal {}", path)));
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  return text;
}

// A missing file reads as empty (nullopt); anything else that fails is an error naming it.
Result<std::optional<std::string>> readIfExists(const std::string& path) {
  auto fd = openUserFile(path, false);  // a FIFO with no writer would hold open() forever
  if (!fd) {
    if (fd.error().code == ENOENT) return std::optional<std::string>{};
    return unexpected(fd.error().code != 0 ? fd.error().wrap("opening journal")
                                           : fd.error().wrap(fmt::format("journal {}", path)));
  }
  auto text = readFd(fd->get(), path);
  if (!text) return unexpected(text.error());
  return std::optional<std::string>(std::move(*text));
}

std::optional<std::uint64_t> idOf(const json& record) {
  auto it = record.find("id");
  if (it == record.end() || !it->is_number_unsigned()) return std::nullopt;
  return it->get<std::uint64_t>();
}

// Writes the torn bytes beside the journal under a name no earlier crash has taken.
Result<std::string> setAside(const std::string& path, std::string_view bytes) {
  const long long now = static_cast<long long>(std::time(nullptr));
  for (int n = 0; n < 1000; ++n) {
    std::string name = n == 0 ? fmt::format("{}.torn-{}", path, now) : fmt::format("{}.torn-{}.{}", path, now, n);
    int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
    if (fd < 0) {
      if (errno == EEXIST) continue;
      return unexpected(errnoError(fmt::format("setting the torn tail of journal {} aside in {}", path, name)));
    }
    Status st = writeAll(fd, bytes, name);
    if (st && ::fsync(fd) != 0) st = unexpected(errnoError(fmt::format("fsync of {}", name)));
    ::close(fd);
    if (!st) {
      ::unlink(name.c_str());
      return unexpected(st.error().wrap(fmt::format("setting the torn tail of journal {} aside", path)));
    }
    return name;
  }
  return unexpected(
      sysError(EEXIST, fmt::format("setting the torn tail of journal {} aside: too many .torn- files", path)));
}

// Opens the journal for appending and takes its lock.
Result<int> openLocked(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (fd < 0) return unexpected(errnoError(fmt::format("opening journal {}", path)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    Error e = errnoError(fmt::format("opening journal {}", path));
    ::close(fd);
    return unexpected(e);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return unexpected(badInput(fmt::format("opening journal {}: not a regular file", path)));
  }
  // A file system without flock (some network ones) gets no lock rather than no journal.
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    ::close(fd);
    return unexpected(
        makeError(ErrorKind::kUnavailable, fmt::format("opening journal {}: another process writes it", path)));
  }
  return fd;
}

}  // namespace

// ---- framing ----

std::string frameRecord(const nlohmann::json& record) {
  // dump() escapes control characters, so the JSON holds no raw newline.
  std::string body = dumpJson(record);
  return fmt::format("{}{} {:08x} {}\n", kMagic, body.size(), crcOf(body), body);
}

namespace detail {
ScanResult scanJournalIds(std::string_view bytes, std::uint64_t& max_id) {
  ScanResult out;
  IdOnly sax;
  scanLines(bytes, out, [&](std::string_view body, std::uint64_t) -> const char* {
    const char* why = sax.check(body);
    if (why == nullptr) max_id = std::max(max_id, sax.id().value_or(0));
    return why;
  });
  return out;
}
}  // namespace detail

ScanResult scanJournal(std::string_view bytes) {
  ScanResult out;
  scanLines(bytes, out, [&out](std::string_view body, std::uint64_t offset) -> const char* {
    json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
    if (const char* why = notARecord(j)) return why;
    out.records.push_back(std::move(j));
    out.offsets.push_back(offset);
    return nullptr;
  });
  return out;
}

// ---- the writer ----

std::string journalFileOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return path + (path.ends_with('/') ? "" : "/") + std::string(kJournalFileName);
  return path;
}

Result<std::unique_ptr<JournalWriter>> JournalWriter::open(const JournalOptions& opts) {
  const std::string& path = opts.path;
  if (path.empty()) return unexpected(badInput("opening journal: no path"));
  if (opts.max_bytes == 0) return unexpected(badInput(fmt::format("opening journal {}: max_bytes is 0", path)));
  const std::string dir = parentDirectory(path);
  if (auto s = makeDirectories(dir); !s) return unexpected(s.error().wrap(fmt::format("opening journal {}", path)));
  auto fd = openLocked(path);
  if (!fd) return unexpected(fd.error());
  auto fail = [&](Error e) -> Result<std::unique_ptr<JournalWriter>> {
    ::close(*fd);
    return unexpected(std::move(e));
  };
  // The directory entry of a newly created file must survive a crash too.
  syncDirectory(dir);

  auto text = readFd(*fd, path);
  if (!text) return fail(text.error());
  JournalStats st;
  std::uint64_t max_id = 0;
  ScanResult scan = detail::scanJournalIds(*text, max_id);
  st.damaged_records += scan.damage.size();
  if (scan.torn_tail) {
    auto aside = setAside(path, std::string_view(*text).substr(scan.tail_offset));
    if (!aside) return fail(aside.error());
    st.torn_file = *aside;
    // The set-aside copy's name is durable before the journal loses those bytes.
    syncDirectory(dir);
    if (::ftruncate(*fd, static_cast<off_t>(scan.tail_offset)) != 0)
      return fail(errnoError(fmt::format("cutting the torn tail off journal {}", path)));
    if (::fsync(*fd) != 0) return fail(errnoError(fmt::format("fsync of journal {}", path)));
    syncDirectory(dir);
  }
  st.bytes = scan.tail_offset;
  text->clear();
  text->shrink_to_fit();

  auto rotated = readIfExists(path + ".1");
  if (!rotated) return fail(rotated.error());
  if (*rotated) st.damaged_records += detail::scanJournalIds(**rotated, max_id).damage.size();
  return std::unique_ptr<JournalWriter>(new JournalWriter(opts, *fd, max_id + 1, std::move(st)));
}

JournalWriter::~JournalWriter() {
  if (fd_ >= 0) ::close(fd_);
}

Status JournalWriter::cutBack() {
  if (fd_ < 0) return ok();
  if (::ftruncate(fd_, static_cast<off_t>(stats_.bytes)) != 0)
    return unexpected(errnoError(fmt::format("cutting a failed append off journal {}", opts_.path)));
  dirty_ = false;
  return ok();
}

Status JournalWriter::reopen() {
  auto fd = openLocked(opts_.path);
  if (!fd) return unexpected(fd.error());
  struct stat st {};
  if (::fstat(*fd, &st) != 0) {
    Error e = errnoError(fmt::format("opening journal {}", opts_.path));
    ::close(*fd);
    return unexpected(e);
  }
  fd_ = *fd;
  stats_.bytes = static_cast<std::uint64_t>(st.st_size);
  syncDirectory(parentDirectory(opts_.path));
  return ok();
}

Status JournalWriter::rotate() {
  const std::string older = opts_.path + ".1";
  // Everything in the file is already fsync'd (each append is); the rename replaces the older
  // rotated file in one step, and a crash before the new file exists leaves only <path>.1,
  // which open() reads for the ids.
  if (::rename(opts_.path.c_str(), older.c_str()) != 0)
    return unexpected(errnoError(fmt::format("rotating journal {} to {}", opts_.path, older)));
  ::close(fd_);
  fd_ = -1;
  dirty_ = false;
  ++stats_.rotations;
  stats_.bytes = 0;
  syncDirectory(parentDirectory(opts_.path));
  return reopen();
}

Result<std::uint64_t> JournalWriter::append(nlohmann::json record) {
  auto failed = [this](Error e) -> Result<std::uint64_t> {
    ++stats_.write_failures;
    return unexpected(std::move(e));
  };
  if (!record.is_object())
    return failed(badData(fmt::format("appending to journal {}: a record must be a JSON object", opts_.path)));
  record["id"] = next_id_;
  const std::string frame = frameRecord(record);
  if (frame.size() > opts_.max_bytes)
    return failed(sysError(
        EFBIG, fmt::format("appending to journal {}: the record takes {} bytes, more than the journal's max_bytes {}",
                           opts_.path, frame.size(), opts_.max_bytes)));
  if (fd_ < 0) {
    if (auto s = reopen(); !s) return failed(s.error().wrap("appending"));
  }
  if (dirty_) {
    if (auto s = cutBack(); !s) return failed(s.error());
  }
  if (stats_.bytes > 0 && stats_.bytes + frame.size() > opts_.max_bytes) {
    if (auto s = rotate(); !s) return failed(s.error());
  }
  Status st = writeAll(fd_, frame, opts_.path);
  if (st && ::fsync(fd_) != 0) st = unexpected(errnoError(fmt::format("fsync of journal {}", opts_.path)));
  if (!st) {
    // Leave no partial frame behind: the next record must start on a clean line, and a record
    // reported as failed must not turn up later.
    dirty_ = true;
    (void)cutBack();
    // A file system that failed (full, read-only, an I/O error) is put right by freeing space,
    // remounting it, or another volume at the same path: the next append opens the path again
    // rather than keep a descriptor on what failed (which would also keep a read-only remount
    // from happening). The descriptor stays only while a partial frame still needs cutting off.
    if (!dirty_) {
      ::close(fd_);
      fd_ = -1;
    }
    return failed(st.error());
  }
  stats_.bytes += frame.size();
  ++stats_.records_written;
  return next_id_++;
}

// ---- the reader ----

Result<JournalContents> readJournal(const std::string& path) {
  JournalContents out;
  // The file first, then <path>.1: a rotation between the two reads shows the same records in
  // both, which the ids tell apart (read the other way round, one file's records would be lost).
  auto current = readIfExists(path);
  if (!current) return unexpected(current.error());
  auto older = readIfExists(path + ".1");
  if (!older) return unexpected(older.error());
  std::set<std::uint64_t> seen;
  auto take = [&](const std::optional<std::string>& text, const std::string& name) {
    if (!text) return;
    ScanResult s = scanJournal(*text);
    for (json& r : s.records) {
      if (auto id = idOf(r)) {
        if (!seen.insert(*id).second) continue;
      }
      out.records.push_back(std::move(r));
    }
    for (const auto& d : s.damage) out.damage.push_back(fmt::format("{}: byte {}: {}", name, d.offset, d.what));
  };
  take(*older, path + ".1");
  take(*current, path);
  return out;
}

Status forEachJournalRecord(const std::string& path, const std::function<void(const nlohmann::json&)>& each) {
  std::set<std::uint64_t> seen;
  // <path>.1, then the file, one at a time: only one file's bytes and one record's document are
  // held. (The caller holds the writer's lock: no rotation comes between the two reads.)
  for (const std::string& name : {path + ".1", path}) {
    auto text = readIfExists(name);
    if (!text) return text.error();
    if (!*text) continue;
    ScanResult ignored;
    scanLines(**text, ignored, [&](std::string_view body, std::uint64_t) -> const char* {
      json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
      if (const char* why = notARecord(j)) return why;
      if (auto id = idOf(j); id && !seen.insert(*id).second) return nullptr;
      each(j);
      return nullptr;
    });
  }
  return ok();
}

}  // namespace headroom
