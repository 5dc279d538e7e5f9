// The GPU side of the agent with the stand-in driver (tests/testing/fake_libcuda.c and
// fake_nvml.c: the device memory the stand-in libcuda hands a process is what the stand-in NVML
// reports for it, as the real driver's NVML reports what it allocated): the driver's device
// memory per process in the snapshot and the metrics, NVML off or degraded and saying why, and a
// real OOM kill of a CUDA process whose journal record carries its pinned and device memory at
// the kill. The real CUDA programs under the real probes: sensors_test.cpp; on a real GPU:
// `make gpu-check` (docs/gpu-check.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "headroom/sensors/readings.h"
#include "testing/cgroup_sandbox.h"
#include "testing/child_process.h"
#include "testing/integration.h"
#include "testing/kernel_features.h"

namespace headroom {
namespace {

using testing::CgroupSandbox;
using testing::ChildProcess;
using testing::runCommand;
using testing::TempDir;
using namespace std::chrono_literals;

constexpr std::uint64_t kMiB = 1ULL << 20;
// What cuda-client holds once ready: 1 + 4 MiB pinned (the 2 MiB freed), 8 MiB and a pitched
// 1024 x 100 on the device (the 16 MiB freed, the VMM handle released).
constexpr std::uint64_t kClientPinned = 5 * kMiB;
constexpr std::uint64_t kClientDevice = 8 * kMiB + 1024 * 100;

testing::AgentProcess::Options withStandInDriver(const TempDir& gpu, std::map<std::string, std::string> more = {}) {
  testing::AgentProcess::Options o;
  o.global_args = {"--log-level", "info"};
  o.env = std::move(more);
  o.env["HEADROOM_FAKE_GPU_DIR"] = gpu.path.string();
  return o;
}

// The process in /v1/snapshot, or null.
nlohmann::json processIn(const nlohmann::json& snap, pid_t pid) {
  if (!snap.is_object() || !snap.contains("processes")) return nullptr;
  for (const auto& p : snap["processes"])
    if (p.value("pid", 0) == pid) return p;
  return nullptr;
}

// Whether a line of the exposition starts with `start` and holds each of `parts`.
bool hasSeries(const std::string& text, const std::string& start, std::initializer_list<std::string> parts) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(start, 0) != 0) continue;
    if (std::all_of(parts.begin(), parts.end(),
                    [&](const std::string& p) { return line.find(p) != std::string::npos; }))
      return true;
  }
  return false;
}

