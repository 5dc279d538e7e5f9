// OOM records off the machine (events.h): the envelope written and read back, every shape a log
// store gives back, bad and cut-short input, the journald fields. Records are real ones, from the committed journal
// fixtures.
#include "headroom/report/events.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "headroom/journal/journal.h"
#include "headroom/report/report.h"
#include "headroom/util/json.h"
#include "testing/fixture_tree.h"

namespace headroom {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// The real records of the committed journals, ids 1 and 2, oldest first.
std::vector<json> realRecords() {
  std::vector<json> out;
  for (const char* name : {"linux-6.18-memcg-v1-brief.hrj", "linux-6.18-memcg-v1-climb.hrj"}) {
    auto c = readJournal(testing::fixturePath("journal") + "/" + name);
    if (!c || c->records.size() != 1) throw std::runtime_error(std::string("fixture ") + name);
    out.push_back(c->records[0]);
  }
  out[0]["id"] = 1u;
  out[1]["id"] = 2u;
  return out;
}

std::vector<json> read(const std::string& text, std::size_t want_skipped = 0) {
  auto r = readEvents(text, "in.jsonl");
  if (!r) throw std::runtime_error(r.error().describe());
  EXPECT_EQ(r->skipped, want_skipped);
  return r->records;
}

TEST(EventEnvelope, OneLineThatReadsBackToTheVeryRecord) {
  for (const json& rec : realRecords()) {
    const std::string line = eventLine(rec);
    ASSERT_EQ(line.back(), '\n');
    EXPECT_EQ(line.find('\n'), line.size() - 1) << "one line";
    json env = json::parse(line);
    EXPECT_EQ(env["schema"], "headroom.event.v1");
    EXPECT_EQ(env["kind"], "oom_kill");
    EXPECT_EQ(env["id"], rec["id"]);
    EXPECT_EQ(env["host"], rec["host"]["hostname"]);
    EXPECT_EQ(env["message"], reportSummary(rec));
    EXPECT_THAT(env["time"].get<std::string>(),
                ::testing::MatchesRegex(R"(20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\.[0-9]{3}Z)"));
    EXPECT_EQ(env["record"], rec);
    auto back = read(line);
    ASSERT_EQ(back.size(), 1u);
    EXPECT_EQ(back[0], rec);
    EXPECT_EQ(dumpJson(back[0]), dumpJson(rec)) << "byte for byte as --json prints it";
    EXPECT_EQ(renderReport(back[0]), renderReport(rec));
  }
}

TEST(EventReader, EveryShapeALogStoreGivesBack) {
  const std::vector<json> recs = realRecords();
  const std::string l0 = eventLine(recs[0]), l1 = eventLine(recs[1]);
  auto strip = [](std::string s) {
    s.pop_back();
    return s;
  };
  const json env0 = json::parse(l0), env1 = json::parse(l1);
  const std::map<std::string, std::string> shapes = {
      {"json lines", l0 + l1},
      {"crlf and blank lines", strip(l0) + "\r\n\r\n" + strip(l1) + "\r\n"},
      {"loki logcli jsonl",
       dumpJson({{"labels", {{"job", "headroom"}}}, {"line", strip(l0)}, {"timestamp", "2026-12-02T14:03:11Z"}}) +
           "\n" + dumpJson({{"labels", {{"job", "headroom"}}}, {"line", strip(l1)}}) + "\n"},
      {"docker json-file",
       dumpJson({{"log", l0}, {"stream", "stdout"}}) + "\n" + dumpJson({{"log", l1}, {"stream", "stdout"}}) + "\n"},
      {"vector message", dumpJson({{"message", strip(l0)}}) + "\n" + dumpJson({{"message", strip(l1)}}) + "\n"},
      {"elasticsearch hits", dumpJson({{"_index", "h"}, {"_source", env0}}) + "\n" +
                                 dumpJson({{"_index", "h"}, {"_source", {{"log", strip(l1)}}}}) + "\n"},
      {"elasticsearch search response",
       dumpJson({{"took", 3}, {"hits", {{"hits", json::array({{{"_source", env0}}, {{"_source", env1}}})}}}}, 2)},
      {"journalctl -o json", dumpJson({{"MESSAGE", "x"}, {"HEADROOM_RECORD", dumpJson(recs[0])}}) + "\n" +
                                 dumpJson({{"MESSAGE", "y"}, {"HEADROOM_RECORD", dumpJson(recs[1])}}) + "\n"},
      {"json array", dumpJson(json::array({env0, env1}), 2)},
      {"report --list --json", dumpJson(json::array({recs[0], recs[1]}))},
  };
  for (const auto& [name, text] : shapes) {
    SCOPED_TRACE(name);
    auto back = read(text);
    ASSERT_EQ(back.size(), 2u);
    EXPECT_EQ(back[0], recs[0]);
    EXPECT_EQ(back[1], recs[1]);
  }
  // journalctl writes a value that is not UTF-8 as its bytes.
  json bytes = json::array();
  for (unsigned char c : dumpJson(recs[0])) bytes.push_back(c);
  auto b = read(dumpJson({{"HEADROOM_RECORD", bytes}}));
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0], recs[0]);
}

