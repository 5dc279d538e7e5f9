// The agent's HTTP API over a real server on a loopback port, without an agent behind it: each
// route answers from what was published (and says so when nothing was), bad queries are 400,
// unknown paths 404, other methods 405; POST /v1/probe refused when off, busy or too soon, and run
// as a subprocess when on, its figures recorded.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <thread>

#include "headroom/daemon/http_api.h"
#include "headroom/model/snapshot.h"
#include "headroom/net/http_client.h"
#include "testing/fixture_tree.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

struct Served {
  Exporter exporter{ExporterLimits{}};
  KillBoard kills;  // what the kill path publishes
  HttpApi api;
  std::unique_ptr<HttpServer> server;

  explicit Served(std::vector<std::string> probe_command = {}, std::string unavailable = "no probe here")
      : api(exporter, kills, std::move(probe_command), std::move(unavailable)) {
    ListenAddress addr;
    addr.port = 0;
    auto s = HttpServer::start(addr, api.getRoutes(), api.postRoutes());
    if (!s) throw std::runtime_error(s.error().describe());
    server = std::move(*s);
  }
  ~Served() { server.reset(); }  // before the API it calls

  std::string base() const { return "http://127.0.0.1:" + std::to_string(server->port()); }
  HttpResponse get(const std::string& path) const {
    auto r = httpGet(base() + path, std::chrono::seconds(5));
    if (!r) throw std::runtime_error(r.error().describe());
    return *r;
  }
  std::pair<int, nlohmann::json> post(const std::string& path) const {
    httplib::Client c("127.0.0.1", server->port());
    c.set_read_timeout(30, 0);
    auto r = c.Post(path);
    if (!r) throw std::runtime_error("POST " + path + ": no answer");
    return {r->status, nlohmann::json::parse(r->body, nullptr, false)};
  }
};

nlohmann::json json(const HttpResponse& r) { return nlohmann::json::parse(r.body, nullptr, false); }

// The exposition after a tick, as the agent's next sample would make it.
std::string metricsNow(Exporter& e) {
  e.update(Snapshot{}, SensorCounters{}, AgentSelf{});
  return e.render(0);
}

TEST(HttpApi, BeforeTheFirstSampleEachRouteSaysSo) {
  Served s;
  auto health = s.get("/healthz");
  EXPECT_EQ(health.status, 503);
  EXPECT_EQ(json(health)["status"], "starting");
  auto snap = s.get("/v1/snapshot");
  EXPECT_EQ(snap.status, 503);
  EXPECT_THAT(json(snap).value("error", ""), HasSubstr("no sample yet"));
  auto budget = s.get("/v1/budget");
  EXPECT_EQ(budget.status, 503);
  EXPECT_THAT(json(budget).value("error", ""), HasSubstr("the first budget comes with the first sample"));
  auto ooms = json(s.get("/v1/ooms"));
  EXPECT_EQ(ooms["total"], 0);
  EXPECT_TRUE(ooms["events"].empty());
  EXPECT_EQ(s.get("/metrics").status, 200);
  EXPECT_EQ(s.get("/no/such/route").status, 404);
  EXPECT_EQ(s.get("/v1/probe").status, 405) << "a probe is a POST";
}

TEST(HttpApi, APublishedSampleIsServedWholeAndTheAgentIsHealthy) {
  Served s;
  testing::FixtureTree t;
  auto snapshot = testing::provingSnapshot(t, {"prover=comm:cuzk"});
  SamplePublication p;
  p.snapshot = snapshot;
  p.sensors = {SensorStatus{SensorId::kOom, SensorState::kActive, "tp_btf/mark_victim"}};
  p.interval_ns = 60'000'000'000;  // a stall would take three minutes: this test never sees one
  p.samples_total = 7;
  p.budget = SamplePublication::Budget{jsonResponse(200, {{"budget_bytes", 42}}), "/proving/prover", 3950};
  s.kills.setJournal({{"state", "on"}, {"path", "/tmp/x"}});
  s.api.publish(std::move(p));

  auto health = s.get("/healthz");
  EXPECT_EQ(health.status, 200);
  auto h = json(health);
  EXPECT_EQ(h["status"], "ok");
  EXPECT_EQ(h["samples_total"], 7);
  EXPECT_EQ(h["journal"]["state"], "on");
  ASSERT_EQ(h["sensors"].size(), 1u);
  EXPECT_EQ(h["sensors"][0]["state"], "active");
  EXPECT_TRUE(h["last_error"].is_null());

  auto snap = s.get("/v1/snapshot");
  EXPECT_EQ(snap.status, 200);
  EXPECT_EQ(json(snap)["processes"].size(), snapshot->processes.size());
  EXPECT_EQ(json(s.get("/v1/budget"))["budget_bytes"], 42);

  // A failed sample is said on /healthz, the last good one still served.
  s.api.publishSampleFailure(1, "reading /proc: EMFILE");
  EXPECT_EQ(json(s.get("/healthz"))["last_error"], "reading /proc: EMFILE");
  EXPECT_EQ(s.get("/v1/snapshot").status, 200);
  // A sample that holds the budget still keeps the last answer.
  SamplePublication held;
  held.snapshot = snapshot;
  held.interval_ns = 60'000'000'000;
  s.api.publish(std::move(held));
  EXPECT_EQ(json(s.get("/v1/budget"))["budget_bytes"], 42);
}

