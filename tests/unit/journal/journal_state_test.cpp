// The state beside the OOM journal: written and read back whole, and a damaged one refused with
// its file named. Hand-made states (the agent writes this file; there is no other producer).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "headroom/journal/journal_state.h"
#include "testing/fixture_tree.h"

namespace headroom {
namespace {

JournalState someState() {
  JournalState s;
  s.boot_id = "f23f9593-6132-4f4f-94a8-98b605b1cd88";
  s.kernel_log_seq = 1153;
  s.in_flight["1796586379005488252-s1-1"] = {{"version", 1}, {"event", {{"id", 1}}}};
  s.oom_kill_counts = {{"/", 0}, {"/proving/prover", 3}};
  return s;
}

TEST(JournalState, WrittenAndReadBackWhole) {
  testing::FixtureTree t;
  const std::string path = journalStateFileOf(t.root() + "/oom.hrj");
  EXPECT_EQ(path, t.root() + "/oom.hrj.state");
  auto none = readJournalState(path);
  ASSERT_TRUE(none);
  EXPECT_FALSE(*none) << "no state yet";
  ASSERT_TRUE(writeJournalState(path, someState()));
  auto back = readJournalState(path);
  ASSERT_TRUE(back && *back) << (back ? "" : back.error().describe());
  EXPECT_EQ(**back, someState());
  JournalState empty;
  empty.boot_id = "b";
  ASSERT_TRUE(writeJournalState(path, empty));
  auto again = readJournalState(path);
  ASSERT_TRUE(again && *again);
  EXPECT_FALSE((*again)->kernel_log_seq) << "null: no kernel log read";
}

TEST(JournalState, ADamagedStateIsRefusedNamingItsFileAndWhat) {
  for (auto [text, says] : std::vector<std::pair<std::string, std::string>>{
           {"", "not a JSON object"},
           {"{\"version\":1,\"boot_id\":\"b\",\"in_fli", "not a JSON object"},
           {"[1]", "not a JSON object"},
           {R"({"version":2,"boot_id":"b"})", "version 2 (this agent writes 1)"},
           {R"({"boot_id":"b"})", "version missing"},
           {R"({"version":1})", "boot_id is not a string"},
           {R"({"version":1,"boot_id":"b","kernel_log_seq":-1})", "kernel_log_seq is not a sequence number"},
           {R"({"version":1,"boot_id":"b","in_flight":[]})", "in_flight is not an object"},
           {R"({"version":1,"boot_id":"b","in_flight":{"k":3}})", "in_flight k: not a record"},
           {R"({"version":1,"boot_id":"b","oom_kill_counts":{"/a":"many"}})", "oom_kill_counts /a: not a count"},
       }) {
    auto s = parseJournalState(text, "/var/lib/headroom/oom-journal.hrj.state");
    ASSERT_FALSE(s) << text;
    EXPECT_NE(s.error().message.find("journal state /var/lib/headroom/oom-journal.hrj.state: " + says),
              std::string::npos)
        << s.error().message;
  }
}

TEST(JournalState, OnlyARegularFileOfBoundedSizeIsRead) {
  testing::FixtureTree t;
  const std::string dir = t.root() + "/a-directory";
  std::filesystem::create_directories(dir);
  auto d = readJournalState(dir);
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().message.find("not a regular file"), std::string::npos) << d.error().message;
  ASSERT_EQ(::mkfifo((t.root() + "/a-fifo").c_str(), 0600), 0);
  EXPECT_FALSE(readJournalState(t.root() + "/a-fifo")) << "never blocks on a FIFO";
  const std::string big = t.root() + "/big.state";
  { std::ofstream(big) << "{"; }
  ASSERT_EQ(::truncate(big.c_str(), static_cast<off_t>(kMaxJournalStateBytes + 1)), 0);
  auto b = readJournalState(big);
  ASSERT_FALSE(b);
  EXPECT_NE(b.error().message.find("larger than 64 MiB"), std::string::npos) << b.error().message;
}

}  // namespace
}  // namespace headroom
