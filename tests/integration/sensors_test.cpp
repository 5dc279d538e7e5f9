// The BPF sensors and the /dev/kmsg source on the real kernel: real OOM kills in a cgroup of
// our own, real exits, real page faults and mappings, and the CUDA probes on a stand-in
// libcuda and on a real nvcc-built program.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <limits.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include "headroom/sources/collector.h"
#include "headroom/sources/procfs.h"
#include "headroom/sources/workload.h"

#include "headroom/sensors/sensors.h"
#include "testing/cgroup_sandbox.h"
#include "testing/child_process.h"
#include "testing/kernel_features.h"

namespace headroom {
namespace {

using testing::CgroupSandbox;
using testing::ChildProcess;
using testing::expectActiveOrSaysWhy;
using testing::kernelCanRun;
using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kMiB = 1ULL << 20;

std::optional<std::string> unavailable() {
  if (auto why = CgroupSandbox::unavailableReason()) return why;
  if (::access("/sys/kernel/btf/vmlinux", R_OK) != 0) return "no kernel BTF";
  return std::nullopt;
}
#define SKIP_WITHOUT_BPF()                              \
  do {                                                  \
    if (auto why = unavailable()) GTEST_SKIP() << *why; \
  } while (0)

struct Env {
  FsRoot fs = std::move(*FsRoot::open("/"));
  CgroupMounts mounts = std::move(*discoverCgroupMounts(fs));
};

std::unique_ptr<Sensors> startSensors(const Env& env, SensorsConfig cfg = {}) {
  auto s = Sensors::start(env.fs, cfg, env.mounts);
  return s;
}

SensorState stateOf(const Sensors& s, SensorId id) {
  for (const auto& st : s.status()) {
    if (st.id == id) return st.state;
  }
  return SensorState::kOff;
}

ChildProcess spawnReady(std::vector<std::string> args, const std::string& procs = "") {
  auto c = ChildProcess::spawn(args, procs);
  if (!c) throw std::runtime_error(c.error().describe());
  auto line = c->readLine();
  if (!line || line->rfind("ready", 0) != 0) throw std::runtime_error("child did not get ready");
  return std::move(*c);
}

// Polls until `pred` holds or the time is up.
template <typename Pred>
bool pollUntil(Sensors& s, Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  auto end = Clock::now() + limit;
  while (Clock::now() < end) {
    s.poll(50);
    if (pred()) return true;
  }
  return false;
}

std::vector<ExitEvent> exitsOf(std::vector<ExitEvent>& all, pid_t pid) {
  std::vector<ExitEvent> out;
  for (const auto& e : all) {
    if (e.pid == pid) out.push_back(e);
  }
  return out;
}

TEST(Sensors, EveryTracepointSensorIsActiveHere) {
  SKIP_WITHOUT_BPF();
  Env env;
  auto s = startSensors(env);
  // Where the kernel lacks what one needs (5.10: task storage, bpf_get_current_task_btf), that
  // one says so and the rest stay active.
  for (SensorId id :
       {SensorId::kOom, SensorId::kKmsg, SensorId::kExits, SensorId::kFaults, SensorId::kMmap, SensorId::kRss}) {
    expectActiveOrSaysWhy(s->status(), id);
  }
  if (kernelCanRun(SensorId::kCuda))
    EXPECT_EQ(stateOf(*s, SensorId::kCuda), SensorState::kOff) << "no libcuda on this machine until one is given";
  else
    expectActiveOrSaysWhy(s->status(), SensorId::kCuda);
}

// A real OOM kill: the victim, the trigger, the cgroup and the figures, from both sources,
// and the victim's exit classified as oom_killed.
TEST(Sensors, RealOomKillIsCaughtJoinedAndClassified) {
  SKIP_WITHOUT_BPF();
  Env env;
  auto s = startSensors(env);
  auto sb = CgroupSandbox::create("headroom-oom");
  ASSERT_TRUE(sb) << sb.error().describe();
  ASSERT_TRUE(sb->setLimit(64 * kMiB));
  auto child = ChildProcess::spawn({HEADROOM_WORKLOAD, "--anon-slow", std::to_string(256 * kMiB)}, sb->procsFile());
  ASSERT_TRUE(child);
  pid_t pid = child->pid();
  auto st = child->wait(std::chrono::seconds(30));
  ASSERT_TRUE(st);
  ASSERT_TRUE(WIFSIGNALED(*st));
  EXPECT_EQ(WTERMSIG(*st), SIGKILL);

  std::vector<OomEvent> ooms;
  std::vector<ExitEvent> exits;
  ASSERT_TRUE(pollUntil(*s, [&] {
    for (auto& e : s->takeOomEvents()) ooms.push_back(std::move(e));
    for (auto& e : s->takeExitEvents()) exits.push_back(std::move(e));
    return !ooms.empty() && !exitsOf(exits, pid).empty();
  })) << "no OOM event or exit within 10 s";
  ASSERT_EQ(ooms.size(), 1u);
  const OomEvent& e = ooms[0];
  EXPECT_TRUE(e.from_bpf);
  EXPECT_TRUE(e.from_kmsg);
  ASSERT_EQ(e.victims.size(), 1u);
  const OomVictim& v = e.victims[0];
  EXPECT_EQ(v.tgid, pid);
  EXPECT_EQ(v.comm, "headroom-worklo");
  EXPECT_EQ(v.cgroup, sb->path());
  EXPECT_EQ(e.trigger_tgid, pid) << "the victim's own allocation hit the limit";
  EXPECT_EQ(e.trigger_comm, "headroom-worklo");
  EXPECT_EQ(e.trigger_cgroup, sb->path());
  EXPECT_EQ(e.constraint, "CONSTRAINT_MEMCG");
  EXPECT_EQ(e.domain_cgroup.value(), sb->path());
  EXPECT_EQ(e.domain_limit_bytes.value(), 64 * kMiB) << "the domain's limit, not the victim's size";
  ASSERT_TRUE(v.anon_rss.has_value());
  EXPECT_GT(*v.anon_rss, 48 * kMiB);
  EXPECT_LE(*v.anon_rss, 64 * kMiB);
  EXPECT_FALSE(e.tasks.empty()) << "the kernel's task dump of the OOM domain";
  // The victim's figures are the kernel's at the kill: its line in the task dump printed just
  // before it was chosen holds the same RSS (one reading of the same counters, in pages).
  auto in_dump = std::find_if(e.tasks.begin(), e.tasks.end(), [&](const OomTaskDumpEntry& t) { return t.tgid == pid; });
  ASSERT_NE(in_dump, e.tasks.end()) << "the victim is in the task dump";
  std::uint64_t victim_rss = *v.anon_rss + v.file_rss.value_or(0) + v.shmem_rss.value_or(0);
  EXPECT_NEAR(static_cast<double>(victim_rss), static_cast<double>(in_dump->rss_bytes), 1.0 * kMiB);

  auto mine = exitsOf(exits, pid);
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_EQ(mine[0].kind, ExitKind::kOomKilled);
  EXPECT_EQ(mine[0].describe(), "oom_killed");
  auto cg = sb->read();
  ASSERT_TRUE(cg);
  EXPECT_EQ(cg->oom_kills.value_or(0), 1u);
}

// The OOM killer also kills every process that shares the victim's mm, without a mark_victim
// of their own: those exits are OOM kills too.
TEST(Sensors, ProcessesSharingTheVictimsMmAreOomKilled) {
  SKIP_WITHOUT_BPF();
  Env env;
  auto s = startSensors(env);
  auto sb = CgroupSandbox::create("headroom-oom-sharers");
  ASSERT_TRUE(sb) << sb.error().describe();
  ASSERT_TRUE(sb->setLimit(64 * kMiB));
  auto child =
      ChildProcess::spawn({HEADROOM_WORKLOAD, "--clone-vm", "--anon", std::to_string(256 * kMiB)}, sb->procsFile());
  ASSERT_TRUE(child);
  auto line = child->readLine();
  ASSERT_TRUE(line);
  ASSERT_EQ(line->rfind("sharer ", 0), 0u) << *line;
  pid_t sharer = std::stoi(line->substr(7));
  ASSERT_TRUE(child->wait());
  std::vector<ExitEvent> exits;
  ASSERT_TRUE(pollUntil(*s, [&] {
    for (auto& e : s->takeExitEvents()) exits.push_back(std::move(e));
    return !exitsOf(exits, child->pid()).empty() && !exitsOf(exits, sharer).empty();
  })) << "both exits";
  auto victims = exitsOf(exits, child->pid());
  auto sharers = exitsOf(exits, sharer);
  EXPECT_EQ(victims[0].kind, ExitKind::kOomKilled);
  EXPECT_EQ(sharers[0].kind, ExitKind::kOomKilled) << "killed with the victim whose mm it shared";
  EXPECT_TRUE(victims[0].oom_marked || sharers[0].oom_marked) << "one of them was marked";
  EXPECT_TRUE(victims[0].shares_oom_mm || sharers[0].shares_oom_mm || (victims[0].oom_marked && sharers[0].oom_marked))
      << "the other was found through the shared mm (marked " << victims[0].oom_marked << "/" << sharers[0].oom_marked
      << ", shares " << victims[0].shares_oom_mm << "/" << sharers[0].shares_oom_mm << ")";
  ::waitpid(sharer, nullptr, WNOHANG);  // reaped by init once its parent is gone
}

TEST(Sensors, KillNineIsSignaledAndExitIsExited) {
  SKIP_WITHOUT_BPF();
  Env env;
  auto s = startSensors(env);
  ChildProcess killed = spawnReady({HEADROOM_WORKLOAD, "--anon", std::to_string(4 * kMiB)});
  ChildProcess exiting = spawnReady({HEADROOM_WORKLOAD, "--exit-code", "3"});
  killed.kill(SIGKILL);
  exiting.closeStdin();
  ASSERT_TRUE(killed.wait());
  ASSERT_TRUE(exiting.wait());
  std::vector<ExitEvent> exits;
  ASSERT_TRUE(pollUntil(*s, [&] {
    for (auto& e : s->takeExitEvents()) exits.push_back(std::move(e));
    return !exitsOf(exits, killed.pid()).empty() && !exitsOf(exits, exiting.pid()).empty();
  }));
  EXPECT_EQ(exitsOf(exits, killed.pid())[0].describe(), "signaled(9)") << "a kill -9 is never an OOM kill";
  EXPECT_EQ(exitsOf(exits, exiting.pid())[0].describe(), "exited(3)");
  EXPECT_EQ(exitsOf(exits, exiting.pid())[0].comm, "headroom-worklo");
}

TEST(Sensors, FaultsMappingsAndRss) {
  SKIP_WITHOUT_BPF();
  Env env;
  auto s = startSensors(env);
  constexpr std::uint64_t kBytes = 64 * kMiB;  // 16384 fresh pages, MADV_NOHUGEPAGE
  ChildProcess c = spawnReady({HEADROOM_WORKLOAD, "--anon", std::to_string(kBytes), "--map-unmap",
                               std::to_string(32 * kMiB), "--mlock", std::to_string(2 * kMiB)});
  s->poll(0);
  auto a = s->activity(c.pid());
  ASSERT_TRUE(a.has_value());
  // Faults and RSS where the kernel can count them; elsewhere (5.10) their sensors say why and
  // nothing is made up.
  for (SensorId id : {SensorId::kFaults, SensorId::kMmap, SensorId::kRss}) expectActiveOrSaysWhy(s->status(), id);
  if (kernelCanRun(SensorId::kFaults))
    EXPECT_GE(a->faults, kBytes / 4096 + 32 * kMiB / 4096) << "one fault per fresh page at least";
  else
    EXPECT_EQ(a->faults, 0u);
  EXPECT_GE(a->mmap_bytes, kBytes + 32 * kMiB + 2 * kMiB);
  EXPECT_GE(a->munmap_bytes, 32 * kMiB);
  EXPECT_LT(a->munmap_bytes, 40 * kMiB);
  EXPECT_EQ(a->mlock_bytes, 2 * kMiB);
  if (kernelCanRun(SensorId::kRss)) {
    ASSERT_TRUE(a->rss_anon.has_value()) << "kmem:rss_stat";
    auto r = readProcess(env.fs, c.pid(), false);
    ASSERT_EQ(r.outcome, ReadOutcome::kOk);
    EXPECT_NEAR(static_cast<double>(*a->rss_anon), static_cast<double>(r.sample.status.rss_anon), 1.0 * kMiB);
  } else {
    EXPECT_FALSE(a->rss_anon.has_value());
  }
  c.closeStdin();
  ASSERT_TRUE(c.wait());
  s->poll(0);
  EXPECT_FALSE(s->activity(c.pid()).has_value()) << "counters are dropped when the process exits";
}

// The kernel's own count of a process's faults (its threads', dead ones included).
std::uint64_t kernelFaults(const Env& env, pid_t pid) {
  auto r = readProcess(env.fs, pid, false);
  if (r.outcome != ReadOutcome::kOk) throw std::runtime_error(fmt::format("reading /proc/{}", pid));
  return r.sample.minflt + r.sample.majflt;
}

// A fault is counted in a per-CPU run of the process faulting there, which goes to the
// process's total when another process faults on that CPU: the counts must survive threads
// that exit, agree with the kernel's own count, and never leak from one process to another
// when two of them take turns on one CPU.
TEST(Sensors, FaultCountsAgreeWithTheKernelAcrossThreadsAndSharedCpus) {
  SKIP_WITHOUT_BPF();
  Env env;
  auto s = startSensors(env);
  // Where the kernel cannot run it (5.10), the sensor says why instead.
  if (!kernelCanRun(SensorId::kFaults)) return expectActiveOrSaysWhy(s->status(), SensorId::kFaults);
  constexpr std::uint64_t kThreadBytes = 16 * kMiB;
  ChildProcess threaded = spawnReady({HEADROOM_WORKLOAD, "--threads", "4", std::to_string(kThreadBytes)});
  auto a = s->activity(threaded.pid());
  ASSERT_TRUE(a.has_value());
  std::uint64_t kernel = kernelFaults(env, threaded.pid());
  EXPECT_GE(a->faults, 4 * kThreadBytes / 4096) << "the faults of 4 threads that have exited";
  // The kernel also counts faults taken before exec and from kernel mode (copies to user
  // memory); the tracepoint sees user-mode faults since exec.
  EXPECT_LE(a->faults, kernel + 64);
  EXPECT_GE(static_cast<double>(a->faults), 0.9 * static_cast<double>(kernel));

  // Two processes on one CPU, touching memory at the same time: their runs alternate there.
  constexpr std::uint64_t kTouch = 32 * kMiB;
  std::vector<ChildProcess> pair;
  for (int i = 0; i < 2; ++i)
    pair.push_back(
        spawnReady({"/usr/bin/taskset", "-c", "0", HEADROOM_WORKLOAD, "--touch-per-line", std::to_string(kTouch)}));
  for (int round = 0; round < 3; ++round) {
    std::uint64_t before[2], kernel_before[2];
    for (int i = 0; i < 2; ++i) {
      auto b = s->activity(pair[i].pid());
      ASSERT_TRUE(b.has_value());
      before[i] = b->faults;
      kernel_before[i] = kernelFaults(env, pair[i].pid());
    }
    for (auto& c : pair) ASSERT_TRUE(c.writeLine(""));
    for (auto& c : pair) ASSERT_EQ(c.readLine().value_or(""), "touched");
    for (int i = 0; i < 2; ++i) {
      auto b = s->activity(pair[i].pid());
      ASSERT_TRUE(b.has_value());
      std::uint64_t ours = b->faults - before[i];
      std::uint64_t theirs = kernelFaults(env, pair[i].pid()) - kernel_before[i];
      EXPECT_GE(ours, kTouch / 4096) << "round " << round << ", process " << i;
      EXPECT_LE(ours, theirs + 16) << "round " << round << ", process " << i << ": another's faults counted as its own";
      EXPECT_GE(ours + 16, theirs) << "round " << round << ", process " << i;
    }
  }
}

TEST(Sensors, CudaDriverApiOnAStandInLibrary) {
  SKIP_WITHOUT_BPF();
  Env env;
  auto s = startSensors(env);
  // Where the kernel cannot run it (5.10), the sensor says why instead.
  if (!kernelCanRun(SensorId::kCuda)) return expectActiveOrSaysWhy(s->status(), SensorId::kCuda);
  ASSERT_TRUE(s->attachCuda(HEADROOM_CUDA_FAKE, false));
  EXPECT_EQ(stateOf(*s, SensorId::kCuda), SensorState::kActive);
  ChildProcess c = spawnReady({HEADROOM_CUDA_CLIENT, HEADROOM_CUDA_FAKE});
  auto g = s->gpu(c.pid());
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->pinned_live, 5 * kMiB) << "1 + 2 + 4 MiB, the 2 MiB freed; register/unregister nets 0";
  EXPECT_EQ(g->pinned_peak, 7 * kMiB);
  EXPECT_EQ(g->pinned_allocs, 4u);
  EXPECT_EQ(g->pinned_frees, 2u);
  EXPECT_EQ(g->failed_calls, 2u) << "the failed calls count nothing else";
  EXPECT_EQ(g->device_live, 8 * kMiB + 1024 * 100) << "8 MiB + a 1024-pitch x 100 rows";
  EXPECT_EQ(g->device_peak, 8 * kMiB + 1024 * 100 + 16 * kMiB);
  EXPECT_EQ(g->device_allocs, 4u);
  EXPECT_EQ(g->device_frees, 2u);
  // The stand-in pins with mmap + mlock, as drivers that pin user pages do: inside its RSS.
  auto addrs = s->pinnedAddresses(c.pid());
  ASSERT_EQ(addrs.size(), 2u);
  auto smaps = env.fs.readFile(fmt::format("/proc/{}/smaps", c.pid()));
  ASSERT_TRUE(smaps);
  EXPECT_EQ(pinnedInsideRss(parseSmapsVmas(*smaps), addrs), std::optional<bool>(true));

