#include "headroom/journal/journal.h"
#include "headroom/journal/oom_record.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "headroom/model/snapshot_json.h"
#include "headroom/report/report.h"
#include "testing/fixture_tree.h"
#include "testing/kernel_report.h"

namespace headroom {
namespace {

using nlohmann::json;

constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::uint64_t kGiB = 1ULL << 30;
constexpr std::int64_t kSec = 1'000'000'000;

// provingHostV1 plus two smaller helpers in the prover's cgroup, so that "top per role" has
// something to leave out, and a shim in /proving itself, so that the agent samples /proving
// (it samples the cgroups processes live in): /proving holds cuzk (3900 MiB PSS), curio (356),
// helper-a (100), helper-b (50) and the shim (10).
std::shared_ptr<const Snapshot> provingWithHelpers(const testing::FixtureTree& t) {
  for (auto [pid, pss] : {std::pair{104, 100 * kMiB}, std::pair{105, 50 * kMiB}, std::pair{106, 10 * kMiB}}) {
    testing::FakeProcess p;
    p.pid = pid;
    p.comm = pid == 104 ? "helper-a" : pid == 105 ? "helper-b" : "shim";
    p.memory_cgroup = pid == 106 ? "/proving" : "/proving/prover";
    p.rss_anon = p.pss_anon = pss;
    p.start_time = 2000;
    t.process(p);
  }
  return testing::provingSnapshot(t, {"prover=cgroup:/proving/prover", "colocated=comm:curio"});
}

CgroupSnapshot* findMutable(Snapshot& s, std::string_view path) {
  for (CgroupSnapshot& c : s.cgroups) {
    if (c.memory.path == path) return &c;
  }
  return nullptr;
}

Snapshot at(const Snapshot& base, std::int64_t mono_ns, std::int64_t wall_ns) {
  Snapshot s = base;
  s.monotonic_time_ns = mono_ns;
  s.wall_time_ns = wall_ns;
  return s;
}

OomEvent memcgKill(std::int64_t wall_ns) {
  OomEvent e;
  e.id = 7;
  e.wall_time_ns = wall_ns;
  e.monotonic_time_ns = 123 * kSec;
  OomVictim v;
  v.pid = 100;
  v.tgid = 100;
  v.comm = "cuzk";
  v.cgroup = "/proving/prover";
  v.anon_rss = 3900 * kMiB;
  v.pgtables = 8 * kMiB;
  e.victims = {v};
  e.trigger_pid = e.trigger_tgid = 101;
  e.trigger_comm = "curio";
  e.trigger_cgroup = "/proving/curio";
  e.constraint = "CONSTRAINT_MEMCG";
  e.domain_cgroup = "/proving";
  e.domain_limit_bytes = 8 * kGiB;
  e.domain_usage_bytes = 8 * kGiB - 4096;
  OomTaskDumpEntry a;
  a.pid = a.tgid = 100;
  a.total_vm_bytes = 20 * kGiB;
  a.rss_bytes = 7 * kGiB;
  a.rss_anon_bytes = 7 * kGiB - kMiB;
  a.rss_file_bytes = kMiB;
  a.rss_shmem_bytes = 0;
  a.pgtables_bytes = 14 * kMiB;
  a.name = "cuzk";
  OomTaskDumpEntry b;
  b.pid = b.tgid = 101;
  b.rss_bytes = 356 * kMiB;
  b.pgtables_bytes = kMiB;
  b.oom_score_adj = -500;
  b.name = "curio";
  e.tasks = {a, b};
  e.from_bpf = e.from_kmsg = true;
  return e;
}

std::set<std::string> keysOf(const json& j) {
  std::set<std::string> k;
  for (const auto& [key, v] : j.items()) k.insert(key);
  return k;
}

// The fields of docs/journal.md's record table: the contract `headroom report` reads.
std::set<std::string> documentedFields() {
  std::ifstream in(std::string(HEADROOM_DOCS_DIR) + "/journal.md");
  std::set<std::string> fields;
  bool in_record = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) in_record = line.find("A record") != std::string::npos;
    if (!in_record || line.rfind("| `", 0) != 0) continue;
    std::size_t end = line.find('`', 3);
    fields.insert(line.substr(3, end - 3));
  }
  return fields;
}

std::vector<int> pidsOf(const json& processes) {
  std::vector<int> pids;
  for (const json& p : processes) pids.push_back(p["pid"].get<int>());
  return pids;
}

// ---- the record ----

