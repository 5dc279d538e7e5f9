// headroom report's rendering (report.h) on hand-built journal records (docs/journal.md): the
// summary, the breakdown, the sparklines, the budget gap, partial records, SVG and HTML.
#include "headroom/report/report.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "headroom/model/snapshot_json.h"
#include "headroom/util/units.h"
#include "testing/child_process.h"

namespace headroom {
namespace {

using nlohmann::json;

constexpr double kKill = 1796220191.0;  // 2026-12-02 14:03:11 UTC
constexpr std::uint64_t kMiB = 1ULL << 20;

// Journal records as the agent writes them: the embedded parts through the real toJson forms
// (event, attribution, memory, processes), the rest as docs/journal.md lays it out.
class RecordBuilder {
 public:
  RecordBuilder() {
    event_.id = 3;
    event_.wall_time_ns = static_cast<std::int64_t>(kKill * 1e9);
    event_.constraint = "CONSTRAINT_MEMCG";
    event_.from_bpf = true;
    event_.from_kmsg = true;
  }

  RecordBuilder& victim(pid_t pid, std::string comm, std::string cgroup, std::uint64_t anon = 200 * kMiB) {
    OomVictim v;
    v.pid = pid;
    v.tgid = pid;
    v.comm = std::move(comm);
    v.cgroup = std::move(cgroup);
    v.anon_rss = anon;
    v.file_rss = 3 * kMiB;
    v.shmem_rss = 0;
    v.pgtables = 4 * kMiB;
    v.swap = 0;
    v.total_vm = 900 * kMiB;
    v.oom_score_adj = 0;
    event_.victims.push_back(v);
    return *this;
  }
  RecordBuilder& trigger(pid_t pid, std::string comm, std::string cgroup) {
    event_.trigger_pid = pid;
    event_.trigger_tgid = pid;
    event_.trigger_comm = std::move(comm);
    event_.trigger_cgroup = std::move(cgroup);
    return *this;
  }
  RecordBuilder& domain(std::optional<std::string> cgroup, std::optional<std::uint64_t> usage,
                        std::optional<std::uint64_t> limit, std::string constraint = "CONSTRAINT_MEMCG") {
    event_.domain_cgroup = std::move(cgroup);
    event_.domain_usage_bytes = usage;
    event_.domain_limit_bytes = limit;
    event_.constraint = std::move(constraint);
    event_.global = event_.constraint == "CONSTRAINT_NONE";
    return *this;
  }
  RecordBuilder& task(pid_t pid, std::string name, std::uint64_t rss, std::uint64_t pte) {
    OomTaskDumpEntry t;
    t.pid = pid;
    t.tgid = pid;
    t.name = std::move(name);
    t.rss_bytes = rss;
    t.rss_anon_bytes = rss;
    t.rss_file_bytes = 0;
    t.rss_shmem_bytes = 0;
    t.pgtables_bytes = pte;
    t.total_vm_bytes = rss * 3;
    event_.tasks.push_back(t);
    return *this;
  }
  // The cgroup as last sampled, one second before the kill.
  RecordBuilder& cgroup(const std::string& path, std::uint64_t usage, std::uint64_t limit) {
    CgroupMemory m;
    m.version = 2;
    m.path = path;
    m.limit = limit;
    m.usage = usage;
    Attribution a;
    a.usage = usage;
    a.parts = {{PartKind::kAnon, 190 * kMiB, Accuracy::kExact, "memory.stat anon"},
               {PartKind::kFile, 10 * kMiB, Accuracy::kExact, "memory.stat file"},
               {PartKind::kShmemMapped, 5 * kMiB, Accuracy::kEstimated, "sum of Pss_Shmem"},
               {PartKind::kPageTables, 12 * kMiB, Accuracy::kExact, "memory.stat pagetables"},
               {PartKind::kSlabUnreclaimable, 8 * kMiB, Accuracy::kExact, "memory.stat slab_unreclaimable"},
               {PartKind::kKernelOther, 25 * kMiB, Accuracy::kEstimated, "memory.stat kernel minus the rest"}};
    a.unattributed = 0;
    a.notes = {"shmem split by PSS"};
    Bound b{path, limit, usage, 0};
    cgroup_ = {{"path", path},          {"sampled_at", kKill - 1.0},  {"memory", toJson(m)}, {"attribution", toJson(a)},
               {"bounds", {toJson(b)}}, {"tightest_bound", toJson(b)}};
    return *this;
  }
  RecordBuilder& process(Role role, pid_t pid, std::string comm, std::uint64_t rss, std::uint64_t pte,
                         std::optional<std::uint64_t> pinned = std::nullopt,
                         std::optional<std::uint64_t> device = std::nullopt) {
    ProcessSnapshot p;
    p.sample.pid = pid;
    p.sample.comm = std::move(comm);
    p.role = role;
    p.attribution.rss = rss;
    p.attribution.rss_anon = rss;
    p.attribution.pss = rss;
    p.attribution.page_tables = pte;
    if (pinned) {
      PinnedOverlay o;
      o.live_bytes = *pinned;
      o.residency = PinnedOverlay::Residency::kOutsideRss;
      p.attribution.pinned = std::make_shared<const PinnedOverlay>(o);
    }
    p.attribution.device_bytes = device;
    processes_.push_back(toJson(p));
    return *this;
  }
  RecordBuilder& point(double before_kill, std::uint64_t usage, std::map<std::string, std::uint64_t> parts,
                       std::optional<std::uint64_t> self = std::nullopt,
                       std::optional<std::uint64_t> limit = 256 * kMiB) {
    json p = {{"time", kKill - before_kill},
              {"usage_bytes", usage},
              {"limit_bytes", limit ? json(*limit) : json(nullptr)},
              {"parts", parts},
              {"self_reported_bytes", self ? json(*self) : json(nullptr)}};
    points_.push_back(p);
    return *this;
  }
  RecordBuilder& budget(std::uint64_t budget, std::uint64_t margin) {
    budget_ = {{"budget_bytes", budget},
               {"margin_bytes", margin},
               {"generation", 2},
               {"reason", "room 216 MiB under /jobs/prover, less the margin"},
               {"margin_source", "floor"}};
    return *this;
  }
  RecordBuilder& selfReported(std::uint64_t b) {
    self_ = b;
    return *this;
  }
  RecordBuilder& charged(std::uint64_t b) {
    charged_ = b;
    return *this;
  }
  RecordBuilder& flightCgroup(std::string cg) {
    flight_cgroup_ = std::move(cg);
    return *this;
  }

