// The sampler's memory of processes on hand-made /proc trees (tests/testing/fixture_tree.h): what
// a second sample reads, what it does when a pid is reused, RSS moves, an exec renames the
// process, or PSS comes due.
#include <gtest/gtest.h>

#include "headroom/sources/process_cache.h"
#include "testing/fixture_tree.h"

namespace headroom {
namespace {

using testing::FakeProcess;
using testing::FixtureTree;

constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::int64_t kSecond = 1'000'000'000;

TEST(ProcessCache, PssIsDueOnFirstSightOnAStepAndWithAge) {
  ProcessCache cache(PssPolicy{std::chrono::seconds(60), 4 * kMiB});
  CachedProcess e;
  EXPECT_TRUE(cache.pssDue(e, 10 * kMiB, 0)) << "never read";
  e.smaps = SmapsRollup{};
  e.smaps_read_ns = 100 * kSecond;
  e.smaps_read_rss = 10 * kMiB;
  EXPECT_FALSE(cache.pssDue(e, 10 * kMiB + 4 * kMiB - 1, 159 * kSecond));
  EXPECT_TRUE(cache.pssDue(e, 14 * kMiB, 101 * kSecond)) << "grew by the step";
  EXPECT_TRUE(cache.pssDue(e, 6 * kMiB, 101 * kSecond)) << "shrank by the step";
  EXPECT_TRUE(cache.pssDue(e, 10 * kMiB, 160 * kSecond)) << "60 s old";
  e.smaps_unreadable = true;
  EXPECT_FALSE(cache.pssDue(e, 99 * kMiB, 999 * kSecond)) << "permissions do not change";
}

// Ten thousand small processes: their first reads and age reads take from a budget (a burst,
// then pss_reads_per_second), so PSS ages rather than the sample paying for every read; a
// process that moved by the step, or a large one, is read whatever the budget.
TEST(ProcessCache, SmallProcessesReadsForAgeOrFirstSightWaitForTheBudget) {
  ProcessCache cache(PssPolicy{std::chrono::seconds(60), 4 * kMiB, 10});
  cache.beginSample(kSecond);
  CachedProcess small;
  std::size_t read = 0;
  for (int i = 0; i < 1000; ++i) read += cache.pssDue(small, 1 * kMiB, kSecond) ? 1 : 0;
  EXPECT_EQ(read, static_cast<std::size_t>(kPssBurst)) << "the burst, then none";
  EXPECT_EQ(cache.pssDeferred(), 1000 - read);
  EXPECT_TRUE(cache.pssDue(small, kPssAlwaysBytes, kSecond)) << "a large process is read whatever the budget";
  CachedProcess moved;
  moved.smaps = SmapsRollup{};
  moved.smaps_read_rss = 1 * kMiB;
  moved.smaps_read_ns = kSecond;
  EXPECT_TRUE(cache.pssDue(moved, 5 * kMiB, kSecond)) << "moved by the step";
  EXPECT_FALSE(cache.pssDue(moved, 1 * kMiB, 200 * kSecond)) << "old, small, and no budget left";
  cache.beginSample(kSecond + kSecond / 2);  // half a second at 10 a second: 5 reads
  read = 0;
  for (int i = 0; i < 100; ++i) read += cache.pssDue(moved, 1 * kMiB, 200 * kSecond) ? 1 : 0;
  EXPECT_EQ(read, 5u);
  cache.beginSample(3600 * kSecond);
  read = 0;
  for (int i = 0; i < 1000; ++i) read += cache.pssDue(small, 1 * kMiB, 3600 * kSecond) ? 1 : 0;
  EXPECT_EQ(read, static_cast<std::size_t>(kPssBurst)) << "an idle hour refills the burst, no more";
}

TEST(ProcessCache, AReusedPidStartsAfreshAndGoneProcessesAreForgotten) {
  ProcessCache cache;
  cache.beginSample(0);
  CachedProcess& a = cache.entry(42, 1000);
  a.cmdline = "first";
  a.cmdline_read = true;
  CachedProcess& again = cache.entry(42, 1000);
  EXPECT_EQ(again.cmdline, "first");
  CachedProcess& reused = cache.entry(42, 2000);
  EXPECT_FALSE(reused.cmdline_read) << "another process under the same pid";
  cache.entry(43, 5);
  cache.forget();
  EXPECT_EQ(cache.size(), 2u);
  cache.beginSample(0);
  cache.entry(43, 5);
  cache.forget();
  EXPECT_EQ(cache.size(), 1u) << "pid 42 was not seen in the last sample";
}

class CachedProcfs : public ::testing::Test {
 protected:
  void SetUp() override {
    t.mountV1();
    p.pid = 321;
    p.comm = "prover";
    p.cmdline = "prover --gpu 0";
    p.memory_cgroup = "/proving";
    p.rss_anon = 64 * kMiB;
    p.rss_file = 8 * kMiB;
    p.pss_anon = 64 * kMiB;
    p.pss_file = 4 * kMiB;
    t.process(p);
  }
  ProcessRead read(std::int64_t now_ns, ProcFileReads& reads) {
    return readProcessCached(fs, p.pid, cache, true, now_ns, {}, reads);
  }
  FixtureTree t;
  FsRoot fs = t.fs();
  FakeProcess p;
  ProcessCache cache{PssPolicy{std::chrono::seconds(60), 4 * kMiB}};
};

TEST_F(CachedProcfs, ASecondSampleReadsCgroupAndStatOnly) {
  ProcFileReads first;
  auto r = read(0, first);
  ASSERT_EQ(r.outcome, ReadOutcome::kOk) << r.error.describe();
  EXPECT_EQ(first.files, 5u) << "cgroup, stat, status, cmdline, smaps_rollup";
  EXPECT_EQ(r.sample.cmdline, "prover --gpu 0");
  EXPECT_EQ(r.sample.status.rss_anon, 64 * kMiB);
  ASSERT_TRUE(r.sample.smaps);
  EXPECT_EQ(r.sample.smaps->pss, 68 * kMiB);

  ProcFileReads second;
  auto again = read(kSecond, second);
  ASSERT_EQ(again.outcome, ReadOutcome::kOk) << again.error.describe();
  EXPECT_EQ(second.files, 2u) << "cgroup, stat";
  EXPECT_EQ(second.status + second.smaps + second.cmdline, 0u);
  EXPECT_EQ(again.sample.status.rss_anon, 64 * kMiB) << "remembered";
  ASSERT_TRUE(again.sample.smaps);
  EXPECT_EQ(again.sample.smaps->pss, 68 * kMiB);
  EXPECT_EQ(again.sample.smaps_read_ns, 0) << "when PSS was read, not now";
  EXPECT_EQ(again.sample.cmdline, "prover --gpu 0");
}

TEST_F(CachedProcfs, MovedRssReadsStatusAndAStepReadsPss) {
  ProcFileReads reads;
  ASSERT_EQ(read(0, reads).outcome, ReadOutcome::kOk);
  p.rss_anon = 80 * kMiB;  // 16 MiB more: stat's rss moves, and by more than the PSS step
  p.pss_anon = 80 * kMiB;
  t.process(p);
  ProcFileReads moved;
  auto r = read(kSecond, moved);
  ASSERT_EQ(r.outcome, ReadOutcome::kOk) << r.error.describe();
  EXPECT_EQ(moved.status, 1u);
  EXPECT_EQ(moved.smaps, 1u);
  EXPECT_EQ(r.sample.status.rss_anon, 80 * kMiB);
  EXPECT_EQ(r.sample.smaps->pss, 84 * kMiB);
  EXPECT_EQ(r.sample.smaps_read_ns, kSecond);
}

TEST_F(CachedProcfs, AnExecReadsTheCmdlineAgainAndAReusedPidEverything) {
  ProcFileReads reads;
  ASSERT_EQ(read(0, reads).outcome, ReadOutcome::kOk);
  p.comm = "cuzk";  // exec: the same pid and start time, another program
  p.cmdline = "cuzk --serve";
  t.process(p);
  ProcFileReads exec;
  auto r = read(kSecond, exec);
  ASSERT_EQ(r.outcome, ReadOutcome::kOk);
  EXPECT_EQ(exec.cmdline, 1u);
  EXPECT_EQ(r.sample.cmdline, "cuzk --serve");
  p.start_time = 99999;  // the pid reused by another process
  t.process(p);
  ProcFileReads reused;
  auto fresh = read(2 * kSecond, reused);
  ASSERT_EQ(fresh.outcome, ReadOutcome::kOk);
  EXPECT_EQ(reused.files, 5u) << "nothing of the old process is kept";
  EXPECT_EQ(fresh.sample.start_time_ticks, 99999u);
}

TEST_F(CachedProcfs, AProcessThatVanishesOrIsOutOfScope) {
  ProcFileReads reads;
  auto skipped = readProcessCached(
      fs, p.pid, cache, true, 0, [](const ProcCgroups&) { return false; }, reads);
  EXPECT_EQ(skipped.outcome, ReadOutcome::kSkipped);
  EXPECT_EQ(reads.files, 1u) << "its cgroup only";
  t.remove("/proc/321");
  EXPECT_EQ(read(kSecond, reads).outcome, ReadOutcome::kVanished);
  t.write("/proc/322/cgroup", "4:memory:/\n");
  t.write("/proc/322/stat", "");  // an exiting process's empty file
  EXPECT_EQ(readProcessCached(fs, 322, cache, true, 0, {}, reads).outcome, ReadOutcome::kVanished);
}

TEST(KernelProcess, ProcIsReadOnlyForWhatTheSourceLacks) {
  FixtureTree t;
  t.mountV1();
  FakeProcess p;
  p.pid = 500;
  p.comm = "curio";
  p.cmdline = "curio run";
  p.memory_cgroup = "/proving/curio";
  p.rss_anon = 16 * kMiB;
  p.pss_anon = 16 * kMiB;
  t.process(p);
  FakeProcess q = p;
  q.pid = 501;
  q.comm = "curio-helper";
  q.cmdline = "curio helper";
  t.process(q);
  FsRoot fs = t.fs();
  ProcessCache cache;
  KernelProcess k;
  k.pid = 500;
  k.start_time_ticks = p.start_time;
  k.comm = "curio";
  k.cgroup_id = 7777;
  k.status.vm_rss = 16 * kMiB;
  k.oom_score_adj = -500;
  ProcFileReads reads;
  auto r = completeKernelProcess(fs, k, cache, true, 0, {}, reads);
  ASSERT_EQ(r.outcome, ReadOutcome::kOk) << r.error.describe();
  EXPECT_EQ(r.cgroups().memoryPath(1), "/proving/curio");
  EXPECT_EQ(r.sample.cmdline, "curio run");
  EXPECT_EQ(r.sample.oom_score_adj, -500);
  ASSERT_TRUE(r.sample.smaps);
  EXPECT_EQ(reads.cgroup, 1u);
  EXPECT_EQ(reads.cmdline, 1u);
  EXPECT_EQ(reads.smaps, 1u);

  // A second process in the same cgroup: its path is known by the id.
  KernelProcess k2 = k;
  k2.pid = 501;
  k2.comm = "curio-helper";
  ProcFileReads second;
  auto r2 = completeKernelProcess(fs, k2, cache, false, 0, {}, second);
  ASSERT_EQ(r2.outcome, ReadOutcome::kOk) << r2.error.describe();
  EXPECT_EQ(second.cgroup, 0u);
  EXPECT_EQ(r2.cgroups().memoryPath(1), "/proving/curio");
  EXPECT_FALSE(r2.sample.smaps) << "not asked for";

  // The first again, nothing due: no /proc file at all.
  ProcFileReads none;
  auto r3 = completeKernelProcess(fs, k, cache, true, kSecond, {}, none);
  ASSERT_EQ(r3.outcome, ReadOutcome::kOk);
  EXPECT_EQ(none.files, 0u);

  // Moved to another cgroup (a new id): /proc/<pid>/cgroup once more.
  t.write("/proc/500/cgroup", "4:memory:/proving/other\n");
  k.cgroup_id = 8888;
  ProcFileReads moved;
  auto r4 = completeKernelProcess(fs, k, cache, false, kSecond, {}, moved);
  ASSERT_EQ(r4.outcome, ReadOutcome::kOk);
  EXPECT_EQ(moved.cgroup, 1u);
  EXPECT_EQ(r4.cgroups().memoryPath(1), "/proving/other");

  // A pid reused between the kernel's read and /proc's: not the process the source saw.
  k.comm = "renamed";  // forces the cmdline read, and with it the identity check
  t.write("/proc/500/stat",
          "500 (other) S 1 500 500 0 -1 4194560 1 0 0 0 5 3 0 0 20 0 1 0 42 123456789 1 "
          "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n");
  ProcFileReads reused;
  EXPECT_EQ(completeKernelProcess(fs, k, cache, false, kSecond, {}, reused).outcome, ReadOutcome::kVanished);
  // A kernel thread is counted, never read.
  KernelProcess kt;
  kt.pid = 2;
  kt.kernel_thread = true;
  EXPECT_EQ(completeKernelProcess(fs, kt, cache, true, 0, {}, reused).outcome, ReadOutcome::kKernelThread);
}

}  // namespace
}  // namespace headroom