TEST(Record, MemcgKillCarriesEveryDocumentedField) {
  testing::FixtureTree t;
  auto snap = provingWithHelpers(t);
  const std::int64_t t0 = snap->wall_time_ns;
  // The flight recorder saw /proving grow by 1 GiB over five seconds.
  FlightRecorder rec;
  Snapshot s1 = at(*snap, 100 * kSec, t0 - 5 * kSec);
  Snapshot s2 = at(*snap, 105 * kSec, t0);
  findMutable(s2, "/proving")->memory.usage += kGiB;
  rec.record(s1, {{"/proving/prover", 3 * kGiB}});
  rec.record(s2, {{"/proving", 4 * kGiB}});

  OomEvent e = memcgKill(t0 + 2 * kSec);
  BudgetDecision budget;
  budget.valid = true;
  budget.budget = 6 * kGiB;
  budget.margin = kGiB;
  budget.generation = 4;
  budget.reason = "room 3 GiB under /proving";
  budget.margin_source = "floor";
  RecordContext ctx;
  ctx.event = &e;
  ctx.last = snap.get();
  ctx.cgroup = oomRecordCgroup(e, snap.get());
  ctx.flight = rec.points(ctx.cgroup);
  ctx.budget = &budget;
  ctx.self_reported = 5 * kGiB;
  ctx.sensors = {{SensorId::kOom, SensorState::kActive, "tp_btf/mark_victim"},
                 {SensorId::kCuda, SensorState::kDegraded, "no libcuda"}};
  ctx.host = {"prover-7", "6.8.0-45-generic", "0.1.0+abc1234", "9b7c0a52-7d1e-4c33-9a55-0f3c2de1b6a4"};
  ctx.top_per_role = 2;
  json r = makeOomRecord(ctx);

  EXPECT_EQ(ctx.cgroup, "/proving") << "the OOM domain, not the victim's own cgroup";
  std::set<std::string> documented = documentedFields();
  ASSERT_GE(documented.size(), 10u) << "docs/journal.md's table was found";
  documented.erase("id");   // the journal adds it
  documented.erase("key");  // and the incident's key, when it was in flight
  EXPECT_EQ(keysOf(r), documented) << "the record is exactly the documented schema";

  EXPECT_EQ(r["version"], 1);
  EXPECT_DOUBLE_EQ(r["time"].get<double>(), static_cast<double>(e.wall_time_ns) / 1e9);
  EXPECT_EQ(r["host"], json({{"hostname", "prover-7"},
                             {"kernel", "6.8.0-45-generic"},
                             {"agent_version", "0.1.0+abc1234"},
                             {"boot_id", "9b7c0a52-7d1e-4c33-9a55-0f3c2de1b6a4"}}));
  EXPECT_TRUE(r["found_after"].is_null()) << "a kill seen live";

  // The event as /v1/ooms shows it, with every task of the kernel's dump.
  json ev = toJson(e, OomWorkloads{Workload{}, {Workload{}}});
  ev["tasks_total"] = 2;
  ev.erase("at_kill");   // the record's own, at its top
  ev.erase("workload");  // the same
  EXPECT_EQ(r["event"], ev);
  EXPECT_EQ(r["event"]["oom_domain"]["cgroup"], "/proving");
  ASSERT_EQ(r["event"]["tasks"].size(), 2u);
  EXPECT_EQ(r["event"]["tasks"][0]["rss_anon_bytes"], 7 * kGiB - kMiB);
  EXPECT_EQ(r["event"]["tasks"][0]["pgtables_bytes"], 14 * kMiB);
  EXPECT_EQ(r["event"]["tasks"][1]["oom_score_adj"], -500);
  EXPECT_EQ(r["event"]["victims"][0]["cgroup"], "/proving/prover");

  // The domain's state at the last sample, in the /v1/snapshot forms.
  const CgroupSnapshot* cg = snap->findCgroup("/proving");
  ASSERT_NE(cg, nullptr);
  const json& c = r["cgroup"];
  EXPECT_EQ(keysOf(c), (std::set<std::string>{"path", "sampled_at", "memory", "workload", "attribution", "bounds",
                                              "tightest_bound"}));
  EXPECT_EQ(c["path"], "/proving");
  EXPECT_DOUBLE_EQ(c["sampled_at"].get<double>(), static_cast<double>(snap->wall_time_ns) / 1e9);
  EXPECT_EQ(c["memory"], toJson(cg->memory));
  EXPECT_EQ(c["memory"]["limit_bytes"], 8 * kGiB);
  EXPECT_EQ(c["attribution"], toJson(cg->attribution));
  EXPECT_GT(c["attribution"]["invisible_bytes"].get<std::uint64_t>(), 0u) << "the invisible part is there";
  ASSERT_EQ(c["bounds"].size(), cg->bounds.size());
  EXPECT_EQ(c["bounds"][0], toJson(cg->bounds[0]));
  EXPECT_EQ(c["tightest_bound"]["name"], "/proving");
  // Inside the full snapshot document the same cgroup reads the same.
  const json full = toJson(*snap);
  int matched = 0;
  for (const json& sc : full["cgroups"]) {
    if (sc["memory"]["path"] != "/proving") continue;
    ++matched;
    EXPECT_EQ(sc["memory"], c["memory"]);
    EXPECT_EQ(sc["attribution"], c["attribution"]);
    EXPECT_EQ(sc["bounds"], c["bounds"]);
    EXPECT_EQ(sc["tightest_bound"], c["tightest_bound"]);
  }
  EXPECT_EQ(matched, 1);

  // Top two per role, by PSS: cuzk and helper-a (prover), curio (colocated), the shim
  // (system); helper-b left out.
  EXPECT_EQ(pidsOf(r["processes"]), (std::vector<int>{100, 101, 104, 106}));
  const ProcessSnapshot* cuzk = snap->findProcess(100);
  ASSERT_NE(cuzk, nullptr);
  json as_sampled = toJson(*cuzk);
  as_sampled["gpu_memory_bytes"] = nullptr;  // the driver's figure of the sample (none: no NVML here)
  EXPECT_EQ(r["processes"][0], as_sampled);
  for (const char* k : {"rss_anon_bytes", "pss_bytes", "page_tables_bytes", "locked_bytes", "pinned", "device_bytes",
                        "overhead_share_bytes", "role"}) {
    EXPECT_TRUE(r["processes"][0].contains(k)) << k;
  }
  EXPECT_EQ(r["processes"][0]["role"], "prover");
  EXPECT_EQ(r["processes"][1]["role"], "colocated");

  EXPECT_EQ(r["budget"], json({{"budget_bytes", 6 * kGiB},
                               {"margin_bytes", kGiB},
                               {"generation", 4},
                               {"reason", "room 3 GiB under /proving"},
                               {"margin_source", "floor"}}));
  EXPECT_EQ(r["self_reported_bytes"], 5 * kGiB);
  EXPECT_EQ(r["charged_bytes"], 8 * kGiB - 4096) << "the kernel's figure for the domain at the kill";
  EXPECT_EQ(r["sensors"], json::parse(R"([{"name":"oom","state":"active","reason":"tp_btf/mark_victim"},
                                          {"name":"cuda","state":"degraded","reason":"no libcuda"}])"));

  const json& f = r["flight"];
  EXPECT_EQ(f["cgroup"], "/proving");
  EXPECT_EQ(f["window_seconds"], 60.0);
  ASSERT_EQ(f["points"].size(), 2u) << "both samples, oldest first";
  EXPECT_DOUBLE_EQ(f["points"][0]["time"].get<double>(), static_cast<double>(t0 - 5 * kSec) / 1e9);
  EXPECT_EQ(f["points"][0]["usage_bytes"], 5 * kGiB);
  EXPECT_EQ(f["points"][1]["usage_bytes"], 6 * kGiB);
  EXPECT_EQ(f["points"][1]["limit_bytes"], 8 * kGiB);
  EXPECT_EQ(f["points"][0]["self_reported_bytes"], nullptr) << "that sample said it for another cgroup";
  EXPECT_EQ(f["points"][1]["self_reported_bytes"], 4 * kGiB);
  EXPECT_EQ(f["points"][0]["parts"]["anon"], cg->attribution.bytesOf(PartKind::kAnon).value());
}

