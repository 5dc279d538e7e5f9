// The path of an OOM kill through its one owner: the incident named, recorded in the journal with
// the budget in force, then published on every surface (the metrics, /v1/ooms, the events file
// and journald, the prover's margin); kills the counters alone show take the same path, and only
// where no kernel source names victims; an explicit journal that cannot open refuses the start.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "headroom/incidents/kill_path.h"
#include "headroom/journal/journal.h"
#include "testing/fixture_tree.h"

namespace headroom {
namespace {

using testing::FixtureTree;
using ::testing::HasSubstr;

constexpr std::uint64_t kMiB = 1ULL << 20;

// Everything a kill path needs, on a fixture tree's proving host (the prover cuzk, pid 100, in
// /proving/prover), with a journal, an events file and a journald that records what it is sent.
struct Desk {
  FixtureTree t;
  std::vector<RoleRule> rules = {*parseRoleRule("prover=comm:cuzk")};
  Exporter exporter{ExporterLimits{}};
  ProverBudget budget{budgetConfig(t), rules, ProverBudget::Options{}};
  std::vector<std::vector<std::string>> journald;
  KillPath kills{exporter, budget, HostIdentity{"node-1", "6.1.0", "test", "boot-1"},
                 [this](const std::vector<std::string>& f) {
                   journald.push_back(f);
                   return 0;
                 }};
  FsRoot fs = t.fs();
  WorkloadResolver names{fs, WorkloadLookup{"", "", false, std::chrono::milliseconds(100)}};
  KillPathSettings settings;