  json build() const {
    return {{"version", 1},
            {"id", 3},
            {"time", kKill},
            {"host", {{"hostname", "gpu-07"}, {"kernel", "6.8.0-45-generic"}, {"agent_version", "0.1.0"}}},
            {"event", toJson(event_)},
            {"cgroup", cgroup_},
            {"processes", processes_},
            {"budget", budget_},
            {"self_reported_bytes", self_ ? json(*self_) : json(nullptr)},
            {"charged_bytes", charged_ ? json(*charged_) : json(nullptr)},
            {"sensors", json::array({{{"name", "oom"}, {"state", "active"}, {"reason", ""}},
                                     {{"name", "cuda"}, {"state", "off"}, {"reason", "no libcuda.so.1"}}})},
            {"flight", {{"cgroup", flight_cgroup_}, {"window_seconds", 60}, {"points", points_}}}};
  }

 private:
  OomEvent event_;
  json cgroup_ = nullptr;
  json processes_ = json::array();
  json budget_ = nullptr;
  json points_ = json::array();
  std::optional<std::uint64_t> self_, charged_;
  std::string flight_cgroup_ = "/jobs/prover";
};

// The story: cuzk at 255 MiB of its cgroup's 256 MiB, believing it used 200 MiB.
json storyRecord() {
  RecordBuilder b;
  b.victim(6467, "cuzk", "/jobs/prover")
      .trigger(6467, "cuzk", "/jobs/prover")
      .domain("/jobs/prover", 255 * kMiB, 256 * kMiB)
      .task(6467, "cuzk", 214 * kMiB, 4 * kMiB)
      .task(7001, "curio", 30 * kMiB, 1 * kMiB)
      .cgroup("/jobs/prover", 250 * kMiB, 256 * kMiB)
      .process(Role::kProver, 6467, "cuzk", 214 * kMiB, 4 * kMiB, 64 * kMiB, 2048 * kMiB)
      .process(Role::kColocated, 7001, "curio", 30 * kMiB, 1 * kMiB)
      .budget(200 * kMiB, 16 * kMiB)
      .selfReported(200 * kMiB)
      .charged(255 * kMiB);
  for (int i = 0; i < 12; ++i) {
    std::uint64_t anon = (120 + 7 * static_cast<std::uint64_t>(i)) * kMiB;
    std::uint64_t pte = (6 + static_cast<std::uint64_t>(i) / 2) * kMiB;
    b.point(60 - 5 * i, anon + pte + 10 * kMiB + 25 * kMiB,
            {{"anon", anon}, {"file", 10 * kMiB}, {"pagetables", pte}, {"kernel_other", 25 * kMiB}, {"sock", 0}},
            (150 + 4 * static_cast<std::uint64_t>(i)) * kMiB);
  }
  return b.build();
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

// The line of `text` that starts (after indentation) with `first`.
std::string lineStarting(const std::string& text, const std::string& first) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    std::string line = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    std::size_t b = line.find_first_not_of(' ');
    if (b != std::string::npos && line.compare(b, first.size(), first) == 0 &&
        (line.size() == b + first.size() || line[b + first.size()] == ' '))
      return line;
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  return {};
}

// One section of the text report: from its title to the blank line after it.
std::string section(const std::string& report, const std::string& title) {
  std::size_t at = report.find("\n" + title);
  if (at == std::string::npos) return {};
  std::size_t end = report.find("\n\n", at + 1);
  return report.substr(at + 1, end == std::string::npos ? std::string::npos : end - at);
}

// The sparkline column of a WHAT GREW row: the second field.
std::string trendOf(const std::string& row) {
  std::smatch m;
  if (!std::regex_search(row, m, std::regex("^ *\\S+ +(\\S+)"))) return {};
  return m[1].str();
}

// Splits a UTF-8 sparkline into its characters' indexes in "▁▂▃▄▅▆▇█".
std::vector<int> levels(const std::string& spark) {
  static const std::vector<std::string> kBars = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  std::vector<int> out;
  for (std::size_t i = 0; i < spark.size();) {
    int found = -1;
    for (std::size_t k = 0; k < kBars.size(); ++k) {
      if (spark.compare(i, kBars[k].size(), kBars[k]) == 0) found = static_cast<int>(k);
    }
    if (found < 0) return {};
    out.push_back(found);
    i += kBars[0].size();
  }
  return out;
}

std::string xmllint() {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  std::size_t pos = 0;
  while (pos <= dirs.size()) {
    std::size_t c = dirs.find(':', pos);
    std::string dir = dirs.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
    std::string candidate = (dir.empty() ? "." : dir) + "/xmllint";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  return {};
}

class TempFile {
 public:
  explicit TempFile(const std::string& suffix) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "headroom-report-XXXXXX").string();
    int fd = ::mkstemp(tmpl.data());
    if (fd >= 0) ::close(fd);
    base_ = tmpl;
    path_ = tmpl + suffix;
  }
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(base_, ec);
    std::filesystem::remove(path_, ec);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }
  void write(const std::string& text) const { std::ofstream(path_, std::ios::binary) << text; }

