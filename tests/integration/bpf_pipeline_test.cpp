// The BPF pipeline end to end: exitcount.bpf.c compiled with CO-RE, its skeleton loaded and
// attached from C++, and real process exits counted in the kernel.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <thread>

#include "headroom/sensors/kernel_support.h"
#include "testing/exit_counter.h"

namespace headroom {
namespace {

using testing::ExitCounter;

std::optional<std::string> bpfUnavailable() {
  if (::geteuid() != 0) return "loading BPF programs needs root (CAP_BPF + CAP_PERFMON)";
  if (::access("/sys/kernel/btf/vmlinux", R_OK) != 0) return "no kernel BTF at /sys/kernel/btf/vmlinux";
  return std::nullopt;
}

pid_t forkAndRun(const std::function<void()>& body) {
  pid_t pid = ::fork();
  if (pid == 0) {
    body();
    ::_exit(0);
  }
  return pid;
}

TEST(BpfPipeline, ExitCounterSeesRealExits) {
  if (auto why = bpfUnavailable()) GTEST_SKIP() << *why;
  ASSERT_TRUE(kernelHasTracepoint("sched_process_exit"));
  EXPECT_FALSE(kernelHasTracepoint("no_such_tracepoint_headroom"));
  auto counter = ExitCounter::start(1024);
  ASSERT_TRUE(counter) << counter.error().describe();

  // A normal exit with a code.
  pid_t exited = forkAndRun([] { ::_exit(7); });
  // A process killed by SIGKILL while it sleeps.
  pid_t killed = forkAndRun([] { ::pause(); });
  // A process whose three threads all exit before the group does.
  pid_t threaded = forkAndRun([] {
    std::thread t1([] {});
    std::thread t2([] {});
    t1.join();
    t2.join();
    ::_exit(3);
  });
  ::kill(killed, SIGKILL);
  for (pid_t p : {exited, killed, threaded}) {
    int st = 0;
    ASSERT_EQ(::waitpid(p, &st, 0), p);
  }

  auto e = counter->lookup(exited);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->thread_exits, 1u);
  EXPECT_TRUE(e->group_dead);
  EXPECT_EQ(e->exit_code, 7 << 8);

  auto k = counter->lookup(killed);
  ASSERT_TRUE(k.has_value());
  EXPECT_TRUE(k->group_dead);
  EXPECT_EQ(k->exit_code & 0x7f, SIGKILL);

  auto t = counter->lookup(threaded);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->thread_exits, 3u);
  EXPECT_TRUE(t->group_dead);
  EXPECT_EQ(t->exit_code, 3 << 8);

  EXPECT_GE(counter->totalExits(), 5u);
  EXPECT_FALSE(counter->lookup(::getpid()).has_value()) << "we have not exited";
}

TEST(BpfPipeline, TwoCountersCoexistAndDetachOnDestruction) {
  if (auto why = bpfUnavailable()) GTEST_SKIP() << *why;
  auto first = ExitCounter::start(64);
  ASSERT_TRUE(first) << first.error().describe();
  std::uint64_t before = 0;
  {
    auto second = ExitCounter::start(64);
    ASSERT_TRUE(second) << second.error().describe();
    pid_t p = forkAndRun([] {});
    ::waitpid(p, nullptr, 0);
    EXPECT_TRUE(second->lookup(p).has_value());
    EXPECT_TRUE(first->lookup(p).has_value());
    before = first->totalExits();
  }
  pid_t p = forkAndRun([] {});
  ::waitpid(p, nullptr, 0);
  EXPECT_GT(first->totalExits(), before) << "the first still counts after the second is gone";
}

}  // namespace
}  // namespace headroom
