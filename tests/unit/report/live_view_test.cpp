// `headroom top`'s view model: the agent's documents (built here by the same functions the agent
// serves them with) read into rows, sorted by each key, and laid out for terminals of each size.
#include "headroom/report/live_screen.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "headroom/controller/budget_document.h"
#include "headroom/model/oom_forecast.h"
#include "headroom/model/snapshot_json.h"
#include "testing/fixture_tree.h"

namespace headroom {
namespace {

constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::uint64_t kGiB = 1ULL << 30;

TopData provingData() {
  testing::FixtureTree t;
  auto snap = testing::provingSnapshot(t, {"prover=comm:cuzk"});
  TopData d;
  auto st = readSnapshotDocument(toJson(*snap), d);
  if (!st) ADD_FAILURE() << st.error().describe();
  return d;
}

const TopCgroup* findCgroup(const TopData& d, const std::string& path) {
  for (const TopCgroup& g : d.cgroups) {
    if (g.path == path) return &g;
  }
  return nullptr;
}

// The line that holds `needle`, or "" when none does.
std::string lineWith(const std::vector<TopLine>& lines, const std::string& needle) {
  for (const TopLine& l : lines) {
    if (l.text.find(needle) != std::string::npos) return l.text;
  }
  return "";
}

int rowOf(const std::vector<TopLine>& lines, const std::string& needle) {
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].text.find(needle) != std::string::npos) return static_cast<int>(i);
  }
  return -1;
}

TopViewState sized(int cols, int rows) {
  TopViewState s;
  s.cols = cols;
  s.rows = rows;
  s.source = "local";
  return s;
}

TEST(TopView, ReadsTheSnapshotAsTheAgentServesIt) {
  testing::FixtureTree t;
  auto snap = testing::provingSnapshot(t, {"prover=comm:cuzk"});
  TopData d;
  ASSERT_TRUE(readSnapshotDocument(toJson(*snap), d));
  EXPECT_EQ(d.wall_time_ns, snap->wall_time_ns);
  EXPECT_EQ(d.machine.total, 16 * kGiB);
  EXPECT_EQ(d.machine.available, 8 * kGiB);
  ASSERT_EQ(d.cgroups.size(), snap->cgroups.size());

  EXPECT_EQ(findCgroup(d, "/proving"), nullptr) << "an ancestor without processes is a bound, not a row";
  const TopCgroup* root = findCgroup(d, "/");
  ASSERT_NE(root, nullptr);
  EXPECT_EQ(root->usage, 10 * kGiB);
  EXPECT_FALSE(root->limit.has_value());
  EXPECT_EQ(root->headroom, 8 * kGiB) << "the host's available memory";
  EXPECT_EQ(root->bound, "host");

  const TopCgroup* prover = findCgroup(d, "/proving/prover");
  ASSERT_NE(prover, nullptr);
  const CgroupSnapshot* model = snap->findCgroup("/proving/prover");
  EXPECT_EQ(prover->usage, 4 * kGiB);
  EXPECT_FALSE(prover->limit.has_value()) << "v1's unlimited is no limit";
  EXPECT_EQ(prover->headroom, 3 * kGiB) << "under /proving's limit";
  EXPECT_EQ(prover->bound, "/proving");
  EXPECT_EQ(prover->visible, model->attribution.visibleBytes());
  EXPECT_EQ(prover->invisible, model->attribution.invisibleBytes());
  EXPECT_GT(prover->invisible, 0u);
  std::uint64_t parts = 0;
  for (const TopPart& p : prover->invisible_parts) parts += p.bytes;
  EXPECT_EQ(parts, prover->invisible) << "the parts are the invisible split";
  EXPECT_TRUE(std::is_sorted(prover->invisible_parts.begin(), prover->invisible_parts.end(),
                             [](const TopPart& a, const TopPart& b) { return a.bytes > b.bytes; }));
  EXPECT_EQ(prover->processes, 1u);
  EXPECT_TRUE(prover->workload.empty());

  auto cuzk = std::find_if(d.processes.begin(), d.processes.end(), [](const TopProcess& p) { return p.pid == 100; });
  ASSERT_NE(cuzk, d.processes.end());
  EXPECT_EQ(cuzk->comm, "cuzk");
  EXPECT_EQ(cuzk->role, "prover");
  EXPECT_EQ(cuzk->cgroup, "/proving/prover");
  EXPECT_EQ(cuzk->pss, 3900 * kMiB);
  EXPECT_EQ(cuzk->page_tables, 8 * kMiB);
  EXPECT_FALSE(cuzk->pinned.has_value());
}