 private:
  std::string base_, path_;
};

// xmllint --noout: empty output and exit 0 when the document is well-formed XML.
void expectWellFormed(const std::string& doc) {
  std::string lint = xmllint();
  ASSERT_FALSE(lint.empty()) << "xmllint not found: install libxml2-utils (deploy/install-deps.sh)";
  TempFile f(".svg");
  f.write(doc);
  auto r = testing::runCommand({lint, "--noout", f.path()});
  EXPECT_EQ(r.exit_code, 0) << r.err << "\n" << doc;
  EXPECT_TRUE(r.err.empty()) << r.err;
}

struct Tick {
  double y;
  std::uint64_t bytes;
};

std::vector<Tick> yTicks(const std::string& svg) {
  static const std::regex kTick(
      R"re(<text class="ytick" x="[0-9.]+" y="([0-9.]+)" dy="4" text-anchor="end">([^<]+)</text>)re");
  std::vector<Tick> out;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), kTick); it != std::sregex_iterator(); ++it) {
    auto b = parseSize((*it)[2].str());
    if (b) out.push_back({std::stod((*it)[1].str()), *b});
  }
  return out;
}

// ---- sparklines ----

TEST(Sparkline, RisingSeriesRisesFromLowestToHighest) {
  EXPECT_EQ(sparkline({1, 2, 3, 4, 5, 6, 7, 8}), "▁▂▃▄▅▆▇█");
  std::vector<double> v;
  for (int i = 0; i < 40; ++i) v.push_back(100.0 + i * i);
  auto l = levels(sparkline(v));
  ASSERT_EQ(l.size(), v.size());
  EXPECT_EQ(l.front(), 0);
  EXPECT_EQ(l.back(), 7);
  for (std::size_t i = 1; i < l.size(); ++i) EXPECT_GE(l[i], l[i - 1]) << i;
  auto down = levels(sparkline({9, 7, 5, 3}));
  EXPECT_EQ(down, (std::vector<int>{7, 5, 2, 0}));
}

TEST(Sparkline, FlatSinglePointAndEmpty) {
  auto flat = levels(sparkline({5e9, 5e9, 5e9}));
  ASSERT_EQ(flat.size(), 3u);
  EXPECT_EQ(flat[0], flat[1]);
  EXPECT_EQ(flat[1], flat[2]);
  EXPECT_EQ(levels(sparkline({42})).size(), 1u);
  EXPECT_EQ(sparkline({}), "");
  EXPECT_EQ(levels(sparkline({1, NAN, 3})).size(), 0u) << "a missing value is a blank, not a bar";
  EXPECT_EQ(sparkline({1, NAN, 3}), "▁ █");
}

// ---- the summary ----

TEST(ReportSummary, NamesVictimCgroupDomainUsageLimitAndTrigger) {
  EXPECT_EQ(
      reportSummary(storyRecord()),
      "pid 6467 (cuzk) was OOM-killed in /jobs/prover, which was at 255 MiB of its 256 MiB limit (OOM domain "
      "/jobs/prover, CONSTRAINT_MEMCG); the allocation that failed was pid 6467 (cuzk)'s, at 2026-12-02 14:03:11 UTC.");
}

TEST(ReportSummary, TheLimitIsTheDomainsNotTheVictimsSize) {
  // Victim in a child cgroup, the limit hit by its parent, the allocation made by a neighbour.
  RecordBuilder b;
  b.victim(6467, "cuzk", "/jobs/prover", 180 * kMiB)
      .trigger(7001, "curio", "/jobs/curio")
      .domain("/jobs", 1023 * kMiB, 1024 * kMiB);
  std::string s = reportSummary(b.build());
  EXPECT_TRUE(contains(s,
                       "pid 6467 (cuzk) was OOM-killed in /jobs/prover; its OOM domain /jobs was at 1023 MiB of its "
                       "1.00 GiB limit (CONSTRAINT_MEMCG)"))
      << s;
  EXPECT_TRUE(contains(s, "the allocation that failed was made by pid 7001 (curio) in /jobs/curio")) << s;
  EXPECT_FALSE(contains(s, "180 MiB")) << "the victim's own size is not the limit: " << s;
  EXPECT_FALSE(contains(s, "900 MiB")) << s;
}

TEST(ReportSummary, GlobalOomAndSeveralVictims) {
  RecordBuilder b;
  b.victim(10, "a", "/x")
      .victim(11, "b", "/x")
      .trigger(12, "c", "/y")
      .domain(std::nullopt, std::nullopt, std::nullopt, "CONSTRAINT_NONE");
  std::string s = reportSummary(b.build());
  EXPECT_TRUE(contains(s, "pid 10 (a) and pid 11 (b) were OOM-killed in /x when the whole machine ran out of memory"))
      << s;
  EXPECT_TRUE(contains(s, "machine-wide OOM, CONSTRAINT_NONE")) << s;
}

