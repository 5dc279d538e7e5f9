// The prover's self-reported memory use: source specs and the number taken from a file's text,
// a JSON document or a Prometheus exposition.
#include "headroom/sources/self_report.h"

#include <gtest/gtest.h>

namespace headroom {
namespace {

SelfReportSource source(std::string_view spec) {
  auto s = parseSelfReportSource(spec);
  EXPECT_TRUE(s) << spec << ": " << s.error().describe();
  return s ? *s : SelfReportSource{};
}

TEST(SelfReport, SpecsNameAFileOrAUrlAndWhatToTake) {
  auto f = source("/run/prover/used");
  EXPECT_EQ(f.kind, SelfReportSource::Kind::kFile);
  EXPECT_EQ(f.location, "/run/prover/used");
  EXPECT_EQ(f.field, "");
  EXPECT_EQ(source("file:/run/x#json:mem.used").field, "json:mem.used");
  auto u = source("http://127.0.0.1:9000/metrics#metric:cuzk_used_bytes{pool=\"all\"}");
  EXPECT_EQ(u.kind, SelfReportSource::Kind::kUrl);
  EXPECT_EQ(u.location, "http://127.0.0.1:9000/metrics");
  EXPECT_EQ(u.field, "metric:cuzk_used_bytes{pool=\"all\"}");
  EXPECT_EQ(u.text(), "http://127.0.0.1:9000/metrics#metric:cuzk_used_bytes{pool=\"all\"}");
}

TEST(SelfReport, BadSpecsSayWhatIsWrong) {
  for (auto [spec, says] : std::vector<std::pair<std::string, std::string>>{
           {"relative/path", "absolute path"},
           {"https://x/metrics", "https is not supported"},
           {"/run/x#xml:a", "json:FIELD.PATH or metric:NAME"},
           {"/run/x#json:", "empty"},
           {"http://", "needs a host"},
           {"http://h/m#metric:x{a=b}", "NAME{label=\"value\""},
       }) {
    auto s = parseSelfReportSource(spec);
    ASSERT_FALSE(s) << spec;
    EXPECT_NE(s.error().describe().find(says), std::string::npos) << s.error().describe();
    EXPECT_NE(s.error().describe().find(spec), std::string::npos) << "the spec is named";
  }
}

TEST(SelfReport, AWholeBodyIsABareNumberASizeOrUsedBytes) {
  auto f = source("/run/x");
  EXPECT_EQ(*extractSelfReport(f, "123456\n"), 123456u);
  EXPECT_EQ(*extractSelfReport(f, " 512MiB "), 512u << 20);
  EXPECT_EQ(*extractSelfReport(f, R"({"used_bytes": 4096, "other": 1})"), 4096u);
  EXPECT_FALSE(extractSelfReport(f, ""));
  EXPECT_FALSE(extractSelfReport(f, "lots"));
  EXPECT_FALSE(extractSelfReport(f, R"({"used": 1})"));
}

TEST(SelfReport, AJsonFieldByPath) {
  auto s = source("http://127.0.0.1:1/status#json:memory.budget.used");
  EXPECT_EQ(*extractSelfReport(s, R"({"memory": {"budget": {"used": 2147483648}}})"), 2147483648u);
  EXPECT_EQ(*extractSelfReport(s, R"({"memory": {"budget": {"used": 1.5e9}}})"), 1500000000u);
  EXPECT_EQ(*extractSelfReport(s, R"({"memory": {"budget": {"used": "2GiB"}}})"), 2u << 30);
  auto missing = extractSelfReport(s, R"({"memory": {}})");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().describe().find("no field \"budget\""), std::string::npos);
  EXPECT_FALSE(extractSelfReport(s, R"({"memory": {"budget": {"used": -1}}})"));
  EXPECT_FALSE(extractSelfReport(s, "not json"));
}

TEST(SelfReport, APrometheusSampleByNameAndLabels) {
  const std::string body =
      "# HELP cuzk_used_bytes What the prover believes it uses.\n"
      "# TYPE cuzk_used_bytes gauge\n"
      "cuzk_used_bytes_total 5\n"
      "cuzk_used_bytes{pool=\"gpu\",node=\"a\"} 1e9\n"
      "cuzk_used_bytes{pool=\"all\",node=\"a\"} 3.5e+09 1733140000000\n"
      "cuzk_other 7\n";
  EXPECT_EQ(*extractSelfReport(source("http://h:1/m#metric:cuzk_used_bytes{pool=\"all\"}"), body), 3500000000u);
  // No labels asked: the first series of that name (not a longer name that starts the same).
  EXPECT_EQ(*extractSelfReport(source("http://h:1/m#metric:cuzk_used_bytes"), body), 1000000000u);
  EXPECT_EQ(*extractSelfReport(source("http://h:1/m#metric:cuzk_other"), body), 7u);
  auto none = extractSelfReport(source("http://h:1/m#metric:cuzk_used_bytes{pool=\"cpu\"}"), body);
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().describe().find("no sample"), std::string::npos);
  EXPECT_FALSE(extractSelfReport(source("http://h:1/m#metric:cuzk_other"), "cuzk_other NaN\n"));
}

// Found with the self_report fuzz target, on an input beyond its length limit: a value that is
// not a byte count was dumped whole into the error, and dump() recurses once per level, so a
// prover's body of 400000 nested arrays (800 kB, under the file's 1 MiB cap) overflowed the
// agent's stack. The error names the value's kind instead.
TEST(SelfReport, ADeeplyNestedValueIsAnErrorNotAStackOverflow) {
  constexpr std::size_t kDepth = 20000;  // ASan's stack overflowed at 1000
  const std::string nested = std::string(kDepth, '[') + std::string(kDepth, ']');
  auto whole = extractSelfReport(source("/run/prover/used"), R"({"used_bytes": )" + nested + "}");
  ASSERT_FALSE(whole);
  EXPECT_NE(whole.error().describe().find("an array is not a byte count"), std::string::npos)
      << whole.error().describe().substr(0, 200);
  auto field = extractSelfReport(source("http://h:1/s#json:a"), R"({"a": )" + nested + "}");
  ASSERT_FALSE(field);
  auto text = extractSelfReport(source("http://h:1/s#json:a"), fmt::format(R"({{"a": "{}"}})", std::string(1000, 'x')));
  ASSERT_FALSE(text);
  EXPECT_LT(text.error().describe().size(), 200u) << "a long value is cut short in the message";
}

}  // namespace
}  // namespace headroom