TEST(TopView, RefusesADocumentThatIsNotASnapshot) {
  TopData d;
  EXPECT_FALSE(readSnapshotDocument(nlohmann::json::parse(R"({"error":"no sample yet"})"), d));
  EXPECT_FALSE(readSnapshotDocument(nlohmann::json::parse("[1,2]"), d));
  auto bad = readSnapshotDocument(nlohmann::json::parse(R"({"cgroups":[{"memory":{}}],"processes":[]})"), d);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().describe().find("memory.path"), std::string::npos) << bad.error().describe();
}

TEST(TopView, WorkloadNamesAreShortAndOptional) {
  EXPECT_EQ(workloadName(nlohmann::json::parse(R"({"unit":"cuzk.service"})")), "cuzk.service");
  EXPECT_EQ(workloadName(nlohmann::json::parse(R"({"unit":"docker-1.scope","container":"curio"})")), "curio");
  EXPECT_EQ(workloadName(nlohmann::json::parse(R"({"pod":"prover-0","namespace":"proving","container":"c"})")),
            "proving/prover-0");
  EXPECT_EQ(workloadName(nlohmann::json(nullptr)), "");

  testing::FixtureTree t;
  auto snap = testing::provingSnapshot(t);
  nlohmann::json doc = toJson(*snap);
  TopData plain;
  ASSERT_TRUE(readSnapshotDocument(doc, plain));
  EXPECT_EQ(lineWith(renderTop(plain, sized(200, 50)), "WORKLOAD"), "") << "no column without a workload";
  for (auto& c : doc["cgroups"]) {
    if (c["memory"]["path"] == "/proving/prover") c["workload"] = {{"pod", "prover-0"}, {"namespace", "proving"}};
  }
  TopData d;
  ASSERT_TRUE(readSnapshotDocument(doc, d));
  auto lines = renderTop(d, sized(200, 50));
  EXPECT_NE(lineWith(lines, "WORKLOAD"), "");
  EXPECT_NE(lineWith(lines, "/proving/prover").find("proving/prover-0"), std::string::npos);
}

TEST(TopView, DrawsEachSectionWithItsFigures) {
  TopData d = provingData();
  TopBudget b;
  b.valid = true;
  b.budget = 6 * kGiB;
  b.margin = kGiB;
  b.generation = 4;
  b.cgroup = "/proving/prover";
  d.budget = b;
  auto lines = renderTop(d, sized(200, 50));
  ASSERT_EQ(lines.size(), 50u);
  for (const TopLine& l : lines) EXPECT_LE(l.text.size(), 200u) << l.text;
  EXPECT_EQ(lines.back().style, TopStyle::kKeys);
  EXPECT_NE(lines.back().text.find("q quit"), std::string::npos);
  EXPECT_NE(lines[0].text.find("headroom top  local"), std::string::npos) << lines[0].text;
  EXPECT_NE(lineWith(lines, "machine").find("total 16.0 GiB  available 8.00 GiB"), std::string::npos);
  EXPECT_NE(lineWith(lines, "budget").find("6.00 GiB for /proving/prover  (margin 1.00 GiB, generation 4)"),
            std::string::npos)
      << lineWith(lines, "budget");
  // /proving/curio: usage, limit, headroom in that order.
  std::string curio = lineWith(lines, "  /proving/curio ");
  auto usage = curio.find("1.00 GiB");
  auto limit = curio.find(" none ");
  auto room = curio.find("3.00 GiB");
  ASSERT_NE(usage, std::string::npos) << curio;
  EXPECT_LT(usage, limit);
  EXPECT_LT(limit, room);
  std::string prover = lineWith(lines, "  /proving/prover ");
  EXPECT_NE(prover.find(" none "), std::string::npos) << "no limit of its own: " << prover;
  EXPECT_NE(prover.find("pagetables"), std::string::npos) << prover;
  std::string cuzk = lineWith(lines, " cuzk ");
  EXPECT_NE(cuzk.find("prover"), std::string::npos) << cuzk;
  EXPECT_NE(cuzk.find("3.81 GiB"), std::string::npos) << "PSS 3900 MiB: " << cuzk;
  EXPECT_NE(cuzk.find("8.00 MiB"), std::string::npos) << "page tables: " << cuzk;
  EXPECT_NE(lineWith(lines, "OOM KILLS"), "");
  EXPECT_NE(rowOf(lines, "  none"), -1) << "no kill yet";
}

