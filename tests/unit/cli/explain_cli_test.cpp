// The real `headroom explain` on real saved logs (tests/fixtures/oom-logs): from a file, from
// standard input, from a .gz made with gzip(1), as JSON with the documented keys, as pictures;
// and what it says of bad input and of text without an OOM report.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "testing/child_process.h"
#include "testing/fixture_tree.h"

namespace headroom {
namespace {

using nlohmann::json;
using testing::runCommand;

std::string corpusFile(const char* name) { return testing::fixturePath("oom-logs") + "/" + name; }

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/headroom-explain-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

constexpr const char* kWhole = "new-ubuntu24-6.8-journalctl-systemd-run-memcg-elided.log";

TEST(ExplainCli, AFileStandardInputAndGzipSayTheSame) {
  std::string file = corpusFile(kWhole);
  auto direct = runCommand({HEADROOM_BINARY, "explain", "--json", file});
  ASSERT_EQ(direct.exit_code, 0) << direct.err;
  json j = json::parse(direct.out);
  ASSERT_EQ(j["incidents"].size(), 1u);
  const json& inc = j["incidents"][0];
  for (const char* key : {"kernel", "trigger", "constraint", "oom_memcg", "task_memcg", "memcg_usage_bytes",
                          "memcg_limit_bytes", "oom_group", "kills", "missing", "source", "at_kill", "tasks"})
    EXPECT_TRUE(inc.contains(key)) << key;
  ASSERT_EQ(inc["kills"].size(), 1u);
  for (const char* key : {"pid", "comm", "anon_rss_bytes", "file_rss_bytes", "shmem_rss_bytes"})
    EXPECT_TRUE(inc["kills"][0].contains(key)) << key;
  EXPECT_EQ(inc["source"]["file"], file);

  auto piped =
      runCommand({"/bin/sh", "-c", std::string("cat '") + file + "' | " + HEADROOM_BINARY + " explain --json"});
  ASSERT_EQ(piped.exit_code, 0) << piped.err;
  json p = json::parse(piped.out);
  EXPECT_EQ(p["incidents"][0]["kills"], inc["kills"]);
  EXPECT_EQ(p["incidents"][0]["source"]["file"], "-");

  TempDir dir;
  std::string gz = dir.path + "/kern.log.2.gz";
  ASSERT_EQ(runCommand({"/bin/sh", "-c", std::string("gzip -c '") + file + "' > " + gz}).exit_code, 0);
  auto zipped = runCommand({HEADROOM_BINARY, "explain", "--json", gz});
  ASSERT_EQ(zipped.exit_code, 0) << zipped.err;
  EXPECT_EQ(json::parse(zipped.out)["incidents"][0]["kills"], inc["kills"]);

  auto text = runCommand({HEADROOM_BINARY, "explain", file});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("OOM incident 1 of 1"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("FROM THE TEXT"), std::string::npos);
  EXPECT_NE(text.out.find("WHO HELD WHAT AT THE KILL"), std::string::npos);
}

TEST(ExplainCli, SeveralFilesPicturesAndAPage) {
  TempDir dir;
  std::string a = corpusFile(kWhole), b = corpusFile("old-rhel7-3.10-327-dmesg-T-kubepods-memcg.log");
  auto r =
      runCommand({HEADROOM_BINARY, "explain", "--svg", dir.path + "/oom.svg", "--html", dir.path + "/oom.html", a, b});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("OOM incident 3 of 3"), std::string::npos) << r.out;
  for (const char* f : {"/oom-1.svg", "/oom-2.svg", "/oom-3.svg", "/oom.html"})
    EXPECT_TRUE(std::filesystem::exists(dir.path + f)) << f;
  EXPECT_NE(testing::fileText(dir.path + "/oom-1.svg").find("<svg"), std::string::npos);
  std::string page = testing::fileText(dir.path + "/oom.html");
  EXPECT_NE(page.find("<!DOCTYPE html>"), std::string::npos);
  EXPECT_EQ(std::count(page.begin(), page.end(), '\n') > 10, true);
}

// The picture of a kill no agent watched is its moment: the parts the kernel charged, stacked.
TEST(ExplainCli, ThePictureIsTheMomentOfTheKill) {
  TempDir dir;
  auto r = runCommand({HEADROOM_BINARY, "explain", "--svg", dir.path + "/m.svg",
                       corpusFile("mid-ubuntu20-5.4-docker-kmem-dmesg-T.log")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string svg = testing::fileText(dir.path + "/m-1.svg");
  for (const char* part : {"id=\"part-anon\"", "id=\"part-file\"", "id=\"part-slab_unreclaimable\""})
    EXPECT_NE(svg.find(part), std::string::npos) << part << "\n" << svg.substr(0, 2000);
  EXPECT_NE(svg.find("at the kill: 10.8 GiB"), std::string::npos) << "the Mem-Info's memory in use";
}

TEST(ExplainCli, BadInputNamesTheFileAndTextWithoutAReportSaysSo) {
  auto missing = runCommand({HEADROOM_BINARY, "explain", "/nonexistent/kern.log"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("/nonexistent/kern.log"), std::string::npos) << missing.err;

  TempDir dir;
  std::string bad = dir.path + "/bad.gz";
  std::ofstream(bad) << "\x1f\x8b\x08\x00garbage";
  auto damaged = runCommand({HEADROOM_BINARY, "explain", bad});
  EXPECT_EQ(damaged.exit_code, 2);
  EXPECT_NE(damaged.err.find(bad), std::string::npos) << damaged.err;

  std::string quiet = dir.path + "/quiet.log";
  std::ofstream(quiet) << "[    0.000000] Linux version 6.1.0-13-amd64\n[    1.000000] usb 1-1: new device\n";
  auto none = runCommand({HEADROOM_BINARY, "explain", quiet});
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.out.find("no OOM report in " + quiet), std::string::npos) << none.out;

  // A log's bytes need not be UTF-8 (a host name, a stamp in a legacy locale): JSON still comes.
  std::string latin1 = dir.path + "/latin1.log";
  std::ofstream(latin1) << "D\xe9"
                           "c  7 00:05:15 h\xf4"
                           "te kernel: Out of memory: Killed process 7 (a) total-vm:4kB, "
                           "anon-rss:4kB, file-rss:0kB, shmem-rss:0kB\n";
  auto bytes = runCommand({HEADROOM_BINARY, "explain", "--json", latin1});
  ASSERT_EQ(bytes.exit_code, 0) << bytes.err;
  EXPECT_EQ(json::parse(bytes.out)["incidents"][0]["kills"][0]["pid"], 7);

  auto twice = runCommand({HEADROOM_BINARY, "explain", "-", "-"});
  EXPECT_EQ(twice.exit_code, 2);
}

}  // namespace
}  // namespace headroom