TEST(Record, WorkloadsAreTheRecordsAndEachVictims) {
  // A pod-level OOM domain (hand-made kubepods paths, containerd): the record names the pod, the
  // victim its container; without names looked up, what the paths say.
  const std::string pod =
      "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0c1f6c1e_5b7d_4c1a_9f2e_6a8b8d3c4e21.slice";
  const std::string id = "4f7d1c2b9a8e6d5c3b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c";
  OomEvent e = memcgKill(1'700'000'000'000'000'000);
  e.domain_cgroup = pod;
  e.victims[0].cgroup = pod + "/cri-containerd-" + id + ".scope";
  RecordContext ctx;
  ctx.event = &e;
  json bare = makeOomRecord(ctx);
  EXPECT_EQ(bare["workload"]["pod_uid"], "0c1f6c1e-5b7d-4c1a-9f2e-6a8b8d3c4e21");
  EXPECT_EQ(bare["workload"]["qos"], "burstable");
  EXPECT_EQ(bare["workload"]["container_id"], "") << "the domain is the pod's, not a container's";
  EXPECT_EQ(bare["workload"]["pod"], "") << "no names looked up";
  EXPECT_EQ(bare["event"]["victims"][0]["workload"]["container_id"], id);
  EXPECT_EQ(bare["event"]["victims"][0]["workload"]["runtime"], "containerd");
  EXPECT_FALSE(bare["event"].contains("workload")) << "the record's is at its top";

  ctx.workloads.cgroup.identity = identifyCgroup(pod);
  ctx.workloads.cgroup.pod = "prover-0";
  ctx.workloads.cgroup.pod_namespace = "proving";
  ctx.workloads.victims = {ctx.workloads.cgroup};
  ctx.workloads.victims[0].identity = identifyCgroup(e.victims[0].cgroup);
  ctx.workloads.victims[0].container = "cuzk";
  json named = makeOomRecord(ctx);
  EXPECT_EQ(named["workload"]["pod"], "prover-0");
  EXPECT_EQ(named["workload"]["namespace"], "proving");
  EXPECT_EQ(named["event"]["victims"][0]["workload"]["container"], "cuzk");
  EXPECT_EQ(workloadFromJson(named["event"]["victims"][0]["workload"]), ctx.workloads.victims[0]) << "reads back";
  EXPECT_EQ(recordWorkload(named), "pod proving/prover-0 cuzk") << "the pod's, its container the victim's";
  EXPECT_EQ(recordWorkloadObject(named)["container_id"], id);
  EXPECT_NE(renderReport(named).find("(pod proving/prover-0 (burstable), container cuzk (containerd 4f7d1c2b9a8e))"),
            std::string::npos)
      << renderReport(named);
}