// The time to OOM from /v1/warnings (the model's document, as the agent serves it): a column for
// every cgroup, "!" and a line of its own while a warning is in force.
TEST(TopView, TheTimeToOomAndTheWarningsInForce) {
  testing::FixtureTree t;
  auto snap = testing::provingSnapshot(t, {"prover=comm:cuzk"});
  TopData d;
  ASSERT_TRUE(readSnapshotDocument(toJson(*snap), d));
  const CgroupSnapshot* prover = snap->findCgroup("/proving/prover");
  ASSERT_NE(prover, nullptr);
  ASSERT_FALSE(prover->bounds.empty());
  const Bound& b = prover->tightest ? *prover->tightest : prover->bounds.front();
  OomForecaster f;
  for (int i = 0; i <= 10; ++i) {
    BoundReading r;
    r.bound = b.name;
    r.time_ns = snap->monotonic_time_ns + i * 500'000'000LL;
    r.limit = b.limit;
    r.usage = b.limit / 2 + static_cast<std::uint64_t>(i) * (b.limit / 100 * 3);  // 6% of the limit a second
    r.reclaimable = 0;
    f.observe(r);
  }
  ASSERT_EQ(f.active().size(), 1U);
  ASSERT_TRUE(readWarningsDocument(warningsDocument(f, snap.get()), d));
  ASSERT_EQ(d.warnings.size(), 1U);
  EXPECT_EQ(d.warnings[0].bound, b.name);
  const TopCgroup* g = findCgroup(d, "/proving/prover");
  ASSERT_NE(g, nullptr);
  ASSERT_TRUE(g->oom_eta);
  EXPECT_NEAR(*g->oom_eta, 3.33, 0.05);  // the 20% left at 6% a second
  EXPECT_TRUE(g->warned);
  auto lines = renderTop(d, sized(220, 50));
  EXPECT_NE(lineWith(lines, "  CGROUP ").find("OOM IN"), std::string::npos) << lineWith(lines, "  CGROUP ");
  EXPECT_NE(lineWith(lines, "  /proving/prover ").find("3s!"), std::string::npos)
      << lineWith(lines, "  /proving/prover ");
  EXPECT_NE(lineWith(lines, "OOM WARNING").find(b.name + " runs out of memory in ~3 s"), std::string::npos)
      << lineWith(lines, "OOM WARNING");
  // A document that is not one is refused, the figures kept.
  EXPECT_FALSE(readWarningsDocument(nlohmann::json::object(), d));
}