  // Exit with allocations outstanding: released from the counters, never leaked.
  c.closeStdin();
  ASSERT_TRUE(c.wait());
  s->poll(0);
  EXPECT_FALSE(s->gpu(c.pid()).has_value());
}

TEST(Sensors, CudaContextDestroyReleasesImplicitly) {
  SKIP_WITHOUT_BPF();
  Env env;
  auto s = startSensors(env);
  // Where the kernel cannot run it (5.10), the sensor says why instead.
  if (!kernelCanRun(SensorId::kCuda)) return expectActiveOrSaysWhy(s->status(), SensorId::kCuda);
  ASSERT_TRUE(s->attachCuda(HEADROOM_CUDA_FAKE, false));
  ChildProcess c = spawnReady({HEADROOM_CUDA_CLIENT, HEADROOM_CUDA_FAKE});
  ASSERT_EQ(s->gpu(c.pid())->pinned_live, 5 * kMiB);
  ASSERT_TRUE(c.writeLine("ctx"));
  auto line = c.readLine();
  ASSERT_TRUE(line);
  EXPECT_EQ(*line, "destroyed");
  auto g = s->gpu(c.pid());
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->pinned_live, 0u);
  EXPECT_EQ(g->device_live, 0u);
  EXPECT_EQ(g->implicit_frees, 5 * kMiB + 8 * kMiB + 1024 * 100);
  EXPECT_EQ(g->pinned_peak, 7 * kMiB) << "the peak stays";
}