TEST(ReportSummary, FallsBackToTheLastSampleAndSaysSo) {
  RecordBuilder b;
  b.victim(6467, "cuzk", "/jobs/prover")
      .domain("/jobs/prover", std::nullopt, std::nullopt)
      .cgroup("/jobs/prover", 250 * kMiB, 256 * kMiB);
  std::string s = reportSummary(b.build());
  EXPECT_TRUE(contains(s, "at 250 MiB of its 256 MiB limit as last sampled")) << s;
  EXPECT_TRUE(contains(s, "the task whose allocation failed is not known")) << s;
}

// ---- the text report ----

json atKill(const char* source) {
  return json::parse(fmt::format(R"({{"source": "{}", "cgroup": "/jobs/prover", "usage_bytes": {}, "limit_bytes": {},
    "failcnt": 12, "visible_bytes": {}, "invisible_bytes": {}, "unattributed_bytes": 4096, "adds_up": true,
    "parts": [{{"kind": "anon", "visible": true, "bytes": {}, "accuracy": "exact", "source": "the OOM report's anon"}},
              {{"kind": "pagetables", "visible": false, "bytes": {}, "accuracy": "exact", "source": "the OOM report's pagetables"}},
              {{"kind": "shmem_unmapped", "visible": false, "bytes": {}, "accuracy": "derived", "source": "x"}},
              {{"kind": "slab_unreclaimable", "visible": false, "bytes": 0, "accuracy": "exact", "source": "y"}}],
    "notes": ["a note"]}})",
                                 source, 256 * kMiB, 256 * kMiB, 200 * kMiB, 56 * kMiB, 200 * kMiB, 40 * kMiB,
                                 16 * kMiB));
}

// The moment of the kill leads: what the prover believed, what the kernel charged and where, the
// invisible parts largest first (those that held nothing left out), then the table.
TEST(Report, TheMomentOfTheKillLeads) {
  json rec = storyRecord();
  rec["at_kill"] = atKill("kernel report");
  std::string r = renderReport(rec);
  EXPECT_LT(r.find("AT THE KILL  (the OOM domain, from the kernel's own OOM report)"), r.find("KILLED")) << r;
  EXPECT_LT(r.find("KILLED"), r.find("BEFORE THE KILL"));
  std::string at = section(r, "AT THE KILL");
  EXPECT_TRUE(contains(at,
                       "the prover believed it used 200 MiB; the kernel charged 256 MiB to /jobs/prover (limit "
                       "256 MiB): 56.0 MiB invisible to any process — page tables 40.0 MiB, shmem nobody maps "
                       "16.0 MiB; besides anon 200 MiB"))
      << at;
  EXPECT_FALSE(contains(at, "unreclaimable slab 0")) << at;
  EXPECT_TRUE(contains(at, "the parts add up to the charge within 1% (unattributed 4.00 KiB)")) << at;
  EXPECT_TRUE(contains(at, "the limit was hit 12 times")) << at;
  EXPECT_TRUE(contains(at, "note: a note")) << at;
  EXPECT_FALSE(lineStarting(at, "pagetables").empty()) << at;
}