TEST(TopView, SortKeysChangeTheOrder) {
  std::vector<TopCgroup> cg(3);
  cg[0].path = "/b";
  cg[0].usage = 300;
  cg[0].headroom = 50;
  cg[0].invisible = 1;
  cg[1].path = "/a";
  cg[1].usage = 100;
  cg[1].invisible = 30;
  cg[2].path = "/c";
  cg[2].usage = 200;
  cg[2].headroom = 10;
  cg[2].invisible = 20;
  auto paths = [&] {
    std::string s;
    for (const TopCgroup& g : cg) s += g.path;
    return s;
  };
  sortCgroups(cg, CgroupSort::kUsage, false);
  EXPECT_EQ(paths(), "/b/c/a");
  sortCgroups(cg, CgroupSort::kHeadroom, false);
  EXPECT_EQ(paths(), "/c/b/a") << "least room first, none last";
  sortCgroups(cg, CgroupSort::kInvisible, false);
  EXPECT_EQ(paths(), "/a/c/b");
  sortCgroups(cg, CgroupSort::kName, false);
  EXPECT_EQ(paths(), "/a/b/c");
  sortCgroups(cg, CgroupSort::kName, true);
  EXPECT_EQ(paths(), "/c/b/a");

  std::vector<TopProcess> ps(3);
  ps[0].pid = 1;
  ps[0].rss = 500;  // no PSS: sorted by RSS
  ps[0].page_tables = 1;
  ps[1].pid = 2;
  ps[1].rss = 900;
  ps[1].pss = 100;
  ps[1].page_tables = 30;
  ps[1].locked = 5;
  ps[2].pid = 3;
  ps[2].rss = 300;
  ps[2].pss = 300;
  ps[2].page_tables = 20;
  ps[2].pinned = 7;
  auto pids = [&] {
    std::string s;
    for (const TopProcess& p : ps) s += std::to_string(p.pid);
    return s;
  };
  sortProcesses(ps, ProcessSort::kPss, false);
  EXPECT_EQ(pids(), "132");
  sortProcesses(ps, ProcessSort::kPageTables, false);
  EXPECT_EQ(pids(), "231");
  sortProcesses(ps, ProcessSort::kPinned, false);
  EXPECT_EQ(pids(), "321") << "pinned, then locked";
}

TEST(TopView, KeysSortPauseHelpAndQuit) {
  TopViewState s;
  EXPECT_EQ(applyTopKey('n', s), TopKeyResult::kRedraw);
  EXPECT_EQ(s.cgroup_sort, CgroupSort::kName);
  EXPECT_FALSE(s.cgroup_reversed);
  applyTopKey('n', s);
  EXPECT_TRUE(s.cgroup_reversed) << "the key in use again reverses";
  applyTopKey('r', s);
  EXPECT_EQ(s.cgroup_sort, CgroupSort::kHeadroom);
  EXPECT_FALSE(s.cgroup_reversed);
  applyTopKey('i', s);
  EXPECT_EQ(s.cgroup_sort, CgroupSort::kInvisible);
  applyTopKey('u', s);
  EXPECT_EQ(s.cgroup_sort, CgroupSort::kUsage);
  applyTopKey('t', s);
  EXPECT_EQ(s.process_sort, ProcessSort::kPageTables);
  applyTopKey('l', s);
  EXPECT_EQ(s.process_sort, ProcessSort::kPinned);
  applyTopKey('p', s);
  EXPECT_EQ(s.process_sort, ProcessSort::kPss);
  EXPECT_EQ(applyTopKey(' ', s), TopKeyResult::kRedraw);
  EXPECT_TRUE(s.paused);
  EXPECT_EQ(applyTopKey(' ', s), TopKeyResult::kRefresh) << "resuming refreshes at once";
  EXPECT_FALSE(s.paused);
  applyTopKey('?', s);
  EXPECT_TRUE(s.help);
  applyTopKey(27, s);
  EXPECT_FALSE(s.help);
  EXPECT_EQ(applyTopKey('x', s), TopKeyResult::kNone);
  EXPECT_EQ(applyTopKey(kTopKeyResize, s), TopKeyResult::kRedraw);
  EXPECT_EQ(applyTopKey('q', s), TopKeyResult::kQuit);
}

TEST(TopView, TheSortShowsOnScreen) {
  TopData d = provingData();
  TopViewState s = sized(200, 50);
  auto byUsage = renderTop(d, s);
  EXPECT_NE(lineWith(byUsage, "CGROUPS").find("by usage"), std::string::npos);
  // By usage "/" (10 GiB) is above /proving/curio (1 GiB); by name reversed, below it.
  EXPECT_LT(rowOf(byUsage, "  /  "), rowOf(byUsage, "/proving/curio"));
  applyTopKey('n', s);
  applyTopKey('n', s);
  auto byName = renderTop(d, s);
  EXPECT_NE(lineWith(byName, "CGROUPS").find("by name, reversed"), std::string::npos);
  EXPECT_GT(rowOf(byName, "  /  "), rowOf(byName, "/proving/curio"));
  applyTopKey('t', s);
  EXPECT_NE(lineWith(renderTop(d, s), "PROCESSES").find("by page tables"), std::string::npos);
  s.paused = true;
  EXPECT_NE(renderTop(d, s)[0].text.find("PAUSED"), std::string::npos);
  s.help = true;
  auto help = renderTop(d, s);
  EXPECT_NE(rowOf(help, "HELP"), -1);
  EXPECT_EQ(rowOf(help, "CGROUPS"), -1) << "help stands in for the sections";
}

