#include <gtest/gtest.h>

#include "headroom/util/units.h"

namespace headroom {
namespace {

TEST(FormatBytes, BinaryUnits) {
  EXPECT_EQ(formatBytes(0), "0 B");
  EXPECT_EQ(formatBytes(1023), "1023 B");
  EXPECT_EQ(formatBytes(1024), "1.00 KiB");
  EXPECT_EQ(formatBytes(512ULL << 20), "512 MiB");
  EXPECT_EQ(formatBytes(3ULL << 29), "1.50 GiB");
  EXPECT_EQ(formatBytes(342ULL << 30), "342 GiB");
  EXPECT_EQ(formatSignedBytes(-(2LL << 20)), "-2.00 MiB");
}

TEST(ParseSize, UnitsAndPlainBytes) {
  EXPECT_EQ(parseSize("1073741824").value(), 1ULL << 30);
  EXPECT_EQ(parseSize("512MiB").value(), 512ULL << 20);
  EXPECT_EQ(parseSize("2GiB").value(), 2ULL << 30);
  EXPECT_EQ(parseSize("2 G").value(), 2ULL << 30);
  EXPECT_EQ(parseSize("1.5GiB").value(), 3ULL << 29);
  EXPECT_EQ(parseSize("4k").value(), 4096u);
}

TEST(ParseSize, ErrorsNameTheValue) {
  auto e = parseSize("12 parsecs");
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("12 parsecs"), std::string::npos);
  EXPECT_FALSE(parseSize(""));
  EXPECT_FALSE(parseSize("GiB"));
  EXPECT_FALSE(parseSize("99999999999TiB"));
}

}  // namespace
}  // namespace headroom
