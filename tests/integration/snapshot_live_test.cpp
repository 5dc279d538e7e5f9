// The snapshot against the real kernel: a child memory cgroup of our own, workloads that
// allocate known amounts of each kind of memory, and the snapshot checked against the truth.
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <sys/utsname.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "headroom/model/snapshot.h"
#include "headroom/sensors/task_iter.h"
#include "headroom/sources/collector.h"
#include "testing/cgroup_sandbox.h"
#include "testing/child_process.h"

namespace headroom {
namespace {

using testing::CgroupSandbox;
using testing::ChildProcess;

constexpr std::uint64_t kMiB = 1ULL << 20;

#define SKIP_WITHOUT_CGROUPS()                                               \
  do {                                                                       \
    if (auto why = CgroupSandbox::unavailableReason()) GTEST_SKIP() << *why; \
  } while (0)

// Removes a tmpfs file when the test ends, whatever happens.
struct TmpfsFile {
  std::string path;
  ~TmpfsFile() { std::filesystem::remove(path); }
};

// The resident bytes of a process's mappings of `file`, from /proc/PID/smaps: a walk of its
// page tables, exact on every kernel.
std::uint64_t residentOf(pid_t pid, const std::string& file) {
  std::ifstream in(fmt::format("/proc/{}/smaps", pid));
  std::string line;
  bool mine = false;
  std::uint64_t kib = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (std::isxdigit(static_cast<unsigned char>(line[0])) && line.find('-') < line.find(' ')) {
      mine = line.size() >= file.size() && line.compare(line.size() - file.size(), file.size(), file) == 0;
    } else if (mine && line.rfind("Rss:", 0) == 0) {
      kib += std::stoull(line.substr(4));
    }
  }
  return kib * 1024;
}

// How far the kernel's RSS counters (what /proc/PID/status and every RSS figure show) may lag
// the page tables. Before 6.2 each thread caches its RSS changes and adds them to the mm's
// counters every 64 faults (SPLIT_RSS_COUNTING, replaced by per-CPU counters in 6.2), and a read
// fault on a file or shmem mapping maps up to fault_around_bytes (64 KiB) at once: up to 4 MiB
// per thread. Since 6.2 the counters are exact to within a page per CPU.
double rssLagBytes() {
  utsname u{};
  ::uname(&u);
  int major = 0, minor = 0;
  std::sscanf(u.release, "%d.%d", &major, &minor);
  return (major < 6 || (major == 6 && minor < 2)) ? 64.0 * 64 * 1024 : 0.5 * kMiB;
}

ChildProcess startWorkload(const CgroupSandbox& sb, std::vector<std::string> args) {
  args.insert(args.begin(), HEADROOM_WORKLOAD);
  auto c = ChildProcess::spawn(args, sb.procsFile());
  if (!c) throw std::runtime_error(c.error().describe());
  auto line = c->readLine();
  if (!line || line->rfind("ready", 0) != 0)
    throw std::runtime_error("workload did not get ready: " + (line ? *line : line.error().describe()));
  return std::move(*c);
}

// The three ways the processes are read, each held to the same truth: every /proc file of every
// process (one-shot commands); the agent's cache over /proc (stat first, the rest when due);
// the agent's task iterator (one BPF read) with /proc only where it has no figure.
enum class Source { kProcfs, kProcfsCached, kTaskIterator };

std::string sourceName(const ::testing::TestParamInfo<Source>& i) {
  switch (i.param) {
    case Source::kProcfs: return "Procfs";
    case Source::kProcfsCached: return "ProcfsCached";
    case Source::kTaskIterator: return "TaskIterator";
  }
  return "?";
}

struct Sampler {
  SourceRoot root;
  ProcessCache cache;
  CgroupFileCache cgroup_files;  // as the agent samples: the cgroups' files held between samples
  std::unique_ptr<TaskIterator> tasks;
  Source mode;

