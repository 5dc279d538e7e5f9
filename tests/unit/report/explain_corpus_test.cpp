// `headroom explain` against the corpus of real OOM reports (tests/fixtures/oom-logs: each
// `.log` as a public source shows it, its `.provenance`, and the facts read from it by eye in
// `.expected.json`), and against hand-made variants of each (CRLF, quoted, indented, gzip,
// /dev/kmsg records, a terminal's wrap): every fact as expected, no victim more or less.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "headroom/report/explain.h"
#include "headroom/sources/log_file.h"
#include "headroom/sources/log_text.h"
#include "headroom/sources/parse.h"
#include "testing/fixture_tree.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<std::string> corpus() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(testing::fixturePath("oom-logs"))) {
    std::string p = e.path().string();
    if (p.size() > 4 && p.substr(p.size() - 4) == ".log") out.push_back(p);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string name(const std::string& path) { return fs::path(path).filename().string(); }

// The facts the expected file names, compared one by one; `where` says which.
void expectFacts(const json& actual, const json& expected, const std::string& where) {
  ASSERT_TRUE(expected.contains("incidents")) << where;
  const json& want = expected["incidents"];
  const json& got = actual["incidents"];
  ASSERT_EQ(got.size(), want.size()) << where << ": incidents\n" << got.dump(1).substr(0, 4000);
  for (std::size_t i = 0; i < want.size(); ++i) {
    std::string at = fmt::format("{}: incident {}", where, i + 1);
    const json& w = want[i];
    const json& g = got[i];
    for (const char* key :
         {"kernel", "constraint", "oom_memcg", "task_memcg", "memcg_usage_bytes", "memcg_limit_bytes", "oom_group"}) {
      if (w.contains(key)) {
        EXPECT_EQ(g[key], w[key]) << at << ": " << key;
      }
    }
    if (w.contains("trigger")) {
      EXPECT_EQ(g["trigger"]["pid"], w["trigger"]["pid"]) << at << ": trigger pid";
      EXPECT_EQ(g["trigger"]["comm"], w["trigger"]["comm"]) << at << ": trigger comm";
    }
    const json& wk = w["kills"];
    const json& gk = g["kills"];
    ASSERT_EQ(gk.size(), wk.size()) << at << ": kills\n" << gk.dump(1);
    for (std::size_t k = 0; k < wk.size(); ++k) {
      for (const char* key : {"pid", "comm", "anon_rss_bytes", "file_rss_bytes", "shmem_rss_bytes"}) {
        if (wk[k].contains(key)) {
          EXPECT_EQ(gk[k][key], wk[k][key]) << at << ": kill " << k + 1 << ": " << key;
        }
      }
    }
  }
}

json explainJson(const std::string& text, const std::string& source) {
  return explanationJson({explainLog(text, source)});
}

TEST(ExplainCorpus, HoldsThirtyRealReportsEachWithItsProvenance) {
  auto files = corpus();
  EXPECT_GE(files.size(), 30u);
  for (const auto& f : files) {
    std::string prov = testing::fileText(f + ".provenance");
    EXPECT_NE(prov.find("source: "), std::string::npos) << name(f);
    EXPECT_NE(prov.find("kernel: "), std::string::npos) << name(f);
    EXPECT_NE(prov.find("format: "), std::string::npos) << name(f);
    EXPECT_FALSE(testing::fileText(f + ".expected.json").empty()) << name(f);
  }
}

TEST(ExplainCorpus, EveryRealReportGivesTheFactsReadFromItByEye) {
  for (const auto& f : corpus()) {
    std::istringstream none;
    auto text = readLogFile(f, none);
    ASSERT_TRUE(text) << text.error().describe();
    expectFacts(explainJson(*text, name(f)), json::parse(testing::fileText(f + ".expected.json")), name(f));
  }
}

// The variants below are hand-made from the real reports: what happens to a log on its way to
// the engineer holding it.
// `prefix` then `l`, and `suffix` (appended, not `+`: g++ 12 at -O3 warns of a string built so).
std::string around(std::string_view prefix, std::string_view l, std::string_view suffix = {}) {
  std::string out(prefix);
  out.append(l);
  out.append(suffix);
  return out;
}

std::string eachLine(const std::string& text, const std::function<std::string(std::string_view)>& f) {
  std::string out;
  for (auto l : splitLines(text)) {
    out += f(l);
    out += '\n';
  }
  return out;
}

std::string gzip(const std::string& text) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, text.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// The kernel's own lines of the text as /dev/kmsg records (as the live agent reads them).
std::string asKmsg(const std::string& text) {
  std::string out;
  std::uint64_t seq = 100;
  for (const LogLine& l : readLogText(text).lines) {
    std::uint64_t ts = l.ts_us.value_or(seq * 1000);
    out += fmt::format("{},{},{},-;{}\n", l.kernel ? 4 : 14, seq, ts, l.text);
    ++seq;
  }
  return out;
}

// A terminal 100 columns wide: every longer line cut into pieces of 100 bytes.
std::string wrapped(const std::string& text) {
  return eachLine(text, [](std::string_view l) {
    std::string out;
    while (l.size() > 100) {
      out.append(l.substr(0, 100));
      out += '\n';
      l.remove_prefix(100);
    }
    out.append(l);
    return out;
  });
}

TEST(ExplainCorpus, HandMadeVariantsOfEveryReportGiveTheSameFacts) {
  for (const auto& f : corpus()) {
    std::string text = testing::fileText(f);
    json expected = json::parse(testing::fileText(f + ".expected.json"));
    std::string n = name(f);
    expectFacts(explainJson(eachLine(text, [](std::string_view l) { return around("", l, "\r"); }), n), expected,
                n + " with CRLF");
    expectFacts(explainJson(eachLine(text, [](std::string_view l) { return around("> ", l); }), n), expected,
                n + " quoted with \"> \"");
    expectFacts(explainJson(eachLine(text, [](std::string_view l) { return around("\t", l); }), n), expected,
                n + " indented by a tab");
    auto unzipped = gunzipIfCompressed(gzip(text), n + ".gz");
    ASSERT_TRUE(unzipped) << unzipped.error().describe();
    EXPECT_EQ(*unzipped, text);
    expectFacts(explainJson(asKmsg(text), n), expected, n + " as /dev/kmsg records");
    LogText lt = readLogText(text);
    const bool prefixed = lt.form.kmsg + lt.form.syslog + lt.form.dmesg > lt.form.lines / 2;
    if (prefixed) expectFacts(explainJson(wrapped(text), n), expected, n + " wrapped by a terminal");
  }
}

TEST(ExplainCorpus, SeveralFilesAndMoreThanOneGzipMember) {
  auto files = corpus();
  ASSERT_GE(files.size(), 2u);
  std::string a = testing::fileText(files[0]), b = testing::fileText(files[1]);
  auto both = gunzipIfCompressed(gzip(a) + gzip(b), "two.gz");
  ASSERT_TRUE(both);
  EXPECT_EQ(*both, a + b);
  auto damaged = gunzipIfCompressed(gzip(a).substr(0, 40), "cut.gz");
  ASSERT_FALSE(damaged);
  EXPECT_NE(damaged.error().message.find("cut.gz"), std::string::npos);
  EXPECT_EQ(damaged.error().kind, ErrorKind::kBadInput);
}

}  // namespace
}  // namespace headroom
