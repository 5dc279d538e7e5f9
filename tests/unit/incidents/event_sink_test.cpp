// The events sink (incidents/event_sink.h): each record the journal takes goes to the file and to
// journald as journaled; a failing or stuck sink is counted and never holds the caller; the queue
// is bounded; journald's "auto".
#include "headroom/incidents/event_sink.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <fstream>
#include <mutex>

#include "headroom/incidents/incident_journal.h"
#include "headroom/journal/journal.h"
#include "headroom/report/events.h"
#include "headroom/sources/collector.h"
#include "testing/fixture_tree.h"

namespace headroom {
namespace {

using nlohmann::json;
using testing::fileText;
using testing::FixtureTree;
using ::testing::HasSubstr;

json record(int id) {
  return {{"version", 1},
          {"id", id},
          {"time", 1796220191.5},
          {"host", {{"hostname", "gpu-07"}}},
          {"event", {{"victims", json::array({{{"tgid", 42}, {"comm", "cuzk"}, {"cgroup", "/ctr"}}})}}},
          {"at_kill", nullptr}};
}

TEST(EventSink, EachRecordGoesToTheFileAndToJournaldAsGiven) {
  FixtureTree dir;
  std::mutex mu;
  std::vector<std::vector<std::string>> sent;
  EventSink sink([&](const std::vector<std::string>& fields) {
    std::lock_guard lock(mu);
    sent.push_back(fields);
    return 0;
  });
  EventsConfig cfg;
  cfg.output = dir.root() + "/events.jsonl";
  cfg.journald = JournaldMode::kOn;
  ASSERT_TRUE(sink.configure(cfg));
  sink.emit(record(1));
  sink.emit(record(2));
  ASSERT_TRUE(sink.drain(std::chrono::seconds(10)));
  EXPECT_EQ(fileText(cfg.output), eventLine(record(1)) + eventLine(record(2)));
  {
    std::lock_guard lock(mu);
    ASSERT_EQ(sent.size(), 2u);
    EXPECT_EQ(sent[1], journaldFields(record(2)));
  }
  EventSinkStats st = sink.stats();
  ASSERT_EQ(st.sinks.size(), 2u);
  EXPECT_EQ(st.sinks[0].name, "file");
  EXPECT_EQ(st.sinks[0].written, 2u);
  EXPECT_EQ(st.sinks[1].name, "journald");
  EXPECT_EQ(st.sinks[1].written, 2u);
  EXPECT_EQ(sink.state()["failing"], json::array());
  // A reload opens the file again: one moved away meanwhile is followed.
  std::rename(cfg.output.c_str(), (cfg.output + ".old").c_str());
  ASSERT_TRUE(sink.configure(cfg));
  sink.emit(record(3));
  ASSERT_TRUE(sink.drain(std::chrono::seconds(10)));
  EXPECT_EQ(fileText(cfg.output), eventLine(record(3)));
  EXPECT_EQ(sink.stats().sinks[0].written, 3u) << "counters carry on across reloads";
}

TEST(EventSink, AFailingSinkIsCountedAndSaidAndTheOthersGoOn) {
  FixtureTree dir;
  std::atomic<int> result{-ECONNREFUSED};
  EventSink sink([&](const std::vector<std::string>&) { return result.load(); });
  EventsConfig cfg;
  cfg.output = dir.root() + "/events.jsonl";
  cfg.journald = JournaldMode::kOn;
  ASSERT_TRUE(sink.configure(cfg));
  sink.emit(record(1));
  ASSERT_TRUE(sink.drain(std::chrono::seconds(10)));
  EventSinkStats st = sink.stats();
  EXPECT_EQ(st.sinks[0].written, 1u) << "the file still gets it";
  EXPECT_EQ(st.sinks[1].failures, 1u);
  json state = sink.state();
  ASSERT_EQ(state["failing"].size(), 1u);
  EXPECT_THAT(state["failing"][0].get<std::string>(), HasSubstr("journald: sending to journald"));
  EXPECT_THAT(state["failing"][0].get<std::string>(), HasSubstr("Connection refused"));
  result = 0;
  sink.emit(record(2));
  ASSERT_TRUE(sink.drain(std::chrono::seconds(10)));
  EXPECT_EQ(sink.state()["failing"], json::array()) << "works again";
  EXPECT_EQ(sink.stats().sinks[1].written, 1u);
}

TEST(EventSink, AStuckSinkNeverHoldsTheCallerAndTheQueueIsBounded) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  int calls = 0;
  auto sink = std::make_unique<EventSink>([&](const std::vector<std::string>&) {
    std::unique_lock lock(mu);
    ++calls;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
    return 0;
  });
  EventsConfig cfg;
  cfg.journald = JournaldMode::kOn;
  ASSERT_TRUE(sink->configure(cfg));
  sink->emit(record(0));
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return calls == 1; })) << "the writer took it";
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 1; i < 100; ++i) sink->emit(record(i));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << "emit never waits on the sink";
  EXPECT_FALSE(sink->drain(std::chrono::milliseconds(50)));
  EventSinkStats st = sink->stats();
  EXPECT_EQ(st.queued, EventSink::kMaxQueued) << "the newest wait";
  EXPECT_EQ(st.dropped, 99u - EventSink::kMaxQueued) << "one in the stuck write, the oldest of the rest given up";
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  ASSERT_TRUE(sink->drain(std::chrono::seconds(10)));
  EXPECT_EQ(sink->stats().sinks[0].written + sink->stats().dropped, 100u);
  sink.reset();
}