TEST(TopView, ASmallTerminalStillGetsSomethingSensible) {
  TopData d = provingData();
  for (auto [cols, rows] : {std::pair{40, 8}, {80, 24}, {20, 3}, {1, 1}, {120, 14}}) {
    auto lines = renderTop(d, sized(cols, rows));
    ASSERT_EQ(lines.size(), static_cast<std::size_t>(rows)) << cols << "x" << rows;
    for (const TopLine& l : lines) EXPECT_LE(l.text.size(), static_cast<std::size_t>(cols)) << cols << "x" << rows;
    EXPECT_EQ(lines.back().style, TopStyle::kKeys);
  }
  auto tiny = renderTop(d, sized(40, 8));
  EXPECT_NE(rowOf(tiny, "terminal 40x8"), -1);
  EXPECT_NE(rowOf(tiny, "10.0 GiB of none"), -1) << "the largest cgroup, in short";
  // 80x24: every section is there.
  auto normal = renderTop(d, sized(80, 24));
  EXPECT_NE(rowOf(normal, "CGROUPS"), -1);
  EXPECT_NE(rowOf(normal, "PROCESSES"), -1);
  EXPECT_NE(rowOf(normal, "OOM KILLS"), -1);
}

TEST(TopView, ManyCgroupsAreCutWithACount) {
  TopData d;
  for (int i = 0; i < 40; ++i) {
    TopCgroup g;
    g.path = "/cg" + std::to_string(i);
    g.usage = static_cast<std::uint64_t>(i) * kMiB;
    d.cgroups.push_back(g);
  }
  for (int i = 0; i < 40; ++i) {
    TopProcess p;
    p.pid = 1000 + i;
    p.comm = "w";
    p.rss = static_cast<std::uint64_t>(i) * kMiB;
    d.processes.push_back(p);
  }
  auto lines = renderTop(d, sized(120, 30));
  ASSERT_EQ(lines.size(), 30u);
  EXPECT_NE(rowOf(lines, "/cg39 "), -1) << "the largest is shown";
  EXPECT_EQ(rowOf(lines, "/cg0 "), -1) << "the smallest is not";
  std::string more = lineWith(lines, "more cgroups");
  ASSERT_NE(more, "");
  int shown = 0;
  for (const TopLine& l : lines) shown += l.text.rfind("  /cg", 0) == 0 ? 1 : 0;
  EXPECT_NE(more.find(std::to_string(40 - shown) + " more"), std::string::npos) << more;
  EXPECT_NE(rowOf(lines, "more processes"), -1);
  EXPECT_NE(rowOf(lines, "OOM KILLS"), -1);
}

