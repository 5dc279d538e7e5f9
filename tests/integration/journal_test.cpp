// The OOM journal as an engineer meets it: the real agent records a real OOM kill of a
// workload with a known mix (anon, shmem, page tables, an mlock'd pool) with its breakdown and
// what grew before it; `headroom report` tells it and draws it; the agent killed with SIGKILL
// inside a journal write leaves a torn record that the restarted agent sets aside, records the
// kill that was in flight, and keeps appending; an unwritable journal is off, said, and the agent
// keeps running.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "headroom/journal/journal.h"
#include "headroom/util/units.h"
#include "testing/cgroup_sandbox.h"
#include "testing/child_process.h"
#include "testing/fixture_tree.h"
#include "testing/integration.h"

namespace headroom {
namespace {

using testing::CgroupSandbox;
using testing::ChildProcess;
using testing::runCommand;
using testing::TempDir;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::uint64_t kMiB = 1ULL << 20;

// The agent at log level info: the journal's lines are what these tests wait for.
using Agent = testing::InfoLogAgent;

// A workload with a known mix that climbs past the limit slowly enough for several samples.
ChildProcess climber(const CgroupSandbox& sb, const std::string& shm) {
  auto w = ChildProcess::spawn(
      {HEADROOM_WORKLOAD, "--shm-create", shm, std::to_string(32 * kMiB), "--sparse", std::to_string(4096 * kMiB),
       "--mlock", std::to_string(16 * kMiB), "--anon", std::to_string(32 * kMiB), "--grow-after-ready",
       std::to_string(512 * kMiB), "10", "--grow-on-line"},
      sb.procsFile());
  if (!w) throw std::runtime_error(w.error().describe());
  auto line = w->readLine();
  if (!line || line->rfind("ready", 0) != 0) throw std::runtime_error("the workload did not get ready");
  return std::move(*w);
}

nlohmann::json reportJson(const std::string& journal, std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {HEADROOM_BINARY, "report", "--journal", journal, "--json"};
  a.insert(a.end(), extra.begin(), extra.end());
  auto r = runCommand(a);
  if (r.exit_code != 0) throw std::runtime_error(r.err);
  return nlohmann::json::parse(r.out);
}

// An attribution that says its memory.stat has no page tables (before 5.11).
bool saysNoPageTables(const nlohmann::json& attribution) {
  for (const auto& n : attribution["notes"]) {
    if (n.get<std::string>().find("no \"pagetables\" key") != std::string::npos) return true;
  }
  return false;
}

TEST(Journal, AnOomKillIsRecordedWithItsBreakdownAndWhatGrewBeforeIt) {
  SKIP_WITHOUT_ROOT();
  auto sb = CgroupSandbox::create("journal-kill");
  ASSERT_TRUE(sb) << sb.error().describe();
  ASSERT_TRUE(sb->setLimit(256 * kMiB));
  TempDir tmp;
  std::string shm = fmt::format("/dev/shm/headroom-journal-test-{}", ::getpid());
  // What the prover believes it uses, as it would write it.
  std::ofstream(tmp.file("used")) << "100MiB\n";
  Agent agent({"--interval", "200ms", "--cgroup", sb->path(), "--role-rule", "prover=comm:headroom-worklo", "--journal",
               tmp.file("oom.hrj"), "--budget.state-file", tmp.file("state.json"), "--budget.margin-floor", "16MiB",
               "--prover.self-report", tmp.file("used"),
               // A budget from the first sample on, whether or not a sample catches the prover before it dies.
               "--budget.cgroup", sb->path()});
  ASSERT_TRUE(agent.waitLog("journal: OOM kills are recorded in")) << agent.logText();
  ChildProcess w = climber(*sb, shm);
  // Three samples of the workload before it climbs (however slow they come), then the climb.
  auto samples = [&] { return testing::metric(agent.metrics(), "headroom_samples_total").value_or(0); };
  const double seen_from = samples();
  for (auto end = Clock::now() + 60s; samples() < seen_from + 3 && Clock::now() < end;)
    std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(w.writeLine("grow"));
  auto recorded = agent.waitLog("OOM kill recorded as record 1", 60s);
  std::filesystem::remove(shm);
  ASSERT_TRUE(recorded) << agent.logText();

  nlohmann::json rec = reportJson(tmp.file("oom.hrj"));
  EXPECT_EQ(rec["version"], 1);
  EXPECT_EQ(rec["id"], 1);
  // The right victim, in the right cgroup, with the kernel's own figures and task dump.
  ASSERT_FALSE(rec["event"]["victims"].empty());
  EXPECT_EQ(rec["event"]["victims"][0]["tgid"], w.pid());
  EXPECT_EQ(rec["event"]["victims"][0]["comm"], "headroom-worklo");
  EXPECT_EQ(rec["event"]["oom_domain"]["cgroup"], sb->path());
  EXPECT_EQ(rec["event"]["oom_domain"]["limit_bytes"], 256 * kMiB);
  EXPECT_FALSE(rec["event"]["tasks"].empty()) << "the kernel's task dump";
  EXPECT_EQ(rec["cgroup"]["path"], sb->path());
  // The breakdown at the last sample holds the known mix.
  std::map<std::string, double> parts;
  for (const auto& p : rec["cgroup"]["attribution"]["parts"])
    parts[p["kind"].get<std::string>()] = p["bytes"].get<double>();
  EXPECT_GE(parts["shmem_mapped"] + parts["shmem_unmapped"], 31.0 * kMiB) << rec["cgroup"]["attribution"].dump();
  if (!saysNoPageTables(rec["cgroup"]["attribution"])) {
    EXPECT_GE(parts["pagetables"], 7.0 * kMiB) << "4 GiB of sparse address space: 8 MiB of page tables";
  }
  EXPECT_GE(parts["anon"], 48.0 * kMiB);
  // The workload among the processes, with its locked pool and page tables.
  bool found = false;
  for (const auto& p : rec["processes"]) {
    if (p["pid"] != w.pid()) continue;
    found = true;
    EXPECT_EQ(p["role"], "prover");
    EXPECT_NEAR(p["locked_bytes"].get<double>(), 16.0 * kMiB, 1.0 * kMiB);
    EXPECT_GE(p["page_tables_bytes"].get<double>(), 7.0 * kMiB);
  }
  EXPECT_TRUE(found) << rec["processes"].dump();
  // The breakdown at the kill, from the kernel's own report: the same mix, adding up.
  const auto& at = rec["at_kill"];
  ASSERT_TRUE(at.is_object()) << rec.dump();
  EXPECT_EQ(at["source"], "kernel report");
  EXPECT_EQ(at["cgroup"], sb->path());
  std::map<std::string, double> kill_parts;
  for (const auto& p : at["parts"]) kill_parts[p["kind"].get<std::string>()] = p["bytes"].get<double>();
  if (saysNoPageTables(at)) {
    // Before 5.11: the page tables are what does not add up, and it says so.
    EXPECT_EQ(at["adds_up"], false) << at.dump();
    EXPECT_GE(at["unattributed_bytes"].get<double>(), 7.0 * kMiB) << at.dump();
  } else {
    EXPECT_EQ(at["adds_up"], true) << at.dump();
    EXPECT_GE(kill_parts["pagetables"], 7.0 * kMiB) << at.dump();
  }
  EXPECT_GE(kill_parts["shmem_mapped"] + kill_parts["shmem_unmapped"], 31.0 * kMiB) << at.dump();
  EXPECT_GT(at["usage_bytes"].get<double>(), 250.0 * kMiB);
  // The last sample stays, as before the kill; the flight's last point is the kill itself.
  const auto& points = rec["flight"]["points"];
  ASSERT_GE(points.size(), 4u) << "three samples before the climb, those during it, and the kill";
  EXPECT_EQ(points.back()["at_kill"], true);
  EXPECT_EQ(points.back()["usage_bytes"], at["usage_bytes"]);
  // The last sample before it (fast readings of a cgroup near its limit may come between).
  const nlohmann::json* last_sample = nullptr;
  for (const auto& p : points)
    if (!p.value("fast", false) && !p.value("at_kill", false)) last_sample = &p;
  ASSERT_NE(last_sample, nullptr) << points.dump();
  EXPECT_EQ((*last_sample)["usage_bytes"], rec["cgroup"]["memory"]["usage_bytes"]);
  // What grew before the kill: the anon part climbed.
  double first_anon = points.front()["parts"].value("anon", 0.0), last_anon = points.back()["parts"].value("anon", 0.0);
  EXPECT_GT(last_anon, first_anon + 16.0 * kMiB) << points.dump();
  // What the prover believed, and what the kernel charged.
  EXPECT_EQ(rec["self_reported_bytes"], 100 * kMiB);
  EXPECT_GT(rec["charged_bytes"].get<double>(), 240.0 * kMiB);
  ASSERT_TRUE(rec["budget"].is_object()) << "a budget was in force for the prover\n" << agent.logText();
  EXPECT_GT(rec["budget"]["budget_bytes"].get<double>(), 0);
  EXPECT_FALSE(rec["sensors"].empty());
  EXPECT_FALSE(rec["host"]["kernel"].get<std::string>().empty());

  // The report as an engineer reads it, and its picture.
  auto text = runCommand({HEADROOM_BINARY, "report", "--journal", tmp.file("oom.hrj"), "--svg", tmp.file("kill.svg")});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find(fmt::format("pid {} (headroom-worklo) was OOM-killed in {}", w.pid(), sb->path())),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("WHAT GREW"), std::string::npos);
  EXPECT_LT(text.out.find("AT THE KILL"), text.out.find("KILLED")) << "the moment of the kill leads";
  EXPECT_NE(text.out.find("the prover believed it used 100 MiB"), std::string::npos) << text.out;
  auto xml = runCommand({"/bin/sh", "-c", "xmllint --noout \"$0\"", tmp.file("kill.svg")});
  EXPECT_EQ(xml.exit_code, 0) << xml.err;
  std::stringstream svg;
  svg << std::ifstream(tmp.file("kill.svg")).rdbuf();
  EXPECT_NE(svg.str().find("id=\"limit\""), std::string::npos);
  EXPECT_NE(svg.str().find("id=\"kill\""), std::string::npos);
  // The metrics say it.
  EXPECT_NE(agent.metrics().find("headroom_journal_records_total 1"), std::string::npos);
}

// A cgroup born and OOM-killed between two samples (the agent samples once a minute): the record
// still has the whole picture of the moment from the kernel's report, the cgroup's files read at
// the kill, and the parts of a known mix where they belong — page tables of a sparse mapping,
// a tmpfs file nobody maps, an mlock'd pool — adding up to the kernel's charge within 1%.
// An agent sampling once a minute, and a memory cgroup (limit 160 MiB) born after its first
// sample and OOM-killed within a second by a known mix: page tables of a 4 GiB sparse mapping, a
// 24 MiB tmpfs file nobody maps, a 16 MiB mlock'd pool, anon past the limit. The record, and the
// cgroup's path.
struct BriefKill {
  nlohmann::json rec;
  std::string cgroup;
  std::string report;
};

BriefKill briefKill(std::vector<std::string> agent_args) {
  BriefKill out;
  TempDir tmp;
  std::vector<std::string> args = {"--interval", "60s", "--journal", tmp.file("oom.hrj"), "--budget.enabled", "false"};
  args.insert(args.end(), agent_args.begin(), agent_args.end());
  Agent agent(args);
  EXPECT_TRUE(agent.waitLog("journal: OOM kills are recorded in")) << agent.logText();
  // The first sample is taken at start; the next comes a minute later.
  auto samples = [&] { return testing::metric(agent.metrics(), "headroom_samples_total").value_or(0); };
  for (auto end = Clock::now() + 60s; samples() < 1 && Clock::now() < end;) std::this_thread::sleep_for(50ms);
  const double samples_before = samples();
  EXPECT_EQ(samples_before, 1) << agent.logText();
  auto sb = CgroupSandbox::create("journal-brief");
  if (!sb) throw std::runtime_error(sb.error().describe());
  if (!sb->setLimit(160 * kMiB)) throw std::runtime_error("cannot set the limit");
  out.cgroup = sb->path();
  std::string tmpfs = fmt::format("/dev/shm/headroom-journal-brief-{}", ::getpid());
  auto w = ChildProcess::spawn(
      {HEADROOM_WORKLOAD, "--sparse", std::to_string(4096 * kMiB), "--tmpfs-file", tmpfs, std::to_string(24 * kMiB),
       "--mlock", std::to_string(16 * kMiB), "--anon", std::to_string(512 * kMiB)},
      sb->procsFile());
  if (!w) throw std::runtime_error(w.error().describe());
  auto recorded = agent.waitLog("OOM kill recorded as record 1", 60s);
  std::filesystem::remove(tmpfs);
  if (!recorded) throw std::runtime_error("no record:\n" + agent.logText());
  EXPECT_EQ(samples(), samples_before) << "no sample came between the cgroup's birth and its kill";
  out.rec = reportJson(tmp.file("oom.hrj"));
  auto text = runCommand({HEADROOM_BINARY, "report", "--journal", tmp.file("oom.hrj")});
  EXPECT_EQ(text.exit_code, 0) << text.err;
  out.report = text.out;
  return out;
}

// The cgroup lived between two samples: the record still has the whole picture of the moment
// from the kernel's report, the cgroup's files read at the kill, and the parts of the known mix
// where they belong, adding up to the kernel's charge within 1%.
TEST(Journal, ACgroupBornAndKilledBetweenTwoSamplesHasTheWholePictureOfTheKill) {
  SKIP_WITHOUT_ROOT();
  BriefKill k = briefKill({});
  const nlohmann::json& rec = k.rec;
  EXPECT_TRUE(rec["cgroup"].is_null()) << "never sampled";
  const auto& at = rec["at_kill"];
  ASSERT_TRUE(at.is_object()) << rec.dump();
  EXPECT_EQ(at["source"], "kernel report");
  EXPECT_EQ(at["cgroup"], k.cgroup);
  EXPECT_EQ(at["limit_bytes"], 160 * kMiB);
  double usage = at["usage_bytes"].get<double>();
  std::map<std::string, double> parts;
  for (const auto& p : at["parts"]) parts[p["kind"].get<std::string>()] = p["bytes"].get<double>();
  const bool no_page_tables = std::any_of(at["notes"].begin(), at["notes"].end(), [](const nlohmann::json& n) {
    return n.get<std::string>().find("no \"pagetables\" key") != std::string::npos;
  });
  if (no_page_tables) {
    // Before 5.11 memory.stat has no page tables: they are what does not add up, and it says so.
    EXPECT_EQ(parts.count("pagetables"), 0u) << at.dump();
    EXPECT_EQ(at["adds_up"], false) << at.dump();
    EXPECT_GE(at["unattributed_bytes"].get<double>(), 7.0 * kMiB) << "the 8 MiB of page tables\n" << at.dump();
    EXPECT_LE(at["unattributed_bytes"].get<double>(), 8.0 * kMiB + 0.01 * usage) << at.dump();
  } else {
    EXPECT_EQ(at["adds_up"], true) << at.dump();
    EXPECT_LE(std::abs(at["unattributed_bytes"].get<double>()), 0.01 * usage) << at.dump();
    EXPECT_GE(parts["pagetables"], 7.0 * kMiB) << "4 GiB of sparse address space: 8 MiB of page tables\n" << at.dump();
  }
  // 24 MiB; before 6.2 the task dump has no rss_shmem and the mapped part is bounded by file_mapped
  // (the binary's own pages among them), so a little less may show as unmapped.
  EXPECT_GE(parts["shmem_unmapped"], 20.0 * kMiB) << "the tmpfs file nobody maps\n" << at.dump();
  EXPECT_GE(parts["anon"], 16.0 * kMiB) << "the mlock'd pool is anon\n" << at.dump();
  // What the kernel printed, every key, and the cgroup's files read at the kill.
  EXPECT_FALSE(rec["event"]["kernel_report"]["memcg"]["stats"].empty());
  bool read = false;
  for (const auto& c : rec["event"]["read_at_kill"]["cgroups"]) {
    if (c["path"] != k.cgroup) continue;
    read = true;
    if (c["peak_bytes"].is_null()) {
      // No memory.peak before 5.19: its parent has none either.
      std::string parent = "/sys/fs/cgroup" + k.cgroup.substr(0, k.cgroup.rfind('/'));
      EXPECT_NE(::access((parent + "/memory.peak").c_str(), F_OK), 0) << c.dump();
    } else {
      EXPECT_GE(c["peak_bytes"].get<double>(), 150.0 * kMiB) << c.dump();
    }
  }
  EXPECT_TRUE(read) << rec["event"]["read_at_kill"].dump();
  // The flight recorder never saw it: its one point is the kill.
  ASSERT_EQ(rec["flight"]["points"].size(), 1u);
  EXPECT_EQ(rec["flight"]["points"][0]["at_kill"], true);

  EXPECT_NE(k.report.find(fmt::format("the kernel charged {}", formatBytes(static_cast<std::uint64_t>(usage)))),
            std::string::npos)
      << k.report;
  EXPECT_NE(k.report.find("shmem nobody maps"), std::string::npos) << k.report;
  if (no_page_tables) {
    EXPECT_NE(k.report.find("the parts do not add up"), std::string::npos) << k.report;
    EXPECT_NE(k.report.find("no \"pagetables\" key (kernel before 5.11)"), std::string::npos) << k.report;
  } else {
    EXPECT_NE(k.report.find("the parts add up to the charge within 1%"), std::string::npos) << k.report;
  }
}

// Without /dev/kmsg (no CAP_SYSLOG) the picture is the domain's files, read the moment BPF's
// mark_victim came: said so, with how late, and the peak the cgroup reached.
TEST(Journal, WithoutTheKernelsReportThePictureIsTheFilesReadAtTheMark) {
  SKIP_WITHOUT_ROOT();
  BriefKill k = briefKill({"--sensors.kmsg", "false"});
  const auto& at = k.rec["at_kill"];
  ASSERT_TRUE(at.is_object()) << k.rec.dump();
  EXPECT_EQ(at["source"], "files read after the kill");
  EXPECT_EQ(at["cgroup"], k.cgroup) << "the nearest cgroup with a limit";
  EXPECT_EQ(at["limit_bytes"], 160 * kMiB);
  if (at["peak_bytes"].is_null()) {
    // No memory.peak before 5.19: its parent has none either.
    std::string parent = "/sys/fs/cgroup" + k.cgroup.substr(0, k.cgroup.rfind('/'));
    EXPECT_NE(::access((parent + "/memory.peak").c_str(), F_OK), 0) << at.dump();
  } else {
    EXPECT_GE(at["peak_bytes"].get<double>(), 150.0 * kMiB) << at.dump();
  }
  ASSERT_TRUE(at["read_after_seconds"].is_number()) << at.dump();
  EXPECT_LT(at["read_after_seconds"].get<double>(), 1.0) << "read at the mark, not at a sample";
  for (const auto& p : at["parts"]) EXPECT_NE(p["accuracy"], "exact") << "read after the kill\n" << p.dump();
  EXPECT_TRUE(k.rec["event"]["kernel_report"].is_null());
  EXPECT_NE(k.report.find("the OOM domain's files, read "), std::string::npos) << k.report;
}

// Without BPF the kernel's report is the first word of the kill: the files are read then.
TEST(Journal, WithoutBpfTheKernelsReportTriggersTheReadAtTheKill) {
  SKIP_WITHOUT_ROOT();
  BriefKill k = briefKill({"--sensors.bpf", "false"});
  EXPECT_EQ(k.rec["at_kill"]["source"], "kernel report") << k.rec.dump();
  bool read = false;
  for (const auto& c : k.rec["event"]["read_at_kill"]["cgroups"]) {
    if (c["path"] != k.cgroup) continue;
    read = true;
    if (c["peak_bytes"].is_null()) {
      // No memory.peak before 5.19: its parent has none either.
      std::string parent = "/sys/fs/cgroup" + k.cgroup.substr(0, k.cgroup.rfind('/'));
      EXPECT_NE(::access((parent + "/memory.peak").c_str(), F_OK), 0) << c.dump();
    } else {
      EXPECT_GE(c["peak_bytes"].get<double>(), 150.0 * kMiB) << c.dump();
    }
  }
  EXPECT_TRUE(read) << k.rec["event"].dump();
}

TEST(Journal, AfterASigkillMidWriteTheRestartedAgentSetsTheTornRecordAsideAndKeepsAppending) {
  SKIP_WITHOUT_ROOT();
  auto sb = CgroupSandbox::create("journal-restart");
  ASSERT_TRUE(sb) << sb.error().describe();
  ASSERT_TRUE(sb->setLimit(128 * kMiB));
  TempDir tmp;
  std::string journal = tmp.file("oom.hrj");
  std::vector<std::string> args = {"--interval", "200ms", "--cgroup",         sb->path(),
                                   "--journal",  journal, "--budget.enabled", "false"};
  auto kill = [&](Agent& agent, const std::string& needle) {
    auto w = ChildProcess::spawn({HEADROOM_WORKLOAD, "--anon-slow", std::to_string(256 * kMiB)}, sb->procsFile());
    ASSERT_TRUE(w) << w.error().describe();
    ASSERT_TRUE(agent.waitLog(needle, 30s)) << agent.logText();
  };
  std::string cut_frame;  // what the killed write left
  {
    Agent agent(args);
    kill(agent, "OOM kill recorded as record 1");
    // The next kill's record is cut short for real: the agent's sampling thread (which writes the
    // journal) is stopped (ptrace) as it enters the journal's write(), the write's length cut to
    // half the frame, and the agent SIGKILLed as that write returns. (A kill aimed at a write
    // from outside lands before or after it: the kernel copies a frame this size in one go.)
    const pid_t pid = agent.child().pid();
    ASSERT_EQ(::ptrace(PTRACE_SEIZE, pid, nullptr, PTRACE_O_TRACESYSGOOD), 0) << std::strerror(errno);
    ASSERT_EQ(::ptrace(PTRACE_INTERRUPT, pid, nullptr, nullptr), 0) << std::strerror(errno);
    int st = 0;
    ASSERT_EQ(::waitpid(pid, &st, __WALL), pid);
    auto w = ChildProcess::spawn({HEADROOM_WORKLOAD, "--anon-slow", std::to_string(256 * kMiB)}, sb->procsFile());
    ASSERT_TRUE(w) << w.error().describe();
    bool cut = false;
    for (auto end = Clock::now() + 60s; Clock::now() < end;) {
      ASSERT_EQ(::ptrace(PTRACE_SYSCALL, pid, nullptr, nullptr), 0) << std::strerror(errno);
      ASSERT_EQ(::waitpid(pid, &st, __WALL), pid);
      ASSERT_TRUE(WIFSTOPPED(st)) << st;
      if (WSTOPSIG(st) != (SIGTRAP | 0x80)) continue;
      __ptrace_syscall_info info{};
      ASSERT_GT(::ptrace(PTRACE_GET_SYSCALL_INFO, pid, sizeof info, &info), 0) << std::strerror(errno);
      if (cut) {
        ASSERT_EQ(info.op, PTRACE_SYSCALL_INFO_EXIT);
        ASSERT_GT(info.exit.rval, 0) << "the cut write wrote";
        break;
      }
      if (info.op != PTRACE_SYSCALL_INFO_ENTRY || info.entry.nr != SYS_write) continue;
      std::error_code ec;
      auto target = std::filesystem::read_symlink(fmt::format("/proc/{}/fd/{}", pid, info.entry.args[0]), ec);
      if (ec || target != journal) continue;
      user_regs_struct regs{};
      ASSERT_EQ(::ptrace(PTRACE_GETREGS, pid, nullptr, &regs), 0) << std::strerror(errno);
      ASSERT_GT(regs.rdx, 64u) << "a whole frame";
      regs.rdx /= 2;
      ASSERT_EQ(::ptrace(PTRACE_SETREGS, pid, nullptr, &regs), 0) << std::strerror(errno);
      cut = true;
    }
    ASSERT_TRUE(cut) << "the agent never wrote the second record";
    agent.child().kill(SIGKILL);
    auto status = agent.child().wait();
    ASSERT_TRUE(status && WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL);
    const std::string bytes = testing::fileText(journal);
    const std::size_t last = bytes.rfind("HRJ1 ");
    ASSERT_NE(last, std::string::npos);
    cut_frame = bytes.substr(last);
    ASSERT_EQ(cut_frame.find('\n'), std::string::npos) << "the frame is torn: no newline";
  }
  Agent again(args);
  ASSERT_TRUE(again.waitLog("journal: OOM kills are recorded in")) << again.logText();
  std::smatch aside;
  const std::string log = again.logText();
  ASSERT_TRUE(
      std::regex_search(log, aside, std::regex("a torn last record \\(a crash mid-write\\) was set aside in (\\S+)")))
      << log;
  EXPECT_EQ(testing::fileText(aside[1].str()), cut_frame) << "the torn tail, byte for byte";
  // The kill whose record was cut was in flight: the restarted agent records it first.
  ASSERT_TRUE(again.waitLog("OOM kill recorded as record 2")) << again.logText();
  kill(again, "OOM kill recorded as record 3");
  auto list = reportJson(journal, {"--list"});
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0]["id"], 1);
  EXPECT_EQ(list[1]["id"], 2);
  EXPECT_EQ(list[2]["id"], 3);
  auto recovered = readJournal(journal);
  ASSERT_TRUE(recovered && recovered->records.size() == 3u);
  EXPECT_EQ(recovered->records[1]["found_after"]["how"], "in_flight") << recovered->records[1].dump();
  std::size_t torn = 0;
  for (const auto& e : std::filesystem::directory_iterator(tmp.path))
    torn += e.path().filename().string().rfind("oom.hrj.torn-", 0) == 0;
  EXPECT_EQ(torn, 1u);
  auto plain = runCommand({HEADROOM_BINARY, "report", "--journal", journal, "--list"});
  EXPECT_EQ(plain.err.find("damaged"), std::string::npos) << "nothing damaged is left in the journal: " << plain.err;
  EXPECT_NE(again.metrics().find("headroom_journal_damaged_records_total 1"), std::string::npos);
}