// The nvcc-built prover-like program (tests/gpu/cuda_prover.cu, the runtime linked in) under the
// runtime probes (on the binary itself) and the driver probes (on the driver's libcuda.so.1 where
// one is installed, else the toolkit's stub). Without a device its first call fails (35: no
// driver, 100: a driver and no device) and only that failure is counted; on a GPU the pinned pool
// and the device memory are counted exactly.
TEST(Sensors, RealCudaProgramIsCountedExactlyOrOnlyItsFailedCall) {
  SKIP_WITHOUT_BPF();
  if (std::string(HEADROOM_CUDA_PROVER).empty()) GTEST_SKIP() << "no nvcc at build time (make test-gpu installs it)";
  Env env;
  auto s = startSensors(env);
  // Where the kernel cannot run it (5.10), the sensor says why instead.
  if (!kernelCanRun(SensorId::kCuda)) return expectActiveOrSaysWhy(s->status(), SensorId::kCuda);
  ASSERT_TRUE(s->attachCuda(HEADROOM_CUDA_PROVER, true)) << "runtime symbols in the nvcc-built binary";
  std::array<char, PATH_MAX> driver{};
  if (::realpath("/usr/lib/x86_64-linux-gnu/libcuda.so.1", driver.data()) != nullptr) {
    ASSERT_TRUE(s->attachCuda(driver.data(), false)) << "driver symbols in " << driver.data();
  } else if (!std::string(HEADROOM_CUDA_STUB).empty()) {
    ASSERT_TRUE(s->attachCuda(HEADROOM_CUDA_STUB, false)) << "driver symbols in the toolkit's stub library";
  }
  auto c = ChildProcess::spawn(
      {HEADROOM_CUDA_PROVER, "--pool", "2", "--chunk", std::to_string(kMiB), "--device", std::to_string(4 * kMiB)});
  ASSERT_TRUE(c);
  auto line = c->readLine();
  ASSERT_TRUE(line);
  auto said = nlohmann::json::parse(*line, nullptr, false);
  ASSERT_TRUE(said.is_object()) << *line;
  auto g = s->gpu(c->pid());
  ASSERT_TRUE(g.has_value()) << "the runtime probes fired";
  if (!said.value("ready", false)) {
    const int code = said.value("code", 0);
    EXPECT_TRUE(code == 35 || code == 100) << *line;
    EXPECT_EQ(said["call"], "cudaMalloc") << "device memory is asked for first";
    EXPECT_EQ(g->failed_calls, 1u);
    EXPECT_EQ(g->pinned_live, 0u);
    EXPECT_EQ(g->pinned_allocs, 0u);
    EXPECT_EQ(g->device_live, 0u);
    c->closeStdin();
    auto end = c->wait();
    ASSERT_TRUE(end);
    EXPECT_EQ(WEXITSTATUS(*end), 3);
    return;
  }
  EXPECT_EQ(g->pinned_live, 2 * kMiB);
  EXPECT_EQ(g->pinned_allocs, 2u);
  EXPECT_EQ(g->device_live, 4 * kMiB);
  EXPECT_EQ(g->failed_calls, 0u);
  c->closeStdin();
  ASSERT_TRUE(c->wait());
}

