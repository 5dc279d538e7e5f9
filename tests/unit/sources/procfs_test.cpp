#include <gtest/gtest.h>

#include "headroom/sources/procfs.h"
#include "testing/fixture_tree.h"

namespace headroom {
namespace {

using testing::FakeProcess;
using testing::FixtureTree;

TEST(ProcStatus, ParsesMemoryFieldsInBytes) {
  auto s = parseProcStatus(
      "Name:\tcuzk\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nPid:\t4242\nPPid:\t1\n"
      "Uid:\t1001\t1001\t1001\t1001\nVmSize:\t 2000000 kB\nVmLck:\t 1024 kB\nVmPin:\t 2048 kB\nVmHWM:\t 900 kB\n"
      "VmRSS:\t 800 kB\nRssAnon:\t 500 kB\nRssFile:\t 200 kB\nRssShmem:\t 100 kB\nVmPTE:\t 64 kB\n"
      "VmSwap:\t 0 kB\nThreads:\t18\n");
  ASSERT_TRUE(s) << s.error().describe();
  EXPECT_EQ(s->tgid, 4242);
  EXPECT_EQ(s->uid, 1001u);
  EXPECT_FALSE(s->kernel_thread);
  EXPECT_EQ(s->vm_rss, 800u * 1024);
  EXPECT_EQ(s->rss_shmem, 100u * 1024);
  EXPECT_EQ(s->vm_pte, 64u * 1024);
  EXPECT_EQ(s->vm_pin, 2048u * 1024);
  EXPECT_EQ(s->threads, 18u);
}

TEST(ProcStatus, KernelThreadsAndTruncation) {
  auto k = parseProcStatus("Name:\tkworker/0:1\nTgid:\t12\nPid:\t12\nPPid:\t2\nKthread:\t1\nThreads:\t1\n");
  ASSERT_TRUE(k);
  EXPECT_TRUE(k->kernel_thread);
  auto old = parseProcStatus("Name:\tkthreadd\nTgid:\t2\nPid:\t2\nPPid:\t0\nThreads:\t1\n");
  ASSERT_TRUE(old);
  EXPECT_TRUE(old->kernel_thread) << "no VmRSS line: no mm (kernels without Kthread:)";
  EXPECT_FALSE(parseProcStatus("Name:\tbash\nUmask:\t00"));
}

TEST(ProcStat, CommWithSpacesAndParentheses) {
  auto s = parseProcStat(
      "4242 (my (odd) prog) R 1 4242 4242 0 -1 4194304 1500 0 7 0 120 30 0 0 20 0 3 0 987654 "
      "100000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n");
  ASSERT_TRUE(s) << s.error().describe();
  EXPECT_EQ(s->pid, 4242);
  EXPECT_EQ(s->comm, "my (odd) prog");
  EXPECT_EQ(s->state, 'R');
  EXPECT_EQ(s->ppid, 1);
  EXPECT_EQ(s->minflt, 1500u);
  EXPECT_EQ(s->majflt, 7u);
  EXPECT_EQ(s->utime_ticks, 120u);
  EXPECT_EQ(s->start_time_ticks, 987654u);
}

TEST(ProcStat, TruncatedOrGarbage) {
  EXPECT_FALSE(parseProcStat("4242 (bash) S 1 4242"));
  EXPECT_FALSE(parseProcStat("garbage"));
  EXPECT_FALSE(parseProcStat(""));
}

// Hand-made, in the layout of this machine's /proc/self/statm (6.18).
TEST(Statm, ResidentInBytesAndBadInput) {
  EXPECT_EQ(parseStatmResidentBytes("6179 1207 1003 214 0 334 0\n", 4096).value(), 1207u * 4096);
  EXPECT_FALSE(parseStatmResidentBytes("", 4096));
  EXPECT_FALSE(parseStatmResidentBytes("6179", 4096)) << "truncated after the size";
  EXPECT_FALSE(parseStatmResidentBytes("6179 12x7 1003", 4096));
  EXPECT_FALSE(parseStatmResidentBytes("1 18446744073709551615 0", 4096)) << "bytes beyond 64 bits";
}

TEST(SmapsRollup, PssParts) {
  auto r = parseSmapsRollup(
      "00400000-7ffd ---p 00000000 00:00 0 [rollup]\nRss:   1780 kB\nPss:   771 kB\n"
      "Pss_Anon:  112 kB\nPss_File:  659 kB\nPss_Shmem: 0 kB\nLocked: 4 kB\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->pss, 771u * 1024);
  EXPECT_EQ(r->pss_file, 659u * 1024);
  EXPECT_EQ(r->locked, 4u * 1024);
  EXPECT_FALSE(parseSmapsRollup("00400000-7ffd ---p 00000000 00:00 0 [rollup]\nRss:   17"));
}

TEST(Cmdline, NulSeparated) {
  EXPECT_EQ(parseCmdline(std::string("cuzk\0--budget\0"
                                     "300GiB\0",
                                     20)),
            "cuzk --budget 300GiB");
  EXPECT_EQ(parseCmdline(""), "");
}

TEST(Meminfo, NamedFieldsAndHugetlb) {
  FixtureTree t;
  t.meminfo(16ULL << 30, 8ULL << 30);
  auto fs = t.fs();
  auto m = parseMeminfo(*fs.readFile("/proc/meminfo"));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->mem_total, 16ULL << 30);
  EXPECT_EQ(m->mem_available, 8ULL << 30);
  EXPECT_EQ(m->page_tables, 64ULL << 20);
  EXPECT_EQ(m->hugepages_total, 4u);
  EXPECT_EQ(m->hugetlb, 8ULL << 20);
  EXPECT_FALSE(m->mem_available_estimated);
}

TEST(Meminfo, OldKernelWithoutMemAvailableOrHugetlb) {
  auto m = parseMeminfo(
      "MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 10 kB\nCached: 200 kB\nShmem: 50 kB\n"
      "SReclaimable: 20 kB\nHugePages_Total: 2\nHugepagesize: 2048 kB\n");
  ASSERT_TRUE(m);
  EXPECT_TRUE(m->mem_available_estimated);
  EXPECT_EQ(m->mem_available, (100u + 200 + 10 + 20 - 50) * 1024);
  EXPECT_EQ(m->hugetlb, 2u * 2048 * 1024);
  EXPECT_FALSE(parseMeminfo("MemFree: 1 kB\n"));
}

TEST(ReadProcess, ReadsEveryFile) {
  FixtureTree t;
  FakeProcess p;
  p.pid = 321;
  p.comm = "cuzk";
  p.cmdline = "cuzk daemon";
  p.memory_cgroup = "/prover";
  p.rss_anon = 100 << 20;
  p.pss_anon = 100 << 20;
  p.vm_pte = 2 << 20;
  p.threads = 7;
  t.process(p);
  auto fs = t.fs();
  auto r = readProcess(fs, 321);
  ASSERT_EQ(r.outcome, ReadOutcome::kOk) << r.error.describe();
  EXPECT_EQ(r.sample.comm, "cuzk");
  EXPECT_EQ(r.sample.cmdline, "cuzk daemon");
  EXPECT_EQ(r.sample.cgroups->v1_memory.value(), "/prover");
  EXPECT_EQ(r.sample.status.vm_pte, 2u << 20);
  EXPECT_EQ(r.sample.status.threads, 7u);
  ASSERT_TRUE(r.sample.smaps.has_value());
  EXPECT_EQ(r.sample.smaps->pss_anon, 100u << 20);
  EXPECT_EQ(r.sample.start_time_ticks, 1000u);
}

TEST(ReadProcess, VanishedBetweenListingAndRead) {
  FixtureTree t;
  t.mkdir("/proc/777");  // listed, but its files are gone: the process exited
  auto fs = t.fs();
  auto r = readProcess(fs, 777);
  EXPECT_EQ(r.outcome, ReadOutcome::kVanished);
  EXPECT_EQ(readProcess(fs, 778).outcome, ReadOutcome::kVanished) << "no directory at all";
}

TEST(ReadProcess, ExitingProcessWithEmptyFilesIsVanished) {
  FixtureTree t;
  FakeProcess p;
  p.pid = 55;
  t.process(p);
  t.write("/proc/55/smaps_rollup", "");
  auto fs = t.fs();
  EXPECT_EQ(readProcess(fs, 55).outcome, ReadOutcome::kVanished);
}

TEST(ReadProcess, NoSmapsIsNotAnError) {
  FixtureTree t;
  FakeProcess p;
  p.pid = 56;
  p.with_smaps = false;
  t.process(p);
  auto fs = t.fs();
  auto r = readProcess(fs, 56);
  ASSERT_EQ(r.outcome, ReadOutcome::kOk);
  EXPECT_FALSE(r.sample.smaps.has_value());
}

TEST(ReadProcess, GarbageStatusIsAFailureNamingTheFile) {
  FixtureTree t;
  FakeProcess p;
  p.pid = 57;
  t.process(p);
  t.write("/proc/57/status", "complete nonsense\n");
  auto fs = t.fs();
  auto r = readProcess(fs, 57);
  ASSERT_EQ(r.outcome, ReadOutcome::kFailed);
  EXPECT_NE(r.error.message.find("/proc/57/status"), std::string::npos);
}

TEST(ReadProcess, KernelThreadsAndFilteredOnesAreNotRead) {
  FixtureTree t;
  t.write("/proc/2/cgroup", "0::/\n");
  t.write("/proc/2/stat",
          "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 0 0 0 18446744073709551615 0 0 0 "
          "0 0 0 0 2147483647 0 0 0 0 17 0 0 0 0 0 0\n");
  t.write("/proc/2/status", "Name:\tkthreadd\nTgid:\t2\nPid:\t2\nPPid:\t0\nKthread:\t1\n");
  FakeProcess p;
  p.pid = 58;
  t.process(p);
  auto fs = t.fs();
  EXPECT_EQ(readProcess(fs, 2).outcome, ReadOutcome::kKernelThread);
  auto skipped = readProcess(fs, 58, true, [](const ProcCgroups&) { return false; });
  EXPECT_EQ(skipped.outcome, ReadOutcome::kSkipped);
}

TEST(ListPids, NumericEntriesOnly) {
  FixtureTree t;
  t.mkdir("/proc/10");
  t.mkdir("/proc/2");
  t.mkdir("/proc/sys");
  t.write("/proc/meminfo", "MemTotal: 1 kB\n");
  auto fs = t.fs();
  auto pids = listPids(fs);
  ASSERT_TRUE(pids);
  EXPECT_EQ(*pids, (std::vector<pid_t>{2, 10}));
}

}  // namespace
}  // namespace headroom