TEST(Record, GlobalKillIsAboutTheVictimsCgroup) {
  testing::FixtureTree t;
  auto base = testing::provingSnapshot(t, {"prover=comm:cuzk"});
  Snapshot snap = *base;
  snap.sensors = {{SensorId::kKmsg, SensorState::kActive, "/dev/kmsg"}};
  OomEvent e = memcgKill(snap.wall_time_ns);
  e.constraint = "CONSTRAINT_NONE";
  e.domain_cgroup.reset();
  e.global = true;
  e.domain_limit_bytes.reset();
  e.domain_usage_bytes.reset();
  e.victims[0].cgroup = "/proving//prover/";  // as odd as a path can come
  RecordContext ctx;
  ctx.event = &e;
  ctx.last = &snap;
  // ctx.cgroup left empty: derived from the event.
  json r = makeOomRecord(ctx);
  EXPECT_EQ(oomRecordCgroup(e), "/proving/prover");
  EXPECT_EQ(r["cgroup"]["path"], "/proving/prover");
  EXPECT_EQ(r["flight"]["cgroup"], "/proving/prover");
  EXPECT_EQ(r["charged_bytes"], 4 * kGiB) << "no kernel figure: the last sample's usage";
  EXPECT_EQ(r["event"]["oom_domain"]["global"], true);
  EXPECT_EQ(r["event"]["oom_domain"]["cgroup"], nullptr);
  EXPECT_EQ(pidsOf(r["processes"]), (std::vector<int>{100}));
  EXPECT_EQ(r["budget"], nullptr);
  EXPECT_EQ(r["self_reported_bytes"], nullptr);
  EXPECT_EQ(r["sensors"], json::parse(R"([{"name":"kmsg","state":"active","reason":"/dev/kmsg"}])"))
      << "none given: the last sample's";
  EXPECT_TRUE(r["flight"]["points"].empty());
}

TEST(Record, UnsampledDomainFallsBackToTheVictimsCgroup) {
  testing::FixtureTree t;
  auto snap = testing::provingSnapshot(t, {"prover=comm:cuzk"});
  ASSERT_EQ(snap->findCgroup("/proving"), nullptr) << "no process lives in /proving itself";
  OomEvent e = memcgKill(snap->wall_time_ns);
  EXPECT_EQ(oomRecordCgroup(e), "/proving") << "without a sample: the domain";
  EXPECT_EQ(oomRecordCgroup(e, snap.get()), "/proving/prover");
  RecordContext ctx;
  ctx.event = &e;
  ctx.last = snap.get();
  json r = makeOomRecord(ctx);
  EXPECT_EQ(r["cgroup"]["path"], "/proving/prover");
  EXPECT_EQ(r["flight"]["cgroup"], "/proving/prover");
  EXPECT_EQ(r["cgroup"]["tightest_bound"]["name"], "/proving") << "the domain shows as the bound";
  EXPECT_EQ(r["cgroup"]["tightest_bound"]["limit_bytes"], 8 * kGiB);
  EXPECT_EQ(r["event"]["oom_domain"]["cgroup"], "/proving");
  EXPECT_EQ(r["charged_bytes"], 8 * kGiB - 4096);
  // A victim in a cgroup that was not sampled: its nearest sampled ancestor inside the domain.
  e.victims[0].cgroup = "/proving/prover/job-1";
  EXPECT_EQ(oomRecordCgroup(e, snap.get()), "/proving/prover");
  // ... but never one outside the domain.
  e.domain_cgroup = "/proving/x";
  e.victims[0].cgroup = "/proving/x/y";
  EXPECT_EQ(oomRecordCgroup(e, snap.get()), "/proving/x");
  // A domain that was sampled wins over the victim's cgroup.
  e.domain_cgroup = "/";
  e.victims[0].cgroup = "/proving/prover";
  EXPECT_EQ(oomRecordCgroup(e, snap.get()), "/");
  // No domain, no victim cgroup: the trigger's.
  e.domain_cgroup.reset();
  e.victims[0].cgroup.clear();
  EXPECT_EQ(oomRecordCgroup(e), "/proving/curio");
}

