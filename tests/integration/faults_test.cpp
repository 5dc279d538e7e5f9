// Faults caused for real, on the real agent: the journal's file system full and then read-only
// (a tmpfs of its own) while OOM kills come, the sampling thread stopped from outside (ptrace),
// and the agent in a cgroup near its limit beside a hog. Each is watched from the real HTTP
// endpoint, with real BPF, real cgroups and real OOM kills.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "headroom/journal/journal.h"
#include "testing/cgroup_sandbox.h"
#include "testing/child_process.h"
#include "testing/integration.h"

namespace headroom {
namespace {

using testing::CgroupSandbox;
using testing::ChildProcess;
using testing::TempDir;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::uint64_t kMiB = 1ULL << 20;

using Agent = testing::InfoLogAgent;

double metricOf(Agent& a, const std::string& name) { return testing::metric(a.metrics(), name).value_or(-1); }

// A tmpfs of `size` mounted on a directory of the test's own, unmounted at the end.
struct SmallFs {
  TempDir dir;
  std::string path;
  explicit SmallFs(const std::string& size) : path(dir.file("fs")) {
    std::filesystem::create_directories(path);
    if (::mount("tmpfs", path.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, fmt::format("size={},mode=0755", size).c_str()) !=
        0)
      throw std::runtime_error(fmt::format("mount tmpfs on {}: {}", path, std::strerror(errno)));
  }
  ~SmallFs() { ::umount2(path.c_str(), MNT_DETACH); }
  SmallFs(const SmallFs&) = delete;
  SmallFs& operator=(const SmallFs&) = delete;
  // Remounts read-only or read-write. The kernel refuses a read-only remount while a file is
  // open for writing (EBUSY): the agent closes its journal after a failed write, and opens it
  // again only for a retry, so this waits for a moment between two retries.
  bool remount(bool read_only) const {
    for (auto end = Clock::now() + 10s; Clock::now() < end; std::this_thread::sleep_for(5ms)) {
      if (::mount(nullptr, path.c_str(), nullptr, MS_REMOUNT | MS_NOSUID | MS_NODEV | (read_only ? MS_RDONLY : 0),
                  nullptr) == 0)
        return true;
      if (errno != EBUSY) return false;
    }
    return false;
  }
  // Writes a file until the file system is full; its size.
  std::uint64_t fill(const std::string& name) const {
    std::string f = path + "/" + name;
    int fd = ::open(f.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return 0;
    std::string chunk(64 * 1024, 'f');
    std::uint64_t n = 0;
    for (;;) {
      ssize_t w = ::write(fd, chunk.data(), chunk.size());
      if (w <= 0) break;
      n += static_cast<std::uint64_t>(w);
    }
    ::close(fd);
    return n;
  }
};

// A workload that climbs past its cgroup's limit and is OOM-killed; its pid.
pid_t oomKill(const CgroupSandbox& sb, std::vector<ChildProcess>& keep) {
  auto w = ChildProcess::spawn({HEADROOM_WORKLOAD, "--anon-slow", std::to_string(1024 * kMiB)}, sb.procsFile());
  if (!w) throw std::runtime_error(w.error().describe());
  pid_t pid = w->pid();
  keep.push_back(std::move(*w));
  return pid;
}

bool killedBySignal(ChildProcess& c) {
  auto st = c.wait(30s);
  return st && WIFSIGNALED(*st) && WTERMSIG(*st) == SIGKILL;
}

std::uint64_t victimOf(const nlohmann::json& rec) { return rec["event"]["victims"][0]["tgid"].get<std::uint64_t>(); }

// The journal's file system full, then read-only: the agent samples and serves on, counts every
// failed write, says "degraded" on /healthz with why, keeps the records it could not write in
// memory, loses nothing already written, and writes them, in order, once space and write access
// come back.
TEST(Faults, AJournalOnAFullThenReadOnlyFileSystemKeepsItsRecordsAndWritesThemWhenItCan) {
  SKIP_WITHOUT_ROOT();
  auto sb = CgroupSandbox::create("faults-journal");
  ASSERT_TRUE(sb) << sb.error().describe();
  ASSERT_TRUE(sb->setLimit(64 * kMiB));
  SmallFs fs("4m");
  const std::string journal = fs.path + "/oom.hrj";
  Agent agent({"--interval", "200ms", "--cgroup", sb->path(), "--journal", journal, "--budget.enabled", "false"});
  ASSERT_TRUE(agent.waitLog("journal: OOM kills are recorded in")) << agent.logText();
  ASSERT_TRUE(agent.waitHealthy());
  std::vector<ChildProcess> workloads;
  std::vector<pid_t> victims;

  // 1: room on the file system: written at once.
  victims.push_back(oomKill(*sb, workloads));
  ASSERT_TRUE(agent.waitLog("OOM kill recorded as record 1", 30s)) << agent.logText();
  ASSERT_TRUE(killedBySignal(workloads.back()));

  // 2: the file system full.
  const std::uint64_t filled = fs.fill("filler");
  ASSERT_GT(filled, 0u);
  victims.push_back(oomKill(*sb, workloads));
  auto said = agent.waitLog("the OOM kill could not be recorded", 30s);
  ASSERT_TRUE(said) << agent.logText();
  EXPECT_NE(said->find("No space left on device"), std::string::npos) << *said;
  EXPECT_NE(said->find("kept in memory"), std::string::npos) << *said;
  ASSERT_TRUE(killedBySignal(workloads.back()));
  // /healthz says it once the agent has published it (right after the log line).
  auto published = agent.waitJson("/healthz", [](const nlohmann::json& j) { return j["status"] == "degraded"; });
  nlohmann::json h = published.value_or(agent.getJson("/healthz"));
  EXPECT_EQ(h["status"], "degraded") << h.dump();
  EXPECT_EQ(h["journal"]["state"], "degraded") << h.dump();
  EXPECT_EQ(h["journal"]["pending_records"], 1) << h.dump();
  ASSERT_EQ(h["degraded"].size(), 1u) << h.dump();
  EXPECT_NE(h["degraded"][0].get<std::string>().find("No space left on device"), std::string::npos) << h.dump();
  EXPECT_EQ(testing::httpGet(agent.port(), "/healthz").status, 200) << "degraded is not down";
  // It samples and serves on, and retries at each sample: every failure counted, said once.
  const double samples = metricOf(agent, "headroom_samples_total");
  const double failures = metricOf(agent, "headroom_journal_write_failures_total");
  ASSERT_TRUE(agent.waitMetrics([&](const std::string& t) {
    return testing::metric(t, "headroom_samples_total").value_or(0) >= samples + 5 &&
           testing::metric(t, "headroom_journal_write_failures_total").value_or(0) >= failures + 3;
  })) << agent.metrics().substr(0, 3000);
  EXPECT_EQ(metricOf(agent, "headroom_journal_pending_records"), 1);
  auto ooms = agent.getJson("/v1/ooms");
  EXPECT_EQ(ooms["total"], 2) << "the kill is served while it waits for the journal";
  // Nothing written before is lost.
  auto before = readJournal(journal);
  ASSERT_TRUE(before) << before.error().describe();
  ASSERT_EQ(before->records.size(), 1u);
  EXPECT_EQ(victimOf(before->records[0]), static_cast<std::uint64_t>(victims[0]));
  EXPECT_TRUE(before->damage.empty()) << before->damage.front();

  // 3: read-only as well.
  ASSERT_TRUE(fs.remount(true)) << std::strerror(errno);
  victims.push_back(oomKill(*sb, workloads));
  ASSERT_TRUE(killedBySignal(workloads.back()));
  auto two = agent.waitJson("/healthz", [](const nlohmann::json& j) {
    return j["journal"]["pending_records"] == 2 &&
           j["journal"]["reason"].get<std::string>().find("Read-only file system") != std::string::npos;
  });
  ASSERT_TRUE(two) << agent.getJson("/healthz").dump() << "\n" << agent.logText();
  EXPECT_EQ((*two)["status"], "degraded");
  EXPECT_EQ(metricOf(agent, "headroom_journal_dropped_records_total"), 0);
  EXPECT_EQ(readJournal(journal)->records.size(), 1u);
  const double failed_total = metricOf(agent, "headroom_journal_write_failures_total");

  // Space and write access back: the waiting records land, in the order of their kills.
  ASSERT_TRUE(fs.remount(false)) << std::strerror(errno);
  std::filesystem::remove(fs.path + "/filler");
  ASSERT_TRUE(agent.waitLog("recorded as record 2 in", 10s)) << agent.logText();
  ASSERT_TRUE(agent.waitLog("recorded as record 3 in", 10s)) << agent.logText();
  ASSERT_TRUE(agent.waitLog("journal: writing works again", 10s)) << agent.logText();
  auto ok = agent.waitJson("/healthz", [](const nlohmann::json& j) { return j["status"] == "ok"; });
  ASSERT_TRUE(ok) << agent.getJson("/healthz").dump();
  EXPECT_EQ((*ok)["journal"]["state"], "on");
  EXPECT_EQ((*ok)["journal"]["pending_records"], 0);
  EXPECT_TRUE((*ok)["degraded"].empty());
  // 4: and the next kill is written at once.
  victims.push_back(oomKill(*sb, workloads));
  ASSERT_TRUE(agent.waitLog("OOM kill recorded as record 4", 30s)) << agent.logText();
  auto after = readJournal(journal);
  ASSERT_TRUE(after) << after.error().describe();
  ASSERT_EQ(after->records.size(), 4u);
  EXPECT_TRUE(after->damage.empty()) << after->damage.front();
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(after->records[i]["id"], i + 1);
    EXPECT_EQ(victimOf(after->records[i]), static_cast<std::uint64_t>(victims[i])) << "record " << i + 1;
  }
  // The page says it at the next sample.
  EXPECT_TRUE(agent.waitMetrics([](const std::string& t) {
    return testing::metric(t, "headroom_journal_records_total") == 4 &&
           testing::metric(t, "headroom_journal_pending_records") == 0;
  })) << agent.metrics().substr(0, 3000);
  std::printf(
      "journal full then read-only: %.0f failed writes counted (%s), 2 records kept in memory and written "
      "after, 4 of 4 kills in the journal\n",
      failed_total, "ENOSPC, then EROFS");
}

// The sampling thread stopped from outside (ptrace-stopped alone: the HTTP threads run on, as
// they do when a read of /proc or a cgroup file blocks): /healthz turns "stalled" (503) within
// its documented bound, three intervals and a second, and "ok" again once the thread runs.
TEST(Faults, AStalledSamplingThreadTurnsHealthzUnhealthyWithinItsBoundAndRecovers) {
  SKIP_WITHOUT_ROOT();
  auto sb = CgroupSandbox::create("faults-stall");
  ASSERT_TRUE(sb) << sb.error().describe();
  constexpr double kInterval = 0.5;
  constexpr double kBound = 3 * kInterval + 1;
  Agent agent({"--interval", "500ms", "--cgroup", sb->path(), "--budget.enabled", "false"});
  ASSERT_TRUE(agent.waitHealthy());
  ASSERT_TRUE(agent.waitMetrics(
      [](const std::string& t) { return testing::metric(t, "headroom_samples_total").value_or(0) >= 3; }));
  // The agent's main thread is the sampling thread (its tid is the pid).
  const pid_t pid = agent.child().pid();
  ASSERT_EQ(::ptrace(PTRACE_SEIZE, pid, nullptr, nullptr), 0) << std::strerror(errno);
  ASSERT_EQ(::ptrace(PTRACE_INTERRUPT, pid, nullptr, nullptr), 0) << std::strerror(errno);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, __WALL), pid);
  const auto stopped = Clock::now();
  ASSERT_TRUE(WIFSTOPPED(status)) << status;
  // Polled every 50 ms: the first answer that says so. An "ok" answer to a request sent after
  // the bound would break it (the answer is made after the request is sent); the first 503's
  // arrival says when it was seen, a request's latency late.
  nlohmann::json h;
  int code = 0;
  double last_ok_sent = 0;
  while (Clock::now() - stopped < 10s) {
    const double sent = std::chrono::duration<double>(Clock::now() - stopped).count();
    auto r = testing::httpGet(agent.port(), "/healthz");
    code = r.status;
    if (r.status == 503) {
      h = nlohmann::json::parse(r.body);
      break;
    }
    if (r.status == 200) last_ok_sent = sent;
    std::this_thread::sleep_for(50ms);
  }
  const double detected = std::chrono::duration<double>(Clock::now() - stopped).count();
  ASSERT_EQ(code, 503) << "never unhealthy";
  EXPECT_EQ(h["status"], "stalled") << h.dump();
  EXPECT_LE(last_ok_sent, kBound) << "still ok past the bound: 3 x interval + 1 s after the last sample";
  EXPECT_LE(detected, kBound + 1) << "seen a request's latency after the bound at most";
  EXPECT_GT(h["last_sample_age_seconds"].get<double>(), kBound) << h.dump();
  EXPECT_GE(detected, kBound - kInterval - 0.2) << "unhealthy before the thread could have missed three samples";
  // Serving goes on while the sampling thread is stopped.
  EXPECT_NE(agent.metrics().find("headroom_samples_total"), std::string::npos);
  const double samples = metricOf(agent, "headroom_samples_total");
  ASSERT_EQ(::ptrace(PTRACE_DETACH, pid, nullptr, nullptr), 0) << std::strerror(errno);
  const auto resumed = Clock::now();
  auto ok = agent.waitJson(
      "/healthz", [](const nlohmann::json& j) { return j["status"] == "ok"; }, 10s);
  ASSERT_TRUE(ok) << agent.getJson("/healthz").dump();
  const double recovered = std::chrono::duration<double>(Clock::now() - resumed).count();
  EXPECT_GT(metricOf(agent, "headroom_samples_total"), samples);
  std::printf(
      "stalled sampling thread: /healthz 503 \"stalled\" %.2f s after the stop, the last \"ok\" asked at %.2f s "
      "(bound %.1f s: 3 x %.1f s + 1 s), \"ok\" again %.2f s after it ran\n",
      detected, last_ok_sent, kBound, kInterval, recovered);
}

