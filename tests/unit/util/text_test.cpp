// printableText and its copy-free test: the exporter's label values go through isPrintableAscii
// first, so it must never say "unchanged" of a string printableText would change.
#include "headroom/util/text.h"

#include <gtest/gtest.h>

#include <string>

namespace headroom {
namespace {

TEST(PrintableText, PlainAsciiIsUnchangedAndToldWithoutACopy) {
  for (std::string_view s : {"", "cuzk", "/system.slice/curio.service", "a b~!\"\\{}"}) {
    EXPECT_TRUE(isPrintableAscii(s)) << s;
    EXPECT_EQ(printableText(s), s);
  }
}

TEST(PrintableText, ControlsAndInvalidUtf8AreReplacedAndNeverCalledPlain) {
  const std::string cases[] = {std::string("tab\there"),   std::string("nl\n"),    std::string("del\x7f"),
                               std::string("esc\x1b[31m"), std::string("cut\xc3"), std::string("c1\xc2\x9b"),
                               std::string("nul\0x", 5)};
  for (const std::string& s : cases) {
    EXPECT_FALSE(isPrintableAscii(s)) << s;
    EXPECT_NE(printableText(s), s);
  }
  EXPECT_EQ(printableText("del\x7f"), "del?");
  EXPECT_EQ(printableText(std::string("c1\xc2\x9b")), "c1?");
}

TEST(PrintableText, ValidUtf8IsKeptButIsNotPlainAscii) {
  const std::string s = "caf\xc3\xa9 \xe2\x82\xac";  // café €
  EXPECT_FALSE(isPrintableAscii(s));
  EXPECT_EQ(printableText(s), s);
}

}  // namespace
}  // namespace headroom