TEST(Record, NeverSampledCgroupIsNullAndAnInvalidBudgetIsNone) {
  testing::FixtureTree t;
  auto snap = testing::provingSnapshot(t);
  OomEvent e = memcgKill(snap->wall_time_ns);
  e.domain_cgroup = "/elsewhere";
  e.victims[0].cgroup = "/elsewhere/job";
  e.domain_usage_bytes.reset();
  BudgetDecision invalid;  // valid = false: no budget in force
  invalid.budget = 0;
  for (const Snapshot* last : {snap.get(), static_cast<const Snapshot*>(nullptr)}) {
    RecordContext ctx;
    ctx.event = &e;
    ctx.last = last;
    ctx.budget = &invalid;
    ctx.flight_window_ns = 30 * kSec;
    json r = makeOomRecord(ctx);
    EXPECT_EQ(r["cgroup"], nullptr);
    EXPECT_EQ(r["processes"], json::array());
    EXPECT_EQ(r["charged_bytes"], nullptr);
    EXPECT_EQ(r["budget"], nullptr);
    EXPECT_EQ(r["flight"]["cgroup"], "/elsewhere");
    EXPECT_EQ(r["flight"]["window_seconds"], 30.0);
    EXPECT_EQ(r["sensors"], json::array());
    EXPECT_EQ(r["event"]["tasks_total"], 2);
  }
}

// The kernel's report came: the record leads with the breakdown at the kill, the last sample
// stays as before it, and the flight's last point is the kill itself at its own time.
TEST(Record, TheBreakdownAtTheKillLeadsAndTheFlightEndsWithTheKill) {
  testing::FixtureTree t;
  auto snap = testing::provingSnapshot(t, {"prover=comm:cuzk"});
  OomEvent e = memcgKill(snap->wall_time_ns);
  e.domain_cgroup = "/proving/prover";
  e.kernel_memcg = testing::memcgReport(4 * kGiB,
                                        {{"anon", 3 * kGiB},
                                         {"file", 512 * kMiB},
                                         {"shmem", 256 * kMiB},
                                         {"file_mapped", 0},
                                         {"kernel", 512 * kMiB},
                                         {"pagetables", 400 * kMiB}},
                                        4 * kGiB);
  e.kernel_memcg->memory.failcnt = 7;
  RecordContext ctx;
  ctx.event = &e;
  ctx.last = snap.get();
  ctx.kill_wall_ns = snap->wall_time_ns + 2 * kSec;
  FlightPoint before;
  before.wall_time_ns = snap->wall_time_ns;
  before.usage = 3 * kGiB;
  ctx.flight = {before};
  json r = makeOomRecord(ctx);
  const json& at = r["at_kill"];
  EXPECT_EQ(at["source"], "kernel report");
  EXPECT_EQ(at["cgroup"], "/proving/prover");
  EXPECT_EQ(at["usage_bytes"], 4 * kGiB);
  EXPECT_EQ(at["failcnt"], 7);
  EXPECT_EQ(at["adds_up"], true) << at.dump();
  EXPECT_FALSE(r["event"].contains("at_kill")) << "said once, at the record's top";
  EXPECT_EQ(r["event"]["kernel_report"]["memcg"]["stats"]["pagetables"], 400 * kMiB);
  EXPECT_DOUBLE_EQ(r["kill_time"].get<double>(), static_cast<double>(ctx.kill_wall_ns) / 1e9);
  EXPECT_EQ(r["cgroup"]["path"], "/proving/prover") << "the last sample, before the kill";
  const json& points = r["flight"]["points"];
  ASSERT_EQ(points.size(), 2u);
  EXPECT_FALSE(points[0].contains("at_kill"));
  EXPECT_EQ(points[1]["at_kill"], true);
  EXPECT_EQ(points[1]["usage_bytes"], 4 * kGiB);
  EXPECT_EQ(points[1]["parts"]["shmem_unmapped"], 256 * kMiB);
  EXPECT_DOUBLE_EQ(points[1]["time"].get<double>(), static_cast<double>(ctx.kill_wall_ns) / 1e9);
  EXPECT_EQ(r["largest_cgroups"], nullptr) << "a memcg kill";
  // A breakdown of another cgroup than the flight's adds no point to it.
  e.domain_cgroup = "/proving";
  r = makeOomRecord(ctx);
  EXPECT_EQ(r["flight"]["points"].size(), 1u);
}