TEST(EventSink, AFileThatCannotOpenIsAnErrorAndJournaldGoesOn) {
  FixtureTree dir;
  dir.write("/a-file", "x");
  int calls = 0;
  EventSink sink([&](const std::vector<std::string>&) { return ++calls, 0; });
  EventsConfig cfg;
  cfg.output = dir.root() + "/a-file/events.jsonl";
  cfg.journald = JournaldMode::kOn;
  auto st = sink.configure(cfg);
  ASSERT_FALSE(st);
  EXPECT_THAT(st.error().describe(), HasSubstr(cfg.output));
  sink.emit(record(1));
  ASSERT_TRUE(sink.drain(std::chrono::seconds(10)));
  EXPECT_EQ(calls, 1);
  ASSERT_EQ(sink.stats().sinks.size(), 1u);
}

TEST(EventSink, JournaldAutoIsOnWhenSystemdStartedTheAgentAndItsSocketIsThere) {
  EXPECT_TRUE(journaldWanted(JournaldMode::kOn, nullptr, nullptr, false));
  EXPECT_FALSE(journaldWanted(JournaldMode::kOff, "abc", "8:9", true));
  EXPECT_TRUE(journaldWanted(JournaldMode::kAuto, "abc", nullptr, true));
  EXPECT_TRUE(journaldWanted(JournaldMode::kAuto, nullptr, "8:9", true));
  EXPECT_FALSE(journaldWanted(JournaldMode::kAuto, "abc", "8:9", false)) << "no socket";
  EXPECT_FALSE(journaldWanted(JournaldMode::kAuto, nullptr, nullptr, true)) << "not under systemd";
  EXPECT_FALSE(journaldWanted(JournaldMode::kAuto, "", "", true));
}

// The journal hands each record it took to the sink, with the id it gave, as journaled.
TEST(EventSink, TheIncidentJournalHandsOverEachRecordAsJournaled) {
  FixtureTree dir;
  JournalConfig cfg;
  cfg.path = dir.root() + "/oom.hrj";
  IncidentJournal j;
  ASSERT_TRUE(j.configure(cfg, "boot-1"));
  std::vector<json> handed;
  j.onWritten([&](const json& r) { handed.push_back(r); });
  OomEvent e;
  e.id = 1;
  e.from_kmsg = true;
  e.monotonic_time_ns = 1;
  e.domain_cgroup = "/ctr";
  OomVictim v;
  v.pid = v.tgid = 10;
  v.comm = "prover";
  v.cgroup = "/ctr";
  e.victims.push_back(v);
  ASSERT_TRUE(j.record(e, IncidentFacts{}));
  ASSERT_TRUE(j.record(e, IncidentFacts{}));
  auto written = readJournal(cfg.path);
  ASSERT_TRUE(written);
  ASSERT_EQ(written->records.size(), 2u);
  ASSERT_EQ(handed.size(), 2u);
  EXPECT_EQ(handed[0], written->records[0]);
  EXPECT_EQ(handed[1], written->records[1]);
  EXPECT_EQ(handed[1]["id"], 2u);
}

}  // namespace
}  // namespace headroom