// A kill found after the fact says so first, how and when, and what its record cannot hold; a
// kill seen live says nothing of the kind.
TEST(Report, AKillFoundAfterTheFactSaysHowAndWhen) {
  json rec = storyRecord();
  EXPECT_FALSE(contains(renderReport(rec), "FOUND AFTER THE FACT"));
  rec["kill_time"] = 1'700'000'000.0;
  rec["found_after"] = {{"how", "kernel_log"}, {"at", 1'700'000'090.0}};
  std::string r = renderReport(rec);
  EXPECT_LT(r.find("FOUND AFTER THE FACT"), r.find("AT THE KILL")) << r;
  std::string found = section(r, "FOUND AFTER THE FACT");
  EXPECT_TRUE(contains(found,
                       "found in the kernel's log, read from the start of its ring when the agent started at "
                       "2023-11-14 22:14:50 UTC, 90 s after the kill"))
      << found;
  EXPECT_TRUE(contains(found, "no sample of the agent's is of the moments before the kill")) << found;
  rec["found_after"]["how"] = "in_flight";
  found = section(renderReport(rec), "FOUND AFTER THE FACT");
  EXPECT_TRUE(contains(found, "seen by an agent that stopped before writing its record")) << found;
  EXPECT_FALSE(contains(found, "no sample of the agent's")) << found;
}

TEST(Report, TheMomentFromFilesReadSaysHowLateAndAGlobalOneNamesSlabAndCgroups) {
  json rec = storyRecord();
  rec["at_kill"] = atKill("files read after the kill");
  rec["at_kill"]["read_after_seconds"] = 0.0021;
  std::string whole = renderReport(rec);
  EXPECT_TRUE(contains(whole, "AT THE KILL  (the OOM domain's files, read 2.1 ms after the kill; derived")) << whole;
  std::string at;

  rec["at_kill"] = atKill("kernel report (Mem-Info)");
  rec["at_kill"]["cgroup"] = nullptr;
  rec["at_kill"]["ram_bytes"] = 3 * 1024 * kMiB;
  rec["at_kill"]["free_bytes"] = 40 * kMiB;
  rec["at_kill"]["unreclaimable_slab"] =
      json::parse(R"([{"name": "task_struct", "used_bytes": 1024, "total_bytes": 2048}])");
  rec["largest_cgroups"] =
      json::parse(R"([{"path": "/jobs/prover", "usage_bytes": 1048576, "invisible_bytes": 4096}])");
  at = section(renderReport(rec), "AT THE KILL");
  EXPECT_TRUE(contains(at, "the machine had 256 MiB in use")) << at;
  EXPECT_TRUE(contains(at, "RAM 3.00 GiB, free 40.0 MiB")) << at;
  EXPECT_FALSE(lineStarting(at, "task_struct").empty()) << at;
  EXPECT_FALSE(lineStarting(at, "/jobs/prover").empty()) << at;

  rec.erase("at_kill");
  at = section(renderReport(rec), "AT THE KILL");
  EXPECT_TRUE(contains(at, "not known: the record has no picture of the moment")) << at;
}

TEST(Report, BreakdownListsVisibleAndInvisibleParts) {
  std::string r = renderReport(storyRecord());
  EXPECT_TRUE(contains(r, "BEFORE THE KILL  (/jobs/prover at the last sample, 1.0 s before the kill")) << r;
  EXPECT_TRUE(contains(r, "usage 250 MiB: visible 205 MiB + invisible 45.0 MiB, unattributed 0 B")) << r;
  std::string anon = lineStarting(r, "anon");
  EXPECT_TRUE(contains(anon, "visible") && contains(anon, "190 MiB") && contains(anon, "exact")) << anon;
  std::string pte = lineStarting(r, "pagetables");
  EXPECT_TRUE(contains(pte, "invisible") && contains(pte, "12.0 MiB") && contains(pte, "4.8%")) << pte;
  std::string other = lineStarting(r, "kernel_other");
  EXPECT_TRUE(contains(other, "invisible") && contains(other, "25.0 MiB~") && contains(other, "estimated")) << other;
  EXPECT_TRUE(contains(r, "note: shmem split by PSS")) << r;
  EXPECT_TRUE(contains(r, "at the kill the kernel charged 255 MiB: +5.00 MiB since this sample")) << r;
}

TEST(Report, WhoHeldWhatAtTheKillAndAtTheLastSample) {
  std::string r = renderReport(storyRecord());
  std::string dump = section(r, "WHO HELD WHAT AT THE KILL");
  std::string victim = lineStarting(dump, "6467");
  EXPECT_TRUE(contains(victim, "cuzk") && contains(victim, "214 MiB") && contains(victim, "killed, trigger")) << r;
  std::string curio = lineStarting(dump, "7001");
  EXPECT_TRUE(contains(curio, "curio") && contains(curio, "30.0 MiB")) << r;
  EXPECT_FALSE(contains(curio, "killed")) << curio;
  EXPECT_TRUE(contains(r, "2 tasks: RSS 244 MiB, page tables 5.00 MiB in all")) << r;
  std::string prover = lineStarting(r, "prover");
  EXPECT_TRUE(contains(prover, "6467") && contains(prover, "64.0 MiB") && contains(prover, "2.00 GiB") &&
              contains(prover, " no "))
      << "pinned 64 MiB outside RSS, 2 GiB on the device: " << prover;
  EXPECT_TRUE(contains(lineStarting(r, "colocated"), "curio")) << r;
  // The victim's own figures, apart from the limit.
  EXPECT_TRUE(
      contains(r, "KILLED  (the victim's own memory when the kernel chose it; the limit above is the OOM domain's)"))
      << r;
}

TEST(Report, WhatGrewHasASparklinePerComponentWithFirstLastAndChange) {
  std::string r = renderReport(storyRecord());
  EXPECT_TRUE(contains(r, "WHAT GREW  (the last 60 s before the kill: 12 samples of /jobs/prover)")) << r;
  std::string grew = section(r, "WHAT GREW");
  std::string anon = lineStarting(grew, "anon");  // not the breakdown's anon line
  ASSERT_FALSE(anon.empty()) << grew;
  EXPECT_TRUE(contains(anon, "120 MiB") && contains(anon, "197 MiB") && contains(anon, "+77.0 MiB")) << anon;
  auto l = levels(trendOf(anon));
  ASSERT_EQ(l.size(), 12u) << anon;
  EXPECT_EQ(l.front(), 0);
  EXPECT_EQ(l.back(), 7);
  auto file = levels(trendOf(lineStarting(grew, "file")));
  ASSERT_EQ(file.size(), 12u) << grew;
  EXPECT_TRUE(std::all_of(file.begin(), file.end(), [&](int x) { return x == file[0]; })) << "flat";
  EXPECT_TRUE(contains(lineStarting(grew, "file"), "0 B")) << "no change";
  EXPECT_TRUE(contains(lineStarting(grew, "usage"), "+82.0 MiB")) << grew;
  EXPECT_TRUE(contains(lineStarting(grew, "limit"), "256 MiB")) << grew;
  EXPECT_TRUE(contains(lineStarting(grew, "self-reported"), "+44.0 MiB")) << grew;
  EXPECT_TRUE(lineStarting(grew, "sock").empty()) << "a part that held nothing is left out";
  // Growth first: anon before page tables before the flat ones.
  EXPECT_LT(grew.find("  anon"), grew.find("  pagetables"));
  EXPECT_LT(grew.find("  pagetables"), grew.find("  file"));
}

TEST(Report, WhatGrewWithOneSample) {
  RecordBuilder b;
  b.victim(1, "p", "/c").domain("/c", 10 * kMiB, 16 * kMiB).point(1, 9 * kMiB, {{"anon", 9 * kMiB}});
  std::string r = renderReport(b.build());
  std::string grew = section(r, "WHAT GREW");
  EXPECT_TRUE(contains(grew, "one point only (the last sample): nothing to compare")) << grew;
  EXPECT_TRUE(lineStarting(grew, "anon").empty()) << "no trend from one point";
}

TEST(Report, BudgetSaysWhatTheProverBelievedAndWhatTheKernelCharged) {
  std::string r = renderReport(storyRecord());
  std::string budget = section(r, "BUDGET");
  EXPECT_TRUE(contains(budget, "budget 200 MiB, margin 16.0 MiB (margin from floor; generation 2)")) << budget;
  EXPECT_TRUE(contains(budget, "why: room 216 MiB under /jobs/prover, less the margin")) << budget;
  EXPECT_TRUE(
      contains(budget, "the prover believed it used 200 MiB; the kernel charged 255 MiB: 55.0 MiB beyond what it saw"))
      << budget;
  EXPECT_TRUE(contains(budget, "the cgroup was charged 55.0 MiB beyond the budget")) << budget;
  EXPECT_TRUE(
      contains(budget, "the invisible overhead at the last sample (45.0 MiB) was 29.0 MiB more than the margin"))
      << budget;
  EXPECT_TRUE(contains(budget, "budget + margin = 216 MiB of the 256 MiB limit of /jobs/prover")) << budget;
}

TEST(Report, PartialRecordsRenderWithNotKnownNotes) {
  RecordBuilder b;
  b.victim(42, "lonely", "/c").domain("/c", std::nullopt, std::nullopt);  // no cgroup, flight, budget, tasks
  json rec = b.build();
  rec["sensors"] = nullptr;
  std::string r = renderReport(rec);
  EXPECT_TRUE(contains(r, "pid 42 (lonely) was OOM-killed in /c")) << r;
  EXPECT_TRUE(contains(r, "not known: the cgroup was never sampled before the kill")) << r;
  EXPECT_TRUE(contains(r, "not known: the record has no task dump")) << r;
  EXPECT_TRUE(contains(r, "not known: no process of this cgroup was sampled")) << r;
  EXPECT_TRUE(contains(r, "not known: the flight recorder kept no samples")) << r;
  EXPECT_TRUE(contains(r, "budget: not known")) << r;
  EXPECT_TRUE(contains(r, "what the prover believed it used and what the kernel charged: not known")) << r;
  EXPECT_TRUE(contains(r, "not known: the record lists no sensors")) << r;
}

// Hand-made: a record from the counters only (an unprivileged container's agent).
TEST(Report, ACounterOnlyKillSaysItsSourceAndThatTheVictimIsInferred) {
  RecordBuilder b;
  b.victim(42, "cuzk", "/").domain("/", std::nullopt, std::nullopt);
  json rec = b.build();
  rec["event"]["victims"][0]["inferred"] = true;
  rec["event"]["sources"] = {{"bpf", false}, {"kmsg", false}, {"counter", true}};
  rec["event"]["counter"] = {{"cgroup", "/"}, {"kills", 1}};
  std::string killed = section(renderReport(rec), "KILLED");
  EXPECT_TRUE(contains(killed, "is inferred, not named by the kernel")) << killed;
  EXPECT_TRUE(contains(killed, "told by the OOM-kill counter of / (+1; no BPF or /dev/kmsg to name the victim)"))
      << killed;
}

TEST(Report, WrongTypesAndGarbageNeverThrow) {
  std::vector<json> odd = {
      json(),
      json::array(),
      json("text"),
      json::object(),
      {{"event", 5}, {"cgroup", json::array()}, {"processes", {{"x", 1}}}, {"flight", "nope"}, {"budget", 7}},
      {{"event",
        {{"victims", {1, "x", nullptr, {{"pid", "six"}, {"comm", 9}}}},
         {"oom_domain", {{"limit_bytes", -5}}},
         {"tasks", {nullptr, {{"rss_bytes", "big"}}}},
         {"wall_time_ns", "soon"}}},
       {"flight",
        {{"points", {nullptr, 3, {{"time", "x"}}, {{"time", 1e9}, {"parts", {{"anon", -1}, {"file", "f"}}}}}}}},
       {"cgroup", {{"attribution", {{"parts", {nullptr, {{"kind", 3}}}}, {"notes", {1, nullptr}}}}}},
       {"self_reported_bytes", 1e300},
       {"charged_bytes", -1},
       {"time", -4}},
  };
  for (const json& rec : odd) {
    EXPECT_NO_THROW({
      std::string r = renderReport(rec);
      EXPECT_TRUE(contains(r, "was OOM-killed")) << rec.dump();
      renderRecordList({rec});
      expectWellFormed(renderReportSvg(rec));
      renderReportHtml(rec);
    }) << rec.dump();
  }
}

TEST(Report, ControlCharactersNeverReachTheTerminal) {
  RecordBuilder b;
  b.victim(1, "ev\x1b[2Jil\x07", "/c\x9b").domain("/c", 1, 2);
  json rec = b.build();
  rec["event"]["victims"][0]["cgroup"] =
      "/c\xc2\x9b"
      "1m";
  std::string r = renderReport(rec);
  EXPECT_FALSE(contains(r, "\x1b")) << r;
  EXPECT_FALSE(contains(r, "\x07")) << r;
  EXPECT_FALSE(contains(r, "\xc2\x9b")) << r;
  EXPECT_TRUE(contains(r, "ev?[2Jil?")) << r;
}

TEST(RecordList, OneLinePerRecordUnderAHeader) {
  json a = storyRecord();
  json b = storyRecord();
  b["id"] = 4;
  b["event"]["victims"][0]["comm"] = "cuzk-2";
  std::string l = renderRecordList({a, b});
  EXPECT_EQ(std::count(l.begin(), l.end(), '\n'), 3);
  std::string first = lineStarting(l, "3");
  EXPECT_TRUE(contains(first, "2026-12-02 14:03:11 UTC") && contains(first, "pid 6467 (cuzk)") &&
              contains(first, "/jobs/prover") && contains(first, "255 MiB") && contains(first, "256 MiB") &&
              contains(first, "CONSTRAINT_MEMCG"))
      << first;
  EXPECT_TRUE(contains(lineStarting(l, "4"), "cuzk-2")) << l;
  EXPECT_TRUE(contains(l.substr(0, l.find('\n')), "TRIGGER")) << l;
}

// ---- pictures ----

TEST(ReportSvg, ParsesAsXmlWithTheLimitLineAtTheLimitAndTheKillMarked) {
  json rec = storyRecord();
  std::string svg = renderReportSvg(rec);
  expectWellFormed(svg);
  EXPECT_TRUE(contains(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\"")) << svg.substr(0, 300);
  EXPECT_TRUE(contains(svg, "<title>pid 6467 (cuzk) was OOM-killed in /jobs/prover")) << "the summary is the title";

  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      svg, m, std::regex(R"re(<line id="limit" x1="[0-9.]+" y1="([0-9.]+)" x2="[0-9.]+" y2="([0-9.]+)")re")))
      << svg;
  double ly = std::stod(m[1].str());
  EXPECT_EQ(m[1].str(), m[2].str()) << "horizontal";
  auto ticks = yTicks(svg);
  ASSERT_GE(ticks.size(), 2u) << svg;
  ASSERT_EQ(ticks.front().bytes, 0u);
  const Tick& top = ticks.back();
  double expect =
      ticks.front().y + (top.y - ticks.front().y) * static_cast<double>(256 * kMiB) / static_cast<double>(top.bytes);
  EXPECT_NEAR(ly, expect, 0.2) << "the limit line sits at 256 MiB on the axis";
  EXPECT_TRUE(contains(svg, ">limit 256 MiB (/jobs/prover)</text>")) << svg;

  ASSERT_TRUE(
      std::regex_search(svg, m, std::regex(R"re(<line id="kill" x1="([0-9.]+)" y1="[0-9.]+" x2="([0-9.]+)")re")))
      << svg;
  EXPECT_EQ(m[1].str(), m[2].str()) << "vertical";
  std::smatch zero;
  ASSERT_TRUE(std::regex_search(
      svg, zero, std::regex(R"re(<text class="xtick" x="([0-9.]+)" y="[0-9.]+" text-anchor="middle">0</text>)re")));
  EXPECT_EQ(m[1].str(), zero[1].str()) << "the kill is at 0 s";
  EXPECT_TRUE(contains(svg, "OOM kill of pid 6467 (cuzk) at 14:03:11 UTC")) << svg;
  // One area per part that held anything, and the legend names them.
  for (const char* k : {"anon", "file", "pagetables", "kernel_other"}) {
    EXPECT_TRUE(contains(svg, std::string("<title>") + k + "</title></path>")) << k;
  }
  EXPECT_FALSE(contains(svg, "<title>sock</title>"));
  EXPECT_TRUE(contains(svg, ">pagetables (invisible)</text>")) << svg;
  EXPECT_TRUE(contains(svg, ">anon (visible)</text>")) << svg;
}