TEST(Sensors, NoBpfStillCatchesOomKillsFromKmsg) {
  SKIP_WITHOUT_BPF();
  Env env;
  SensorsConfig cfg;
  cfg.bpf = false;
  auto s = startSensors(env, cfg);
  EXPECT_EQ(stateOf(*s, SensorId::kOom), SensorState::kOff);
  ASSERT_EQ(stateOf(*s, SensorId::kKmsg), SensorState::kActive);
  auto sb = CgroupSandbox::create("headroom-oom-nobpf");
  ASSERT_TRUE(sb) << sb.error().describe();
  ASSERT_TRUE(sb->setLimit(48 * kMiB));
  auto child = ChildProcess::spawn({HEADROOM_WORKLOAD, "--anon", std::to_string(128 * kMiB)}, sb->procsFile());
  ASSERT_TRUE(child);
  auto st = child->wait();
  ASSERT_TRUE(st);
  std::vector<OomEvent> ooms;
  ASSERT_TRUE(pollUntil(*s, [&] {
    for (auto& e : s->takeOomEvents()) ooms.push_back(std::move(e));
    return !ooms.empty();
  }));
  ASSERT_EQ(ooms.size(), 1u);
  EXPECT_FALSE(ooms[0].from_bpf);
  ASSERT_EQ(ooms[0].victims.size(), 1u);
  EXPECT_EQ(ooms[0].victims[0].tgid, child->pid());
  EXPECT_EQ(ooms[0].domain_cgroup.value(), sb->path());
  // The exit is classified from the kernel's word, never from the status alone.
  ExitEvent x = classifyExit(child->pid(), *st, ooms[0].victim(child->pid()) != nullptr, false);
  EXPECT_EQ(x.describe(), "oom_killed");
  EXPECT_EQ(sb->read()->oom_kills.value_or(0), 1u);
}