  explicit Sampler(Source m) : mode(m) {
    auto r = openSourceRoot("/");
    if (!r) throw std::runtime_error(r.error().describe());
    root = std::move(*r);
    if (mode == Source::kTaskIterator) {
      auto it = TaskIterator::open(root.collector->hierarchy().version());
      if (!it) throw std::runtime_error("task iterator: " + it.error().describe());
      tasks = std::move(*it);
    }
  }
  RawSample collect(CollectOptions o) {
    if (mode != Source::kProcfs) {
      o.cache = &cache;
      o.cgroup_files = &cgroup_files;
    }
    o.source = tasks.get();
    auto raw = root.collector->collect(o);
    if (!raw) throw std::runtime_error(raw.error().describe());
    if (mode == Source::kTaskIterator) {
      EXPECT_EQ(raw->stats.process_source, "bpf-task-iterator");
    }
    return std::move(*raw);
  }
  // A cached sampler reads twice: the second sample is the one made from what it remembered.
  std::shared_ptr<const Snapshot> snapshotOf(const CgroupSandbox& sb) {
    CollectOptions o;
    o.cgroups = {sb.path()};
    if (mode != Source::kProcfs) (void)collect(o);
    return buildSnapshot(collect(o), RoleMatcher({*parseRoleRule("prover=comm:headroom-worklo")}));
  }
};

class SnapshotLive : public ::testing::TestWithParam<Source> {};
INSTANTIATE_TEST_SUITE_P(Sources, SnapshotLive,
                         ::testing::Values(Source::kProcfs, Source::kProcfsCached, Source::kTaskIterator), sourceName);

TEST_P(SnapshotLive, BreakdownMatchesKnownAllocations) {
  SKIP_WITHOUT_CGROUPS();
  auto sb = CgroupSandbox::create("headroom-snapshot-test");
  ASSERT_TRUE(sb) << sb.error().describe();
  ASSERT_TRUE(sb->setLimit(1024 * kMiB));
  TmpfsFile shared{fmt::format("/dev/shm/headroom-test-{}-shared", ::getpid())};
  TmpfsFile unmapped{fmt::format("/dev/shm/headroom-test-{}-unmapped", ::getpid())};

  // anon; shmem mapped by two processes; a sparse mapping that costs page tables; and a tmpfs
  // file that nobody maps (its writer exits).
  ChildProcess a =
      startWorkload(*sb, {"--anon", std::to_string(96 * kMiB), "--shm-create", shared.path, std::to_string(64 * kMiB)});
  ChildProcess b = startWorkload(*sb, {"--shm-map", shared.path});
  ChildProcess c = startWorkload(*sb, {"--sparse", std::to_string(4096 * kMiB)});  // 2048 touched pages
  ChildProcess d = startWorkload(*sb, {"--tmpfs-file", unmapped.path, std::to_string(32 * kMiB), "--exit-after-ready"});
  ASSERT_TRUE(d.wait());

  Sampler sampler(GetParam());
  auto snap = sampler.snapshotOf(*sb);
  const CgroupSnapshot* cg = snap->findCgroup(sb->path());
  ASSERT_NE(cg, nullptr);
  const Attribution& at = cg->attribution;

  // Every part plus unattributed is the usage, always.
  std::int64_t sum = at.unattributed;
  for (const Part& p : at.parts) sum += static_cast<std::int64_t>(p.bytes);
  EXPECT_EQ(sum, static_cast<std::int64_t>(cg->memory.usage));

  // anon: 96 MiB + 8 MiB of sparse pages + a little of each process's own heap and stack.
  std::uint64_t anon = at.bytesOf(PartKind::kAnon).value();
  EXPECT_GE(anon, 104 * kMiB);
  EXPECT_LE(anon, 112 * kMiB);
  // 64 MiB mapped by A and B (counted once, by PSS); 32 MiB that no process maps.
  EXPECT_NEAR(static_cast<double>(at.bytesOf(PartKind::kShmemMapped).value()), 64.0 * kMiB, 1.0 * kMiB);
  EXPECT_NEAR(static_cast<double>(at.bytesOf(PartKind::kShmemUnmapped).value()), 32.0 * kMiB, 1.0 * kMiB);
  // One page-table page per touched 2 MiB span.
  if (auto pt = at.bytesOf(PartKind::kPageTables)) {
    EXPECT_GE(*pt, 8 * kMiB);
    EXPECT_LE(*pt, 8 * kMiB + 2 * kMiB);
    EXPECT_GT(at.invisibleBytes(), 40 * kMiB) << "32 MiB unmapped shmem + 8 MiB page tables at least";
    // What the kernel charged that we could not name stays small.
    EXPECT_LT(std::abs(at.unattributed), static_cast<std::int64_t>(4 * kMiB)) << at.unattributed;
  } else {
    // memory.stat has no pagetables before 5.11: they are what is unattributed, and it says so.
    EXPECT_TRUE(std::any_of(at.notes.begin(), at.notes.end(),
                            [](const std::string& n) { return n.find("no \"pagetables\" key") != std::string::npos; }));
    EXPECT_GE(at.unattributed, static_cast<std::int64_t>(8 * kMiB)) << at.unattributed;
    EXPECT_LT(at.unattributed, static_cast<std::int64_t>(8 * kMiB + 6 * kMiB)) << at.unattributed;
    EXPECT_GT(at.invisibleBytes(), 32 * kMiB) << "32 MiB unmapped shmem at least";
  }

  // Per process: PSS splits the shared 64 MiB between A and B; RSS shows it twice.
  const ProcessSnapshot* pa = snap->findProcess(a.pid());
  const ProcessSnapshot* pb = snap->findProcess(b.pid());
  const ProcessSnapshot* pc = snap->findProcess(c.pid());
  ASSERT_TRUE(pa && pb && pc);
  EXPECT_EQ(pa->role, Role::kProver);
  for (const ProcessSnapshot* p : {pa, pb}) {
    double mapped = static_cast<double>(residentOf(p->sample.pid, shared.path));
    EXPECT_NEAR(mapped, 64.0 * kMiB, 0.5 * kMiB) << "pid " << p->sample.pid << ": its page tables map all of it";
    EXPECT_NEAR(static_cast<double>(p->attribution.rss_shmem), mapped, rssLagBytes())
        << "pid " << p->sample.pid << ": RssShmem, as far as the kernel's counters lag";
  }
  EXPECT_NEAR(static_cast<double>(pa->attribution.pss_shmem.value()), 32.0 * kMiB, 0.5 * kMiB);
  EXPECT_NEAR(static_cast<double>(pb->attribution.pss_shmem.value()), 32.0 * kMiB, 0.5 * kMiB);
  EXPECT_NEAR(static_cast<double>(pa->attribution.rss_anon), 96.0 * kMiB, 2.0 * kMiB);
  EXPECT_GE(pc->attribution.page_tables, 8 * kMiB);
  EXPECT_LE(pc->attribution.page_tables, 8 * kMiB + 256 * 1024);
  EXPECT_GT(pc->attribution.overhead_share, pc->attribution.page_tables) << "page tables plus its share of the rest";
  EXPECT_EQ(snap->findProcess(d.pid()), nullptr) << "the tmpfs writer has exited";

  if (cg->memory.version == 1) {
    // v1: page tables are the processes' summed VmPTE, exact; the rest of kmem estimated.
    std::uint64_t vmpte = pa->attribution.page_tables + pb->attribution.page_tables + pc->attribution.page_tables;
    EXPECT_EQ(at.bytesOf(PartKind::kPageTables).value_or(0), std::min(vmpte, cg->memory.kmem_usage.value()));
    bool estimated_other = false;
    for (const Part& p : at.parts) {
      if (p.kind == PartKind::kKernelOther) estimated_other = p.accuracy == Accuracy::kEstimated;
    }
    EXPECT_TRUE(estimated_other);
  }
}

// Every process of the machine is in an unscoped snapshot, whatever cgroup it is in: on cgroup
// v2 the root cgroup (pid 1, everything a bare machine starts there) has no memory.current,
// which once dropped all of its processes.
TEST_P(SnapshotLive, EveryProcessIsInTheTable) {
  SKIP_WITHOUT_CGROUPS();
  auto userProcesses = [] {
    std::set<pid_t> out;
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      const std::string name = e.path().filename();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream st(e.path() / "status");
      std::string line;
      bool user = false;  // kernel threads have no VmSize
      while (std::getline(st, line)) user |= line.rfind("VmSize:", 0) == 0;
      if (user) out.insert(std::stoi(name));
    }
    return out;
  };
  Sampler sampler(GetParam());
  if (GetParam() != Source::kProcfs) (void)sampler.collect({});
  auto before = userProcesses();
  RawSample raw = sampler.collect({});
  for (const std::string& w : raw.stats.warnings) ADD_FAILURE() << "warning: " << w;
  EXPECT_EQ(raw.stats.processes_outside_mount, 0u);
  auto snap = buildSnapshot(std::move(raw), RoleMatcher());
  auto after = userProcesses();
  std::size_t checked = 0;
  for (pid_t pid : before) {
    if (after.count(pid) == 0) continue;  // came and went around the snapshot
    ++checked;
    EXPECT_NE(snap->findProcess(pid), nullptr) << "pid " << pid << " is missing from the table";
  }
  EXPECT_GT(checked, 0u);
  if (after.count(1) != 0) {
    const ProcessSnapshot* init = snap->findProcess(1);
    ASSERT_NE(init, nullptr) << "pid 1";
    EXPECT_NE(snap->findCgroup(init->cgroup), nullptr) << "pid 1's cgroup " << init->cgroup;
  }
}

