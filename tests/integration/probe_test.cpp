// `headroom probe` on real cgroups: beside a process holding memory it reports what can
// really be allocated, never causes an OOM kill, and gives the memory back.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "headroom/sources/cgroup.h"
#include "testing/cgroup_sandbox.h"
#include "testing/child_process.h"
#include "testing/integration.h"

namespace headroom {
namespace {

using testing::CgroupSandbox;
using testing::ChildProcess;
using testing::runCommand;

constexpr std::uint64_t kMiB = 1ULL << 20;

ChildProcess holder(const CgroupSandbox& sb, std::uint64_t bytes) {
  auto c = ChildProcess::spawn({HEADROOM_WORKLOAD, "--anon", std::to_string(bytes)}, sb.procsFile());
  if (!c) throw std::runtime_error(c.error().describe());
  auto line = c->readLine();
  if (!line || line->rfind("ready", 0) != 0) throw std::runtime_error("holder did not get ready");
  return std::move(*c);
}

std::size_t probeCgroupsLeft(const CgroupSandbox& sb) {
  std::size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(sb.directory()))
    n += e.is_directory() && e.path().filename().string().rfind("headroom-probe-", 0) == 0;
  return n;
}

TEST(Probe, ReportsWhatCanReallyBeAllocatedBesideAHolderWithoutAnyOomKill) {
  SKIP_WITHOUT_CGROUPS();
  auto sb = CgroupSandbox::create("probe-holder");
  ASSERT_TRUE(sb) << sb.error().describe();
  ASSERT_TRUE(sb->setLimit(512 * kMiB));
  ChildProcess h = holder(*sb, 200 * kMiB);
  auto before = sb->read();
  ASSERT_TRUE(before);

  auto r = runCommand({HEADROOM_BINARY, "probe", "--cgroup", sb->path(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  // The truth: the limit less what is charged now (the holder, and little else).
  double truth = 512.0 * kMiB - static_cast<double>(before->usage);
  EXPECT_NEAR(j["allocatable_bytes"].get<double>(), truth, 16.0 * kMiB) << r.out;
  EXPECT_GT(j["allocated_bytes"].get<double>(), truth - 64.0 * kMiB) << "it got close to the margin";
  EXPECT_EQ(j["cgroup_limit_bytes"], 512 * kMiB);
  EXPECT_EQ(j["bound"]["name"], sb->path());
  EXPECT_EQ(j["stop_margin_bytes"], 32 * kMiB);
  EXPECT_GE(j["probe_chunks"].get<int>(), 1);
  // v1: a sub-cgroup of its own with a hard limit. v2: a cgroup that holds processes cannot have
  // children with the memory controller, so the probe joins it as the OOM killer's first choice.
  EXPECT_NE(j["placement"].get<std::string>().find(sb->version() == 1 ? "sub-cgroup" : "target cgroup"),
            std::string::npos)
      << j["placement"];
  // The old tool's arithmetic holds.
  EXPECT_EQ(j["overhead_bytes"].get<std::int64_t>(), j["usage_peak_bytes"].get<std::int64_t>() -
                                                         j["usage_before_bytes"].get<std::int64_t>() -
                                                         j["allocated_bytes"].get<std::int64_t>());
  // The holder sat still: the overhead is the kernel's (the probe's page tables), not growth.
  EXPECT_LT(std::abs(j["others_growth_bytes"].get<double>()), 2.0 * kMiB) << r.out;
  EXPECT_LT(j["kernel_overhead_bytes"].get<double>(), 8.0 * kMiB) << r.out;
  // No OOM kill of anything, the holder alive, the memory back, no cgroup left behind.
  auto after = sb->read();
  ASSERT_TRUE(after);
  EXPECT_EQ(after->oom_kills.value_or(0), before->oom_kills.value_or(0));
  EXPECT_EQ(j["oom_kills_after"], j["oom_kills_before"]);
  EXPECT_TRUE(h.running());
  EXPECT_TRUE(j["reclaimed"].get<bool>());
  EXPECT_NEAR(static_cast<double>(after->usage), static_cast<double>(before->usage), 8.0 * kMiB);
  EXPECT_EQ(probeCgroupsLeft(*sb), 0u);
  EXPECT_GT(j["bytes_per_second"].get<double>(), 0.0);
}

TEST(Probe, ABusyNeighboursGrowthIsNotCalledKernelOverhead) {
  SKIP_WITHOUT_CGROUPS();
  auto sb = CgroupSandbox::create("probe-busy");
  ASSERT_TRUE(sb) << sb.error().describe();
  ASSERT_TRUE(sb->setLimit(768 * kMiB));
  // A "prover" that keeps allocating (1 MiB every 8 ms, up to 192 MiB) while the probe runs: it
  // starts when the probe's first chunk is charged, so after the probe's baseline however long
  // the probe takes to start (on an emulated guest, longer than the whole growth took).
  auto busy = ChildProcess::spawn({HEADROOM_WORKLOAD, "--anon", std::to_string(32 * kMiB), "--grow-after-ready",
                                   std::to_string(192 * kMiB), "8", "--grow-on-line"},
                                  sb->procsFile());
  ASSERT_TRUE(busy);
  ASSERT_TRUE(busy->readLine());
  auto idle = sb->read();
  ASSERT_TRUE(idle);
  auto probe = ChildProcess::spawn({HEADROOM_BINARY, "probe", "--cgroup", sb->path(), "--chunk", "16MiB", "--json"});
  ASSERT_TRUE(probe) << probe.error().describe();
  bool probing = false;
  for (auto end = std::chrono::steady_clock::now() + std::chrono::minutes(2);
       !probing && std::chrono::steady_clock::now() < end; ::usleep(2000)) {
    auto now = sb->read();
    probing = now && now->usage >= idle->usage + 12 * kMiB;
  }
  ASSERT_TRUE(probing) << "the probe never charged its first chunk";
  ASSERT_TRUE(busy->writeLine("grow"));
  auto out = probe->readLine(std::chrono::minutes(5));
  ASSERT_TRUE(out) << "headroom probe printed nothing: " << out.error().describe();
  auto status = probe->wait();
  ASSERT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *out;
  const std::string text = *out;
  auto j = nlohmann::json::parse(text);
  double others = j["others_growth_bytes"].get<double>();
  double kernel = j["kernel_overhead_bytes"].get<double>();
  double overhead = j["overhead_bytes"].get<double>();
  EXPECT_GT(others, 8.0 * kMiB) << "the neighbour grew while the probe ran: " << text;
  EXPECT_LT(std::abs(kernel), 8.0 * kMiB) << "its growth must not be counted as kernel overhead: " << text;
  EXPECT_NEAR(others + kernel, overhead, 1.0);
  auto after = sb->read();
  ASSERT_TRUE(after);
  EXPECT_EQ(after->oom_kills.value_or(0), 0u) << "the probe never causes an OOM kill";
  EXPECT_TRUE(busy->running());
}

TEST(Probe, AChunkLargerThanTheHeadroomNeverOvershoots) {
  SKIP_WITHOUT_CGROUPS();
  auto sb = CgroupSandbox::create("probe-chunk");
  ASSERT_TRUE(sb) << sb.error().describe();
  ASSERT_TRUE(sb->setLimit(256 * kMiB));
  ChildProcess h = holder(*sb, 64 * kMiB);
  auto before = sb->read();
  ASSERT_TRUE(before);
  for (const char* touch : {"threads", "memset", "populate"}) {
    auto r = runCommand({HEADROOM_BINARY, "probe", "--cgroup", sb->path(), "--chunk", "4GiB", "--stop-margin", "16MiB",
                         "--touch", touch, "--json"});
    ASSERT_EQ(r.exit_code, 0) << touch << ": " << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_LT(j["usage_peak_bytes"].get<std::uint64_t>(), 256 * kMiB - 8 * kMiB) << touch << ": " << r.out;
    EXPECT_GT(j["allocated_bytes"].get<std::uint64_t>(), 120 * kMiB) << touch;
    EXPECT_GE(j["probe_chunks"].get<int>(), 2) << "the 4 GiB chunk shrank to fit";
    EXPECT_EQ(j["touch"], touch);
  }
  auto after = sb->read();
  ASSERT_TRUE(after);
  EXPECT_EQ(after->oom_kills.value_or(0), before->oom_kills.value_or(0));
  EXPECT_TRUE(h.running());
}

// The ancestors of a cgroup that have a memory limit, read straight from their files (v2:
// memory.max of each directory up to the mount; v1: hierarchical_memory_limit, which already
// is the least of them).
std::vector<std::string> limitedAncestors(const CgroupSandbox& sb) {
  std::vector<std::string> out;
  if (sb.version() == 1) {
    auto own = sb.read();
    if (own && own->effectiveLimitHint() && *own->effectiveLimitHint() < (1ULL << 50)) out.push_back("(v1 hierarchy)");
    return out;
  }
  std::filesystem::path dir = sb.directory();
  for (auto path = parentCgroup(sb.path()); path; path = parentCgroup(*path)) {
    dir = dir.parent_path();
    std::ifstream f(dir / "memory.max");
    std::string v;
    if (f >> v && v != "max") out.push_back(*path);
  }
  return out;
}

TEST(Probe, WithoutALimitOfItsOwnTheTightestBoundAboveAppliesAndSaysSo) {
  SKIP_WITHOUT_CGROUPS();
  auto sb = CgroupSandbox::create("probe-nolimit");
  ASSERT_TRUE(sb) << sb.error().describe();
  auto above = limitedAncestors(*sb);
  // --max keeps it small: this is about which bound applies, not about filling the machine.
  auto r = runCommand({HEADROOM_BINARY, "probe", "--cgroup", sb->path(), "--max", "64MiB", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  if (above.empty()) {
    EXPECT_EQ(j["bound"]["name"], "host");
    EXPECT_EQ(j["bound"]["kind"], "MemAvailable");
  } else {
    // A pod's or slice's limit above it (Kubernetes, systemd): one of those, never the host.
    EXPECT_EQ(j["bound"]["kind"], "limit") << r.out;
    if (sb->version() == 2) {
      EXPECT_NE(std::find(above.begin(), above.end(), j["bound"]["name"].get<std::string>()), above.end()) << r.out;
    }
  }
  EXPECT_EQ(j["allocated_bytes"], 64 * kMiB);
  EXPECT_NE(j["stop_reason"].get<std::string>().find("most asked for"), std::string::npos) << r.out;
  EXPECT_GT(j["allocatable_bytes"].get<std::uint64_t>(), 64 * kMiB);
}

TEST(Probe, TheHumanSummarySaysWhatBoundAppliedAndWhy) {
  SKIP_WITHOUT_CGROUPS();
  auto sb = CgroupSandbox::create("probe-text");
  ASSERT_TRUE(sb) << sb.error().describe();
  ASSERT_TRUE(sb->setLimit(128 * kMiB));
  auto r = runCommand({HEADROOM_BINARY, "probe", "--cgroup", sb->path()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("allocatable"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(sb->path() + " limit 128 MiB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stopped"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GiB/s"), std::string::npos) << r.out;
}

TEST(Probe, BadInputIsAClearErrorAndExitCode2) {
  SKIP_WITHOUT_CGROUPS();
  auto sb = CgroupSandbox::create("probe-bad");
  ASSERT_TRUE(sb) << sb.error().describe();
  ASSERT_TRUE(sb->setLimit(64 * kMiB));
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> must_name;
  };
  std::vector<Case> cases = {
      {{"--cgroup", sb->path() + "/nope"}, {"--cgroup", "/nope"}},
      {{"--cgroup", sb->path(), "--stop-margin", "1GiB"}, {"--stop-margin", "1.00 GiB", "64.0 MiB"}},
      {{"--cgroup", sb->path(), "--chunk", "0"}, {"--chunk", "0"}},
      {{"--cgroup", sb->path(), "--chunk", "lots"}, {"--chunk", "lots"}},
      {{"--cgroup", sb->path(), "--touch", "fast"}, {"--touch", "fast"}},
      {{"--cgroup", sb->path(), "--reclaim-timeout", "soon"}, {"--reclaim-timeout", "soon"}},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {HEADROOM_BINARY, "probe"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    auto r = runCommand(argv);
    EXPECT_EQ(r.exit_code, 2) << c.args.back() << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    for (const auto& n : c.must_name) EXPECT_NE(r.err.find(n), std::string::npos) << "must name " << n << ": " << r.err;
  }
  EXPECT_EQ(probeCgroupsLeft(*sb), 0u);
}

}  // namespace
}  // namespace headroom