TEST(Sensors, RingOverflowIsCountedAndTheConsumerRecovers) {
  SKIP_WITHOUT_BPF();
  Env env;
  SensorsConfig cfg;
  cfg.exit_ring_bytes = 4096;  // room for ~60 exit records
  auto s = startSensors(env, cfg);
  // A burst of exits without consuming.
  for (int i = 0; i < 300; ++i) {
    pid_t p = ::fork();
    if (p == 0) ::_exit(0);
    ::waitpid(p, nullptr, 0);
  }
  EXPECT_GT(s->counters().exit_ring_drops, 0u) << "drops are counted, never silent";
  (void)s->takeExitEvents();
  s->poll(0);
  (void)s->takeExitEvents();
  // After the burst, new exits arrive again.
  ChildProcess c = spawnReady({HEADROOM_WORKLOAD, "--exit-code", "5"});
  c.closeStdin();
  ASSERT_TRUE(c.wait());
  std::vector<ExitEvent> exits;
  ASSERT_TRUE(pollUntil(*s, [&] {
    for (auto& e : s->takeExitEvents()) exits.push_back(std::move(e));
    return !exitsOf(exits, c.pid()).empty();
  }));
  EXPECT_EQ(exitsOf(exits, c.pid())[0].describe(), "exited(5)");
}