TEST(ReportSvg, EscapesCommsAndPaths) {
  RecordBuilder b;
  b.victim(666, "<evil&\"proc>", "/jobs/<a&b>")
      .trigger(666, "<evil&\"proc>", "/jobs/<a&b>")
      .domain("/jobs/<a&b>", 9 * kMiB, 10 * kMiB);
  b.flightCgroup("/jobs/<a&b>").point(2, 9 * kMiB, {{"anon", 9 * kMiB}});
  std::string svg = renderReportSvg(b.build());
  expectWellFormed(svg);
  EXPECT_FALSE(contains(svg, "<evil")) << svg;
  EXPECT_TRUE(contains(svg, "&lt;evil&amp;&quot;proc&gt;")) << svg;
  EXPECT_TRUE(contains(svg, "/jobs/&lt;a&amp;b&gt;")) << svg;
}

TEST(ReportSvg, ALimitHitHigherUpIsNamedAsTheDomains) {
  RecordBuilder b;
  b.victim(6467, "cuzk", "/jobs/prover")
      .domain("/jobs", 1023 * kMiB, 1024 * kMiB)
      .point(5, 700 * kMiB, {{"anon", 700 * kMiB}});
  std::string svg = renderReportSvg(b.build());
  expectWellFormed(svg);
  EXPECT_TRUE(contains(svg, ">limit 1.00 GiB (/jobs)</text>")) << svg;
  EXPECT_TRUE(contains(svg, "the parts are /jobs/prover's; the limit and the kill's usage are its OOM domain /jobs's"))
      << svg;
}

