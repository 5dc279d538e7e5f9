// No kill lost across restarts, through the kill path as the agent drives it: each "agent" here is
// a fresh KillPath on the same journal. A kill the kernel's log shows is journaled once however
// often it is found again; an incident begun and never completed (the agent killed in between)
// is recorded by the next one, with the log's report of it where there is one; journal.catch_up
// says which of the log's kills are wanted; a ring that wrapped is counted; the counters catch up
// from the last agent's sample.
#include <gtest/gtest.h>

#include <filesystem>

#include "headroom/incidents/kill_path.h"
#include "headroom/journal/journal.h"
#include "headroom/journal/journal_state.h"
#include "testing/fixture_tree.h"

namespace headroom {
namespace {

using testing::FixtureTree;

constexpr std::uint64_t kMiB = 1ULL << 20;
const std::vector<SensorStatus> kKernelNames = {{SensorId::kOom, SensorState::kActive, "tp_btf/mark_victim"}};
const std::vector<SensorStatus> kNoKernelSource = {{SensorId::kOom, SensorState::kOff, "--no-bpf"},
                                                   {SensorId::kKmsg, SensorState::kOff, "off"}};

// One agent's kill path: its own exporter, budget and names, the machine's journal.
struct AgentRun {
  explicit AgentRun(const FixtureTree& t, JournalCatchUp mode = JournalCatchUp::kBoot, std::string boot = "boot-1")
      : kills(exporter, budget, HostIdentity{"node-1", "6.1.0", "test", std::move(boot)},
              [](const auto&) { return 0; }),
        fs(t.fs()) {
    settings.journal.path = t.root() + "/journal/oom.hrj";
    settings.journal.catch_up = mode;
    if (!kills.configure(settings, names, true)) throw std::runtime_error("configure");
  }
  Exporter exporter{ExporterLimits{}};
  ProverBudget budget{BudgetConfig{}, {}, ProverBudget::Options{}};
  KillPath kills;
  FsRoot fs;
  WorkloadResolver names{fs, WorkloadLookup{"", "", false, std::chrono::milliseconds(100)}};
  KillPathSettings settings;
};

// A kill of the kernel's log, as the start's read of the ring gives it.
OomEvent logged(std::uint64_t seq, pid_t victim, std::int64_t at_ns) {
  OomEvent e = testing::proverKill(at_ns, 512 * kMiB, 2 * kMiB);
  e.from_bpf = false;
  e.from_kmsg = true;
  e.kmsg_seq = seq;
  e.victims[0].pid = e.victims[0].tgid = victim;
  e.found_after = "kernel_log";
  e.id = (std::uint64_t{1} << 62) + seq;
  return e;
}

std::vector<nlohmann::json> records(const FixtureTree& t) {
  auto j = readJournal(t.root() + "/journal/oom.hrj");
  if (!j) throw std::runtime_error(j.error().describe());
  return j->records;
}

std::string stateFile(const FixtureTree& t) { return journalStateFileOf(t.root() + "/journal/oom.hrj"); }

TEST(CatchUp, AKillOfTheLogIsJournaledOnceHoweverOftenItIsFound) {
  FixtureTree t;
  for (int start = 0; start < 3; ++start) {
    AgentRun a(t);
    a.kills.sensorsStarted({logged(100, 4242, 5'000'000'000), logged(180, 4343, 9'000'000'000)},
                           KernelLogPosition{true, 0, 300}, kKernelNames);
    EXPECT_EQ(a.kills.catchUp().found.count("kernel_log") ? a.kills.catchUp().found.at("kernel_log") : 0,
              start == 0 ? 2U : 0U)
        << start;
    EXPECT_EQ(a.kills.catchUp().already_journaled, start == 0 ? 0U : 2U) << start;
    a.kills.stop();
  }
  const auto r = records(t);
  ASSERT_EQ(r.size(), 2U);
  EXPECT_EQ(r[0]["found_after"]["how"], "kernel_log");
  EXPECT_EQ(r[0]["event"]["kernel_log_seq"], 100);
  EXPECT_EQ(r[0]["host"]["boot_id"], "boot-1");
  EXPECT_TRUE(r[0]["cgroup"].is_null()) << "no sample of this agent is of the kill";
  EXPECT_TRUE(r[0]["flight"]["points"].empty() || r[0]["flight"]["points"].back().value("at_kill", false));
  // The same sequence number in another boot is another kill.
  AgentRun other(t, JournalCatchUp::kBoot, "boot-2");
  other.kills.sensorsStarted({logged(100, 4242, 5'000'000'000)}, KernelLogPosition{true, 0, 300}, kKernelNames);
  EXPECT_EQ(records(t).size(), 3U);
}

TEST(CatchUp, ALiveRecordWithoutASequenceNumberIsKnownByItsVictimAndTime) {
  FixtureTree t;
  {
    AgentRun a(t);
    a.kills.sensorsStarted({}, KernelLogPosition{true, 0, 10}, kKernelNames);
    OomEvent bpf_only = testing::proverKill(7'000'000'000, 512 * kMiB, 2 * kMiB);  // BPF's word alone
    bpf_only.id = 1;
    a.kills.take(bpf_only, kKernelNames);
  }
  AgentRun b(t);
  // Its report, found in the ring: the same victim 0.3 s away on the kernel's clock.
  OomEvent again = logged(50, 100, 7'300'000'000);
  b.kills.sensorsStarted({again}, KernelLogPosition{true, 0, 60}, kKernelNames);
  EXPECT_EQ(records(t).size(), 1U);
  EXPECT_EQ(b.kills.catchUp().already_journaled, 1U);
}

TEST(CatchUp, AnIncidentBegunAndNeverCompletedIsRecordedByTheNextAgentOnce) {
  FixtureTree t;
  OomEvent first_word = testing::proverKill(8'000'000'000, 512 * kMiB, 2 * kMiB);
  first_word.id = 7;
  {
    AgentRun a(t);
    a.kills.sensorsStarted({}, KernelLogPosition{true, 0, 10}, kKernelNames);
    a.kills.begin(first_word, kKernelNames);
    // Killed here: no take(), no stop().
  }
  auto st = readJournalState(stateFile(t));
  ASSERT_TRUE(st && *st) << "the state beside the journal";
  ASSERT_EQ((*st)->in_flight.size(), 1U) << "durable before any wait";
  EXPECT_TRUE(records(t).empty());
  {
    // The next agent: the log still holds the kill's report (the same victim, a moment later).
    AgentRun b(t);
    b.kills.sensorsStarted({logged(20, 100, 8'100'000'000)}, KernelLogPosition{true, 0, 40}, kKernelNames);
    const auto r = records(t);
    ASSERT_EQ(r.size(), 1U) << "the in-flight record and the log's report are one kill";
    EXPECT_EQ(r[0]["found_after"]["how"], "in_flight");
    EXPECT_EQ(r[0]["event"]["kernel_log_seq"], 20) << "the log's whole report as its event";
    EXPECT_EQ(b.kills.catchUp().found.at("in_flight"), 1U);
    auto after = readJournalState(stateFile(t));
    ASSERT_TRUE(after && *after);
    EXPECT_TRUE((*after)->in_flight.empty());
  }
  AgentRun c(t);
  c.kills.sensorsStarted({logged(20, 100, 8'100'000'000)}, KernelLogPosition{true, 0, 40}, kKernelNames);
  EXPECT_EQ(records(t).size(), 1U);
}

TEST(CatchUp, AnIncidentInFlightWithoutTheLogsReportIsRecordedAsItWent) {
  FixtureTree t;
  {
    AgentRun a(t);
    OomEvent e = testing::proverKill(8'000'000'000, 512 * kMiB, 2 * kMiB);
    e.id = 3;
    a.kills.begin(e, kKernelNames);
  }
  AgentRun b(t, JournalCatchUp::kOff);  // kills left in flight are recorded whatever the mode
  b.kills.sensorsStarted({}, std::nullopt, kKernelNames);
  const auto r = records(t);
  ASSERT_EQ(r.size(), 1U);
  EXPECT_EQ(r[0]["found_after"]["how"], "in_flight");
  EXPECT_EQ(r[0]["event"]["victims"][0]["pid"], 100);
  EXPECT_EQ(nlohmann::json::parse(b.kills.board().oomsPage(10))["total"], 1) << "published";
}

TEST(CatchUp, ACompletedIncidentIsNoLongerInFlight) {
  FixtureTree t;
  AgentRun a(t);
  OomEvent e = testing::proverKill(8'000'000'000, 512 * kMiB, 2 * kMiB);
  e.id = 1;
  a.kills.begin(e, kKernelNames);
  a.kills.take(e, kKernelNames);
  auto st = readJournalState(stateFile(t));
  ASSERT_TRUE(st && *st);
  EXPECT_TRUE((*st)->in_flight.empty());
  ASSERT_EQ(records(t).size(), 1U);
  EXPECT_TRUE(records(t)[0]["found_after"].is_null());
  EXPECT_TRUE(records(t)[0]["key"].is_string());
}

TEST(CatchUp, RestartsTakesOnlyWhatCameSinceTheLastAgentsRead) {
  FixtureTree t;
  {
    AgentRun fresh(t, JournalCatchUp::kRestarts);  // no state yet: nothing of the log is wanted
    fresh.kills.sensorsStarted({logged(10, 4242, 1'000'000'000)}, KernelLogPosition{true, 0, 100}, kKernelNames);
    EXPECT_EQ(fresh.kills.catchUp().not_asked, 1U);
    EXPECT_EQ(fresh.kills.catchUp().unread_records, 0U);
    fresh.kills.kernelLogSettled(150);
    fresh.kills.stop();
  }
  EXPECT_TRUE(records(t).empty());
  {
    AgentRun next(t, JournalCatchUp::kRestarts);
    next.kills.sensorsStarted(
        {logged(10, 4242, 1'000'000'000), logged(120, 4343, 2'000'000'000), logged(160, 4444, 3'000'000'000)},
        KernelLogPosition{true, 0, 200}, kKernelNames);
    const auto r = records(t);
    ASSERT_EQ(r.size(), 1U) << "before the last agent's read: seen by it";
    EXPECT_EQ(r[0]["event"]["kernel_log_seq"], 160);
    EXPECT_EQ(next.kills.catchUp().not_asked, 2U);
  }
  // A state of another boot: all of this one is wanted.
  AgentRun rebooted(t, JournalCatchUp::kRestarts, "boot-2");
  rebooted.kills.sensorsStarted({logged(5, 4545, 1'000'000'000)}, KernelLogPosition{true, 0, 30}, kKernelNames);
  EXPECT_EQ(records(t).size(), 2U);
}

TEST(CatchUp, ARingThatWrappedIsCounted) {
  FixtureTree t;
  {
    AgentRun a(t);
    a.kills.sensorsStarted({}, KernelLogPosition{true, 0, 500}, kKernelNames);
    EXPECT_EQ(a.kills.catchUp().unread_records, 0U);
    a.kills.kernelLogSettled(900);
    a.kills.stop();
  }
  {
    // The ring now starts at 1500: records 900..1499 were never read.
    AgentRun b(t);
    b.kills.sensorsStarted({}, KernelLogPosition{true, 1500, 2000}, kKernelNames);
    EXPECT_EQ(b.kills.catchUp().unread_records, 600U);
    AgentSelf self;
    b.kills.addFigures(self);
    EXPECT_EQ(self.journal_kernel_log_unread_records, 600U);
  }
  // Without a state of this boot: every record before the ring's start.
  std::filesystem::remove(stateFile(t));
  AgentRun c(t);
  c.kills.sensorsStarted({}, KernelLogPosition{true, 1500, 2000}, kKernelNames);
  EXPECT_EQ(c.kills.catchUp().unread_records, 1500U);
}

// Two samples of the proving host: the prover's cgroup with `kills` OOM kills counted.
std::shared_ptr<const Snapshot> counted(const FixtureTree& t, std::uint64_t kills, std::int64_t at_ns) {
  auto s = std::make_shared<Snapshot>(*testing::provingSnapshot(t, {"prover=comm:cuzk"}));
  for (CgroupSnapshot& c : s->cgroups)
    if (c.memory.path == "/proving/prover") c.memory.oom_kills = kills;
  s->monotonic_time_ns = s->completed_monotonic_ns = at_ns;
  return s;
}

TEST(CatchUp, TheCountersCatchUpFromTheLastAgentsSample) {
  FixtureTree t;
  testing::provingHostV1(t);
  {
    AgentRun a(t);
    a.kills.sensorsStarted({}, std::nullopt, kNoKernelSource);
    a.kills.sample(counted(t, 2, 1'000'000'000), std::nullopt, kNoKernelSource);
    a.kills.stop();
  }
  auto st = readJournalState(stateFile(t));
  ASSERT_TRUE(st && *st);
  EXPECT_EQ((*st)->oom_kill_counts.at("/proving/prover"), 2U);
  {
    // Three more kills while no agent ran.
    AgentRun b(t);
    b.kills.sensorsStarted({}, std::nullopt, kNoKernelSource);
    b.kills.sample(counted(t, 5, 9'000'000'000), std::nullopt, kNoKernelSource);
    b.kills.sample(counted(t, 5, 9'200'000'000), std::nullopt, kNoKernelSource);
    const auto r = records(t);
    ASSERT_EQ(r.size(), 1U);
    EXPECT_EQ(r[0]["found_after"]["how"], "counters");
    EXPECT_EQ(r[0]["event"]["counter"]["kills"], 3);
    EXPECT_EQ(b.kills.catchUp().found.at("counters"), 1U);
    // Killed before its stop: the state has the counts of the kill it recorded.
  }
  AgentRun c(t);
  c.kills.sensorsStarted({}, std::nullopt, kNoKernelSource);
  c.kills.sample(counted(t, 5, 12'000'000'000), std::nullopt, kNoKernelSource);
  EXPECT_EQ(records(t).size(), 1U) << records(t).back().dump();
}

TEST(CatchUp, WithAKernelSourceTheCountersTellOnlyWhatTheLogLost) {
  for (const bool wrapped : {false, true}) {
    FixtureTree t;
    testing::provingHostV1(t);
    {
      AgentRun a(t);
      a.kills.sensorsStarted({}, KernelLogPosition{true, 0, 100}, kKernelNames);
      a.kills.sample(counted(t, 0, 1'000'000'000), std::nullopt, kKernelNames);
      a.kills.kernelLogSettled(100);
      a.kills.stop();
    }
    // Two kills while no agent ran; the log shows one of them (the other lost when it wrapped).
    AgentRun b(t);
    b.kills.sensorsStarted({logged(wrapped ? 400 : 150, 100, 5'000'000'000)},
                           KernelLogPosition{true, wrapped ? 300U : 0U, 500}, kKernelNames);
    b.kills.sample(counted(t, wrapped ? 2 : 1, 9'000'000'000), std::nullopt, kKernelNames);
    const auto r = records(t);
    ASSERT_EQ(r.size(), wrapped ? 2U : 1U) << wrapped;
    EXPECT_EQ(r[0]["found_after"]["how"], "kernel_log");
    if (wrapped) {
      EXPECT_EQ(r[1]["found_after"]["how"], "counters");
      EXPECT_EQ(r[1]["event"]["counter"]["kills"], 1) << "less the one the log shows";
    }
  }
}

}  // namespace
}  // namespace headroom