TEST(Sensors, AMissingTracepointDegradesOneSensorOnly) {
  SKIP_WITHOUT_BPF();
  Env env;
  SensorsConfig cfg;
  cfg.tracepoints[SensorId::kFaults] = "page_fault_user_no_such_tracepoint";
  auto s = startSensors(env, cfg);
  EXPECT_EQ(stateOf(*s, SensorId::kFaults), SensorState::kDegraded);
  for (const auto& st : s->status()) {
    if (st.id == SensorId::kFaults) {
      EXPECT_NE(st.reason.find("page_fault_user_no_such_tracepoint"), std::string::npos);
    }
  }
  for (SensorId id : {SensorId::kOom, SensorId::kKmsg, SensorId::kExits, SensorId::kMmap, SensorId::kRss}) {
    expectActiveOrSaysWhy(s->status(), id);
  }
  ChildProcess c = spawnReady({HEADROOM_WORKLOAD, "--map-unmap", std::to_string(8 * kMiB)});
  auto a = s->activity(c.pid());
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->faults, 0u);
  EXPECT_GE(a->munmap_bytes, 8 * kMiB);
}

TEST(Sensors, CudaLibraryIsFoundInAProcesssMaps) {
  SKIP_WITHOUT_BPF();
  Env env;
  auto s = startSensors(env);
  // Where the kernel cannot run it (5.10), the sensor says why instead.
  if (!kernelCanRun(SensorId::kCuda)) return expectActiveOrSaysWhy(s->status(), SensorId::kCuda);
  ChildProcess c = spawnReady({HEADROOM_CUDA_CLIENT, HEADROOM_CUDA_FAKE});
  EXPECT_EQ(stateOf(*s, SensorId::kCuda), SensorState::kOff);
  s->discoverCuda({c.pid()});
  EXPECT_EQ(stateOf(*s, SensorId::kCuda), SensorState::kActive);
  bool named = false;
  for (const auto& st : s->status()) {
    if (st.id == SensorId::kCuda) named = st.reason.find("fake-driver/libcuda.so.1") != std::string::npos;
  }
  EXPECT_TRUE(named);
  // From now on its calls count: destroying the context is seen (nothing was live yet).
  ASSERT_TRUE(c.writeLine("ctx"));
  ASSERT_TRUE(c.readLine());
  auto g = s->gpu(c.pid());
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->failed_calls, 0u);
}