TEST(TopView, OomKillsFromTheAgentNewestFirst) {
  OomEvent first;
  first.wall_time_ns = 1'700'000'000'000'000'000;
  OomVictim v;
  v.pid = v.tgid = 4242;
  v.comm = "hog";
  v.cgroup = "/proving/prover";
  v.anon_rss = 30 * kMiB;
  v.file_rss = 2 * kMiB;
  first.victims.push_back(v);
  first.domain_cgroup = "/proving";
  first.domain_usage_bytes = 32 * kMiB;
  first.domain_limit_bytes = 32 * kMiB;
  OomEvent second;
  second.wall_time_ns = first.wall_time_ns + 60'000'000'000;
  second.global = true;
  second.trigger_cgroup = "/other";

  auto o = readOomEvent(toJson(first));
  ASSERT_TRUE(o);
  EXPECT_EQ(o->victim_pid, 4242);
  EXPECT_EQ(o->victim_comm, "hog");
  EXPECT_EQ(o->victim_cgroup, "/proving/prover");
  EXPECT_EQ(o->victim_rss, 32 * kMiB);
  EXPECT_EQ(o->domain, "/proving");
  EXPECT_EQ(o->domain_limit, 32 * kMiB);

  nlohmann::json doc = {{"total", 7}, {"kept", 2}, {"events", {toJson(first), toJson(second)}}};
  TopData d = provingData();
  ASSERT_TRUE(readOomsDocument(doc, d));
  ASSERT_EQ(d.ooms.size(), 2u);
  EXPECT_EQ(d.ooms_total, 7u);
  EXPECT_EQ(d.ooms[0].domain, "global") << "newest first";
  EXPECT_EQ(d.ooms[0].victim_cgroup, "/other") << "no victim named: the trigger's cgroup";
  EXPECT_EQ(d.ooms[0].victim_pid, 0);

  auto lines = renderTop(d, sized(200, 50));
  EXPECT_NE(lineWith(lines, "OOM KILLS").find("2 kept of 7 seen"), std::string::npos);
  std::string kill = lineWith(lines, " hog ");
  ASSERT_NE(kill, "");
  EXPECT_NE(kill.find("2023-11-14 22:13:20 UTC"), std::string::npos) << kill;
  EXPECT_NE(kill.find("4242"), std::string::npos);
  EXPECT_NE(kill.find("32.0 MiB"), std::string::npos);
  EXPECT_NE(kill.find("/proving at 32.0 MiB of 32.0 MiB"), std::string::npos) << kill;
  EXPECT_LT(rowOf(lines, " global"), rowOf(lines, " hog ")) << "newest first";

  EXPECT_FALSE(readOomsDocument(nlohmann::json::parse(R"({"total":1})"), d));
}

TEST(TopView, TheBudgetOrWhyThereIsNone) {
  BudgetDecision dec;
  dec.valid = true;
  dec.budget = 6 * kGiB;
  dec.margin = 512 * kMiB;
  dec.generation = 2;
  dec.inputs.cgroup = "/proving/prover";
  dec.reason = "room 3 GiB under /proving";
  TopData d;
  readBudgetDocument(200, budgetDocument(dec, ControllerState{}, 0), d);
  ASSERT_TRUE(d.budget.has_value());
  EXPECT_TRUE(d.budget->valid);
  EXPECT_EQ(d.budget->budget, 6 * kGiB);
  EXPECT_EQ(d.budget->margin, 512 * kMiB);
  EXPECT_EQ(d.budget->generation, 2u);
  EXPECT_EQ(d.budget->cgroup, "/proving/prover");

  readBudgetDocument(503, nlohmann::json{{"error", "no prover: set budget.cgroup"}}, d);
  EXPECT_FALSE(d.budget.has_value());
  EXPECT_EQ(d.budget_note, "no prover: set budget.cgroup");
  EXPECT_NE(lineWith(renderTop(d, sized(120, 30)), "budget").find("none: no prover: set budget.cgroup"),
            std::string::npos);
}

TEST(TopView, ARefreshFailureIsSaidAndTheFiguresKept) {
  TopData d = provingData();
  TopViewState s = sized(160, 40);
  s.error = "http://127.0.0.1:1/v1/snapshot: Connection refused";
  auto lines = renderTop(d, s);
  int row = rowOf(lines, "Connection refused");
  ASSERT_NE(row, -1);
  EXPECT_EQ(lines[static_cast<std::size_t>(row)].style, TopStyle::kWarning);
  EXPECT_NE(rowOf(lines, "/proving/prover"), -1);
}

TEST(TopView, TextFromElsewhereIsMadePrintable) {
  nlohmann::json doc = {{"cgroups", nlohmann::json::array()},
                        {"processes", {{{"pid", 9}, {"comm", "evil\x1b[2Jx"}, {"rss_bytes", 1}}}}};
  TopData d;
  ASSERT_TRUE(readSnapshotDocument(doc, d));
  ASSERT_EQ(d.processes.size(), 1u);
  EXPECT_EQ(d.processes[0].comm.find('\x1b'), std::string::npos);
}

}  // namespace
}  // namespace headroom