// A journal that fails to write: "degraded" with why, still 200 (a restart would mend no disk);
// "ok" again once it writes; a stall wins over it.
TEST(HttpApi, AJournalThatFailsToWriteMakesTheAgentDegradedNotDown) {
  Served s;
  SamplePublication p;
  p.snapshot = std::make_shared<Snapshot>();
  p.interval_ns = 60'000'000'000;
  s.api.publish(std::move(p));
  s.kills.setJournal({{"state", "degraded"},
                      {"path", "/j/oom.hrj"},
                      {"reason", "writing failed: No space left on device; 1 record(s) kept in memory"},
                      {"pending_records", 1}});
  auto health = s.get("/healthz");
  EXPECT_EQ(health.status, 200);
  auto h = json(health);
  EXPECT_EQ(h["status"], "degraded");
  ASSERT_EQ(h["degraded"].size(), 1u) << h.dump();
  EXPECT_THAT(h["degraded"][0].get<std::string>(), HasSubstr("journal: writing failed: No space left on device"));
  s.kills.setJournal({{"state", "on"}, {"path", "/j/oom.hrj"}, {"pending_records", 0}});
  h = json(s.get("/healthz"));
  EXPECT_EQ(h["status"], "ok");
  EXPECT_TRUE(h["degraded"].empty());
  // Degraded, and stalled: stalled (503) is what a liveness probe must see.
  SamplePublication quick;
  quick.snapshot = std::make_shared<Snapshot>();
  quick.interval_ns = 1;  // three intervals and a second: a second
  s.api.publish(std::move(quick));
  s.kills.setJournal({{"state", "degraded"}, {"reason", "writing failed: EROFS"}});
  auto stalled = s.get("/healthz");
  for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       stalled.status != 503 && std::chrono::steady_clock::now() < end; stalled = s.get("/healthz"))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(stalled.status, 503);
  EXPECT_EQ(json(stalled)["status"], "stalled");
  EXPECT_EQ(json(stalled)["degraded"].size(), 1u);
}

TEST(HttpApi, OomEventsAreKeptBoundedAndListedNewestLast) {
  Served s;
  s.kills.setCapacity(2);
  for (pid_t pid : {10, 11, 12}) {
    OomEvent e;
    e.id = static_cast<std::uint64_t>(pid);
    OomVictim v;
    v.pid = v.tgid = pid;
    v.comm = "victim";
    e.victims.push_back(v);
    s.kills.addOom(e, {});
  }
  auto all = json(s.get("/v1/ooms"));
  EXPECT_EQ(all["total"], 3);
  EXPECT_EQ(all["kept"], 2);
  ASSERT_EQ(all["events"].size(), 2u);
  EXPECT_EQ(all["events"][1]["id"], 12);
  auto one = json(s.get("/v1/ooms?limit=1"));
  ASSERT_EQ(one["events"].size(), 1u);
  EXPECT_EQ(one["events"][0]["id"], 12);
  auto bad = s.get("/v1/ooms?limit=many");
  EXPECT_EQ(bad.status, 400);
  EXPECT_THAT(json(bad).value("error", ""), HasSubstr("limit=many"));
}