namespace headroom {
namespace {

constexpr const char* kSmaps =
    "7f0000000000-7f0000200000 rw-p 00000000 00:00 0 \n"
    "Size:               2048 kB\n"
    "Rss:                2048 kB\n"
    "VmFlags: rd wr mr mw me lo ac sd \n"
    "7f1000000000-7f1000400000 rw-s 00000000 00:05 12 /dev/nvidia0\n"
    "Size:               4096 kB\n"
    "Rss:                   0 kB\n"
    "VmFlags: rd wr sh mr mw me ms io pf dc de dd sd \n";

TEST(Smaps, VmasAndFlags) {
  auto v = parseSmapsVmas(kSmaps);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].start, 0x7f0000000000u);
  EXPECT_EQ(v[0].end, 0x7f0000200000u);
  EXPECT_TRUE(v[0].hasFlag("lo"));
  EXPECT_TRUE(v[1].hasFlag("pf"));
  EXPECT_TRUE(parseSmapsVmas("garbage\nVmFlags: rd\n").empty());
}

TEST(Smaps, PinnedResidencyFromVmFlags) {
  auto v = parseSmapsVmas(kSmaps);
  EXPECT_EQ(pinnedInsideRss(v, {0x7f0000001000}).value(), true) << "locked anonymous pages: in RSS";
  EXPECT_EQ(pinnedInsideRss(v, {0x7f1000000000}).value(), false) << "a driver's io/pfn mapping: no RSS shows it";
  EXPECT_EQ(pinnedInsideRss(v, {0x7f0000001000, 0x7f1000000000}).value(), false);
  EXPECT_FALSE(pinnedInsideRss(v, {0x1000}).has_value());
}

}  // namespace
}  // namespace headroom