// The agent in a cgroup near its limit, beside a hog that climbs to it, three times: the hog is
// the OOM victim each time, never the agent, which records each kill. The agent says its own
// oom_score_adj (log and metric) and warns when it is not protected.
TEST(Faults, AnAgentInACgroupNearItsLimitIsNeverTheVictimAndRecordsEachKill) {
  SKIP_WITHOUT_ROOT();
  auto sb = CgroupSandbox::create("faults-self");
  ASSERT_TRUE(sb) << sb.error().describe();
  TempDir tmp;
  Agent agent(
      {"--interval", "200ms", "--cgroup", sb->path(), "--journal", tmp.file("oom.hrj"), "--budget.enabled", "false"},
      sb->procsFile());
  ASSERT_TRUE(agent.waitHealthy());
  const pid_t pid = agent.child().pid();
  // Said at start, and exported.
  auto adj_line = agent.waitLog("oom_score_adj ", 10s);
  ASSERT_TRUE(adj_line) << agent.logText();
  std::ifstream adj_file(fmt::format("/proc/{}/oom_score_adj", pid));
  int adj = 1;
  adj_file >> adj;
  EXPECT_EQ(metricOf(agent, "headroom_agent_oom_score_adj"), adj);
  if (adj > -500) {
    EXPECT_NE(adj_line->find("not protected from the OOM killer"), std::string::npos) << *adj_line;
  }
  // Lowering it needs CAP_SYS_RESOURCE: where the test has it, the agent says the change.
  {
    std::ofstream w(fmt::format("/proc/{}/oom_score_adj", pid));
    w << "-900" << std::flush;
    if (w) {
      auto changed = agent.waitLog("oom_score_adj -900: the OOM killer passes over the agent", 10s);
      EXPECT_TRUE(changed) << agent.logText();
      adj = -900;
    }
  }
  // The limit: what the agent holds now, plus room for a hog larger than the agent even after the
  // agent grew while it recorded a kill (the sanitizers' quarantine keeps what it freed: 85 MiB
  // more after the first kill was seen under load, which with 96 MiB of room made the agent the
  // larger and the victim).
  auto usage = sb->read();
  ASSERT_TRUE(usage) << usage.error().describe();
  std::uint64_t agent_rss = 0;
  {
    std::ifstream st(fmt::format("/proc/{}/statm", pid));
    std::uint64_t size = 0, resident = 0;
    st >> size >> resident;
    agent_rss = resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  }
  const std::uint64_t limit = usage->usage + 2 * agent_rss + 96 * kMiB;
  ASSERT_TRUE(sb->setLimit(limit));
  std::vector<ChildProcess> hogs;
  int recorded = 0;
  for (int i = 1; i <= 3; ++i) {
    auto hog = ChildProcess::spawn({HEADROOM_WORKLOAD, "--anon-slow", std::to_string(2 * limit)}, sb->procsFile());
    ASSERT_TRUE(hog) << hog.error().describe();
    const pid_t hog_pid = hog->pid();
    hogs.push_back(std::move(*hog));
    auto line = agent.waitLog(fmt::format("OOM kill recorded as record {}", i), 60s);
    ASSERT_TRUE(line) << agent.logText();
    ASSERT_TRUE(killedBySignal(hogs.back())) << "the hog was the victim";
    ASSERT_EQ(::kill(pid, 0), 0) << "the agent survived";
    // Served too (published right after the record is written).
    auto served = agent.waitJson("/v1/ooms", [&](const nlohmann::json& j) {
      return !j["events"].empty() && j["events"].back()["victims"][0]["tgid"] == hog_pid;
    });
    EXPECT_TRUE(served) << agent.getJson("/v1/ooms").dump().substr(0, 2000);
    ++recorded;
  }
  EXPECT_TRUE(agent.waitHealthy(5s));
  auto contents = readJournal(tmp.file("oom.hrj"));
  ASSERT_TRUE(contents);
  ASSERT_EQ(contents->records.size(), 3u);
  for (const auto& r : contents->records) EXPECT_NE(victimOf(r), static_cast<std::uint64_t>(pid));
  std::printf(
      "agent near its cgroup's limit (%.0f MiB: the agent's %.0f MiB RSS + 96 MiB), oom_score_adj %d: %d hogs "
      "OOM-killed, the agent never, each kill recorded\n",
      static_cast<double>(limit) / kMiB, static_cast<double>(agent_rss) / kMiB, adj, recorded);
  agent.stop();
}

}  // namespace
}  // namespace headroom