TEST(Record, AGlobalKillListsTheLargestCgroupsOfTheLastSample) {
  testing::FixtureTree t;
  auto snap = testing::provingSnapshot(t, {"prover=comm:cuzk"});
  OomEvent e = memcgKill(snap->wall_time_ns);
  e.global = true;
  e.domain_cgroup.reset();
  RecordContext ctx;
  ctx.event = &e;
  ctx.last = snap.get();
  json r = makeOomRecord(ctx);
  ASSERT_TRUE(r["largest_cgroups"].is_array());
  ASSERT_FALSE(r["largest_cgroups"].empty());
  EXPECT_EQ(r["largest_cgroups"][0]["path"], snap->cgroups[0].memory.path) << "largest first";
  EXPECT_EQ(r["largest_cgroups"][0]["usage_bytes"], snap->cgroups[0].memory.usage);
}

// The ledger at the kill: each victim's RAM and page tables (the kernel's), what it held locked
// and pinned for DMA (BPF at the mark), its CUDA pinned and device memory live at the kill, and
// NVML's device memory at the last sample, side by side; a kernel log alone says what it lacks.
TEST(Record, TheLedgerAtTheKillPutsRamPinnedAndDeviceMemorySideBySide) {
  testing::FixtureTree t;
  auto base = provingWithHelpers(t);
  Snapshot last = *base;
  last.monotonic_time_ns = 120 * kSec;  // three seconds before the kill
  auto reading = std::make_shared<GpuReading>();
  GpuDevice gpu;
  gpu.index = 0;
  gpu.total_bytes = 80 * kGiB;
  gpu.used_bytes = 71 * kGiB;
  gpu.processes = {{100, 70 * kGiB + 300 * kMiB}, {101, std::nullopt}};
  reading->devices = {gpu};
  last.gpu.reading = reading;
  last.gpu.state = "active";

  OomEvent e = memcgKill(last.wall_time_ns + 3 * kSec);
  OomVictim& v = e.victims[0];
  v.file_rss = 2 * kMiB;
  v.shmem_rss = 0;
  v.locked = 16 * kMiB;
  v.pinned_vm = 0;
  v.cuda_pinned = 3 * kGiB;
  v.cuda_device = 70 * kGiB;
  RecordContext ctx;
  ctx.event = &e;
  ctx.last = &last;
  json r = makeOomRecord(ctx);
  ASSERT_EQ(r["ledger"].size(), 1u) << r["ledger"].dump();
  const json& l = r["ledger"][0];
  EXPECT_EQ(l["pid"], 100);
  EXPECT_EQ(l["comm"], "cuzk");
  EXPECT_EQ(l["ram"]["anon_bytes"], 3900 * kMiB);
  EXPECT_EQ(l["ram"]["file_bytes"], 2 * kMiB);
  EXPECT_EQ(l["page_tables_bytes"], 8 * kMiB);
  EXPECT_EQ(l["locked_bytes"], 16 * kMiB);
  EXPECT_EQ(l["pinned_vm_bytes"], 0);
  EXPECT_EQ(l["cuda"]["pinned_bytes"], 3 * kGiB);
  EXPECT_EQ(l["cuda"]["device_bytes"], 70 * kGiB);
  EXPECT_EQ(l["cuda"]["at_kill"], true);
  EXPECT_EQ(l["gpu_memory"]["bytes"], 70 * kGiB + 300 * kMiB) << "the driver's figure: allocations and context";
  EXPECT_DOUBLE_EQ(l["gpu_memory"]["age_seconds"].get<double>(), 3.0);
  // Residency unknown (no mappings read): the pinned bytes are not added to the host's.
  EXPECT_EQ(l["host_bytes"], 3900 * kMiB + 2 * kMiB + 8 * kMiB);
  EXPECT_TRUE(l["notes"].empty()) << l["notes"].dump();

  // The same kill told by a kernel log alone: RAM and page tables, and what it cannot say.
  OomEvent from_log = memcgKill(last.wall_time_ns);
  from_log.from_bpf = false;
  RecordContext log_ctx;
  log_ctx.event = &from_log;
  json r2 = makeOomRecord(log_ctx);
  const json& l2 = r2["ledger"][0];
  EXPECT_EQ(l2["ram"]["anon_bytes"], 3900 * kMiB);
  EXPECT_TRUE(l2["locked_bytes"].is_null());
  EXPECT_TRUE(l2["cuda"].is_null());
  EXPECT_TRUE(l2["gpu_memory"].is_null());
  EXPECT_NE(l2["notes"].dump().find("from the kernel's log: RAM, page tables and swap only"), std::string::npos)
      << l2["notes"].dump();
}

