// OOM latency for `make bench`: real OOM kills in a child cgroup of our own, and the time
// from oom:mark_victim in the kernel to the record in user space. Prints one JSON line.
//   oom-latency WORKLOAD KILLS
#include <spdlog/spdlog.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "headroom/sensors/sensors.h"
#include "testing/cgroup_sandbox.h"
#include "testing/child_process.h"

using namespace headroom;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: oom-latency WORKLOAD KILLS\n");
    return 2;
  }
  int kills = std::atoi(argv[2]);
  spdlog::set_level(spdlog::level::warn);
  auto fs = FsRoot::open("/");
  auto mounts = discoverCgroupMounts(*fs);
  if (!fs || !mounts) return 1;
  auto sensors = Sensors::start(*fs, {}, *mounts);
  auto sb = testing::CgroupSandbox::create("headroom-bench-oom");
  if (!sb || !sb->setLimit(32ULL << 20)) {
    std::fprintf(stderr, "oom-latency: no cgroup sandbox\n");
    return 1;
  }
  std::vector<double> ms;
  for (int i = 0; i < kills; ++i) {
    auto before = sensors->counters().last_oom_mark_latency_ns;
    auto c = testing::ChildProcess::spawn({argv[1], "--anon", std::to_string(128ULL << 20)}, sb->procsFile());
    if (!c) return 1;
    // Consume while the kill happens: the latency is taken when the record is read.
    for (int tries = 0; tries < 500; ++tries) {
      sensors->poll(1000);  // as the agent waits: up to its next sample
      auto now = sensors->counters().last_oom_mark_latency_ns;
      if (now && now != before) {
        ms.push_back(static_cast<double>(*now) / 1e6);
        break;
      }
    }
    (void)sensors->takeOomEvents();
    (void)sensors->takeExitEvents();
    if (!c->wait()) return 1;
  }
  if (ms.empty()) return 1;
  std::sort(ms.begin(), ms.end());
  std::printf("{\"kills\": %zu, \"median_ms\": %.3f, \"max_ms\": %.3f}\n", ms.size(), ms[ms.size() / 2], ms.back());
  return 0;
}