TEST(HttpApi, TheProbeIsRefusedWhenOffOrWithoutACgroup) {
  Served s;
  auto [off, off_body] = s.post("/v1/probe?cgroup=/x");
  EXPECT_EQ(off, 403);
  EXPECT_THAT(off_body.value("error", ""), HasSubstr("probe.enabled"));
  ApiSettings on;
  on.probe_enabled = true;
  s.api.configure(on);
  auto [which, which_body] = s.post("/v1/probe");
  EXPECT_EQ(which, 400);
  EXPECT_THAT(which_body.value("error", ""), HasSubstr("which cgroup?"));
  auto [unavailable, why] = s.post("/v1/probe?cgroup=/x");
  EXPECT_EQ(unavailable, 500);
  EXPECT_EQ(why.value("error", ""), "no probe here");
  EXPECT_THAT(metricsNow(s.exporter), HasSubstr("headroom_probes_total{outcome=\"refused\"} 2"));
}

TEST(HttpApi, TheProbeRunsAsASubprocessAndItsFiguresAreRecorded) {
  // A stand-in for `headroom probe --json`: it prints what the real one prints and exits 0;
  // called with "probe --json --cgroup PATH" after this command line.
  std::string script =
      R"(echo "{\"cgroup\": \"$4\", \"allocatable_bytes\": 1073741824, \"allocated_bytes\": 805306368, )"
      R"(\"aborted\": false, \"duration_seconds\": 1.5}")";
  Served s({"/bin/sh", "-c", script, "sh"});
  ApiSettings on;
  on.probe_enabled = true;
  on.probe_min_interval = std::chrono::hours(1);
  s.api.configure(on);
  // The prover's cgroup as the last sample published it: a probe of it caps the budget.
  SamplePublication p;
  p.interval_ns = 60'000'000'000;
  p.budget = SamplePublication::Budget{jsonResponse(200, {{"budget_bytes", 1}}), "/jobs/prover", 300};
  s.api.publish(std::move(p));

  auto [status, body] = s.post("/v1/probe?cgroup=/jobs/prover");
  ASSERT_EQ(status, 200) << body.dump();
  EXPECT_EQ(body["allocatable_bytes"], 1073741824);
  EXPECT_TRUE(s.api.takeSampleSoon()) << "its figures are shown at once";
  EXPECT_FALSE(s.api.probeActive());
  auto finding = s.api.probeFinding("/jobs/prover");
  ASSERT_TRUE(finding);
  EXPECT_EQ(finding->allocatable, 1073741824u);
  EXPECT_EQ(finding->prover_usage, 300u);
  EXPECT_FALSE(s.api.probeFinding("/elsewhere"));
  std::string metrics = metricsNow(s.exporter);
  EXPECT_THAT(metrics, HasSubstr("headroom_probes_total{outcome=\"done\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("headroom_probe_allocatable_bytes{cgroup=\"/jobs/prover\",container=\"\","
                                 "namespace=\"\",pod=\"\",unit=\"\"}"));

  auto [again, again_body] = s.post("/v1/probe?cgroup=/jobs/prover");
  EXPECT_EQ(again, 429);
  EXPECT_GT(again_body.value("retry_after_seconds", 0.0), 3500.0);
}

TEST(HttpApi, AProbeThatFailsOrIsRefusedBelowIsSaid) {
  // Exit 2 is the probe's "bad input": the request's fault, 400 with what it said.
  Served refused({"/bin/sh", "-c", "echo 'headroom probe: --cgroup /x: not a cgroup' >&2; exit 2", "sh"});
  ApiSettings on;
  on.probe_enabled = true;
  on.probe_min_interval = std::chrono::milliseconds(0);
  refused.api.configure(on);
  auto [bad, bad_body] = refused.post("/v1/probe?cgroup=/x");
  EXPECT_EQ(bad, 400);
  EXPECT_EQ(bad_body.value("error", ""), "headroom probe: --cgroup /x: not a cgroup");
  // Any other failure is the agent's: 500.
  Served failed({"/bin/sh", "-c", "echo 'cannot fork' >&2; exit 1", "sh"});
  failed.api.configure(on);
  auto [error, error_body] = failed.post("/v1/probe?cgroup=/x");
  EXPECT_EQ(error, 500);
  EXPECT_THAT(error_body.value("error", ""), HasSubstr("the probe failed (exit 1): cannot fork"));
  EXPECT_THAT(metricsNow(failed.exporter), HasSubstr("headroom_probes_total{outcome=\"failed\"} 1"));
}

}  // namespace
}  // namespace headroom