  static BudgetConfig budgetConfig(const FixtureTree& t) {
    BudgetConfig b;
    b.cgroup = "/proving/prover";
    b.state_file = t.root() + "/budget-state.json";
    return b;
  }
  Desk() {
    testing::provingHostV1(t);
    settings.journal.path = t.root() + "/journal/oom.hrj";
    settings.events.output = t.root() + "/events.jsonl";
    settings.events.journald = JournaldMode::kOn;
    settings.role_rules = rules;
  }
};

const std::vector<SensorStatus> kKernelNames = {{SensorId::kOom, SensorState::kActive, "tp_btf/mark_victim"}};
const std::vector<SensorStatus> kNoKernelSource = {{SensorId::kOom, SensorState::kOff, "--no-bpf"},
                                                   {SensorId::kKmsg, SensorState::kDegraded, "EPERM"}};

OomEvent proverKilled(std::int64_t at_ns) {
  OomEvent e = testing::proverKill(at_ns, 3900 * kMiB, 8 * kMiB);
  e.id = 1;
  e.wall_time_ns = 1'700'000'000'000'000'000;
  return e;
}

TEST(KillPath, AKillIsRecordedWithTheBudgetInForceThenPublishedEverywhere) {
  Desk d;
  auto snap = testing::provingSnapshot(d.t, {"prover=comm:cuzk"});
  ASSERT_TRUE(d.budget.update(*snap, std::nullopt));
  ASSERT_NE(d.budget.inForce(), nullptr) << "a budget in force before the kill";
  const std::uint64_t in_force = d.budget.inForce()->budget;
  const std::uint64_t margin_before = d.budget.controller()->state().learned_margin;
  ASSERT_TRUE(d.kills.configure(d.settings, d.names, true));

  d.kills.sample(snap, 3000 * kMiB, kKernelNames);
  d.kills.take(proverKilled(snap->completed_monotonic_ns + 1), kKernelNames);

  // The durable record: the budget the prover ran under, not the one the kill grows.
  auto journal = readJournal(d.settings.journal.path);
  ASSERT_TRUE(journal) << journal.error().describe();
  ASSERT_EQ(journal->records.size(), 1U);
  const nlohmann::json& rec = journal->records[0];
  ASSERT_TRUE(rec["budget"].is_object()) << rec.dump();
  EXPECT_EQ(rec["budget"]["budget_bytes"], in_force);
  EXPECT_EQ(rec["host"]["hostname"], "node-1");
  // Published: the events file and journald each got the record as journaled.
  const std::string events = testing::fileText(d.settings.events.output);
  ASSERT_TRUE(d.kills.drain(std::chrono::seconds(5)));
  EXPECT_THAT(testing::fileText(d.settings.events.output), HasSubstr("\"id\":1")) << events;
  ASSERT_EQ(d.journald.size(), 1U);
  // /v1/ooms.
  const auto ooms = nlohmann::json::parse(d.kills.board().oomsPage(10));
  EXPECT_EQ(ooms["total"], 1);
  EXPECT_EQ(ooms["events"][0]["victims"][0]["comm"], "cuzk");
  EXPECT_EQ(d.kills.board().journal()["state"], "on");
  // The metrics: the kill by the victim's cgroup, role and command, and the margin it grew.
  AgentSelf self;
  d.kills.addFigures(self);
  EXPECT_TRUE(self.journal_up);
  EXPECT_EQ(self.journal_records_total, 1U);
  d.exporter.update(*snap, SensorCounters{}, self);
  const std::string page = d.exporter.render(0);
  EXPECT_THAT(page, HasSubstr("headroom_oom_kills_total{cgroup=\"/proving/prover\""));
  EXPECT_THAT(page, HasSubstr("process=\"cuzk\",role=\"prover\""));
  EXPECT_THAT(page, HasSubstr("headroom_budget_margin_changes_total{cgroup=\"/proving/prover\""));
  EXPECT_THAT(page, HasSubstr("reason=\"oom_kill\",unit=\"\"} 1"));
  // The prover's budget learnt from the kill.
  const BudgetController* controller = d.budget.controller();
  ASSERT_NE(controller, nullptr);
  EXPECT_EQ(controller->state().oom_kills, 1U);
  EXPECT_GT(controller->state().learned_margin, margin_before);
}

// Where no kernel source names victims, a rise of a cgroup's own OOM-kill counter between two
// samples is the kill, and takes the same path; where one does, the counter only moves its
// baseline (the kernel's incident is the kill, not a second one).
TEST(KillPath, KillsTheCountersAloneShowTakeTheSamePath) {
  for (const bool kernel_source : {false, true}) {
    Desk d;
    ASSERT_TRUE(d.kills.configure(d.settings, d.names, true));
    auto before = testing::provingSnapshot(d.t, {"prover=comm:cuzk"});
    // The next sample: the prover's cgroup counted a kill, and the prover is gone.
    auto next = std::make_shared<Snapshot>(*before);
    for (CgroupSnapshot& c : next->cgroups)
      if (c.memory.path == "/proving/prover") c.memory.oom_kills = 1;
    next->processes.eraseIf([](const ProcessSnapshot& p) { return p.sample.pid == 100; });
    next->monotonic_time_ns += 1'000'000'000;
    next->wall_time_ns += 1'000'000'000;
    std::shared_ptr<const Snapshot> after = next;
    const auto& sensors = kernel_source ? kKernelNames : kNoKernelSource;
    d.kills.sample(before, std::nullopt, sensors);
    d.kills.sample(after, std::nullopt, sensors);
    const auto ooms = nlohmann::json::parse(d.kills.board().oomsPage(10));
    auto journal = readJournal(d.settings.journal.path);
    if (kernel_source) {
      EXPECT_EQ(ooms["total"], 0) << "the kernel's incident is the kill";
      EXPECT_FALSE(journal && !journal->records.empty());
      continue;
    }
    EXPECT_EQ(ooms["total"], 1);
    ASSERT_TRUE(journal) << journal.error().describe();
    ASSERT_EQ(journal->records.size(), 1U);
    EXPECT_EQ(journal->records[0]["event"]["sources"]["counter"], true);
  }
}

TEST(KillPath, AnExplicitJournalThatCannotOpenRefusesTheStartNotAReload) {
  Desk d;
  d.t.write("/not-a-dir", "x");
  d.settings.journal.path = d.t.root() + "/not-a-dir/oom.hrj";
  d.settings.journal.path_given = true;
  auto st = d.kills.configure(d.settings, d.names, true);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().kind, ErrorKind::kBadInput);
  EXPECT_THAT(st.error().describe(), HasSubstr("--journal / journal.path"));
  EXPECT_TRUE(d.kills.configure(d.settings, d.names, false)) << "a reload runs on without it";
  EXPECT_EQ(d.kills.board().journal()["state"], "off");
  // Without an explicit path the start runs on too, the journal off and said.
  d.settings.journal.path_given = false;
  EXPECT_TRUE(d.kills.configure(d.settings, d.names, true));
}

}  // namespace
}  // namespace headroom