TEST(Record, RoundTripsThroughTheJournal) {
  testing::FixtureTree t;
  auto snap = provingWithHelpers(t);
  FlightRecorder rec;
  rec.record(*snap);
  OomEvent e = memcgKill(snap->wall_time_ns);
  e.victims[0].comm = "cu\xffzk";  // not UTF-8: replaced, never a throw
  RecordContext ctx;
  ctx.event = &e;
  ctx.last = snap.get();
  ctx.cgroup = oomRecordCgroup(e, snap.get());
  ctx.flight = rec.points(ctx.cgroup);
  ctx.host = {"h", "k", "v", ""};
  json r = makeOomRecord(ctx);
  ASSERT_EQ(r["flight"]["points"].size(), 1u);

  std::string dir = (std::filesystem::temp_directory_path() / "headroom-record-XXXXXX").string();
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  JournalOptions o;
  o.path = dir + "/j.hrj";
  {
    auto w = JournalWriter::open(o);
    ASSERT_TRUE(w) << w.error().describe();
    auto id = (*w)->append(r);
    ASSERT_TRUE(id);
    EXPECT_EQ(*id, 1u);
  }
  auto c = readJournal(o.path);
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(c) << c.error().describe();
  ASSERT_EQ(c->records.size(), 1u);
  json expect = r;
  expect["id"] = 1;
  expect["event"]["victims"][0]["comm"] = "cu\xEF\xBF\xBDzk";
  expect["ledger"][0]["comm"] = "cu\xEF\xBF\xBDzk";
  EXPECT_EQ(c->records[0], expect) << "a record read back equals the one written, id added";
}

// ---- the flight recorder ----

TEST(Flight, OnePointPerCgroupWithItsPartsAndTightestLimit) {
  testing::FixtureTree t;
  auto snap = testing::provingSnapshot(t);
  FlightRecorder rec;
  rec.record(*snap, {{"/proving/prover", 3 * kGiB}});
  EXPECT_EQ(rec.cgroups(), snap->cgroups.size());
  for (const CgroupSnapshot& c : snap->cgroups) {
    SCOPED_TRACE(c.memory.path);
    auto pts = rec.points(c.memory.path);
    ASSERT_EQ(pts.size(), 1u);
    const FlightPoint& p = pts[0];
    EXPECT_EQ(p.wall_time_ns, snap->wall_time_ns);
    EXPECT_EQ(p.usage, c.memory.usage);
    ASSERT_TRUE(c.tightest);
    EXPECT_EQ(p.limit, c.tightest->limit);
    std::uint64_t sum = 0;
    for (const Part& part : c.attribution.parts) {
      ASSERT_TRUE(p.parts.count(toString(part.kind))) << toString(part.kind);
      EXPECT_EQ(p.parts.at(toString(part.kind)), part.bytes);
    }
    for (const auto& [k, v] : p.parts) sum += v;
    EXPECT_EQ(p.parts.count("unattributed"), c.attribution.unattributed > 0 ? 1u : 0u);
    if (c.attribution.unattributed >= 0) {
      EXPECT_EQ(sum, c.memory.usage) << "the parts add up to usage";
    }
  }
  EXPECT_EQ(rec.points("/proving/prover")[0].self_reported, 3 * kGiB);
  EXPECT_FALSE(rec.points("/").at(0).self_reported);
  EXPECT_EQ(rec.points("/proving/prover")[0].limit, 8 * kGiB) << "the tightest bound is the parent's limit";
  EXPECT_TRUE(rec.points("/nowhere").empty());

  // Unattributed shows only when positive (negative: the kernel's counters disagree).
  Snapshot s = at(*snap, snap->monotonic_time_ns + kSec, snap->wall_time_ns + kSec);
  findMutable(s, "/proving/prover")->attribution.unattributed = 12345;
  findMutable(s, "/proving/curio")->attribution.unattributed = -4096;
  rec.record(s);
  EXPECT_EQ(rec.points("/proving/prover").back().parts.at("unattributed"), 12345u);
  EXPECT_EQ(rec.points("/proving/curio").back().parts.count("unattributed"), 0u);
}

TEST(Flight, PointJson) {
  FlightPoint p;
  p.wall_time_ns = 1'700'000'000'500'000'000;
  p.usage = 42;
  p.parts = {{"anon", 40}, {"unattributed", 2}};
  EXPECT_EQ(toJson(p), json::parse(R"({"time":1700000000.5,"usage_bytes":42,"limit_bytes":null,
                                       "parts":{"anon":40,"unattributed":2},"self_reported_bytes":null,
                                       "fast":false,"reclaimable_bytes":null,"processes":[]})"));
  p.limit = 100;
  p.self_reported = 30;
  EXPECT_EQ(toJson(p)["limit_bytes"], 100);
  EXPECT_EQ(toJson(p)["self_reported_bytes"], 30);
}

