#include "headroom/sources/kmsg.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include "headroom/sources/parse.h"

namespace headroom {

namespace {

// A record's "pri" field: (facility << 3) | level, the facility a byte.
constexpr std::uint64_t kMaxPriority = (0xFFU << 3) | 7U;

}  // namespace

Result<KmsgRecord> parseKmsgRecord(std::string_view raw) {
  auto semi = raw.find(';');
  if (semi == std::string_view::npos) return badData("kmsg record without ';'");
  std::string_view prefix = raw.substr(0, semi);
  std::string_view msg = raw.substr(semi + 1);
  auto nl = msg.find('\n');
  if (nl != std::string_view::npos) msg = msg.substr(0, nl);
  std::vector<std::string_view> f;
  while (!prefix.empty()) {
    auto c = prefix.find(',');
    f.push_back(prefix.substr(0, c));
    if (c == std::string_view::npos) break;
    prefix.remove_prefix(c + 1);
  }
  if (f.size() < 3) return badData(fmt::format("kmsg record prefix has {} fields, need 3", f.size()));
  auto pri = parseU64(f[0]);
  auto seq = parseU64(f[1]);
  auto ts = parseU64(f[2]);
  if (!pri || !seq || !ts) return badData("kmsg record prefix is not numeric");
  // The kernel keeps a record's facility in one byte (printk_info.facility) beside its 3-bit
  // level: a larger number is no record's prefix (and would not fit `facility`).
  if (*pri > kMaxPriority) return badData(fmt::format("kmsg record priority {} out of range", *pri));
  KmsgRecord r;
  r.priority = static_cast<int>(*pri & 7);
  r.facility = static_cast<int>(*pri >> 3);
  r.seq = *seq;
  r.ts_us = *ts;
  r.message = std::string(msg);
  return r;
}

std::vector<LogLine> logLines(const KmsgRecord& rec) {
  LogLine l;
  l.text = rec.message;
  l.seq = rec.seq;
  l.ts_us = rec.ts_us;
  l.kernel = rec.facility == 0;
  return splitEscapedLines(std::move(l));
}

Result<KmsgReader> KmsgReader::open(const FsRoot& fs, bool from_start) {
  std::string path = fs.display("/dev/kmsg");
  Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) return errnoError(fmt::format("opening {} (reading the kernel log needs CAP_SYSLOG)", path));
  if (!from_start && ::lseek(fd.get(), 0, SEEK_END) < 0)
    return errnoError(fmt::format("seeking to the end of {}", path));
  return KmsgReader(std::move(fd));
}

std::vector<KmsgRecord> KmsgReader::readAvailable() {
  std::vector<KmsgRecord> out;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd_.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      // Overwritten before we read it: reading goes on at the oldest record left, and the gap in
      // the sequence numbers counts what was lost.
      if (errno == EPIPE) continue;
      break;  // EAGAIN: nothing more now
    }
    if (n == 0) break;
    auto rec = parseKmsgRecord(std::string_view(buf, static_cast<std::size_t>(n)));
    if (!rec) continue;
    if (next_seq_ && rec->seq > *next_seq_) lost_ += rec->seq - *next_seq_;
    if (!first_seq_) first_seq_ = rec->seq;
    next_seq_ = rec->seq + 1;
    out.push_back(std::move(*rec));
  }
  return out;
}

}  // namespace headroom