TEST(ReportSvg, EmptyFlightStillShowsTheLimitAndTheKill) {
  RecordBuilder b;
  b.victim(1, "p", "/c").domain("/c", 10 * kMiB, 16 * kMiB);
  std::string svg = renderReportSvg(b.build());
  expectWellFormed(svg);
  EXPECT_TRUE(contains(svg, "id=\"limit\"")) << svg;
  EXPECT_TRUE(contains(svg, "id=\"kill\"")) << svg;
  EXPECT_TRUE(contains(svg, "id=\"no-samples\"")) << svg;
  b.domain("/c", std::nullopt, std::nullopt);
  svg = renderReportSvg(b.build());
  expectWellFormed(svg);
  EXPECT_FALSE(contains(svg, "id=\"limit\"")) << svg;
  EXPECT_TRUE(contains(svg, "limit not known")) << svg;
}

TEST(ReportHtml, SelfContainedWithTheInlineSvgAndEverythingEscaped) {
  RecordBuilder b;
  b.victim(666, "<evil&\"proc>", "/jobs/prover")
      .domain("/jobs/prover", 255 * kMiB, 256 * kMiB)
      .cgroup("/jobs/prover", 250 * kMiB, 256 * kMiB);
  b.process(Role::kProver, 666, "<evil&\"proc>", 200 * kMiB, 1 * kMiB).point(3, 250 * kMiB, {{"anon", 200 * kMiB}});
  std::string html = renderReportHtml(b.build());
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_TRUE(contains(html, "<svg xmlns=\"http://www.w3.org/2000/svg\"")) << "the picture is inline";
  EXPECT_FALSE(contains(html, "<?xml")) << "no XML declaration inside HTML";
  EXPECT_TRUE(contains(html, "id=\"limit\"") && contains(html, "id=\"kill\""));
  EXPECT_TRUE(contains(html, "<table>"));
  EXPECT_TRUE(contains(html, "&lt;evil&amp;&quot;proc&gt;")) << html;
  EXPECT_FALSE(contains(html, "<evil")) << html;
  for (const char* external : {"<script", "<link", "src=", "href=", "@import", "url("}) {
    EXPECT_FALSE(contains(html, external)) << external;
  }
  EXPECT_TRUE(contains(html, "was OOM-killed in /jobs/prover, which was at 255 MiB of its 256 MiB limit")) << html;
}

