// The rings' records decoded from the very structs the BPF programs write (bpf/events.h): every
// field where it belongs, pages made bytes, and a short or unknown record refused, never read past.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <csignal>
#include <cstring>
#include <limits>
#include <vector>

#include "events.h"
#include "headroom/sensors/ring_decode.h"

namespace headroom {
namespace {

constexpr std::uint64_t kPage = 4096;

template <typename T>
std::vector<std::byte> bytesOf(const T& v, std::size_t size = sizeof(T)) {
  std::vector<std::byte> out(size);
  std::memcpy(out.data(), &v, std::min(size, sizeof(T)));
  return out;
}

void setComm(char (&comm)[HR_COMM_LEN], const char* name) {
  std::memset(comm, 0, HR_COMM_LEN);
  // a 15-byte comm fills all but the last byte; a 16-byte one fills it all, unterminated
  std::memcpy(comm, name, std::min(std::strlen(name), sizeof comm));
}

oom_victim_event victimEvent() {
  oom_victim_event e{};
  e.type = HR_EV_OOM_VICTIM;
  e.flags = HR_OOM_VICTIM_TASK;
  e.ts_ns = 123'456'789;
  e.trigger.pid = 4242;
  e.trigger.tgid = 4240;
  setComm(e.trigger.comm, "allocator");
  e.trigger_cgroup_id = 77;
  e.victim.pid = 5001;
  e.victim.tgid = 5000;
  setComm(e.victim.comm, "cuzk-worker-123");  // 15 bytes: no terminating NUL inside the field
  e.victim_uid = 1001;
  e.victim_oom_score_adj = 500;
  e.victim_cgroup_id = 88;
  e.victim_total_vm_pages = 1000;
  e.victim_rss_file_pages = 10;
  e.victim_rss_anon_pages = 200;
  e.victim_swapents = 3;
  e.victim_rss_shmem_pages = 40;
  e.victim_pgtables_bytes = 65536;
  return e;
}

TEST(RingDecode, AVictimWithItsTaskCarriesEveryFigureInBytes) {
  auto r = decodeOomRecord(bytesOf(victimEvent()));
  auto* d = std::get_if<DecodedOomMark>(&r);
  ASSERT_NE(d, nullptr);
  EXPECT_TRUE(d->victim_is_task);
  EXPECT_EQ(d->trigger_cgroup_id, 77u);
  EXPECT_EQ(d->victim_cgroup_id, 88u);
  const OomMark& m = d->mark;
  EXPECT_EQ(m.ts_ns, 123'456'789);
  EXPECT_EQ(m.trigger_pid, 4242);
  EXPECT_EQ(m.trigger_tgid, 4240);
  EXPECT_EQ(m.trigger_comm, "allocator");
  EXPECT_TRUE(m.trigger_cgroup.empty()) << "cgroups stay ids until the sensors name them";
  const OomVictim& v = m.victim;
  EXPECT_EQ(v.pid, 5001);
  EXPECT_EQ(v.tgid, 5000);
  EXPECT_EQ(v.process(), 5000);
  EXPECT_EQ(v.comm, "cuzk-worker-123");
  EXPECT_EQ(v.uid, 1001u);
  EXPECT_EQ(v.oom_score_adj, 500);
  EXPECT_EQ(v.total_vm, 1000 * kPage);
  EXPECT_EQ(v.file_rss, 10 * kPage);
  EXPECT_EQ(v.anon_rss, 200 * kPage);
  EXPECT_EQ(v.swap, 3 * kPage);
  EXPECT_EQ(v.shmem_rss, 40 * kPage);
  EXPECT_EQ(v.pgtables, 65536u) << "page tables come in bytes already";
  EXPECT_EQ(v.charge(), (10 + 200 + 40) * kPage + 65536);
  EXPECT_FALSE(v.kill_skipped);
}

TEST(RingDecode, AVictimCarriesWhatItHeldLockedPinnedAndOnTheDeviceAtTheMark) {
  oom_victim_event e = victimEvent();
  e.victim_mm = 0xffff888012345000ULL;
  e.victim_locked_pages = 256;
  e.victim_pinned_pages = 64;
  auto r = decodeOomRecord(bytesOf(e));
  const OomVictim& without = std::get<DecodedOomMark>(r).mark.victim;
  EXPECT_EQ(without.locked, 256 * kPage);
  EXPECT_EQ(without.pinned_vm, 64 * kPage);
  EXPECT_FALSE(without.cuda_pinned) << "no CUDA counters without HR_OOM_VICTIM_GPU";
  EXPECT_FALSE(without.cuda_device);

  e.flags |= HR_OOM_VICTIM_GPU;
  e.victim_gpu.pinned_live = 3ULL << 30;
  e.victim_gpu.pinned_peak = 4ULL << 30;
  e.victim_gpu.device_live = 70ULL << 30;
  r = decodeOomRecord(bytesOf(e));
  const OomVictim& v = std::get<DecodedOomMark>(r).mark.victim;
  EXPECT_EQ(v.cuda_pinned, 3ULL << 30) << "live at the kill, not the peak";
  EXPECT_EQ(v.cuda_device, 70ULL << 30);

  // Without an mm (an exiting victim) there are no locked or pinned pages to read.
  e.victim_mm = 0;
  r = decodeOomRecord(bytesOf(e));
  EXPECT_FALSE(std::get<DecodedOomMark>(r).mark.victim.locked);
}

TEST(RingDecode, AVictimAlreadyExitingIsMarkedSkipped) {
  oom_victim_event e = victimEvent();
  e.flags |= HR_OOM_VICTIM_EXITING;
  auto r = decodeOomRecord(bytesOf(e));
  ASSERT_TRUE(std::holds_alternative<DecodedOomMark>(r));
  EXPECT_TRUE(std::get<DecodedOomMark>(r).mark.victim.kill_skipped);
}

TEST(RingDecode, APidOnlyVictimHasItsThreadIdAndNoFigures) {
  // Kernels before 6.9: the tracepoint carries a pid; the rest of the event is left zero.
  oom_victim_event e{};
  e.type = HR_EV_OOM_VICTIM;
  e.victim.pid = 777;
  e.trigger.pid = 9;
  auto r = decodeOomRecord(bytesOf(e));
  auto* d = std::get_if<DecodedOomMark>(&r);
  ASSERT_NE(d, nullptr);
  EXPECT_FALSE(d->victim_is_task);
  EXPECT_EQ(d->mark.victim.pid, 777);
  EXPECT_EQ(d->mark.victim.tgid, 0);
  EXPECT_EQ(d->mark.victim.process(), 777);
  EXPECT_FALSE(d->mark.victim.anon_rss.has_value());
  EXPECT_FALSE(d->mark.victim.charge().has_value());
  EXPECT_EQ(d->victim_cgroup_id, 0u);
  EXPECT_FALSE(d->mark.victim.cuda_device.has_value());
  // The CUDA counters are by process, found when the kernel marked the leader: they come.
  e.flags = HR_OOM_VICTIM_GPU;
  e.victim_gpu.device_live = 1ULL << 30;
  r = decodeOomRecord(bytesOf(e));
  EXPECT_EQ(std::get<DecodedOomMark>(r).mark.victim.cuda_device, 1ULL << 30);
  EXPECT_FALSE(std::get<DecodedOomMark>(r).mark.victim.locked.has_value());
}

TEST(RingDecode, ReapingStartAndFinish) {
  for (auto [type, finished] : {std::pair{HR_EV_REAP_START, false}, {HR_EV_REAP_FINISH, true}}) {
    reap_event e{};
    e.type = type;
    e.pid = 5001;
    e.ts_ns = 99;
    auto r = decodeOomRecord(bytesOf(e));
    auto* d = std::get_if<DecodedReap>(&r);
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->pid, 5001);
    EXPECT_EQ(d->finished, finished);
    EXPECT_EQ(d->ts_ns, 99);
  }
}

TEST(RingDecode, ShortOrUnknownRecordsAreRefused) {
  oom_victim_event e = victimEvent();
  EXPECT_TRUE(std::holds_alternative<std::monostate>(decodeOomRecord(bytesOf(e, sizeof e - 1))));
  EXPECT_TRUE(std::holds_alternative<std::monostate>(decodeOomRecord(bytesOf(e, 3))));
  EXPECT_TRUE(std::holds_alternative<std::monostate>(decodeOomRecord({})));
  reap_event reap{};
  reap.type = HR_EV_REAP_START;
  EXPECT_TRUE(std::holds_alternative<std::monostate>(decodeOomRecord(bytesOf(reap, sizeof reap - 8))));
  e.type = 99;
  EXPECT_TRUE(std::holds_alternative<std::monostate>(decodeOomRecord(bytesOf(e))));
  exit_event x{};
  x.type = HR_EV_EXIT;
  EXPECT_FALSE(decodeExitRecord(bytesOf(x, sizeof x - 1)).has_value());
  x.type = HR_EV_OOM_VICTIM;
  EXPECT_FALSE(decodeExitRecord(bytesOf(x)).has_value()) << "not an exit record";
}

exit_event exitEvent(int wait_status, std::uint32_t flags = 0) {
  exit_event x{};
  x.type = HR_EV_EXIT;
  x.flags = flags;
  x.ts_ns = 555;
  x.task.pid = 300;
  x.task.tgid = 300;
  setComm(x.task.comm, "prover");
  x.exit_code = wait_status;
  x.parent_tgid = 299;
  x.cgroup_id = 66;
  return x;
}

TEST(RingDecode, ExitsAreClassifiedOnTheKernelsEvidence) {
  auto exited = decodeExitRecord(bytesOf(exitEvent(3 << 8)));
  ASSERT_TRUE(exited);
  EXPECT_EQ(exited->exit.pid, 300);
  EXPECT_EQ(exited->exit.parent_pid, 299);
  EXPECT_EQ(exited->exit.comm, "prover");
  EXPECT_EQ(exited->exit.monotonic_time_ns, 555);
  EXPECT_EQ(exited->cgroup_id, 66u);
  EXPECT_EQ(exited->exit.kind, ExitKind::kExited);
  EXPECT_EQ(exited->exit.code, 3);

  auto crashed = decodeExitRecord(bytesOf(exitEvent(SIGSEGV)));
  ASSERT_TRUE(crashed);
  EXPECT_EQ(crashed->exit.kind, ExitKind::kSignaled);
  EXPECT_EQ(crashed->exit.signal, SIGSEGV);

  // A SIGKILL is an OOM kill only with the OOM killer's mark on it (or on its mm).
  auto killed = decodeExitRecord(bytesOf(exitEvent(SIGKILL)));
  ASSERT_TRUE(killed);
  EXPECT_EQ(killed->exit.kind, ExitKind::kSignaled);
  auto marked = decodeExitRecord(bytesOf(exitEvent(SIGKILL, HR_EXIT_OOM_MARKED)));
  ASSERT_TRUE(marked);
  EXPECT_EQ(marked->exit.kind, ExitKind::kOomKilled);
  EXPECT_TRUE(marked->exit.oom_marked);
  auto shared = decodeExitRecord(bytesOf(exitEvent(SIGKILL, HR_EXIT_SHARES_OOM_MM)));
  ASSERT_TRUE(shared);
  EXPECT_EQ(shared->exit.kind, ExitKind::kOomKilled);
  EXPECT_TRUE(shared->exit.shares_oom_mm);
}

// The task iterator's records: a process from its leader's record, its threads' faults added
// (before or after the leader), pages made bytes, the start time in USER_HZ ticks as /proc.
hr_task_record leader(__u32 tgid, const char* comm) {
  hr_task_record r{};
  r.pid = r.tgid = tgid;
  r.ppid = 1;
  r.start_boottime_ns = 12'345'678'901ULL;
  setComm(r.comm, comm);
  r.cgroup_id = 4242;
  r.uid = 1000;
  r.oom_score_adj = -900;
  r.threads = 3;
  r.min_flt = 100;
  r.maj_flt = 2;
  r.rss_file = 10;
  r.rss_anon = 20;
  r.swapents = 3;
  r.rss_shmem = 5;
  r.hiwater_rss = 30;  // below today's 35 pages: VmHWM shows the larger
  r.total_vm = 1000;
  r.locked_vm = 4;
  r.pinned_vm = 2;
  r.pgtables_bytes = 3 * kPage;
  return r;
}

hr_task_record thread(__u32 tgid, __u32 pid, __u64 minflt, __u64 majflt) {
  hr_task_record r{};
  r.pid = pid;
  r.tgid = tgid;
  r.flags = HR_TASK_THREAD;
  r.min_flt = minflt;
  r.maj_flt = majflt;
  return r;
}

std::vector<std::byte> records(const std::vector<hr_task_record>& rs) {
  std::vector<std::byte> out;
  for (const auto& r : rs) {
    auto b = bytesOf(r);
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

TEST(TaskRecords, AProcessFromItsLeaderAndItsThreads) {
  hr_task_record kthread{};
  kthread.pid = kthread.tgid = 2;
  kthread.flags = HR_TASK_KTHREAD;
  hr_task_record zombie = leader(77, "zombie");
  zombie.flags = HR_TASK_NO_MM;
  // A thread seen before its leader (a reused tgid), another after.
  auto bytes = records(
      {kthread, thread(500, 499, 7, 0), leader(500, "cuzk"), thread(500, 501, 40, 1), zombie, thread(900, 901, 5, 5)});
  auto ps = decodeTaskRecords(bytes, 100, kPage);
  ASSERT_TRUE(ps) << ps.error().describe();
  ASSERT_EQ(ps->size(), 3u) << "kthread, zombie, cuzk; the orphan thread of 900 dropped";
  EXPECT_EQ((*ps)[0].pid, 2) << "by pid, whatever order the records came in";
  EXPECT_TRUE((*ps)[0].kernel_thread);
  EXPECT_EQ((*ps)[1].pid, 77);
  EXPECT_TRUE((*ps)[1].kernel_thread) << "a leader without an mm shows no memory, as /proc";
  const KernelProcess& k = (*ps)[2];
  EXPECT_EQ(k.pid, 500);
  EXPECT_FALSE(k.kernel_thread);
  EXPECT_EQ(k.comm, "cuzk");
  EXPECT_EQ(k.ppid, 1);
  EXPECT_EQ(k.uid, 1000u);
  EXPECT_EQ(k.cgroup_id, 4242u);
  EXPECT_EQ(k.oom_score_adj, -900);
  EXPECT_EQ(k.start_time_ticks, 1234u) << "12.345678901 s at 100 ticks a second";
  EXPECT_EQ(k.minflt, 147u);
  EXPECT_EQ(k.majflt, 3u);
  const ProcStatus& s = k.status;
  EXPECT_EQ(s.rss_file, 10 * kPage);
  EXPECT_EQ(s.rss_anon, 20 * kPage);
  EXPECT_EQ(s.rss_shmem, 5 * kPage);
  EXPECT_EQ(s.vm_rss, 35 * kPage);
  EXPECT_EQ(s.vm_hwm, 35 * kPage);
  EXPECT_EQ(s.vm_swap, 3 * kPage);
  EXPECT_EQ(s.vm_size, 1000 * kPage);
  EXPECT_EQ(s.vm_lck, 4 * kPage);
  EXPECT_EQ(s.vm_pin, 2 * kPage);
  EXPECT_EQ(s.vm_pte, 3 * kPage);
  EXPECT_EQ(s.threads, 3u);
  EXPECT_EQ(s.tgid, 500);
}

TEST(TaskRecords, TheSensorsCountersRideAlong) {
  hr_task_record a = leader(600, "prover");
  a.flags |= HR_TASK_ACTIVITY | HR_TASK_GPU;
  a.activity.mmap_bytes = 5 * kPage;
  a.activity.mlock_bytes = kPage;
  a.gpu.pinned_live = 64 * kPage;
  a.gpu.device_peak = 128 * kPage;
  hr_task_record plain = leader(601, "helper");
  std::unordered_map<pid_t, TaskCounters> counters;
  auto ps = decodeTaskRecords(records({a, plain}), 100, kPage, true, &counters);
  ASSERT_TRUE(ps) << ps.error().describe();
  ASSERT_EQ(counters.size(), 1u) << "only the process the maps know";
  const TaskCounters& c = counters.at(600);
  ASSERT_TRUE(c.activity && c.gpu);
  EXPECT_EQ(c.activity->mmap_bytes, 5 * kPage);
  EXPECT_EQ(c.activity->mlock_bytes, kPage);
  EXPECT_EQ(c.gpu->pinned_live, 64 * kPage);
  EXPECT_EQ(c.gpu->device_peak, 128 * kPage);
}

// Since 6.2 the RSS counters are per-CPU: the record has the folded count and the CPUs' parts
// apart, added where /proc adds them (6.16+), the sum clamped at zero as /proc clamps it.
TEST(TaskRecords, PerCpuPartsAreAddedWhereProcAddsThem) {
  hr_task_record r = leader(700, "percpu");
  r.flags |= HR_TASK_RSS_PARTS;
  r.rss_anon = 20;
  r.rss_cpu_parts[1] = -3;
  r.rss_file = -2;  // a folded count may dip below zero
  r.rss_cpu_parts[0] = 1;
  r.rss_shmem = 5;
  r.rss_cpu_parts[3] = 2;
  auto summed = decodeTaskRecords(records({r}), 100, kPage, true);
  ASSERT_TRUE(summed);
  EXPECT_EQ((*summed)[0].status.rss_anon, 17 * kPage);
  EXPECT_EQ((*summed)[0].status.rss_file, 0u);
  EXPECT_EQ((*summed)[0].status.rss_shmem, 7 * kPage);
  EXPECT_EQ((*summed)[0].status.vm_rss, 24 * kPage);
  auto folded = decodeTaskRecords(records({r}), 100, kPage, false);
  ASSERT_TRUE(folded);
  EXPECT_EQ((*folded)[0].status.rss_anon, 20 * kPage);
  EXPECT_EQ((*folded)[0].status.rss_file, 0u);
  EXPECT_EQ((*folded)[0].status.rss_shmem, 5 * kPage);
  // Before 6.2 (no parts) the counts are the figures either way.
  r.flags &= ~HR_TASK_RSS_PARTS;
  EXPECT_EQ((*decodeTaskRecords(records({r}), 100, kPage, true))[0].status.rss_anon, 20 * kPage);
}

// A per-CPU counter read without its parts (the process not among those summed exactly): the
// folded counts, and how far they may be off said in rss_drift; an exact record says 0.
TEST(TaskRecords, CountsReadWithoutTheirPartsSayHowFarOffTheyMayBe) {
  hr_task_record r = leader(705, "approx");
  r.flags |= HR_TASK_RSS_APPROX;
  r.rss_anon = 20;
  r.rss_cpu_parts[1] = 7;  // not read by the program: never added
  const std::uint64_t drift = rssDriftPages(4);
  auto ps = decodeTaskRecords(records({r}), 100, kPage, true, nullptr, drift);
  ASSERT_TRUE(ps);
  EXPECT_EQ((*ps)[0].status.rss_anon, 20 * kPage);
  EXPECT_EQ((*ps)[0].status.rss_drift, 3 * drift * kPage) << "file, anon and shmem each";
  r.flags = HR_TASK_RSS_PARTS;
  EXPECT_EQ((*decodeTaskRecords(records({r}), 100, kPage, true, nullptr, drift))[0].status.rss_drift, 0u);
}

// lib/percpu_counter.c: each online CPU holds less than a batch, the batch max(32, 2 x online).
TEST(TaskRecords, DriftOfAFoldedCountFollowsTheKernelsBatch) {
  EXPECT_EQ(rssDriftPages(2), 31u * 2);
  EXPECT_EQ(rssDriftPages(16), 31u * 16);
  EXPECT_EQ(rssDriftPages(128), 255u * 128);
  EXPECT_EQ(rssDriftPages(0), 31u) << "never zero";
}

// Found by the ring_decode fuzz target: a garbled record's count and per-CPU part overflowed a
// signed 64-bit sum (undefined behaviour). The sum saturates: at zero below, at the largest above.
TEST(TaskRecords, PerCpuPartsThatOverflowSaturate) {
  hr_task_record r = leader(710, "garbled");
  r.flags |= HR_TASK_RSS_PARTS;
  r.rss_anon = std::numeric_limits<__s64>::min() / 2 - 1;
  r.rss_cpu_parts[1] = std::numeric_limits<__s64>::min() / 2 - 1;
  r.rss_file = std::numeric_limits<__s64>::max();
  r.rss_cpu_parts[0] = 1;
  auto ps = decodeTaskRecords(records({r}), 100, 1);
  ASSERT_TRUE(ps);
  EXPECT_EQ((*ps)[0].status.rss_anon, 0u);
  EXPECT_EQ((*ps)[0].status.rss_file, static_cast<std::uint64_t>(std::numeric_limits<__s64>::max()));
}

TEST(TaskRecords, ATornReadIsAnErrorNeverAGuess) {
  auto bytes = records({leader(1, "init"), leader(2, "two")});
  bytes.resize(bytes.size() - 8);
  auto ps = decodeTaskRecords(bytes, 100, kPage);
  ASSERT_FALSE(ps);
  EXPECT_NE(ps.error().describe().find("not a whole number"), std::string::npos) << ps.error().describe();
  auto empty = decodeTaskRecords({}, 100, kPage);
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
  EXPECT_FALSE(decodeTaskRecords(records({leader(1, "x")}), 0, kPage));
}

}  // namespace
}  // namespace headroom