TEST(Sensors, TrackedCgroupsFilterInTheKernel) {
  SKIP_WITHOUT_BPF();
  Env env;
  auto sb = CgroupSandbox::create("headroom-tracked");
  ASSERT_TRUE(sb) << sb.error().describe();
  struct stat st {};
  ASSERT_EQ(::stat(sb->directory().c_str(), &st), 0);
  SensorsConfig cfg;
  cfg.tracked_cgroups = std::vector<std::uint64_t>{st.st_ino};
  auto s = startSensors(env, cfg);
  ChildProcess inside = spawnReady({HEADROOM_WORKLOAD, "--map-unmap", std::to_string(8 * kMiB)}, sb->procsFile());
  ChildProcess outside = spawnReady({HEADROOM_WORKLOAD, "--map-unmap", std::to_string(8 * kMiB)});
  auto a = s->activity(inside.pid());
  ASSERT_TRUE(a.has_value());
  if (kernelCanRun(SensorId::kFaults)) {
    EXPECT_GE(a->faults, 8 * kMiB / 4096);
  }
  EXPECT_GE(a->munmap_bytes, 8 * kMiB);
  EXPECT_FALSE(s->activity(outside.pid()).has_value()) << "not in a tracked cgroup";
  inside.closeStdin();
  outside.closeStdin();
  ASSERT_TRUE(inside.wait());
  ASSERT_TRUE(outside.wait());
  std::vector<ExitEvent> exits;
  ASSERT_TRUE(pollUntil(*s, [&] {
    for (auto& e : s->takeExitEvents()) exits.push_back(std::move(e));
    return !exitsOf(exits, inside.pid()).empty();
  }));
  EXPECT_EQ(exitsOf(exits, inside.pid())[0].cgroup, sb->path());
  EXPECT_TRUE(exitsOf(exits, outside.pid()).empty()) << "exits of untracked cgroups are not sent";
}

