// `headroom report`: OOM post-mortems from the journal, on this machine or from a copy of
// another's. Reads only; the latest kill by default, --list, --id, --since, --json, pictures.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <iostream>
#include <set>

#include "headroom/cli/commands.h"
#include "headroom/journal/journal.h"
#include "headroom/report/events.h"
#include "headroom/report/report.h"
#include "headroom/sources/fs_root.h"
#include "headroom/util/clock.h"
#include "headroom/util/exit_codes.h"
#include "headroom/util/files.h"
#include "headroom/util/json.h"
#include "headroom/util/text.h"

namespace headroom::cli {
namespace {

// What --from-json reads of stdin at most: as much as of a file (readAll's bound).
constexpr std::size_t kMaxJsonInputBytes = 64u << 20;

using nlohmann::json;

std::optional<std::uint64_t> idOf(const json& rec) {
  if (!rec.is_object()) return std::nullopt;
  auto it = rec.find("id");
  if (it == rec.end() || !it->is_number_integer()) return std::nullopt;
  if (it->is_number_unsigned()) return it->get<std::uint64_t>();
  auto i = it->get<std::int64_t>();
  return i < 0 ? std::nullopt : std::optional<std::uint64_t>(static_cast<std::uint64_t>(i));
}

// readJournal names each damaged region "<file>: byte N: <what>"; said here as one line each.
std::string damageLine(const std::string& d) {
  static constexpr std::string_view kByte = ": byte ";
  for (std::size_t at = d.find(kByte); at != std::string::npos; at = d.find(kByte, at + 1)) {
    std::size_t num = at + kByte.size();
    std::size_t end = num;
    while (end < d.size() && d[end] >= '0' && d[end] <= '9') ++end;
    if (end == num || d.compare(end, 2, ": ") != 0) continue;
    return fmt::format("skipped a damaged record at byte {} of {}: {}", d.substr(num, end - num), d.substr(0, at),
                       d.substr(end + 2));
  }
  return "skipped a damaged record: " + d;
}

bool exists(const std::string& path, struct stat* st) { return ::stat(path.c_str(), st) == 0; }

// The host a record names ("" when it names none).
std::string hostOf(const json& rec) {
  if (!rec.is_object()) return {};
  auto h = rec.find("host");
  if (h == rec.end() || !h->is_object()) return {};
  auto n = h->find("hostname");
  return n != h->end() && n->is_string() ? n->get<std::string>() : std::string();
}

// Records read back from log stores (--from-json): in the order of their kills, whatever order
// the store answered in (Loki answers newest first), a record shipped twice once.
struct Loaded {
  std::vector<json> records;
  std::string where;  // for messages: the journal's path, or the files read
};

Result<Loaded> loadFromJson(const std::vector<std::string>& sources, std::istream& in, std::ostream& err) {
  Loaded l;
  bool stdin_read = false;
  for (const std::string& src : sources) {
    std::string text;
    std::string name = src == "-" ? "stdin" : src;
    if (src == "-") {
      if (stdin_read) return usageError("--from-json -: stdin given twice");
      stdin_read = true;
      std::array<char, 1 << 16> buf{};
      while (in.read(buf.data(), buf.size()) || in.gcount() > 0) {
        text.append(buf.data(), static_cast<std::size_t>(in.gcount()));
        if (text.size() > kMaxJsonInputBytes)
          return badInput(fmt::format("--from-json -: stdin holds more than {} bytes", kMaxJsonInputBytes));
      }
      if (in.bad()) return ioError("--from-json: reading stdin");
    } else {
      // A FIFO is read as it comes (one with no writer reads as empty, never waits); a device is
      // read under readAll's bound; a directory or a socket is refused.
      auto fd = openUserFile(src, true);
      if (!fd)
        return fd.error().wrap(fd.error().code != 0 ? "--from-json" : "--from-json " + src).as(ErrorKind::kBadInput);
      auto t = readAll(fd->get(), src);
      if (!t) return t.error().wrap("--from-json").as(ErrorKind::kBadInput);
      text = std::move(*t);
    }
    auto r = readEvents(text, name);
    if (!r) return r.error().wrap("--from-json").as(ErrorKind::kBadInput);
    if (r->skipped > 0)
      err << fmt::format("headroom report: {}: skipped {} line(s) that are not headroom OOM kill events\n", name,
                         r->skipped);
    for (json& rec : r->records) l.records.push_back(std::move(rec));
    l.where += (l.where.empty() ? "" : ", ") + name;
  }
  std::stable_sort(l.records.begin(), l.records.end(), [](const json& a, const json& b) {
    auto ta = recordTime(a), tb = recordTime(b);
    if (ta.has_value() != tb.has_value()) return !ta.has_value();  // timeless first, as they came
    return ta && *ta < *tb;
  });
  std::vector<json> unique;
  std::size_t duplicates = 0;
  for (json& rec : l.records) {
    bool seen = std::any_of(unique.begin(), unique.end(), [&](const json& u) {
      return idOf(u) == idOf(rec) && hostOf(u) == hostOf(rec) && u == rec;
    });
    if (seen)
      ++duplicates;
    else
      unique.push_back(std::move(rec));
  }
  if (duplicates > 0) err << fmt::format("headroom report: {} record(s) read more than once, shown once\n", duplicates);
  l.records = std::move(unique);
  return l;
}

Result<Loaded> loadJournal(const std::string& given, std::ostream& err) {
  auto none = [](std::string msg) { return makeError(ErrorKind::kNotFound, std::move(msg)); };
  if (given.empty()) return badInput("--journal: an empty path");
  // A directory names the journal in it, as the agent's --journal does.
  const std::string journal = journalFileOf(given);

  // Say a missing journal plainly: readJournal reads a missing file as empty.
  struct stat st {};
  bool have_main = exists(journal, &st);
  if (have_main && S_ISDIR(st.st_mode))
    return badInput(fmt::format("--journal {}: a directory, not a journal file", journal));
  int main_errno = have_main ? 0 : errno;
  struct stat st1 {};
  bool have_rotated = exists(journal + ".1", &st1);
  if (!have_main && !have_rotated) {
    if (main_errno == ENOENT)
      return none(fmt::format("no journal at {} (the agent writes it on the first OOM kill; --journal to read another)",
                              journal));
    if (main_errno == ENOTDIR || main_errno == ENAMETOOLONG || main_errno == ELOOP)
      return sysError(main_errno, fmt::format("--journal {}", journal)).as(ErrorKind::kBadInput);
  }

  auto contents = readJournal(journal);
  if (!contents) {
    int code = contents.error().code;
    bool bad_path = code == EISDIR || code == ENOTDIR || code == ENAMETOOLONG || code == ELOOP;
    // A file that is not one (a FIFO, a device) is named by the error already, the rotated one too.
    Error e = contents.error().kind == ErrorKind::kBadInput
                  ? contents.error()
                  : contents.error().wrap(fmt::format("reading the journal {}", journal));
    return bad_path ? e.as(ErrorKind::kBadInput) : e;
  }
  for (const std::string& d : contents->damage) err << "headroom report: " << damageLine(d) << "\n";
  if (contents->records.empty())
    return none(fmt::format("the journal at {} holds no OOM kills{}", journal,
                            contents->damage.empty() ? "" : " (only damaged records)"));
  return Loaded{std::move(contents->records), journal};
}

}  // namespace

int runReportCommand(const ReportOptions& opts, std::ostream& out, std::ostream& err) {
  return runReportCommand(opts, std::cin, out, err);
}

int runReportCommand(const ReportOptions& opts, std::istream& in, std::ostream& out, std::ostream& err) {
  auto fail = [&](const Error& e) { return cli::fail(err, "report", e); };
  auto bad = [&](std::string msg) { return fail(badInput(std::move(msg))); };
  // Nothing to show: no journal, no record, none since then.
  auto none = [&](std::string msg) { return fail(makeError(ErrorKind::kNotFound, std::move(msg))); };

  std::optional<double> since;
  if (!opts.since.empty()) {
    double now = unixSeconds();
    auto s = parseSinceTime(opts.since, now);
    if (!s) return bad("--since " + s.error().describe());
    since = *s;
  }
  if (opts.list && (!opts.svg.empty() || !opts.html.empty()))
    return bad("--svg and --html draw one record: not with --list");

  auto loaded = opts.from_json.empty() ? loadJournal(opts.journal, err) : loadFromJson(opts.from_json, in, err);
  if (!loaded) return fail(loaded.error());
  const std::string& journal = loaded->where;
  std::vector<json> all = std::move(loaded->records);
  if (all.empty()) return none(fmt::format("no OOM kill records in {}", journal));
  if (!opts.host.empty()) {
    std::vector<json> mine;
    std::set<std::string> hosts;
    for (json& r : all) {
      hosts.insert(hostOf(r));
      if (hostOf(r) == opts.host) mine.push_back(std::move(r));
    }
    if (mine.empty())
      return none(fmt::format("no record of host {} in {} (hosts: {})", opts.host, journal,
                              fmt::join(hosts.begin(), hosts.end(), ", ")));
    all = std::move(mine);
  }
  std::vector<json> chosen;
  for (const json& rec : all) {
    if (!since) {
      chosen.push_back(rec);
      continue;
    }
    auto t = recordTime(rec);
    if (t && *t >= *since) chosen.push_back(rec);
  }
  if (chosen.empty()) {
    auto latest = recordTime(all.back());
    return none(fmt::format("no OOM kills since {} in {} ({} recorded{})", formatUtc(*since), journal, all.size(),
                            latest ? ", the latest at " + formatUtc(*latest) : ""));
  }

  if (opts.id) {
    auto match = [&](const json& r) { return idOf(r) == opts.id; };
    auto it = std::find_if(chosen.begin(), chosen.end(), match);
    if (it == chosen.end()) {
      std::optional<std::uint64_t> lo, hi;
      for (const json& r : all) {
        if (auto id = idOf(r)) {
          lo = lo ? std::min(*lo, *id) : *id;
          hi = hi ? std::max(*hi, *id) : *id;
        }
      }
      std::string range = lo ? (*lo == *hi ? fmt::format("only id {} is present", *lo)
                                           : fmt::format("ids {} to {} are present", *lo, *hi))
                             : std::string("no record has an id");
      bool before_since = std::any_of(all.begin(), all.end(), match);
      return none(fmt::format("no record with id {} in {}{} ({})", *opts.id, journal,
                              before_since ? " since " + opts.since : "", range));
    }
    // Ids are each host's own: the same id from two hosts needs --host.
    std::set<std::string> hosts;
    for (const json& r : chosen)
      if (match(r)) hosts.insert(hostOf(r));
    if (hosts.size() > 1)
      return bad(fmt::format("--id {}: records of {} hosts have it ({}): give --host", *opts.id, hosts.size(),
                             fmt::join(hosts.begin(), hosts.end(), ", ")));
    chosen = {*it};
  }

  if (opts.list) {
    if (opts.json) {
      json arr = json::array();
      for (const json& r : chosen) arr.push_back(r);
      out << dumpJson(arr) << "\n";
    } else {
      out << renderRecordList(chosen);
    }
    return kExitOk;
  }

  const json& rec = chosen.back();
  if (!opts.svg.empty()) {
    if (auto s = writeOutputFile(opts.svg, renderReportSvg(rec), "SVG"); !s) return fail(s.error());
  }
  if (!opts.html.empty()) {
    if (auto s = writeOutputFile(opts.html, renderReportHtml(rec), "HTML page"); !s) return fail(s.error());
  }
  // As stored: one line of JSON that parses back to the very record.
  if (opts.json)
    out << dumpJson(rec) << "\n";
  else
    out << renderReport(rec);
  return kExitOk;
}

}  // namespace headroom::cli