TEST(Gpu, AnOomKilledCudaProcessCarriesItsPinnedAndDeviceMemoryAtTheKill) {
  SKIP_WITHOUT_ROOT();
  auto sb = CgroupSandbox::create("gpu-kill");
  ASSERT_TRUE(sb) << sb.error().describe();
  ASSERT_TRUE(sb->setLimit(96 * kMiB));
  TempDir tmp, gpu;
  testing::AgentProcess agent({"--interval", "200ms", "--cgroup", sb->path(), "--journal", tmp.file("oom.hrj"),
                               "--budget.enabled", "false", "--role-rule", "prover=comm:cuda-client", "--cuda-library",
                               HEADROOM_CUDA_FAKE, "--sensors.nvml-library", HEADROOM_NVML_FAKE},
                              withStandInDriver(gpu));
  ASSERT_TRUE(agent.waitLog("gpu: NVML through")) << agent.logText();  // said at start, before the journal
  ASSERT_TRUE(agent.waitLog("journal: OOM kills are recorded in")) << agent.logText();
  auto c = ChildProcess::spawn(
      {"/usr/bin/env", "HEADROOM_FAKE_GPU_DIR=" + gpu.path.string(), HEADROOM_CUDA_CLIENT, HEADROOM_CUDA_FAKE},
      sb->procsFile());
  ASSERT_TRUE(c) << c.error().describe();
  auto ready = c->readLine();
  ASSERT_TRUE(ready && ready->rfind("ready", 0) == 0);
  const pid_t pid = c->pid();
  const bool probes = testing::kernelCanRun(SensorId::kCuda);

  // A sample with the driver's figure for it (and the probes', where the kernel runs them).
  auto seen = agent.waitJson(
      "/v1/snapshot",
      [&](const nlohmann::json& s) {
        nlohmann::json p = processIn(s, pid);
        // Its comm too: a walk that came between the fork and the exec saw "env", and the samples
        // between two walks carry what the walk read (up to process_walk_max_interval).
        return p.is_object() && p["comm"] == "cuda-client" && p["gpu_memory_bytes"] == kClientDevice &&
               (!probes || p["device_bytes"] == kClientDevice);
      },
      60s);
  ASSERT_TRUE(seen) << agent.logText();
  const nlohmann::json& gpus = (*seen)["gpus"];
  EXPECT_EQ(gpus["state"], "active");
  ASSERT_EQ(gpus["devices"].size(), 1u);
  EXPECT_EQ(gpus["devices"][0]["name"], "headroom stand-in GPU");
  EXPECT_EQ(gpus["devices"][0]["total_bytes"], 80ULL << 30);
  const std::string m = agent.metrics();
  EXPECT_NE(m.find("headroom_sensor_state{sensor=\"nvml\",state=\"active\"} 1"), std::string::npos);
  EXPECT_TRUE(
      hasSeries(m, "headroom_gpu_memory_total_bytes{",
                {"gpu=\"0\"", "name=\"headroom stand-in GPU\"", "uuid=\"GPU-", fmt::format("}} {}", 80ULL << 30)}))
      << m;
  EXPECT_TRUE(hasSeries(m, "headroom_gpu_process_memory_bytes{",
                        {"gpu=\"0\"", "process=\"cuda-client\"", fmt::format("}} {}", kClientDevice)}))
      << m;

  // The kill: anonymous memory past the limit while the pinned pool and device memory are held.
  ASSERT_TRUE(c->writeLine("grow"));
  ASSERT_TRUE(agent.waitLog("OOM kill recorded as record 1", 60s)) << agent.logText();
  auto r = runCommand({HEADROOM_BINARY, "report", "--journal", tmp.file("oom.hrj"), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json rec = nlohmann::json::parse(r.out);
  ASSERT_EQ(rec["ledger"].size(), 1u) << rec.dump();
  const nlohmann::json& l = rec["ledger"][0];
  EXPECT_EQ(l["pid"], pid);
  EXPECT_EQ(l["comm"], "cuda-client");
  EXPECT_GT(l["ram"]["anon_bytes"].get<double>(), 48.0 * kMiB) << l.dump();
  EXPECT_EQ(l["gpu_memory"]["bytes"], kClientDevice) << "the driver's figure at the last sample";
  if (probes) {
    EXPECT_EQ(l["cuda"]["pinned_bytes"], kClientPinned) << l.dump();
    EXPECT_EQ(l["cuda"]["device_bytes"], kClientDevice) << l.dump();
    EXPECT_EQ(l["cuda"]["at_kill"], true) << "read by BPF at the mark";
    EXPECT_EQ(l["cuda"]["pinned_residency"], "inside_rss") << "the stand-in pins with mmap + mlock";
    // The stand-in's pinned pages are mlock'd: the kernel's locked_vm holds them.
    EXPECT_GE(l["locked_bytes"].get<double>(), static_cast<double>(kClientPinned)) << l.dump();
  } else {
    EXPECT_TRUE(l["cuda"].is_null() || l["cuda"]["at_kill"] == false) << l.dump();
  }
  auto text = runCommand({HEADROOM_BINARY, "report", "--journal", tmp.file("oom.hrj")});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("LEDGER AT THE KILL"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("CUDA DEVICE"), std::string::npos) << text.out;
}

TEST(Gpu, NvmlWithoutADriverOrWithoutTheLibrarySaysWhyAndTheAgentRuns) {
  TempDir gpu;
  {
    // The library is there, the driver is not: nvmlInit fails (9, as on a machine with the
    // driver's packages and no GPU).
    testing::AgentProcess agent({"--interval", "200ms", "--sensors.nvml-library", HEADROOM_NVML_FAKE},
                                withStandInDriver(gpu, {{"HEADROOM_FAKE_NVML_INIT", "9"}}));
    ASSERT_TRUE(agent.waitLog("gpu: no device memory per process from NVML")) << agent.logText();
    EXPECT_NE(agent.logText().find("Driver Not Loaded (9)"), std::string::npos) << agent.logText();
    ASSERT_TRUE(agent.waitHealthy());
    auto s = agent.getJson("/v1/snapshot");
    EXPECT_EQ(s["gpus"]["state"], "degraded") << s["gpus"].dump();
    EXPECT_NE(s["gpus"]["reason"].get<std::string>().find("Driver Not Loaded"), std::string::npos);
    EXPECT_NE(agent.metrics().find("headroom_sensor_state{sensor=\"nvml\",state=\"degraded\"} 1"), std::string::npos);
  }
  {
    // No library at all: off, and why.
    testing::AgentProcess agent({"--interval", "200ms", "--sensors.nvml-library", "/nonexistent/libnvidia-ml.so.1"},
                                withStandInDriver(gpu));
    ASSERT_TRUE(agent.waitHealthy()) << agent.logText();
    auto s = agent.getJson("/v1/snapshot");
    EXPECT_EQ(s["gpus"]["state"], "off") << s["gpus"].dump();
    EXPECT_NE(s["gpus"]["reason"].get<std::string>().find("/nonexistent/libnvidia-ml.so.1"), std::string::npos);
  }
  {
    // Turned off: not loaded at all.
    testing::AgentProcess agent(
        {"--interval", "200ms", "--sensors.nvml", "false", "--sensors.nvml-library", HEADROOM_NVML_FAKE},
        withStandInDriver(gpu));
    ASSERT_TRUE(agent.waitHealthy()) << agent.logText();
    auto s = agent.getJson("/v1/snapshot");
    EXPECT_EQ(s["gpus"]["state"], "off");
    EXPECT_EQ(s["gpus"]["reason"], "turned off (sensors.nvml = false)");
    EXPECT_TRUE(s["gpus"]["devices"].empty());
  }
}

}  // namespace
}  // namespace headroom