TEST(Journal, TheProversSelfReportIsReadFromItsPrometheusEndpoint) {
  SKIP_WITHOUT_ROOT();
  if (::access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3 to serve the prover's metrics";
  auto sb = CgroupSandbox::create("journal-selfreport");
  ASSERT_TRUE(sb) << sb.error().describe();
  TempDir tmp;
  auto serve = [&](const std::string& body) { std::ofstream(tmp.file("metrics")) << body; };
  serve("# TYPE cuzk_used_bytes gauge\ncuzk_used_bytes{pool=\"gpu\"} 1\ncuzk_used_bytes{pool=\"all\"} 123456789\n");
  // The prover's metrics endpoint: a real HTTP server on loopback, serving that file.
  auto server = ChildProcess::spawn(
      {"/usr/bin/python3", "-u", "-m", "http.server", "--bind", "127.0.0.1", "0", "--directory", tmp.path.string()});
  ASSERT_TRUE(server) << server.error().describe();
  // "Serving HTTP on 127.0.0.1 port N (http://127.0.0.1:N/) ...": python's start (http.server
  // imports much of the standard library) took over 10 s on an emulated guest of a busy host.
  auto line = server->readLine(60s);
  ASSERT_TRUE(line) << "python3 http.server did not start: " << line.error().describe();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(*line, m, std::regex(R"(port ([0-9]+))"))) << *line;
  std::string url = fmt::format("http://127.0.0.1:{}/metrics#metric:cuzk_used_bytes{{pool=\"all\"}}", m[1].str());
  Agent agent({"--interval", "200ms", "--cgroup", sb->path(), "--budget.cgroup", sb->path(), "--budget.margin-floor",
               "16MiB", "--budget.state-file", tmp.file("state.json"), "--journal", tmp.file("oom.hrj"),
               "--prover.self-report", url});
  nlohmann::json b;
  for (int i = 0; i < 50; ++i) {
    b = agent.getJson("/v1/budget");
    if (b.is_object() && b.contains("inputs") && b["inputs"]["self_reported_bytes"].is_number()) break;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(b.is_object() && b.contains("inputs")) << b.dump();
  EXPECT_EQ(b["inputs"]["self_reported_bytes"], 123456789u) << b.dump();
  // A value that is not a number: counted, said once, and the budget goes on without it.
  serve("cuzk_used_bytes{pool=\"all\"} lots\n");
  ASSERT_TRUE(agent.waitLog("prover.self_report:", 10s)) << agent.logText();
  std::string metrics;
  for (int i = 0; i < 50; ++i) {
    metrics = agent.metrics();
    if (metrics.find("headroom_self_report_failures_total 0") == std::string::npos) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_NE(metrics.find("headroom_self_report_failures_total"), std::string::npos);
  EXPECT_EQ(metrics.find("headroom_self_report_failures_total 0\n"), std::string::npos);
  server->kill(SIGTERM);
}

// The prover's endpoint is the prover's: stuck, or dripping its answer a byte at a time (each
// read within the client's timeout), it must never hold the agent's samples.
TEST(Journal, AProversEndpointThatDripsNeverHoldsASample) {
  SKIP_WITHOUT_ROOT();
  if (::access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3 to serve the endpoint";
  auto sb = CgroupSandbox::create("journal-drip");
  ASSERT_TRUE(sb) << sb.error().describe();
  TempDir tmp;
  const std::string drip =
      tmp.file("drip.py",
               "import socket, threading, time\n"
               "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(16)\n"
               "print(s.getsockname()[1], flush=True)\n"
               "def one(c):\n"
               "    try:\n"
               "        c.recv(4096)\n"
               "        for b in b'HTTP/1.1 200 OK\\r\\nContent-Length: 3\\r\\n\\r\\n123' * 1000:\n"
               "            c.send(bytes([b])); time.sleep(0.2)\n"
               "    except OSError: pass\n"
               "while True:\n"
               "    c, _ = s.accept(); threading.Thread(target=one, args=(c,), daemon=True).start()\n");
  auto server = ChildProcess::spawn({"/usr/bin/python3", "-u", drip});
  ASSERT_TRUE(server) << server.error().describe();
  auto port = server->readLine(60s);  // python's start: slow on an emulated guest (above)
  ASSERT_TRUE(port) << "the dripping endpoint did not start: " << port.error().describe();
  Agent agent({"--interval", "200ms", "--cgroup", sb->path(), "--journal", tmp.file("oom.hrj"), "--prover.self-report",
               fmt::format("http://127.0.0.1:{}/used", *port)});
  ASSERT_TRUE(agent.waitHealthy()) << "the first sample was held: " << agent.logText();
  // Samples go on (the counter moves well past the three a stall would allow), and the missing
  // answer is counted and said.
  ASSERT_TRUE(agent.waitMetrics([](const std::string& t) {
    return testing::metric(t, "headroom_samples_total").value_or(0) >= 15 &&
           testing::metric(t, "headroom_self_report_failures_total").value_or(0) >= 1;
  })) << agent.metrics().substr(0, 2000);
  auto said = agent.waitLog("no answer for", 10s);
  ASSERT_TRUE(said) << agent.logText();
  EXPECT_NE(said->find("the endpoint is slow or stuck"), std::string::npos) << *said;
  EXPECT_EQ(agent.getJson("/healthz")["status"], "ok");
  server->kill(SIGKILL);
}

// An explicit journal that cannot be opened at start is exit 2 (tests/unit/cli/agent_cli_test.cpp).
// One that cannot be opened at a reload is off, said, and the agent keeps running; a later
// reload to a writable place turns it on again.
TEST(Journal, AJournalThatCannotOpenAtAReloadIsOffAndSaidAndTheAgentKeepsRunning) {
  SKIP_WITHOUT_ROOT();
  auto sb = CgroupSandbox::create("journal-off");
  ASSERT_TRUE(sb) << sb.error().describe();
  TempDir tmp;
  auto configWith = [&](const std::string& journal) {
    return tmp.file("agent.toml", fmt::format("interval = \"200ms\"\ncgroups = [\"{}\"]\n[journal]\npath = \"{}\"\n",
                                              sb->path(), journal));
  };
  std::filesystem::create_directories(tmp.file("journals"));
  const std::string config = configWith(tmp.file("journals"));
  Agent agent({"--config", config});
  auto journalState = [&](const std::string& want) {
    nlohmann::json h;
    for (int i = 0; i < 100; ++i) {
      h = agent.getJson("/healthz");
      if (h.is_object() && h["status"] == "ok" && h["journal"]["state"] == want) break;
      std::this_thread::sleep_for(100ms);
    }
    return h;
  };
  nlohmann::json h = journalState("on");
  EXPECT_EQ(h["journal"]["path"], tmp.file("journals/oom-journal.hrj"))
      << "a directory names the journal in it: " << h.dump();

  configWith("/proc/headroom/oom.hrj");
  agent.child().kill(SIGHUP);
  auto line = agent.waitLog("the OOM journal is off");
  ASSERT_TRUE(line) << agent.logText();
  EXPECT_NE(line->find("/proc/headroom/oom.hrj"), std::string::npos) << *line;
  h = journalState("off");
  EXPECT_EQ(h["status"], "ok");
  EXPECT_EQ(h["journal"]["state"], "off");
  EXPECT_NE(h["journal"]["reason"].get<std::string>().find("/proc/headroom"), std::string::npos);
  EXPECT_TRUE(agent.waitMetrics([](const std::string& t) {
    return t.find("headroom_journal_up 0\n") != std::string::npos;
  })) << "the next sample's page says it too";

  configWith(tmp.file("again.hrj"));
  agent.child().kill(SIGHUP);
  h = journalState("on");
  EXPECT_EQ(h["journal"]["path"], tmp.file("again.hrj")) << h.dump();
}

}  // namespace
}  // namespace headroom