TEST(EventReader, OtherLinesMixedInAreSkippedAndCounted) {
  const std::vector<json> recs = realRecords();
  const std::string text =
      "level=info msg=\"starting\"\n" + eventLine(recs[0]) + R"({"labels":{},"line":"GET /metrics 200"})" + "\n" +
      R"({"log":"{\"a\":1}\n"})" + "\n" + R"({"MESSAGE":"Started foo.service"})" + "\n" + "[1, 2]\n" + "\n" +
      R"({"schema":"another.schema.v3","x":1})" + "\n" +
      R"({"schema":"headroom.event.v1","kind":"budget_change","record":{}})" + "\n" + eventLine(recs[1]);
  auto r = readEvents(text, "mixed");
  ASSERT_TRUE(r) << r.error().describe();
  ASSERT_EQ(r->records.size(), 2u);
  EXPECT_EQ(r->records[1], recs[1]);
  EXPECT_EQ(r->skipped, 7u) << "a text line, a wrapped non-event, a wrapped JSON non-event, another journal entry, an "
                               "array line, another schema, a kind not rendered";
  EXPECT_EQ(r->blank, 1u);
}

std::string errorOf(const std::string& text, const char* source = "store.jsonl") {
  auto r = readEvents(text, source);
  if (r) return "(read " + std::to_string(r->records.size()) + " records, no error)";
  EXPECT_EQ(r.error().kind, ErrorKind::kBadData);
  return r.error().describe();
}

