// The fixtures themselves: every real capture says where it came from (kernel, hierarchy, date,
// the command that made it), and a fixture written by hand says so in its name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "testing/fixture_tree.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool handMade(const fs::path& p) { return p.filename().string().rfind("handmade-", 0) == 0; }

void expectProvenance(const fs::path& fixture, const fs::path& provenance) {
  ASSERT_TRUE(fs::exists(provenance)) << fixture << " is a real capture without " << provenance.filename()
                                      << " (or, if written by hand, its name should start with handmade-)";
  std::string text = slurp(provenance);
  for (const char* key : {"kernel: ", "hierarchy: ", "date: ", "command: "})
    EXPECT_NE(text.find(std::string("\n") + key), std::string::npos) << provenance << " names no " << key << "\n"
                                                                     << text;
}

TEST(Fixtures, EveryRealCaptureHasItsProvenance) {
  const fs::path root = testing::fixturePath("");
  int real = 0, hand = 0;
  // Files (kernel logs, journals) carry a provenance beside them.
  for (const char* dir : {"kmsg", "journal"}) {
    for (const auto& e : fs::directory_iterator(root / dir)) {
      if (e.path().extension() != ".txt" && e.path().extension() != ".hrj") continue;
      if (handMade(e.path())) {
        ++hand;
        continue;
      }
      ++real;
      expectProvenance(e.path(), e.path().string() + ".provenance");
    }
  }
  // Reports gathered from public sources (tests/fixtures/oom-logs): where from, as what.
  for (const auto& e : fs::directory_iterator(root / "oom-logs")) {
    if (e.path().extension() != ".log") continue;
    ++real;
    fs::path provenance = e.path().string() + ".provenance";
    ASSERT_TRUE(fs::exists(provenance)) << e.path() << " has no " << provenance.filename();
    std::string text = slurp(provenance);
    for (const char* key : {"source: ", "retrieved: ", "kernel: ", "format: ", "whole: ", "edits: "}) {
      EXPECT_TRUE(text.rfind(key, 0) == 0 || text.find(std::string("\n") + key) != std::string::npos)
          << provenance << " names no " << key;
    }
  }
  for (const auto& e : fs::directory_iterator(root)) {
    if (!e.is_directory() || e.path().filename() == "kmsg" || e.path().filename() == "journal" ||
        e.path().filename() == "oom-logs")
      continue;
    if (handMade(e.path())) {
      ++hand;
      continue;
    }
    ++real;
    // A tree's provenance sits beside its proc/ and sys/ (its first line is "what: ...").
    expectProvenance(e.path(), e.path() / "PROVENANCE");
  }
  EXPECT_GT(real, 0);
  std::cout << real << " real capture(s), " << hand << " hand-made fixture(s)\n";
}

}  // namespace
}  // namespace headroom