TEST(SnapshotCli, JsonOnTheSandbox) {
  SKIP_WITHOUT_CGROUPS();
  auto sb = CgroupSandbox::create("headroom-snapshot-cli");
  ASSERT_TRUE(sb) << sb.error().describe();
  ChildProcess a = startWorkload(*sb, {"--anon", std::to_string(48 * kMiB)});
  auto r = testing::runCommand(
      {HEADROOM_BINARY, "snapshot", "--json", "--cgroup", sb->path(), "--role-rule", "prover=comm:headroom-worklo"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["cgroups"].size(), 1u);
  EXPECT_EQ(j["cgroups"][0]["memory"]["path"], sb->path());
  bool seen = false;
  for (const auto& p : j["processes"]) {
    if (p["pid"] != a.pid()) continue;
    seen = true;
    EXPECT_EQ(p["role"], "prover");
    EXPECT_NEAR(p["rss_anon_bytes"].get<double>(), 48.0 * kMiB, 2.0 * kMiB);
  }
  EXPECT_TRUE(seen);
  auto pid = testing::runCommand({HEADROOM_BINARY, "snapshot", "--pid", std::to_string(a.pid())});
  ASSERT_EQ(pid.exit_code, 0) << pid.err;
  EXPECT_NE(pid.out.find(sb->path().substr(sb->path().size() - 20)), std::string::npos) << pid.out;
}

TEST_P(SnapshotLive, ExitedProcessesAreCountedNotErrors) {
  SKIP_WITHOUT_CGROUPS();
  auto sb = CgroupSandbox::create("headroom-snapshot-churn");
  ASSERT_TRUE(sb) << sb.error().describe();
  // Processes come and go while the collector reads: it must never fail because of that.
  std::vector<ChildProcess> kids;
  for (int i = 0; i < 20; ++i) kids.push_back(startWorkload(*sb, {"--anon", std::to_string(kMiB)}));
  Sampler sampler(GetParam());
  std::thread killer([&] {
    for (auto& k : kids) {
      k.closeStdin();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  for (int round = 0; round < 20; ++round) {
    CollectOptions o;
    o.cgroups = {sb->path()};
    RawSample raw = sampler.collect(o);
    EXPECT_EQ(raw.stats.processes_failed, 0u) << raw.stats.warnings.front();
  }
  killer.join();
  for (auto& k : kids) ASSERT_TRUE(k.wait());
}

}  // namespace
}  // namespace headroom