// A process already faulting when its cgroup joins the tracked set is counted from then on: the
// fault program judges a process once per run, and a change of the set makes it judge again.
TEST(Sensors, AProcessIsCountedOnceItsCgroupIsTracked) {
  SKIP_WITHOUT_BPF();
  Env env;
  auto sb = CgroupSandbox::create("headroom-retrack");
  ASSERT_TRUE(sb) << sb.error().describe();
  struct stat st {};
  ASSERT_EQ(::stat(sb->directory().c_str(), &st), 0);
  SensorsConfig cfg;
  cfg.tracked_cgroups = std::vector<std::uint64_t>{};  // filtering, nothing tracked yet
  auto s = startSensors(env, cfg);
  // Where the kernel cannot run it (5.10), the sensor says why instead.
  if (!kernelCanRun(SensorId::kFaults)) return expectActiveOrSaysWhy(s->status(), SensorId::kFaults);
  constexpr std::uint64_t kTouch = 8 * kMiB;
  ChildProcess c = spawnReady(
      {"/usr/bin/taskset", "-c", "1", HEADROOM_WORKLOAD, "--touch-per-line", std::to_string(kTouch)}, sb->procsFile());
  ASSERT_TRUE(c.writeLine(""));
  ASSERT_EQ(c.readLine().value_or(""), "touched");
  EXPECT_FALSE(s->activity(c.pid()).has_value()) << "not tracked yet";
  ASSERT_TRUE(s->trackCgroups({st.st_ino}));
  ASSERT_TRUE(c.writeLine(""));
  ASSERT_EQ(c.readLine().value_or(""), "touched");
  auto a = s->activity(c.pid());
  ASSERT_TRUE(a.has_value()) << "tracked now";
  EXPECT_GE(a->faults, kTouch / 4096);
  c.closeStdin();
  ASSERT_TRUE(c.wait());
}

// Without the privileges for BPF, every BPF sensor says why and the snapshot still works from
// /proc and the cgroup files.
TEST(Sensors, UnprivilegedSnapshotDegradesAndStillWorks) {
  SKIP_WITHOUT_BPF();
  if (::access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "no setpriv (util-linux)";
  auto r = testing::runCommand({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                "--inh-caps=-all", HEADROOM_BINARY, "snapshot", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  for (const auto& sensor : j["sensors"]) {
    std::string name = sensor["name"];
    if (name == "cuda" || name == "mmap") continue;  // off / no tracefs as an ordinary user
    EXPECT_EQ(sensor["state"], "degraded") << name;
    if (name == "kmsg") {
      EXPECT_NE(sensor["reason"].get<std::string>().find("CAP_SYSLOG"), std::string::npos);
    } else {
      EXPECT_NE(sensor["reason"].get<std::string>().find("CAP_BPF"), std::string::npos) << sensor["reason"];
    }
  }
  EXPECT_FALSE(j["cgroups"].empty()) << "the snapshot itself is whole";
}

TEST(Sensors, CliWatchOomsJson) {
  SKIP_WITHOUT_BPF();
  auto sb = CgroupSandbox::create("headroom-oom-cli");
  ASSERT_TRUE(sb) << sb.error().describe();
  ASSERT_TRUE(sb->setLimit(48 * kMiB));
  auto watcher =
      ChildProcess::spawn({HEADROOM_BINARY, "snapshot", "--watch-ooms", "--json", "--count", "1", "--seconds", "30"});
  ASSERT_TRUE(watcher);
  auto header = watcher->readLine(std::chrono::seconds(30));  // attached and watching
  ASSERT_TRUE(header) << header.error().describe();
  auto h = nlohmann::json::parse(*header);
  EXPECT_EQ(h["watching"], true);
  EXPECT_FALSE(h["sensors"].empty());
  auto child = ChildProcess::spawn({HEADROOM_WORKLOAD, "--anon", std::to_string(128 * kMiB)}, sb->procsFile());
  ASSERT_TRUE(child);
  ASSERT_TRUE(child->wait());
  auto line = watcher->readLine(std::chrono::seconds(15));
  ASSERT_TRUE(line) << line.error().describe();
  auto j = nlohmann::json::parse(*line);
  EXPECT_EQ(j["victims"][0]["tgid"], child->pid());
  EXPECT_EQ(j["oom_domain"]["cgroup"], sb->path());
  EXPECT_EQ(j["sources"]["bpf"], true);
  EXPECT_EQ(j["sources"]["kmsg"], true);
  // What operators call it: the domain's workload and the victim's (the same cgroup here).
  EXPECT_EQ(j["workload"]["unit"], identifyCgroup(sb->path()).unit) << j["workload"];
  EXPECT_EQ(j["victims"][0]["workload"], j["workload"]);
  auto st = watcher->wait();
  ASSERT_TRUE(st);
  EXPECT_EQ(WEXITSTATUS(*st), 0);
}

}  // namespace
}  // namespace headroom
