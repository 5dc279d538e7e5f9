// No OOM kill lost across agent restarts, with the real agent, real cgroups and real kills: a
// kill while no agent runs is journaled at the next start from the kernel's log, once however
// often the agent restarts after; an agent SIGKILLed with a kill in flight (seen, its record not
// written yet) or right after a kill leaves nothing to lose; without a kernel source the cgroups'
// counters catch up from what the last agent saw. Each kill is in the journal by the time the
// next agent serves.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "headroom/journal/journal.h"
#include "headroom/journal/journal_state.h"
#include "testing/cgroup_sandbox.h"
#include "testing/child_process.h"
#include "testing/fixture_tree.h"
#include "testing/integration.h"

namespace headroom {
namespace {

using testing::CgroupSandbox;
using testing::ChildProcess;
using testing::TempDir;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::uint64_t kMiB = 1ULL << 20;

using Agent = testing::InfoLogAgent;

std::vector<nlohmann::json> records(const std::string& journal) {
  auto c = readJournal(journal);
  if (!c) throw std::runtime_error(c.error().describe());
  return c->records;
}

// The journal once it holds `n` records, waited for up to `limit`; what it holds then.
std::vector<nlohmann::json> waitRecords(const std::string& journal, std::size_t n, std::chrono::milliseconds limit) {
  const auto end = Clock::now() + limit;
  std::vector<nlohmann::json> r = records(journal);
  while (r.size() < n && Clock::now() < end) {
    std::this_thread::sleep_for(20ms);
    r = records(journal);
  }
  return r;
}

// The records of the kill of `victim`.
std::size_t recordsOf(const std::string& journal, pid_t victim) {
  std::size_t n = 0;
  for (const nlohmann::json& r : records(journal)) {
    for (const nlohmann::json& v : r["event"]["victims"]) n += v.value("pid", 0) == victim;
  }
  return n;
}

std::string bootId() {
  std::string id = testing::fileText("/proc/sys/kernel/random/boot_id");
  while (!id.empty() && id.back() == '\n') id.pop_back();
  return id;
}

// A workload that climbs past the sandbox's limit and is OOM-killed: its pid, once it died so.
pid_t oomKill(const CgroupSandbox& sb) {
  auto w = ChildProcess::spawn({HEADROOM_WORKLOAD, "--anon-slow", std::to_string(256 * kMiB)}, sb.procsFile());
  if (!w) throw std::runtime_error(w.error().describe());
  const pid_t pid = w->pid();
  auto st = w->wait(60s);
  if (!st || !WIFSIGNALED(*st) || WTERMSIG(*st) != SIGKILL) throw std::runtime_error("the workload was not killed");
  return pid;
}

// A cgroup whose workload is OOM-killed at 64 MiB.
Result<CgroupSandbox> limitedSandbox(const char* name) {
  auto sb = CgroupSandbox::create(name);
  if (!sb) return sb;
  if (auto st = sb->setLimit(64 * kMiB); !st) return unexpected(st.error());
  return sb;
}

struct Journaled {
  TempDir tmp;
  std::string journal = tmp.file("oom.hrj");
  std::vector<std::string> args(const CgroupSandbox& sb, std::vector<std::string> extra = {}) const {
    // The OOM sources and the cgroups' files are what these tests are about: the per-process
    // sensors stay off, and each start is a third of the time (tens of seconds under TCG).
    std::vector<std::string> a = {"--interval",       "200ms", "--cgroup",        sb.path(), "--journal",      journal,
                                  "--budget.enabled", "false", "--sensors.tasks", "false",   "--sensors.mmap", "false"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
};

// One more start: the journal still holds `n` records.
void still(const Journaled& j, const CgroupSandbox& sb, std::size_t n) {
  Agent again(j.args(sb));
  ASSERT_TRUE(again.waitHealthy()) << again.logText();
  EXPECT_EQ(records(j.journal).size(), n) << again.logText();
}

TEST(Restart, AKillWhileNoAgentRanIsJournaledOnceAtTheNextStartHoweverOftenItRestarts) {
  SKIP_WITHOUT_ROOT();
  auto sb = limitedSandbox("restart-stopped");
  ASSERT_TRUE(sb) << sb.error().describe();
  Journaled j;
  {
    Agent first(j.args(*sb));
    ASSERT_TRUE(first.waitHealthy()) << first.logText();
    first.stop();
  }
  ASSERT_TRUE(std::filesystem::exists(journalStateFileOf(j.journal))) << "the state beside the journal";
  const pid_t victim = oomKill(*sb);  // no agent runs

  const auto started = Clock::now();
  {
    // Recorded before the agent serves: nothing new is told before what it missed.
    Agent next(j.args(*sb));
    auto r = records(j.journal);
    ::testing::Test::RecordProperty(
        "start_to_record_ms",
        static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count()));
    ASSERT_EQ(r.size(), 1u) << next.logText();
    const nlohmann::json& rec = r[0];
    EXPECT_EQ(rec["found_after"]["how"], "kernel_log") << rec.dump();
    ASSERT_FALSE(rec["event"]["victims"].empty()) << rec.dump();
    EXPECT_EQ(rec["event"]["victims"][0]["pid"], victim);
    EXPECT_TRUE(rec["event"]["kernel_log_seq"].is_number_unsigned()) << rec["event"].dump();
    EXPECT_EQ(rec["host"]["boot_id"], bootId());
    EXPECT_TRUE(rec["event"]["kernel_report"].is_object()) << "the kernel's own figures";
    EXPECT_TRUE(next.waitLog("found after the fact, in the kernel's log")) << next.logText();
    ASSERT_TRUE(next.waitHealthy()) << next.logText();
    const nlohmann::json health = next.getJson("/healthz");
    EXPECT_EQ(health["journal"]["catch_up"]["found"]["kernel_log"], 1) << health.dump();
    EXPECT_EQ(testing::metric(next.metrics(), "headroom_journal_found_after_total", {{"how", "kernel_log"}}), 1.0);
  }
  // Again, asking for every kill of this boot (the log holds earlier tests' too): this one is
  // known by its boot and kernel log sequence number, and not journaled again.
  Agent again(j.args(*sb, {"--journal.catch-up", "boot"}));
  ASSERT_TRUE(again.waitHealthy()) << again.logText();
  EXPECT_EQ(recordsOf(j.journal, victim), 1u) << again.logText();
  const nlohmann::json health = again.getJson("/healthz");
  EXPECT_EQ(health["journal"]["catch_up"]["found"]["kernel_log"].get<int>() + 1, records(j.journal).size())
      << "the others, once each";
  EXPECT_GE(health["journal"]["catch_up"]["already_journaled"].get<int>(), 1) << health.dump();
}

// Both ways a kill escapes an agent in one run (the v2 guest's smoke run has this one): killed
// while the agent that saw it was SIGKILLed before its record, and killed while none ran.
TEST(Restart, AKillLeftInFlightByASigkilledAgentAndOneWhileNoneRanAreEachJournaledOnce) {
  SKIP_WITHOUT_ROOT();
  auto sb = limitedSandbox("restart-inflight");
  ASSERT_TRUE(sb) << sb.error().describe();
  Journaled j;
  const std::string state = journalStateFileOf(j.journal);
  pid_t victim = 0;
  {
    Agent first(j.args(*sb));
    ASSERT_TRUE(first.waitHealthy()) << first.logText();
    auto w = ChildProcess::spawn({HEADROOM_WORKLOAD, "--anon-slow", std::to_string(256 * kMiB)}, sb->procsFile());
    ASSERT_TRUE(w) << w.error().describe();
    victim = w->pid();
    // The moment the incident is durable and before its record is: the sources' join waits at
    // least 200 ms for the rest of it.
    bool in_flight = false;
    for (const auto end = Clock::now() + 60s; !in_flight && Clock::now() < end;) {
      auto s = readJournalState(state);
      in_flight = s && *s && !(*s)->in_flight.empty();
      if (!in_flight) std::this_thread::sleep_for(1ms);
    }
    ASSERT_TRUE(in_flight) << first.logText();
    first.child().kill(SIGKILL);
    ASSERT_TRUE(first.child().wait());
    ASSERT_TRUE(records(j.journal).empty()) << "killed before its record was written";
  }
  const pid_t unseen = oomKill(*sb);  // no agent runs
  {
    Agent next(j.args(*sb));
    auto r = records(j.journal);  // before it serves
    ASSERT_EQ(r.size(), 2u) << next.logText();
    const nlohmann::json& rec = r[0];
    EXPECT_EQ(rec["found_after"]["how"], "in_flight") << rec.dump();
    ASSERT_FALSE(rec["event"]["victims"].empty()) << rec.dump();
    EXPECT_EQ(rec["event"]["victims"][0]["pid"], victim);
    EXPECT_TRUE(rec["event"]["kernel_report"].is_object()) << "the kernel log's report of the same kill";
    EXPECT_TRUE(rec["cgroup"].is_object()) << "the sample before the kill, as the first agent had it";
    EXPECT_EQ(r[1]["found_after"]["how"], "kernel_log") << r[1].dump();
    EXPECT_EQ(r[1]["event"]["victims"][0]["pid"], unseen);
    ASSERT_TRUE(next.waitHealthy());
    const nlohmann::json found = next.getJson("/healthz")["journal"]["catch_up"]["found"];
    EXPECT_EQ(found["in_flight"], 1) << found.dump();
    EXPECT_EQ(found["kernel_log"], 1) << found.dump();
    auto s = readJournalState(state);
    ASSERT_TRUE(s && *s);
    EXPECT_TRUE((*s)->in_flight.empty()) << "written, no longer in flight";
  }
  still(j, *sb, 2);
}

TEST(Restart, AnAgentSigkilledRightAfterAKillLeavesOneRecord) {
  SKIP_WITHOUT_ROOT();
  auto sb = limitedSandbox("restart-sigkill");
  ASSERT_TRUE(sb) << sb.error().describe();
  Journaled j;
  {
    Agent first(j.args(*sb));
    ASSERT_TRUE(first.waitHealthy()) << first.logText();
    (void)oomKill(*sb);
    first.child().kill(SIGKILL);  // the moment the victim is reaped: seen, or not even that
    ASSERT_TRUE(first.child().wait());
  }
  Agent next(j.args(*sb));
  // Seen and recorded, in flight, or not even seen: one record by the time it serves.
  ASSERT_EQ(records(j.journal).size(), 1u) << next.logText();
  ASSERT_TRUE(next.waitHealthy());
  next.stop();
  still(j, *sb, 1);
}

TEST(Restart, WithoutAKernelSourceTheCountersCatchUpFromTheLastAgentsSample) {
  SKIP_WITHOUT_ROOT();
  auto sb = limitedSandbox("restart-counters");
  ASSERT_TRUE(sb) << sb.error().describe();
  // A process that stays: the cgroup is sampled before and after the kill.
  auto sleeper = ChildProcess::spawn({"/bin/sleep", "600"}, sb->procsFile());
  ASSERT_TRUE(sleeper) << sleeper.error().describe();
  Journaled j;
  const std::vector<std::string> counters_only = {"--sensors.bpf", "false", "--sensors.kmsg", "false"};
  {
    Agent first(j.args(*sb, counters_only));
    ASSERT_TRUE(first.waitHealthy()) << first.logText();
    first.stop();
  }
  auto s = readJournalState(journalStateFileOf(j.journal));
  ASSERT_TRUE(s && *s);
  ASSERT_EQ((*s)->oom_kill_counts.count(sb->path()), 1u) << "the sandbox's count, sampled";
  (void)oomKill(*sb);
  {
    Agent next(j.args(*sb, counters_only));
    auto r = waitRecords(j.journal, 1, 10s);
    ASSERT_EQ(r.size(), 1u) << next.logText();
    EXPECT_EQ(r[0]["found_after"]["how"], "counters") << r[0].dump();
    EXPECT_EQ(r[0]["event"]["counter"]["cgroup"], sb->path()) << r[0]["event"].dump();
    EXPECT_EQ(r[0]["event"]["counter"]["kills"], 1);
    ASSERT_TRUE(next.waitHealthy());
    next.stop();
  }
  Agent again(j.args(*sb, counters_only));
  ASSERT_TRUE(again.waitHealthy()) << again.logText();
  // Several samples: none counts the kill again.
  ASSERT_TRUE(again.waitMetrics([](const std::string& m) {
    return testing::metric(m, "headroom_samples_total").value_or(0) >= 5;
  })) << again.logText();
  EXPECT_EQ(records(j.journal).size(), 1u) << again.logText();
}

}  // namespace
}  // namespace headroom
