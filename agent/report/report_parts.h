// The parts of `headroom report` that its renderers share (report/report.h): reading a record
// defensively (a record from an older agent, a partial write path or another machine: a missing
// key, a null and a wrong type all read as "not known", never as an exception), what a record
// says, the report as a document of sections, and the flight recorder's minute. Private to
// agent/report.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace headroom::report_detail {

using nlohmann::json;

struct Task {
  std::int64_t pid = 0;
  std::string comm;
  std::string cgroup;
};

// The OOM domain: the cgroup that hit its limit (or the machine), with its usage and limit at
// the kill from the kernel's report; when the record lacks them, the last sampled values.
struct Domain {
  std::string cgroup;
  bool global = false;
  std::string constraint;
  std::optional<std::uint64_t> limit, usage;
  bool limit_sampled = false, usage_sampled = false;
};

struct Table {
  std::vector<std::string> header;
  std::string align;  // one 'l' or 'r' per column
  std::vector<std::vector<std::string>> rows;
  std::set<std::size_t> mono;  // columns that must stay monospace (sparklines)
};

using Block = std::variant<std::string, Table>;

struct Section {
  std::string title;
  std::string subtitle;
  std::vector<Block> blocks;
};

struct Doc {
  std::string heading;
  std::string summary;
  std::vector<Section> sections;
};

struct Flight {
  std::string cgroup;
  std::optional<double> window;  // seconds, as the agent said
  bool kill_time_known = false;
  std::vector<double> t;  // seconds relative to the kill (negative: before it)
  std::vector<std::optional<double>> usage, limit, self;
  std::vector<std::string> kinds;                    // drawing order; only kinds that held anything
  std::map<std::string, std::vector<double>> parts;  // per kind, one value per point
  std::size_t without_time = 0;
};

const json* field(const json& j, const char* key);
const json& objectAt(const json& j, const char* key);
const json& arrayAt(const json& j, const char* key);
std::optional<double> numberOf(const json* v);
std::optional<double> numberAt(const json& j, const char* key);
std::optional<std::uint64_t> bytesOf(const json* v);
std::optional<std::uint64_t> bytesAt(const json& j, const char* key);
std::optional<std::int64_t> intAt(const json& j, const char* key);
std::string textAt(const json& j, const char* key);
bool flagAt(const json& j, const char* key);
// A time field written in seconds; nanoseconds (an agent that wrote wall_time_ns there) are
// recognised by their size.
std::optional<double> secondsOf(std::optional<double> v);
std::string bytesText(std::optional<std::uint64_t> v, const char* none = "-");
std::string bytesText(double v);
std::string changeText(double delta);
// "2026-12-02 14:03:11 UTC", or with `clock_only` "14:03:11 UTC".
std::string utcTime(double secs, bool clock_only = false);
std::string secondsText(double s);
// Counts code points, so that sparklines and non-ASCII comms line up.
std::size_t displayWidth(std::string_view s);
std::string joinList(const std::vector<std::string>& items);
std::vector<std::string> wrapWords(const std::string& text, std::size_t width);
// The process (tgid) when the record has it: the kernel picks a thread, people know processes.
Task taskOf(const json& j);
std::string who(const Task& t);
std::vector<Task> victimsOf(const json& rec);
std::optional<Task> triggerOf(const json& rec);
std::string victimCgroup(const json& rec);
std::optional<std::uint64_t> lastFlightValue(const json& rec, const char* key);
Domain domainOf(const json& rec);
// The cgroup the record is about (what died): the sampled one, else the flight's, else the
// OOM domain, else the victim's.
std::string recordCgroup(const json& rec);
std::string usageOfLimit(const Domain& d);
std::string xmlEscape(std::string_view s);
std::string renderDocHtml(const Doc& d, const std::string& svg);
// Several documents on one page (`headroom explain`'s incidents), each with its picture.
std::string renderDocsHtml(const std::string& title, const std::vector<std::pair<Doc, std::string>>& docs);
// The document as text, tables aligned (indented by `indent`).
std::string renderDocText(const Doc& d);
std::string renderTableText(const Table& t, const std::string& indent);
int kindRank(const std::string& kind);
std::optional<bool> kindVisible(const std::string& kind);
Flight readFlight(const json& rec);
// At most `width` values: each column the largest of its bucket, so that a peak is never lost.
std::vector<double> resample(const std::vector<double>& v, std::size_t width);

// The report as a document: its sections in order (report_sections.cpp).
Doc buildDoc(const json& rec);
// Its sections of the moment of the kill, for a record of a kill no agent watched (explain).
Section killedSection(const json& rec);
Section breakdownSection(const json& rec);
Section taskDumpSection(const json& rec);
// The parts of an attribution (or of the breakdown at the kill) as a table, each with its share
// of `usage`; and its notes, one block each (report_moment.cpp).
Table partsTable(const json& att, std::optional<std::uint64_t> usage);
void addNotes(Section& s, const json& att);
// LEDGER AT THE KILL: each victim's RAM, page tables, pinned and device memory side by side; none
// for a record without a ledger (one written before it had one) (report_ledger.cpp).
std::optional<Section> ledgerSection(const json& rec);
// AT THE KILL: the record's at_kill in a sentence and a table.
Section momentSection(const json& rec);
// Whether the kill was warned of, and the run-up's growers (report_warning.cpp); none without a verdict.
std::optional<Section> warningSection(const json& rec);

// The last minute before the kill as an SVG element: the parts stacked, the limit, the kill;
// with `caption`, the report's sentence above them (a picture standing alone).
std::string svgElement(const json& rec, bool caption);
// The moment of the kill alone (a record without the flight's minute: `headroom explain`): the
// parts the kernel charged as one stacked bar, the limit marked, a legend with each part's share.
std::string momentSvgElement(const json& rec, bool caption);

}  // namespace headroom::report_detail