TEST(Flight, WindowTrimsOldPoints) {
  testing::FixtureTree t;
  auto snap = testing::provingSnapshot(t);
  FlightRecorder rec(25 * kSec);
  const std::int64_t wall0 = 1'700'000'000 * kSec;
  for (int i = 0; i <= 4; ++i) rec.record(at(*snap, 1000 * kSec + i * 10 * kSec, wall0 + i * 10 * kSec));
  auto pts = rec.points("/proving/prover");
  ASSERT_EQ(pts.size(), 3u) << "20, 30 and 40 s; 0 and 10 s are older than 25 s";
  EXPECT_EQ(pts.front().wall_time_ns, wall0 + 20 * kSec);
  EXPECT_EQ(pts.back().wall_time_ns, wall0 + 40 * kSec);
  rec.setWindow(5 * kSec);
  EXPECT_EQ(rec.window(), 5 * kSec);
  rec.record(at(*snap, 1045 * kSec, wall0 + 45 * kSec));
  EXPECT_EQ(rec.points("/proving/prover").size(), 2u) << "a shorter window applies at the next sample";
}

TEST(Flight, AgeIsOnTheMonotonicClock) {
  testing::FixtureTree t;
  auto snap = testing::provingSnapshot(t);
  FlightRecorder rec(25 * kSec);
  const std::int64_t wall0 = 1'700'000'000 * kSec;
  // The wall clock steps back an hour between samples: nothing is lost, the order holds.
  rec.record(at(*snap, 1000 * kSec, wall0));
  rec.record(at(*snap, 1010 * kSec, wall0 - 3600 * kSec));
  rec.record(at(*snap, 1020 * kSec, wall0 - 3590 * kSec));
  EXPECT_EQ(rec.points("/proving/prover").size(), 3u);
  // Without a monotonic time, the wall clock is used.
  FlightRecorder wall(25 * kSec);
  for (int i = 0; i <= 3; ++i) wall.record(at(*snap, 0, wall0 + i * 10 * kSec));
  EXPECT_EQ(wall.points("/proving/prover").size(), 3u);
}

TEST(Flight, CgroupsNotSeenForAWindowAreDropped) {
  testing::FixtureTree t;
  auto snap = testing::provingSnapshot(t);
  FlightRecorder rec(60 * kSec);
  rec.record(at(*snap, 100 * kSec, 1 * kSec));
  Snapshot without = *snap;
  std::erase_if(without.cgroups, [](const CgroupSnapshot& c) { return c.memory.path == "/proving/curio"; });
  rec.record(at(without, 130 * kSec, 31 * kSec));
  EXPECT_EQ(rec.points("/proving/curio").size(), 1u) << "gone for half a window: its points stay";
  rec.record(at(without, 161 * kSec, 62 * kSec));
  EXPECT_TRUE(rec.points("/proving/curio").empty()) << "not seen for a whole window";
  EXPECT_EQ(rec.cgroups(), snap->cgroups.size() - 1);
  EXPECT_EQ(rec.points("/proving/prover").size(), 2u);
}

TEST(Flight, AtMostMaxCgroupsTheLargestAndTheFreshest) {
  testing::FixtureTree t;
  auto snap = testing::provingSnapshot(t);
  ASSERT_EQ(snap->cgroups.size(), 3u);
  FlightRecorder rec(60 * kSec, 2);
  rec.record(at(*snap, 100 * kSec, 1 * kSec));
  EXPECT_EQ(rec.cgroups(), 2u);
  EXPECT_EQ(rec.points("/").size(), 1u) << "the snapshot's order is by usage: the largest first";
  EXPECT_EQ(rec.points("/proving/prover").size(), 1u);
  EXPECT_TRUE(rec.points("/proving/curio").empty());
  // Another comes: the one seen longest ago makes room.
  Snapshot others = *snap;
  std::erase_if(others.cgroups, [](const CgroupSnapshot& c) { return c.memory.path == "/"; });
  rec.record(at(others, 101 * kSec, 2 * kSec));
  EXPECT_EQ(rec.cgroups(), 2u);
  EXPECT_EQ(rec.points("/proving/prover").size(), 2u);
  EXPECT_EQ(rec.points("/proving/curio").size(), 1u);
  EXPECT_TRUE(rec.points("/").empty());
  FlightRecorder none(60 * kSec, 0);
  none.record(*snap);
  EXPECT_EQ(none.cgroups(), 0u);
}

}  // namespace
}  // namespace headroom
