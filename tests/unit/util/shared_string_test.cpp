// SharedString: the type a thousand processes name their cgroup and command line with each sample;
// a copy must share, and must still read, compare and print as the string it holds.
#include "headroom/util/shared_string.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

namespace headroom {
namespace {

TEST(SharedString, CopiesShareOneBuffer) {
  const SharedString path = std::string("/kubepods.slice/kubepods-burstable.slice/pod-prover/cuzk.scope");
  std::vector<SharedString> processes(1000, path);
  for (const SharedString& p : processes) {
    EXPECT_TRUE(p.sharesWith(path));
    EXPECT_EQ(p.c_str(), path.c_str()) << "a copy holds no bytes of its own";
  }
  const SharedString equal_text = std::string(path.str());
  EXPECT_FALSE(equal_text.sharesWith(path));
  EXPECT_EQ(equal_text, path) << "equal text, apart: still equal";
}

TEST(SharedString, ReadsAndComparesAsAString) {
  const SharedString s = "/proving/prover";
  EXPECT_EQ(s, "/proving/prover");
  EXPECT_EQ(s, std::string("/proving/prover"));
  EXPECT_EQ(s, std::string_view("/proving/prover"));
  EXPECT_NE(s, "/proving");
  EXPECT_EQ(std::string("/proving/prover"), s);
  EXPECT_LT(SharedString("/a"), SharedString("/b"));
  EXPECT_EQ(s.size(), 15u);
  EXPECT_EQ(fmt::format("[{:>17}]", s), "[  /proving/prover]");
  std::ostringstream os;
  os << s;
  EXPECT_EQ(os.str(), "/proving/prover");
  const std::string& text = s;
  EXPECT_EQ(text, "/proving/prover");
}

TEST(SharedString, EmptyHoldsNothing) {
  const SharedString none;
  const SharedString blank = std::string();
  EXPECT_TRUE(none.empty());
  EXPECT_TRUE(blank.empty());
  EXPECT_EQ(none, blank);
  EXPECT_EQ(none, "");
  EXPECT_STREQ(none.c_str(), "");
  EXPECT_FALSE(SharedString("x").empty());
}

}  // namespace
}  // namespace headroom
