// The events file (event_file.h): rotated at its bound, following a file moved or truncated
// under it, and a path that cannot be a file (real files in a temporary directory).
#include "headroom/incidents/event_file.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "testing/fixture_tree.h"

namespace headroom {
namespace {

using testing::fileText;
using testing::FixtureTree;
using ::testing::HasSubstr;

std::set<std::string> filesIn(const std::string& dir) {
  std::set<std::string> s;
  for (const auto& e : std::filesystem::directory_iterator(dir)) s.insert(e.path().filename().string());
  return s;
}

TEST(EventFile, RotatesAtTheBoundKeepingMaxFilesAndRemovingTheOldest) {
  FixtureTree dir;
  const std::string path = dir.root() + "/ev/events.jsonl";
  auto f = EventFile::open(EventFileOptions{path, 100, 2});
  ASSERT_TRUE(f) << f.error().describe();
  auto line = [](int i) { return fmt::format("{{\"n\":{}, \"pad\":\"{}\"}}\n", i, std::string(20, 'x')); };  // 37 bytes
  for (int i = 1; i <= 8; ++i) ASSERT_TRUE((*f)->append(line(i)));
  // Two lines fit in 100 bytes: 7 8 | 5 6 | 3 4; 1 2 removed.
  EXPECT_EQ(filesIn(dir.root() + "/ev"), (std::set<std::string>{"events.jsonl", "events.jsonl.1", "events.jsonl.2"}));
  EXPECT_EQ(fileText(path), line(7) + line(8));
  EXPECT_EQ(fileText(path + ".1"), line(5) + line(6));
  EXPECT_EQ(fileText(path + ".2"), line(3) + line(4));
  EXPECT_EQ((*f)->stats().rotations, 3u);
  EXPECT_EQ((*f)->stats().lines, 8u);
  EXPECT_EQ((*f)->stats().bytes, 2 * line(1).size());
  // A line larger than the bound alone goes into a file of its own.
  const std::string big = fmt::format("{{\"big\":\"{}\"}}\n", std::string(300, 'y'));
  ASSERT_TRUE((*f)->append(big));
  EXPECT_EQ(fileText(path), big);
  ASSERT_TRUE((*f)->append(line(9)));
  EXPECT_EQ(fileText(path), line(9));
  EXPECT_EQ(fileText(path + ".1"), big);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}

TEST(EventFile, NoRotatedFilesKeptStartsTheFileAgain) {
  FixtureTree dir;
  const std::string path = dir.root() + "/events.jsonl";
  auto f = EventFile::open(EventFileOptions{path, 10, 0});
  ASSERT_TRUE(f);
  ASSERT_TRUE((*f)->append("{\"a\":1111}\n"));
  ASSERT_TRUE((*f)->append("{\"b\":2222}\n"));
  EXPECT_EQ(fileText(path), "{\"b\":2222}\n");
  EXPECT_EQ(filesIn(dir.root()), (std::set<std::string>{"events.jsonl"}));
}

TEST(EventFile, FollowsAFileMovedAwayOrTruncatedUnderIt) {
  FixtureTree dir;
  const std::string path = dir.root() + "/events.jsonl";
  auto f = EventFile::open(EventFileOptions{path, 1 << 20, 5});
  ASSERT_TRUE(f);
  ASSERT_TRUE((*f)->append("{\"n\":1}\n"));
  // logrotate's default: the file renamed, a new one expected at the path.
  ASSERT_EQ(::rename(path.c_str(), (path + ".old").c_str()), 0);
  ASSERT_TRUE((*f)->append("{\"n\":2}\n"));
  EXPECT_EQ(fileText(path + ".old"), "{\"n\":1}\n");
  EXPECT_EQ(fileText(path), "{\"n\":2}\n");
  EXPECT_EQ((*f)->stats().reopens, 1u);
  // copytruncate: the same file, emptied; appends go on at its new end.
  ASSERT_EQ(::truncate(path.c_str(), 0), 0);
  ASSERT_TRUE((*f)->append("{\"n\":3}\n"));
  EXPECT_EQ(fileText(path), "{\"n\":3}\n");
  // Removed: made again.
  ASSERT_EQ(::unlink(path.c_str()), 0);
  ASSERT_TRUE((*f)->append("{\"n\":4}\n"));
  EXPECT_EQ(fileText(path), "{\"n\":4}\n");
  // SIGHUP's reopen.
  ASSERT_TRUE((*f)->reopen());
  ASSERT_TRUE((*f)->append("{\"n\":5}\n"));
  EXPECT_EQ(fileText(path), "{\"n\":4}\n{\"n\":5}\n");
}

TEST(EventFile, APathThatCannotBeAFileIsAnErrorNamingIt) {
  FixtureTree dir;
  dir.mkdir("/a-dir");
  auto f = EventFile::open(EventFileOptions{dir.root() + "/a-dir", 1 << 20, 5});
  ASSERT_FALSE(f);
  EXPECT_THAT(f.error().describe(), HasSubstr(dir.root() + "/a-dir"));
  dir.write("/a-file", "x");
  auto g = EventFile::open(EventFileOptions{dir.root() + "/a-file/events.jsonl", 1 << 20, 5});
  ASSERT_FALSE(g);
  EXPECT_THAT(g.error().describe(), HasSubstr(dir.root() + "/a-file"));
}

}  // namespace
}  // namespace headroom