// ---- --since ----

TEST(ParseSinceTime, IsoUtcUnixTimesAndAges) {
  const double now = kKill;
  EXPECT_EQ(*parseSinceTime("2026-12-02T14:00:00Z", now), 1796220000.0);
  EXPECT_EQ(*parseSinceTime("2026-12-02 14:00", now), 1796220000.0);
  EXPECT_EQ(*parseSinceTime("2026-12-02 14:00:30", now), 1796220030.0);
  EXPECT_EQ(*parseSinceTime("2026-12-02T16:00:00+02:00", now), 1796220000.0);
  EXPECT_EQ(*parseSinceTime("2026-12-02T14:00:00.5Z", now), 1796220000.5);
  EXPECT_EQ(*parseSinceTime("2026-12-02", now), 1796169600.0);
  EXPECT_EQ(*parseSinceTime("2024-02-29T00:00:00Z", now), 1709164800.0) << "a leap day";
  EXPECT_EQ(*parseSinceTime("1796220000", now), 1796220000.0);
  EXPECT_EQ(*parseSinceTime("2h", now), now - 7200);
  EXPECT_EQ(*parseSinceTime("30m", now), now - 1800);
  EXPECT_EQ(*parseSinceTime(" 90s ", now), now - 90);
  EXPECT_EQ(*parseSinceTime("1.5d", now), now - 1.5 * 86400);
  for (const char* bad : {"", "yesterday", "2h30", "-5m", "2026-13-01", "2026-02-30", "2026-12-02T25:00",
                          "2026-12-02 14:00 CET", "12/02/2026", "1e", "m"}) {
    auto r = parseSinceTime(bad, now);
    EXPECT_FALSE(r) << bad;
    if (!r && *bad) {
      EXPECT_TRUE(contains(r.error().describe(), bad)) << r.error().describe();
    }
  }
}

// Found by the report_since fuzz target: an age of "1e308w" was now minus infinity, and a unix
// time may be any number. Both are refused beyond the times a date can say (years 0 to 9999).
TEST(ParseSinceTime, AnAgeOrUnixTimeBeyondTheYears0To9999IsRefused) {
  const double now = kKill;
  for (const char* bad : {"1e308w", "1e300s", "99999999999999999999", "253402300800", "1e12s"}) {
    auto r = parseSinceTime(bad, now);
    ASSERT_FALSE(r) << bad << " gave " << *r;
    EXPECT_TRUE(contains(r.error().describe(), "out of range")) << r.error().describe();
  }
  EXPECT_EQ(*parseSinceTime("253402300799", now), 253402300799.0);
  EXPECT_EQ(*parseSinceTime("0", now), 0.0);
  EXPECT_EQ(*parseSinceTime("520w", now), now - 520 * 604800.0) << "ten years back is a time";
}

// Found by the report_since fuzz target: a date's fields took a sign ("-022" a year, "-1" an
// hour), since from_chars reads one. Each field is digits alone.
TEST(ParseSinceTime, ADateFieldIsDigitsWithoutASign) {
  const double now = kKill;
  for (const char* bad : {"-022-12-02", "2026-12-02T-1:00", "2026-12-02T14:-5", "2026-12-02T14:00:-1",
                          "2026-12-02T14:00+-1:00", "2026-12-02T14:00-01:-5", "+026-12-02"}) {
    auto r = parseSinceTime(bad, now);
    EXPECT_FALSE(r) << bad << " gave " << *r;
  }
}

}  // namespace
}  // namespace headroom
