// The agent's OOM incidents: the journal record of a kill (the last sample read whole before it,
// the flight recorder up to it, the prover's budget when the kill concerns it), a journal that
// cannot open said and off, and the kills that only the cgroups' counters show.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "headroom/incidents/counted_ooms.h"
#include "headroom/incidents/incident_journal.h"
#include "headroom/journal/journal.h"
#include "headroom/sources/collector.h"
#include "testing/fixture_tree.h"

namespace headroom {
namespace {

using testing::FixtureTree;
using ::testing::HasSubstr;

constexpr std::uint64_t kMiB = 1ULL << 20;

// A sample of a container cgroup whose OOM-kill counter stands at `kills`, taken (and read whole)
// at `t` on the monotonic clock, with these processes.
std::shared_ptr<const Snapshot> sample(std::int64_t t, std::uint64_t kills, const std::vector<pid_t>& pids) {
  RawSample raw;
  raw.wall_time_ns = 1'700'000'000'000'000'000 + t;
  raw.monotonic_time_ns = t;
  raw.completed_monotonic_ns = t + 1000;
  raw.memory_version = 2;
  CgroupMemory cg;
  cg.version = 2;
  cg.path = "/ctr";
  cg.usage = 300 * kMiB;
  cg.limit = 512 * kMiB;
  cg.events_local.set("oom_kill", kills);
  raw.cgroups.push_back(cg);
  for (pid_t pid : pids) {
    ProcessSample s;
    s.pid = pid;
    s.start_time_ticks = 1;
    s.comm = pid == 10 ? "prover" : "helper";
    s.memory_cgroup = "/ctr";
    s.status.tgid = pid;
    s.status.vm_rss = s.status.rss_anon = (pid == 10 ? 250 : 20) * kMiB;
    raw.processes.push_back(s);
  }
  return buildSnapshot(std::move(raw), RoleMatcher());
}

OomEvent killAt(std::int64_t t) {
  OomEvent e;
  e.id = 1;
  e.from_kmsg = true;
  e.monotonic_time_ns = t;
  e.domain_cgroup = "/ctr";
  e.domain_limit_bytes = 512 * kMiB;
  e.domain_usage_bytes = 512 * kMiB;
  OomVictim v;
  v.pid = v.tgid = 10;
  v.comm = "prover";
  v.cgroup = "/ctr";
  e.victims.push_back(v);
  return e;
}

TEST(IncidentJournal, ARecordHoldsTheLastSampleReadWholeBeforeTheKill) {
  FixtureTree dir;
  JournalConfig cfg;
  cfg.path = dir.root() + "/journal/oom.hrj";
  IncidentJournal j;
  EXPECT_EQ(j.last(), nullptr);
  ASSERT_TRUE(j.configure(cfg, "boot-1"));
  EXPECT_EQ(j.state()["state"], "on");
  ASSERT_NE(j.writer(), nullptr);
  // Two samples before the kill and one after it, which shows the memory already freed.
  auto before = sample(1'000'000'000, 0, {10, 11});
  auto just_before = sample(2'000'000'000, 0, {10, 11});
  auto after = sample(3'000'000'000, 1, {11});
  for (const auto& s : {before, just_before, after}) {
    j.fly(*s, {});
    j.keep(s);
  }
  EXPECT_EQ(j.last(), after);
  auto id = j.record(killAt(2'500'000'000), IncidentFacts{});
  ASSERT_TRUE(id);
  ASSERT_TRUE(*id) << id->error().describe();
  EXPECT_EQ(**id, 1u);
  auto written = readJournal(cfg.path);
  ASSERT_TRUE(written);
  ASSERT_EQ(written->records.size(), 1u);
  const nlohmann::json& rec = written->records[0];
  EXPECT_EQ(rec["cgroup"]["path"], "/ctr");
  EXPECT_EQ(rec["cgroup"]["sampled_at"], 1'700'000'002.0) << "the sample before the kill, not the one after";
  ASSERT_EQ(rec["flight"]["points"].size(), 2u) << "the flight recorder up to the kill";
  EXPECT_TRUE(rec["budget"].is_null()) << "no prover budget: none recorded";
}

// What a kill's record reads, when it is handed over up to the joiner's 2 s wait after the kill.
double sampledAtOfTheRecord(IncidentJournal& j, const std::string& path, std::int64_t kill_ns) {
  auto id = j.record(killAt(kill_ns), IncidentFacts{});
  if (!id || !*id) return -1;
  auto written = readJournal(path);
  if (!written || written->records.empty()) return -1;
  return written->records.back()["cgroup"]["sampled_at"].get<double>();
}

TEST(IncidentJournal, ASampleIsKeptWhileAKillAfterItCouldStillBeHandedOver) {
  FixtureTree dir;
  JournalConfig cfg;
  cfg.path = dir.root() + "/journal/oom.hrj";
  constexpr std::int64_t kS = 1'000'000'000;
  {
    // 1 s samples: a kill 1.5 s before the newest sample still finds the sample before it;
    // the samples no kill can still need are not kept (they hold every process).
    IncidentJournal j;
    ASSERT_TRUE(j.configure(cfg, "boot-1"));
    for (std::int64_t t = 0; t <= 10; ++t) j.keep(sample(t * kS, 0, {10, 11}));
    EXPECT_EQ(sampledAtOfTheRecord(j, cfg.path, 8 * kS + kS / 2), 1'700'000'008.0);
    EXPECT_EQ(sampledAtOfTheRecord(j, cfg.path, 7 * kS + kS / 2), 1'700'000'007.0);
    // 2.5 s and more before the newest: handed over long ago; the oldest kept is what is left.
    EXPECT_EQ(sampledAtOfTheRecord(j, cfg.path, 3 * kS + kS / 2), 1'700'000'007.0);
  }
  {
    // 10 s samples: the two last are kept, the one before the kill among them.
    IncidentJournal j;
    ASSERT_TRUE(j.configure(cfg, "boot-1"));
    for (std::int64_t t = 0; t <= 20; t += 10) j.keep(sample(t * kS, 0, {10, 11}));
    EXPECT_EQ(sampledAtOfTheRecord(j, cfg.path, 19 * kS), 1'700'000'010.0);
    EXPECT_EQ(sampledAtOfTheRecord(j, cfg.path, 21 * kS), 1'700'000'020.0);
  }
}

TEST(IncidentJournal, AJournalThatCannotOpenIsOffAndSaysWhy) {
  FixtureTree dir;
  dir.write("/a-file", "not a directory\n");
  JournalConfig cfg;
  cfg.path = dir.root() + "/a-file/oom.hrj";
  IncidentJournal j;
  auto st = j.configure(cfg, "boot-1");
  ASSERT_FALSE(st);
  EXPECT_THAT(st.error().describe(), HasSubstr(cfg.path));
  EXPECT_EQ(j.writer(), nullptr);
  auto state = j.state();
  EXPECT_EQ(state["state"], "off");
  EXPECT_THAT(state.value("reason", ""), HasSubstr(cfg.path));
  EXPECT_FALSE(j.record(killAt(1), IncidentFacts{})) << "off: nothing to record into";
  cfg.enabled = false;
  EXPECT_TRUE(j.configure(cfg, "boot-1"));
  EXPECT_EQ(j.state()["reason"], "journal.enabled = false");
}

// A record the journal refuses whatever the disk does (larger than max_bytes) is not kept to be
// tried again: it would hold every later record behind it. (A full or read-only disk, whose
// records are kept and written later: tests/integration/faults_test.cpp.)
TEST(IncidentJournal, ARecordTooLargeForTheJournalIsNotKeptWaiting) {
  FixtureTree dir;
  JournalConfig cfg;
  cfg.path = dir.root() + "/journal/oom.hrj";
  cfg.max_bytes = 8192;
  IncidentJournal j;
  ASSERT_TRUE(j.configure(cfg, "boot-1"));
  OomEvent big = killAt(1);
  big.tasks.resize(200);  // a task dump of some 30 KiB
  auto refused = j.record(big, IncidentFacts{});
  ASSERT_TRUE(refused);
  ASSERT_FALSE(*refused);
  EXPECT_EQ(refused->error().code, EFBIG) << refused->error().describe();
  EXPECT_EQ(j.pending(), 0u);
  EXPECT_EQ(j.writeFailures(), 1u);
  EXPECT_EQ(j.state()["state"], "on");
  auto id = j.record(killAt(2), IncidentFacts{});
  ASSERT_TRUE(id && *id) << (id ? id->error().describe() : "off");
  EXPECT_EQ(**id, 1u);
  EXPECT_TRUE(j.flush().empty());
}

TEST(IncidentJournal, ADirectoryNamesTheJournalInIt) {
  FixtureTree dir;
  dir.mkdir("/journals");
  JournalConfig cfg;
  cfg.path = dir.root() + "/journals";
  IncidentJournal j;
  ASSERT_TRUE(j.configure(cfg, "boot-1"));
  EXPECT_EQ(j.state()["state"], "on");
  EXPECT_EQ(j.state()["path"], dir.root() + "/journals/oom-journal.hrj");
  EXPECT_EQ(journalFileOf(cfg.path), dir.root() + "/journals/oom-journal.hrj");
  EXPECT_EQ(journalFileOf(cfg.path + "/"), dir.root() + "/journals/oom-journal.hrj");
  EXPECT_EQ(journalFileOf(dir.root() + "/journals/x.hrj"), dir.root() + "/journals/x.hrj") << "a file stays itself";
}

TEST(CountedOoms, KillsFromTheCountersOnlyWhereNoKernelSourceNamesThem) {
  CountedOoms counted;
  auto a = sample(1000, 0, {10, 11});
  EXPECT_TRUE(counted.update(nullptr, *a, false).empty()) << "the first sample is the baseline";
  auto b = sample(2000, 1, {11});
  // With BPF or /dev/kmsg there, the kernel names the kill; the counter only moves its baseline.
  EXPECT_TRUE(counted.update(a.get(), *b, true).empty());
  auto c = sample(3000, 3, {11});
  EXPECT_TRUE(counted.update(b.get(), *c, false).empty()) << "its process is still there: the kill waits a sample";
  auto d = sample(4000, 4, {});
  auto events = counted.update(c.get(), *d, false);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].id, 1u);
  EXPECT_TRUE(events[0].from_counter);
  EXPECT_EQ(events[0].counted_kills, 2u);
  ASSERT_EQ(events[0].victims.size(), 1u) << "named once it went";
  EXPECT_TRUE(events[0].victims[0].inferred);
  EXPECT_EQ(events[0].victims[0].pid, 11);
  EXPECT_EQ(events[1].id, 2u) << "ids go on";
  EXPECT_TRUE(events[1].victims.empty()) << "pid 11 is the first kill's victim, not this one's too";
}

}  // namespace
}  // namespace headroom