TEST(EventReader, BadInputIsAnErrorNamingTheSourceTheLineAndWhat) {
  const std::vector<json> recs = realRecords();
  std::string l0 = eventLine(recs[0]);
  std::string cut = eventLine(recs[1]).substr(0, 4000);
  EXPECT_EQ(errorOf(l0 + cut + "\n"),
            fmt::format("store.jsonl: line 2: a headroom event that is not whole JSON ({} bytes: cut short or damaged)",
                        cut.size()));
  EXPECT_EQ(errorOf(l0 + cut), errorOf(l0 + cut + "\n")) << "cut at the end of the input too";
  EXPECT_THAT(errorOf("\n\n" + dumpJson({{"labels", json::object()}, {"line", cut}}) + "\n"),
              HasSubstr("store.jsonl: line 3: the event in \"line\" is not whole JSON"));
  json newer = json::parse(l0);
  newer["schema"] = "headroom.event.v2";
  EXPECT_EQ(
      errorOf(dumpJson(newer)),
      "store.jsonl: line 1: schema \"headroom.event.v2\": this headroom reads headroom.event.v1; a newer headroom "
      "reads this one (docs/events.md: versions)");
  newer["schema"] = "headroom.event.vx";
  EXPECT_THAT(errorOf(dumpJson(newer)), HasSubstr("not a schema headroom knows"));
  json norecord = json::parse(l0);
  norecord["record"] = "text";
  EXPECT_THAT(errorOf(l0 + dumpJson(norecord) + "\n"),
              HasSubstr("store.jsonl: line 2: \"record\" is \"text\", not the journal record (an object)"));
  norecord.erase("record");
  EXPECT_THAT(errorOf(dumpJson(norecord)), HasSubstr("\"record\" is missing"));
  json wrong_id = json::parse(l0);
  wrong_id["id"] = 7;
  EXPECT_THAT(errorOf(dumpJson(wrong_id)), HasSubstr("the envelope's id 7 is not its record's id 1"));
  EXPECT_THAT(errorOf(dumpJson({{"MESSAGE", "x"}, {"HEADROOM_RECORD", nullptr}}) + "\n"),
              HasSubstr("line 1: HEADROOM_RECORD is null: journalctl leaves out fields over 4096 bytes unless given "
                        "--all (journalctl -o json --all)"));
  EXPECT_THAT(errorOf(dumpJson({{"HEADROOM_RECORD", dumpJson(recs[0]).substr(0, 100)}})),
              HasSubstr("HEADROOM_RECORD is not a JSON object (100 bytes: cut short or damaged)"));
  const std::string array = dumpJson(json::array({json::parse(l0), json::parse(l0)}));
  EXPECT_EQ(errorOf(array.substr(0, array.size() - 10)), "store.jsonl: not a whole JSON array (cut short or damaged)");
  EXPECT_THAT(errorOf(dumpJson(json::array({json::parse(l0), norecord}))), HasSubstr("store.jsonl: element 2: "));
  // Nothing at all: no error, no record (the command says so).
  auto empty = readEvents("", "empty");
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->records.empty());
}

std::multimap<std::string, std::string> fieldsOf(const json& rec) {
  std::multimap<std::string, std::string> m;
  for (const std::string& f : journaldFields(rec)) {
    auto eq = f.find('=');
    EXPECT_NE(eq, std::string::npos) << f;
    m.emplace(f.substr(0, eq), f.substr(eq + 1));
  }
  return m;
}

