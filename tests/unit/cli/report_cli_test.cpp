// The real `headroom report` on journal files written here in the documented frame format
// (docs/journal.md: "HRJ1 <length> <crc32> <json>\n"), as a journal copied from another machine.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "testing/child_process.h"

namespace headroom {
namespace {

using nlohmann::json;
using testing::runCommand;

constexpr std::uint64_t kMiB = 1ULL << 20;

// zlib's CRC-32 (reflected, polynomial 0xEDB88320), written out so that the test does not
// share the journal's own code.
std::uint32_t crc32Of(const std::string& s) {
  std::uint32_t c = 0xFFFFFFFFU;
  for (unsigned char b : s) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c & 1U) != 0 ? (c >> 1) ^ 0xEDB88320U : c >> 1;
  }
  return c ^ 0xFFFFFFFFU;
}

std::string frame(const json& rec) {
  std::string body = rec.dump();
  std::array<char, 9> crc{};
  std::snprintf(crc.data(), crc.size(), "%08x", crc32Of(body));
  return "HRJ1 " + std::to_string(body.size()) + " " + crc.data() + " " + body + "\n";
}

double now() { return static_cast<double>(std::time(nullptr)); }

// One record of docs/journal.md: pid `pid` (`comm`) killed in /jobs/prover at 255 MiB of its
// 256 MiB limit, `age` seconds ago, with a minute of flight.
json record(int id, double age, int pid, const std::string& comm) {
  double t = std::floor(now() - age);
  json points = json::array();
  for (int i = 0; i < 6; ++i) {
    std::uint64_t anon = (150 + 20 * static_cast<std::uint64_t>(i)) * kMiB;
    points.push_back({{"time", t - 60 + 10 * i},
                      {"usage_bytes", anon + 8 * kMiB},
                      {"limit_bytes", 256 * kMiB},
                      {"parts", {{"anon", anon}, {"pagetables", 8 * kMiB}}},
                      {"self_reported_bytes", nullptr}});
  }
  json victim = {{"pid", pid},
                 {"tgid", pid},
                 {"comm", comm},
                 {"uid", 0},
                 {"oom_score_adj", 0},
                 {"cgroup", "/jobs/prover"},
                 {"total_vm_bytes", 900 * kMiB},
                 {"anon_rss_bytes", 240 * kMiB},
                 {"file_rss_bytes", 0},
                 {"shmem_rss_bytes", 0},
                 {"pgtables_bytes", 8 * kMiB},
                 {"swap_bytes", 0},
                 {"kill_skipped", false}};
  return {{"version", 1},
          {"id", id},
          {"time", t},
          {"host", {{"hostname", "gpu-07"}, {"kernel", "6.8.0-45-generic"}, {"agent_version", "0.1.0"}}},
          {"event",
           {{"id", id},
            {"wall_time_ns", static_cast<std::int64_t>(t) * 1'000'000'000},
            {"victims", json::array({victim})},
            {"trigger", {{"pid", pid}, {"tgid", pid}, {"comm", comm}, {"cgroup", "/jobs/prover"}}},
            {"constraint", "CONSTRAINT_MEMCG"},
            {"oom_domain",
             {{"cgroup", "/jobs/prover"}, {"global", false}, {"limit_bytes", 256 * kMiB}, {"usage_bytes", 255 * kMiB}}},
            {"tasks", json::array({{{"pid", pid},
                                    {"uid", 0},
                                    {"tgid", pid},
                                    {"total_vm_bytes", 900 * kMiB},
                                    {"rss_bytes", 240 * kMiB},
                                    {"rss_anon_bytes", 240 * kMiB},
                                    {"rss_file_bytes", 0},
                                    {"rss_shmem_bytes", 0},
                                    {"pgtables_bytes", 8 * kMiB},
                                    {"swap_bytes", 0},
                                    {"oom_score_adj", 0},
                                    {"name", comm}}})},
            {"sources", {{"bpf", true}, {"kmsg", true}}},
            {"reap_start_ns", nullptr},
            {"reap_finish_ns", nullptr}}},
          {"cgroup", nullptr},
          {"processes", json::array()},
          {"budget",
           {{"budget_bytes", 200 * kMiB},
            {"margin_bytes", 16 * kMiB},
            {"generation", 1},
            {"reason", "test"},
            {"margin_source", "floor"}}},
          {"self_reported_bytes", 200 * kMiB},
          {"charged_bytes", 255 * kMiB},
          {"sensors", json::array({{{"name", "oom"}, {"state", "active"}, {"reason", ""}}})},
          {"flight", {{"cgroup", "/jobs/prover"}, {"window_seconds", 60}, {"points", points}}}};
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "headroom-report-cli-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void writeFile(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string readFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }
std::size_t lines(const std::string& s) { return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n')); }

class ReportCli : public ::testing::Test {
 protected:
  void SetUp() override {
    records_ = {record(1, 7200, 101, "cuzk-one"), record(2, 3600, 202, "cuzk-two"), record(3, 60, 303, "cuzk-three")};
    std::string text;
    for (const json& r : records_) text += frame(r);
    writeFile(journal_, text);
  }
  testing::CommandResult report(std::vector<std::string> args) const {
    std::vector<std::string> v = {HEADROOM_BINARY, "report", "--journal", journal_};
    v.insert(v.end(), args.begin(), args.end());
    return runCommand(v);
  }

  TempDir dir_;
  std::string journal_ = dir_.file("oom-journal.hrj");
  std::vector<json> records_;
};

std::string xmllint() {
  for (const char* p : {"/usr/bin/xmllint", "/usr/local/bin/xmllint", "/bin/xmllint"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return {};
}

TEST_F(ReportCli, DefaultIsTheLatestKill) {
  auto r = report({});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  EXPECT_TRUE(
      contains(r.out, "pid 303 (cuzk-three) was OOM-killed in /jobs/prover, which was at 255 MiB of its 256 MiB limit"))
      << r.out;
  EXPECT_FALSE(contains(r.out, "cuzk-two")) << r.out;
  for (const char* part :
       {"AT THE KILL", "BEFORE THE KILL", "WHO HELD WHAT AT THE KILL", "WHAT GREW", "BUDGET",
        "the prover believed it used 200 MiB; the kernel charged 255 MiB: 55.0 MiB beyond what it saw"}) {
    EXPECT_TRUE(contains(r.out, part)) << part << "\n" << r.out;
  }
}

TEST_F(ReportCli, ListIsOneLinePerRecord) {
  auto r = report({"--list"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(lines(r.out), 4u) << "a header and three records:\n" << r.out;
  EXPECT_LT(r.out.find("cuzk-one"), r.out.find("cuzk-two"));
  EXPECT_LT(r.out.find("cuzk-two"), r.out.find("cuzk-three"));
}

TEST_F(ReportCli, IdChoosesARecordAndAMissingIdNamesTheRange) {
  auto r = report({"--id", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "pid 202 (cuzk-two) was OOM-killed")) << r.out;
  auto missing = report({"--id", "9"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_TRUE(missing.out.empty()) << missing.out;
  EXPECT_TRUE(contains(missing.err, "id 9") && contains(missing.err, "1 to 3")) << missing.err;
}

TEST_F(ReportCli, SinceTakesAnIsoTimeAUnixTimeAndAnAge) {
  char iso[32];
  std::time_t t = static_cast<std::time_t>(now() - 5400);  // 90 minutes ago
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(iso, sizeof iso, "%Y-%m-%dT%H:%M:%SZ", &tm);
  for (const std::string& since : {std::string("90m"), std::string(iso), std::to_string(t)}) {
    auto r = report({"--list", "--since", since});
    ASSERT_EQ(r.exit_code, 0) << since << ": " << r.err;
    EXPECT_EQ(lines(r.out), 3u) << since << ":\n" << r.out;
    EXPECT_FALSE(contains(r.out, "cuzk-one")) << since;
    EXPECT_TRUE(contains(r.out, "cuzk-two") && contains(r.out, "cuzk-three")) << since;
  }
  auto compound = report({"--since", "2h30m"});
  EXPECT_EQ(compound.exit_code, 2) << "not an age: " << compound.err;
  auto none = report({"--since", "30s"});
  EXPECT_EQ(none.exit_code, 1) << none.err;
  EXPECT_TRUE(none.out.empty()) << none.out;
  EXPECT_TRUE(contains(none.err, "no OOM kills since")) << none.err;
  auto old = report({"--since", "3h", "--id", "1"});
  EXPECT_EQ(old.exit_code, 0) << old.err;
  EXPECT_TRUE(contains(old.out, "cuzk-one")) << old.out;
}

TEST_F(ReportCli, BadSinceIsBadInput) {
  for (const char* bad : {"yesterday", "2026-13-40", "-5m"}) {
    auto r = report({"--since", bad});
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_TRUE(contains(r.err, "--since") && contains(r.err, bad)) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

TEST_F(ReportCli, JsonRoundTrips) {
  auto one = report({"--json", "--id", "2"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(json::parse(one.out), records_[1]);
  auto latest = report({"--json"});
  ASSERT_EQ(latest.exit_code, 0) << latest.err;
  EXPECT_EQ(json::parse(latest.out), records_[2]);
  auto all = report({"--list", "--json"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(json::parse(all.out), json(records_));
}

TEST_F(ReportCli, SvgAndHtmlAreWrittenBesideTheText) {
  std::string svg = dir_.file("kill.svg");
  std::string html = dir_.file("kill.html");
  auto r = report({"--svg", svg, "--html", html});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "cuzk-three")) << "the text report still comes";
  std::string lint = xmllint();
  ASSERT_FALSE(lint.empty()) << "xmllint not found: install libxml2-utils (deploy/install-deps.sh)";
  auto x = runCommand({lint, "--noout", svg});
  EXPECT_EQ(x.exit_code, 0) << x.err;
  std::string text = readFile(svg);
  EXPECT_TRUE(contains(text, "id=\"limit\"") && contains(text, "id=\"kill\"")) << text;
  EXPECT_TRUE(contains(text, "limit 256 MiB")) << text;
  std::string page = readFile(html);
  EXPECT_TRUE(contains(page, "<!DOCTYPE html>") && contains(page, "<svg xmlns=")) << page;

  auto bad = report({"--svg", dir_.file("no/such/dir/kill.svg")});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_TRUE(contains(bad.err, dir_.file("no/such/dir/kill.svg"))) << bad.err;
  auto with_list = report({"--list", "--svg", svg});
  EXPECT_EQ(with_list.exit_code, 2) << with_list.err;
}

TEST_F(ReportCli, ADamagedMiddleRecordIsSkippedAndNamed) {
  std::string first = frame(records_[0]);
  std::string second = frame(records_[1]);
  second[second.size() / 2] = second[second.size() / 2] == 'x' ? 'y' : 'x';  // the CRC no longer matches
  writeFile(journal_, first + second + frame(records_[2]));
  auto r = report({"--list"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(lines(r.out), 3u) << r.out;
  EXPECT_TRUE(contains(r.out, "cuzk-one") && contains(r.out, "cuzk-three")) << r.out;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_TRUE(contains(r.err, "skipped a damaged record at byte " + std::to_string(first.size()) + " of " + journal_))
      << r.err;
  auto latest = report({});
  EXPECT_EQ(latest.exit_code, 0) << latest.err;
  EXPECT_TRUE(contains(latest.out, "cuzk-three"));
  EXPECT_TRUE(contains(latest.err, "skipped a damaged record")) << latest.err;
}

TEST_F(ReportCli, RotatedFileIsReadFirst) {
  writeFile(journal_ + ".1", frame(records_[0]));
  writeFile(journal_, frame(records_[1]) + frame(records_[2]));
  auto r = report({"--list", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out), json(records_));
}

// A journal that is not a regular file is refused at once with one line and exit 2: a device
// would never end (/dev/zero grew 2.6 GB in 20 s), a FIFO would hold the read forever.
// --from-json reads a FIFO as it comes (one with no writer is empty at once) and a device under
// the 64 MiB bound, and refuses a directory. `timeout` turns a hang into a failure.
TEST(ReportCliJournal, ANonRegularJournalIsRefusedAtOnceAndNoReadWaitsForever) {
  TempDir dir;
  const std::string zero = dir.file("zero.hrj"), fifo = dir.file("fifo.hrj");
  std::filesystem::create_symlink("/dev/zero", zero);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto report = [](std::vector<std::string> args) {
    std::vector<std::string> a = {"/usr/bin/timeout", "20", HEADROOM_BINARY, "report"};
    a.insert(a.end(), args.begin(), args.end());
    return runCommand(a);
  };
  for (auto [path, kind] : {std::pair{zero, "a character device"}, std::pair{fifo, "a FIFO"}}) {
    for (const char* list : {"--list", "--json"}) {
      auto r = report({"--journal", path, list});
      EXPECT_EQ(r.exit_code, 2) << path << "\n" << r.err;
      EXPECT_EQ(r.err, fmt::format("headroom report: journal {}: {}, not a regular file\n", path, kind));
      EXPECT_TRUE(r.out.empty());
    }
  }
  auto from_fifo = report({"--from-json", fifo});
  EXPECT_EQ(from_fifo.exit_code, 1) << from_fifo.err;
  EXPECT_TRUE(contains(from_fifo.err, "no OOM kill records in " + fifo)) << from_fifo.err;
  auto from_zero = report({"--from-json", "/dev/zero"});
  EXPECT_EQ(from_zero.exit_code, 2) << from_zero.err;
  EXPECT_TRUE(contains(from_zero.err, "larger than 67108864 bytes")) << from_zero.err;
  auto from_dir = report({"--from-json", dir.file("")});
  EXPECT_EQ(from_dir.exit_code, 2) << from_dir.err;
  EXPECT_TRUE(contains(from_dir.err, "a directory, not a regular file")) << from_dir.err;
}

TEST(ReportCliJournal, MissingOrEmptyJournal) {
  TempDir dir;
  std::string path = dir.file("nothing-here.hrj");
  auto r = runCommand({HEADROOM_BINARY, "report", "--journal", path});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_TRUE(contains(
      r.err, "no journal at " + path + " (the agent writes it on the first OOM kill; --journal to read another)"))
      << r.err;
  writeFile(path, "");
  auto empty = runCommand({HEADROOM_BINARY, "report", "--journal", path, "--list"});
  EXPECT_EQ(empty.exit_code, 1);
  EXPECT_TRUE(contains(empty.err, "holds no OOM kills")) << empty.err;
  // A directory names the journal in it, as the agent's --journal does.
  auto in_dir = runCommand({HEADROOM_BINARY, "report", "--journal", dir.file("")});
  EXPECT_EQ(in_dir.exit_code, 1) << in_dir.err;
  EXPECT_TRUE(contains(in_dir.err, "no journal at " + dir.file("oom-journal.hrj"))) << in_dir.err;
  writeFile(dir.file("oom-journal.hrj"), "");
  auto in_dir_empty = runCommand({HEADROOM_BINARY, "report", "--journal", dir.file("")});
  EXPECT_EQ(in_dir_empty.exit_code, 1);
  EXPECT_TRUE(contains(in_dir_empty.err, "holds no OOM kills")) << in_dir_empty.err;
  std::filesystem::remove(dir.file("oom-journal.hrj"));
  std::filesystem::create_directory(dir.file("oom-journal.hrj"));
  auto is_dir = runCommand({HEADROOM_BINARY, "report", "--journal", dir.file("")});
  EXPECT_EQ(is_dir.exit_code, 2) << is_dir.err;
  EXPECT_TRUE(contains(is_dir.err, "a directory, not a journal file")) << is_dir.err;
  std::filesystem::remove(dir.file("oom-journal.hrj"));
}

// --from-json: records of several hosts, as a log store returns them (newest first, a record
// shipped twice): --id needs --host where two hosts have it, --host keeps one host's records,
// --list groups them by host.
TEST_F(ReportCli, FromJsonReadsSeveralHostsRecords) {
  auto envelope = [](json rec, const std::string& host) {
    rec["host"]["hostname"] = host;
    return json{{"schema", "headroom.event.v1"}, {"kind", "oom_kill"}, {"id", rec["id"]}, {"record", rec}}.dump();
  };
  const std::string store = dir_.file("store.jsonl");
  writeFile(store, envelope(records_[2], "gpu-b") + "\n" + envelope(records_[1], "gpu-a") + "\n" +
                       envelope(records_[0], "gpu-a") + "\n" + envelope(records_[0], "gpu-a") + "\n" +
                       "not json at all\n");
  auto run = [&](std::vector<std::string> args) {
    std::vector<std::string> v = {HEADROOM_BINARY, "report", "--from-json", store};
    v.insert(v.end(), args.begin(), args.end());
    return runCommand(v);
  };
  auto latest = run({"--json"});
  ASSERT_EQ(latest.exit_code, 0) << latest.err;
  EXPECT_EQ(json::parse(latest.out)["id"], 3) << "the latest kill, whatever order the store gave";
  EXPECT_TRUE(contains(latest.err, "skipped 1 line(s) that are not headroom OOM kill events")) << latest.err;
  EXPECT_TRUE(contains(latest.err, "1 record(s) read more than once, shown once")) << latest.err;
  auto list = run({"--list"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  ASSERT_EQ(lines(list.out), 4u) << list.out;
  EXPECT_EQ(list.out.rfind("HOST", 0), 0u) << list.out;
  EXPECT_LT(list.out.find("cuzk-two"), list.out.find("cuzk-one")) << "newest first in a group\n" << list.out;
  EXPECT_LT(list.out.find("cuzk-one"), list.out.find("gpu-b")) << list.out;
  // Ids are each host's own.
  json also = records_[0];
  also["id"] = 3;
  writeFile(dir_.file("more.jsonl"), envelope(also, "gpu-a") + "\n");
  auto ambiguous = runCommand(
      {HEADROOM_BINARY, "report", "--from-json", store, "--from-json", dir_.file("more.jsonl"), "--id", "3"});
  EXPECT_EQ(ambiguous.exit_code, 2);
  EXPECT_TRUE(contains(ambiguous.err, "--id 3: records of 2 hosts have it (gpu-a, gpu-b): give --host"))
      << ambiguous.err;
  auto one = runCommand({HEADROOM_BINARY, "report", "--from-json", store, "--from-json", dir_.file("more.jsonl"),
                         "--id", "3", "--host", "gpu-b", "--json"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(json::parse(one.out)["host"]["hostname"], "gpu-b");
  auto nohost = run({"--host", "gpu-z"});
  EXPECT_EQ(nohost.exit_code, 1);
  EXPECT_TRUE(contains(nohost.err, "no record of host gpu-z in " + store + " (hosts: gpu-a, gpu-b)")) << nohost.err;
  // Bad input names the file and the line; a missing file is bad input too.
  // Cut as the agent writes the line: the schema first.
  const std::string line = R"({"schema":"headroom.event.v1","kind":"oom_kill","record":)" + records_[0].dump() + "}";
  writeFile(dir_.file("cut.jsonl"), line.substr(0, 300) + "\n");
  auto cut = runCommand({HEADROOM_BINARY, "report", "--from-json", dir_.file("cut.jsonl")});
  EXPECT_EQ(cut.exit_code, 2);
  EXPECT_TRUE(contains(cut.err, dir_.file("cut.jsonl") + ": line 1: a headroom event that is not whole JSON"))
      << cut.err;
  auto missing = runCommand({HEADROOM_BINARY, "report", "--from-json", dir_.file("nope.jsonl")});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_TRUE(contains(missing.err, dir_.file("nope.jsonl"))) << missing.err;
  auto both = runCommand({HEADROOM_BINARY, "report", "--from-json", store, "--journal", journal_});
  EXPECT_EQ(both.exit_code, 2) << "one source of records";
}

}  // namespace
}  // namespace headroom
