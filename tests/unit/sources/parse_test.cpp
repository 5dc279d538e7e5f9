#include <gtest/gtest.h>

#include "headroom/sources/parse.h"

namespace headroom {
namespace {

TEST(ParseU64, AcceptsNumbersWithKernelWhitespace) {
  EXPECT_EQ(parseU64("0").value(), 0u);
  EXPECT_EQ(parseU64("123456789\n").value(), 123456789u);
  EXPECT_EQ(parseU64("  42 \n").value(), 42u);
  EXPECT_EQ(parseU64("18446744073709551615").value(), UINT64_MAX);
}

TEST(ParseU64, RejectsEmptyGarbageNegativeAndOverflow) {
  EXPECT_FALSE(parseU64(""));
  EXPECT_FALSE(parseU64("\n"));
  EXPECT_FALSE(parseU64("12abc"));
  EXPECT_FALSE(parseU64("-1"));
  EXPECT_FALSE(parseU64("max"));
  auto big = parseU64("18446744073709551616");
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().kind, ErrorKind::kBadData);
  EXPECT_NE(parseU64("12abc").error().message.find("12abc"), std::string::npos) << "errors name the value";
}

TEST(ParseLimit, MaxAndTheV1PageCounterMaxAreNoLimit) {
  EXPECT_FALSE(parseLimit("max\n").value().has_value());
  EXPECT_FALSE(parseLimit("9223372036854771712\n").value().has_value());
  EXPECT_FALSE(parseLimit("9223372036854775807").value().has_value());
  EXPECT_EQ(parseLimit("536870912\n").value().value(), 536870912u);
  EXPECT_FALSE(parseLimit(""));
  EXPECT_FALSE(parseLimit("unlimited"));
}

TEST(ParseKeyValueLines, KeepsUnknownKeysInOrder) {
  auto p = parseKeyValueLines("anon 4096\nfile 8192\nsome_future_key 7\n");
  ASSERT_TRUE(p.malformed.empty());
  ASSERT_EQ(p.values.size(), 3u);
  EXPECT_EQ(p.values.entries()[2].first, "some_future_key");
  EXPECT_EQ(p.values.get("file").value(), 8192u);
  EXPECT_FALSE(p.values.get("shmem").has_value());
  EXPECT_EQ(p.values.getOr("shmem", 5), 5u);
}

TEST(ParseKeyValueLines, GarbageAndTruncatedLinesAreSetAsideNotGuessed) {
  auto p = parseKeyValueLines("anon 4096\nthis is garbage\nslab -3\nfile 8192\nshm");
  EXPECT_EQ(p.values.get("anon").value(), 4096u);
  EXPECT_EQ(p.values.get("file").value(), 8192u);
  EXPECT_FALSE(p.values.contains("slab"));
  ASSERT_EQ(p.malformed.size(), 3u);
  EXPECT_EQ(p.malformed.back(), "shm");
}

TEST(ParseColonKbLines, ConvertsKbAndKeepsCounts) {
  auto m = parseColonKbLines("Name:\tbash\nVmRSS:\t    4384 kB\nThreads:\t3\nState:\tS (sleeping)\nBad:\t12 MB\n");
  EXPECT_EQ(m.get("VmRSS").value(), 4384u * 1024);
  EXPECT_EQ(m.get("Threads").value(), 3u);
  EXPECT_FALSE(m.contains("Name"));
  EXPECT_FALSE(m.contains("State"));
  EXPECT_FALSE(m.contains("Bad")) << "an unknown unit is not guessed at";
}

// StatMap finds a key by its hash: every key found whatever the growth, a key set again keeps
// its place in the order, keys that share a prefix or a length are told apart, copies stand alone.
TEST(StatMap, FindsEachKeyThroughGrowthAndKeepsFirstSetOrder) {
  StatMap m;
  EXPECT_FALSE(m.get("anything"));
  for (int i = 0; i < 300; ++i) m.set(fmt::format("key_{}", i), static_cast<std::uint64_t>(i));
  m.set("key_7", 700);
  m.set("", 1);
  ASSERT_EQ(m.size(), 301u);
  for (int i = 0; i < 300; ++i)
    EXPECT_EQ(m.get(fmt::format("key_{}", i)), i == 7 ? 700u : static_cast<std::uint64_t>(i)) << i;
  EXPECT_EQ(m.get(""), 1u);
  EXPECT_FALSE(m.get("key_300"));
  EXPECT_FALSE(m.get("key_"));
  EXPECT_FALSE(m.get("key_1000"));
  EXPECT_EQ(m.entries()[7].first, "key_7");
  EXPECT_EQ(m.entries()[7].second, 700u);
  EXPECT_EQ(m.entries()[300].first, "");
  StatMap copy = m;
  copy.set("key_0", 5);
  copy.set("total_rss", 9);
  EXPECT_EQ(m.get("key_0"), 0u);
  EXPECT_FALSE(m.get("total_rss"));
  EXPECT_EQ(copy.get("key_0"), 5u);
  EXPECT_EQ(copy.get("total_rss"), 9u);
  StatMap reserved;
  reserved.reserve(3, 64);
  reserved.set("rss", 1);
  reserved.set("total_rss", 2);
  EXPECT_EQ(reserved.get("rss"), 1u);
  EXPECT_EQ(reserved.get("total_rss"), 2u);
}

TEST(ParseColonKbLines, OddLinesAreLeftOut) {
  // Hand-made: more than a number and a unit, no value, no key, a fraction, no final newline.
  auto m = parseColonKbLines("Three:\t1 kB more\nNoValue:\n:5\nSigQ:\t0/95430\n  Spaced  :  7  kB  \nLast:\t9");
  EXPECT_FALSE(m.contains("Three"));
  EXPECT_FALSE(m.contains("NoValue"));
  EXPECT_FALSE(m.contains(""));
  EXPECT_FALSE(m.contains("SigQ"));
  EXPECT_EQ(m.get("Spaced").value(), 7u * 1024);
  EXPECT_EQ(m.get("Last").value(), 9u);
}

TEST(ParsePsi, SomeAndFull) {
  auto p = parsePsi(
      "some avg10=1.50 avg60=0.75 avg300=0.10 total=123456\nfull avg10=0.50 avg60=0.25 avg300=0.05 total=65432\n");
  ASSERT_TRUE(p) << p.error().describe();
  EXPECT_DOUBLE_EQ(p->some.avg10, 1.5);
  EXPECT_EQ(p->some.total_us, 123456u);
  ASSERT_TRUE(p->full.has_value());
  EXPECT_EQ(p->full->total_us, 65432u);
}

TEST(ParsePsi, SomeOnlyAndBrokenInput) {
  auto p = parsePsi("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
  ASSERT_TRUE(p);
  EXPECT_FALSE(p->full.has_value());
  EXPECT_FALSE(parsePsi(""));
  EXPECT_FALSE(parsePsi("some avg10=x total=1\n"));
  EXPECT_FALSE(parsePsi("some avg10=0.00 avg60=0.00\n")) << "truncated before total=";
  EXPECT_FALSE(parsePsi("other avg10=0.00 total=1\n"));
}

TEST(SplitFields, RunsOfWhitespace) {
  auto f = splitFields("  a\tbb   c \n");
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[1], "bb");
  EXPECT_TRUE(splitFields("   ").empty());
}

}  // namespace
}  // namespace headroom