TEST(JournaldFields, TheSummaryTheFixedIdTheVictimTheBreakdownAndTheWholeRecord) {
  const json rec = realRecords()[1];
  auto f = fieldsOf(rec);
  for (const auto& [name, value] : f) {
    EXPECT_TRUE(!name.empty() && name.size() <= 64 && name[0] != '_') << name;
    EXPECT_EQ(name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"), std::string::npos) << name;
  }
  auto one = [&](const std::string& name) {
    EXPECT_EQ(f.count(name), 1u) << name;
    auto it = f.find(name);
    return it == f.end() ? std::string() : it->second;
  };
  EXPECT_EQ(one("MESSAGE"), reportSummary(rec));
  EXPECT_EQ(one("MESSAGE_ID"), "78cbe2b375704b3eaa519cd951e0e16e");
  EXPECT_EQ(one("PRIORITY"), "3");
  EXPECT_EQ(one("HEADROOM_RECORD_ID"), "2");
  const json& victim = rec["event"]["victims"][0];
  EXPECT_EQ(one("HEADROOM_VICTIM_PID"), std::to_string(victim["tgid"].get<long>()));
  EXPECT_EQ(one("HEADROOM_VICTIM_COMM"), victim["comm"]);
  EXPECT_EQ(one("HEADROOM_CGROUP"), victim["cgroup"]);
  EXPECT_EQ(one("HEADROOM_OOM_DOMAIN"), rec["event"]["oom_domain"]["cgroup"]);
  EXPECT_EQ(one("HEADROOM_LIMIT_BYTES"), std::to_string(rec["at_kill"]["limit_bytes"].get<std::uint64_t>()));
  EXPECT_EQ(one("HEADROOM_AT_KILL_SOURCE"), "kernel report");
  for (const json& p : rec["at_kill"]["parts"]) {
    std::string kind = p["kind"];
    std::transform(kind.begin(), kind.end(), kind.begin(), ::toupper);
    EXPECT_EQ(one("HEADROOM_AT_KILL_" + kind + "_BYTES"), std::to_string(p["bytes"].get<std::uint64_t>()));
  }
  EXPECT_EQ(json::parse(one("HEADROOM_RECORD")), rec);
  EXPECT_EQ(f.count("HEADROOM_UNIT"), 0u) << "no workload object in this record: no workload fields";
  // With the workload object (added to records by the agent that knows it).
  json with = rec;
  with["workload"] = {{"unit", ""},
                      {"container", "prover"},
                      {"pod", "cuzk-0"},
                      {"namespace", "proving"},
                      {"runtime", "containerd"},
                      {"container_id", "abc"},
                      {"pod_uid", "u"}};
  auto w = fieldsOf(with);
  EXPECT_EQ(w.count("HEADROOM_UNIT"), 0u) << "empty names are left out";
  EXPECT_EQ(w.find("HEADROOM_CONTAINER")->second, "prover");
  EXPECT_EQ(w.find("HEADROOM_POD")->second, "cuzk-0");
  EXPECT_EQ(w.find("HEADROOM_NAMESPACE")->second, "proving");
  // Two victims: the field twice.
  json two = rec;
  two["event"]["victims"].push_back(victim);
  two["event"]["victims"][1]["tgid"] = 99;
  auto t = fieldsOf(two);
  EXPECT_EQ(t.count("HEADROOM_VICTIM_PID"), 2u);
  // A partial record still has the fixed fields and itself.
  auto partial = fieldsOf(json{{"version", 1}});
  EXPECT_EQ(partial.count("MESSAGE_ID"), 1u);
  EXPECT_EQ(partial.count("HEADROOM_RECORD"), 1u);
  EXPECT_EQ(partial.count("HEADROOM_RECORD_ID"), 0u);
}

TEST(RecordList, RecordsOfSeveralHostsAreGroupedByHostThenWorkloadNewestFirst) {
  const std::vector<json> recs = realRecords();
  // One host: the journal's own look, in the order given.
  const std::string single = renderRecordList(recs);
  EXPECT_EQ(single.rfind("ID", 0), 0u) << single;
  json a1 = recs[0], a2 = recs[1], b1 = recs[0];
  a1["host"]["hostname"] = "gpu-a";
  a2["host"]["hostname"] = "gpu-a";
  b1["host"]["hostname"] = "gpu-b";
  a2["workload"] = {{"unit", "cuzk.service"}};
  json a3 = recs[0];
  a3["host"]["hostname"] = "gpu-a";
  a3["id"] = 3;
  a3["kill_time"] = *recordTime(recs[0]) + 3600;
  const std::string fleet = renderRecordList({b1, a1, a2, a3});
  std::vector<std::string> lines;
  std::istringstream in(fleet);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 5u) << fleet;
  EXPECT_EQ(lines[0].rfind("HOST", 0), 0u) << fleet;
  EXPECT_NE(lines[0].find("WORKLOAD"), std::string::npos);
  // gpu-a: its cgroup workload (ids 3 then 1: newest first), then unit cuzk.service; then gpu-b.
  EXPECT_EQ(lines[1].rfind("gpu-a", 0), 0u) << fleet;
  EXPECT_NE(lines[1].find("cgroup /"), std::string::npos) << fleet;
  EXPECT_THAT(lines[1], ::testing::ContainsRegex(" 3  2026|  3  20")) << fleet;
  EXPECT_THAT(lines[2], ::testing::ContainsRegex(" 1  20")) << fleet;
  EXPECT_NE(lines[3].find("unit cuzk.service"), std::string::npos) << fleet;
  EXPECT_EQ(lines[4].rfind("gpu-b", 0), 0u) << fleet;
  EXPECT_EQ(recordWorkload(json{{"workload", {{"pod", "p"}, {"namespace", "n"}, {"container", "c"}}}}), "pod n/p c");
  EXPECT_EQ(recordWorkload(json{{"workload", {{"container", "c"}, {"unit", "u"}}}}), "container c");
  EXPECT_EQ(recordWorkload(json::object()), "-");
}

}  // namespace
}  // namespace headroom
