// The task iterator against /proc on the same live processes, field by field, and the sampler's
// cache: which /proc files a second sample reads (none it does not need), and PSS read again
// when RSS moves.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <cstdio>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "headroom/sensors/task_iter.h"
#include "headroom/sources/collector.h"
#include "testing/cgroup_sandbox.h"
#include "testing/child_process.h"
#include "testing/fixture_tree.h"
#include "testing/integration.h"

namespace headroom {
namespace {

using testing::CgroupSandbox;
using testing::ChildProcess;

constexpr std::uint64_t kMiB = 1ULL << 20;

char stateOf(pid_t pid) {
  const std::string text = testing::fileText(fmt::format("/proc/{}/stat", pid));
  auto close = text.rfind(')');
  return close == std::string::npos || close + 2 >= text.size() ? '?' : text[close + 2];
}

// Stopped processes hold still: every figure read twice is the same figure.
struct Stopped {
  std::vector<pid_t> pids;
  explicit Stopped(std::vector<pid_t> p) : pids(std::move(p)) {
    for (pid_t pid : pids) ::kill(pid, SIGSTOP);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (pid_t pid : pids) {
      while (stateOf(pid) != 'T' && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      EXPECT_EQ(stateOf(pid), 'T') << "pid " << pid << " did not stop";
    }
  }
  ~Stopped() {
    for (pid_t pid : pids) ::kill(pid, SIGCONT);
  }
};

TEST(ProcessSource, TaskIteratorMatchesProcfsFieldByField) {
  auto sb = CgroupSandbox::create("headroom-task-iter");
  ASSERT_TRUE(sb) << sb.error().describe();
  const std::string shm = fmt::format("/dev/shm/headroom-task-iter-{}", ::getpid());
  std::vector<ChildProcess> kids;
  // anon, shared memory, locked memory; threads that have exited (their faults live on in the
  // signal struct); a sparse mapping (page tables); a second mapper of the shared memory.
  kids.push_back(testing::spawnReady({HEADROOM_WORKLOAD, "--anon", std::to_string(24 * kMiB), "--shm-create", shm,
                                      std::to_string(16 * kMiB), "--mlock", std::to_string(2 * kMiB)},
                                     sb->procsFile()));
  kids.push_back(testing::spawnReady({HEADROOM_WORKLOAD, "--threads", "4", std::to_string(8 * kMiB)}, sb->procsFile()));
  kids.push_back(testing::spawnReady({HEADROOM_WORKLOAD, "--sparse", std::to_string(512 * kMiB)}, sb->procsFile()));
  kids.push_back(testing::spawnReady({HEADROOM_WORKLOAD, "--shm-map", shm}, sb->procsFile()));
  std::filesystem::remove(shm);
  {
    std::ofstream adj(fmt::format("/proc/{}/oom_score_adj", kids[1].pid()));
    adj << 345;
  }
  std::vector<pid_t> pids;
  for (const auto& k : kids) pids.push_back(k.pid());
  Stopped stopped(pids);

  auto root = openSourceRoot("/");
  ASSERT_TRUE(root) << root.error().describe();
  const int version = root->collector->hierarchy().version();
  auto it = TaskIterator::open(version);
  ASSERT_TRUE(it) << it.error().describe();
  // Read first as the processes the agent sums exactly (the prover's, those near a limit), then
  // as every other: the folded counts alone on a kernel with per-CPU counters, within their drift.
  (*it)->sumExactly(pids);
  auto tasks = (*it)->read();
  ASSERT_TRUE(tasks) << tasks.error().describe();
  std::map<pid_t, KernelProcess> by_pid;
  for (const KernelProcess& k : *tasks) by_pid[k.pid] = k;
  (*it)->sumExactly({});
  auto folded = (*it)->read();
  ASSERT_TRUE(folded) << folded.error().describe();
  std::map<pid_t, KernelProcess> folded_by_pid;
  for (const KernelProcess& k : *folded) folded_by_pid[k.pid] = k;
  utsname u{};
  ASSERT_EQ(::uname(&u), 0);
  int major = 0, minor = 0;
  ASSERT_EQ(std::sscanf(u.release, "%d.%d", &major, &minor), 2);
  const bool per_cpu_counters =
      major > 6 || (major == 6 && minor >= 2);  // "mm: convert mm's rss stats into percpu_counter"

  ProcessCache cache;
  ProcFileReads reads;
  for (pid_t pid : pids) {
    SCOPED_TRACE(fmt::format("pid {}", pid));
    ASSERT_EQ(by_pid.count(pid), 1u);
    const KernelProcess& k = by_pid[pid];
    ProcessRead p = readProcess(*root->fs, pid, false);
    ASSERT_EQ(p.outcome, ReadOutcome::kOk) << p.error.describe();
    const ProcessSample& s = p.sample;
    EXPECT_FALSE(k.kernel_thread);
    EXPECT_EQ(k.ppid, s.ppid);
    EXPECT_EQ(k.uid, s.uid);
    EXPECT_EQ(k.start_time_ticks, s.start_time_ticks);
    EXPECT_EQ(k.comm, s.comm);
    EXPECT_EQ(k.minflt, s.minflt);
    EXPECT_EQ(k.majflt, s.majflt);
    EXPECT_EQ(k.status.vm_size, s.status.vm_size);
    EXPECT_EQ(k.status.vm_rss, s.status.vm_rss);
    EXPECT_EQ(k.status.vm_hwm, s.status.vm_hwm);
    EXPECT_EQ(k.status.rss_anon, s.status.rss_anon);
    EXPECT_EQ(k.status.rss_file, s.status.rss_file);
    EXPECT_EQ(k.status.rss_shmem, s.status.rss_shmem);
    EXPECT_EQ(k.status.rss_drift, 0u) << "summed exactly";
    ASSERT_EQ(folded_by_pid.count(pid), 1u);
    const ProcStatus& f = folded_by_pid[pid].status;
    if (per_cpu_counters) {
      EXPECT_GT(f.rss_drift, 0u) << "the folded counts are said to be approximate";
    } else {
      EXPECT_EQ(f.rss_drift, 0u) << "no per-CPU counters before 6.2: nothing to fold";
    }
    const std::uint64_t per_counter = f.rss_drift / 3;
    auto near = [&](std::uint64_t got, std::uint64_t want) {
      return got + per_counter >= want && got <= want + per_counter;
    };
    EXPECT_TRUE(near(f.rss_anon, s.status.rss_anon))
        << f.rss_anon << " vs " << s.status.rss_anon << " ± " << per_counter;
    EXPECT_TRUE(near(f.rss_file, s.status.rss_file))
        << f.rss_file << " vs " << s.status.rss_file << " ± " << per_counter;
    EXPECT_TRUE(near(f.rss_shmem, s.status.rss_shmem))
        << f.rss_shmem << " vs " << s.status.rss_shmem << " ± " << per_counter;
    EXPECT_EQ(k.status.vm_pte, s.status.vm_pte);
    EXPECT_EQ(k.status.vm_lck, s.status.vm_lck);
    EXPECT_EQ(k.status.vm_pin, s.status.vm_pin);
    EXPECT_EQ(k.status.vm_swap, s.status.vm_swap);
    EXPECT_EQ(k.status.threads, s.status.threads);
    std::ifstream adj(fmt::format("/proc/{}/oom_score_adj", pid));
    int want_adj = 0;
    adj >> want_adj;
    EXPECT_EQ(k.oom_score_adj, want_adj);
    // The cgroup a new id resolves to is the one /proc names.
    ProcessRead done = completeKernelProcess(*root->fs, k, cache, false, 0, {}, reads);
    ASSERT_EQ(done.outcome, ReadOutcome::kOk) << done.error.describe();
    EXPECT_EQ(done.cgroups().memoryPath(version), s.cgroups->memoryPath(version));
    EXPECT_EQ(done.sample.cmdline, s.cmdline);
  }
  EXPECT_EQ(by_pid[pids[1]].oom_score_adj, 345);
  EXPECT_GE(by_pid[pids[0]].status.vm_lck, 2 * kMiB);
  EXPECT_GE(by_pid[pids[2]].status.vm_pte, 256 * 4096u) << "a page-table page per touched 2 MiB";
  EXPECT_GT(by_pid[pids[3]].status.rss_shmem, 15 * kMiB);
  // Four processes in one cgroup: its path read once, from the first of them.
  EXPECT_EQ(reads.cgroup, 1u);

  // Every user process /proc shows is a task the iterator saw (the first task of the namespace
  // aside, which some kernels' iterator skips: the collector reads that one from /proc).
  std::set<pid_t> missing;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    pid_t pid = std::stoi(name);
    if (by_pid.count(pid) == 0 && pid != 1) missing.insert(pid);
  }
  auto again = (*it)->read();
  ASSERT_TRUE(again);
  std::set<pid_t> now;
  for (const KernelProcess& k : *again) now.insert(k.pid);
  for (pid_t pid : missing) {
    if (std::filesystem::exists(fmt::format("/proc/{}", pid)) && now.count(pid) == 0)
      ADD_FAILURE() << "pid " << pid << " is in /proc but not in the task iterator's output";
  }
}

// The same process sampled again reads nothing it already has; PSS comes back when RSS moves by
// the step, or when it is old.
TEST(ProcessSource, ProcFilesAreReadWhenDueOnly) {
  auto sb = CgroupSandbox::create("headroom-proc-due");
  ASSERT_TRUE(sb) << sb.error().describe();
  ChildProcess w = testing::spawnReady(
      {HEADROOM_WORKLOAD, "--anon", std::to_string(8 * kMiB), "--touch-per-line", std::to_string(16 * kMiB)},
      sb->procsFile());
  auto root = openSourceRoot("/");
  ASSERT_TRUE(root) << root.error().describe();
  auto it = TaskIterator::open(root->collector->hierarchy().version());
  ASSERT_TRUE(it) << it.error().describe();

  for (ProcessSource* source : {static_cast<ProcessSource*>(nullptr), static_cast<ProcessSource*>(it->get())}) {
    SCOPED_TRACE(source ? source->name() : "procfs");
    ProcessCache cache(PssPolicy{std::chrono::hours(1), 4 * kMiB});
    CollectOptions o;
    o.cgroups = {sb->path()};
    o.cache = &cache;
    o.source = source;
    auto pssOf = [&](const RawSample& raw) -> std::optional<std::uint64_t> {
      for (const ProcessSample& p : raw.processes) {
        if (p.pid == w.pid() && p.smaps) return p.smaps->pss;
      }
      return std::nullopt;
    };
    auto first = root->collector->collect(o);
    ASSERT_TRUE(first) << first.error().describe();
    ASSERT_EQ(first->processes.size(), 1u);
    EXPECT_EQ(first->stats.proc_reads.smaps, 1u);
    EXPECT_EQ(first->stats.proc_reads.cmdline, 1u);
    auto pss0 = pssOf(*first);
    ASSERT_TRUE(pss0);

    auto second = root->collector->collect(o);
    ASSERT_TRUE(second) << second.error().describe();
    EXPECT_EQ(second->stats.proc_reads.smaps, 0u);
    EXPECT_EQ(second->stats.proc_reads.cmdline, 0u);
    EXPECT_EQ(second->stats.proc_reads.status, 0u) << "nothing moved";
    if (source) {
      // Nothing at all, but pid 1's cgroup where this kernel's iterator skips pid 1.
      EXPECT_LE(second->stats.proc_reads.cgroup, 1u);
      EXPECT_EQ(second->stats.proc_reads.files, second->stats.proc_reads.cgroup);
    } else {
      // Every process's cgroup (is it in scope?), and this one's stat.
      EXPECT_EQ(second->stats.proc_reads.files, second->stats.proc_reads.cgroup + 1);
    }
    EXPECT_EQ(pssOf(*second), pss0) << "the remembered figure";
    EXPECT_EQ(second->processes.front().smaps_read_ns, first->processes.front().smaps_read_ns);

    ASSERT_TRUE(w.writeLine(""));
    auto touched = w.readLine();
    ASSERT_TRUE(touched && *touched == "touched");
    auto third = root->collector->collect(o);
    ASSERT_TRUE(third) << third.error().describe();
    EXPECT_EQ(third->stats.proc_reads.smaps, 1u) << "RSS moved by 16 MiB, more than the step";
    auto pss1 = pssOf(*third);
    ASSERT_TRUE(pss1);
    EXPECT_GE(*pss1, *pss0 + 15 * kMiB);
  }
  // A figure older than the policy's age is read again.
  ProcessCache young(PssPolicy{std::chrono::nanoseconds(1), 1ULL << 40});
  CollectOptions o;
  o.cgroups = {sb->path()};
  o.cache = &young;
  o.source = it->get();
  ASSERT_TRUE(root->collector->collect(o));
  auto aged = root->collector->collect(o);
  ASSERT_TRUE(aged);
  EXPECT_EQ(aged->stats.proc_reads.smaps, 1u);
}

}  // namespace
}  // namespace headroom
