// NVML through dlopen, against the stand-in library of the tests (tests/testing/fake_nvml.c):
// one GPU, its processes those the stand-in driver published (HEADROOM_FAKE_GPU_DIR), more of
// them than the first call has room for, a library missing, and one whose driver is not loaded.
#include "headroom/sources/nvml.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

namespace headroom {
namespace {

// HEADROOM_FAKE_GPU_DIR set to a fresh directory for one test, and each process it holds.
struct FakeGpuDir {
  std::filesystem::path dir;
  std::vector<pid_t> children;
  FakeGpuDir() {
    std::string d = (std::filesystem::temp_directory_path() / "headroom-nvml-XXXXXX").string();
    if (::mkdtemp(d.data()) == nullptr) throw std::runtime_error("mkdtemp");
    dir = d;
    ::setenv("HEADROOM_FAKE_GPU_DIR", d.c_str(), 1);
  }
  ~FakeGpuDir() {
    for (pid_t c : children) {
      ::kill(c, SIGKILL);
      ::waitpid(c, nullptr, 0);
    }
    ::unsetenv("HEADROOM_FAKE_GPU_DIR");
    ::unsetenv("HEADROOM_FAKE_NVML_INIT");
    std::filesystem::remove_all(dir);
  }
  void holds(pid_t pid, std::uint64_t bytes) const { std::ofstream(dir / std::to_string(pid)) << bytes << "\n"; }
  // A live process (a child that waits to be killed) holding `bytes`.
  pid_t child(std::uint64_t bytes) {
    pid_t c = ::fork();
    if (c == 0) {
      ::pause();
      ::_exit(0);
    }
    children.push_back(c);
    holds(c, bytes);
    return c;
  }
};

TEST(Nvml, OneGpuWithTheProcessesTheDriverGaveMemory) {
  FakeGpuDir gpu;
  gpu.holds(::getpid(), 3ULL << 30);
  gpu.holds(999999999, 1ULL << 30);  // a pid that is not alive: the driver lists no such process
  auto n = Nvml::open(HEADROOM_NVML_FAKE);
  ASSERT_TRUE(n) << n.error().describe();
  auto r = (*n)->read();
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->library, HEADROOM_NVML_FAKE);
  EXPECT_EQ(r->driver_version, "stand-in");
  ASSERT_EQ(r->devices.size(), 1u);
  const GpuDevice& d = r->devices[0];
  EXPECT_EQ(d.index, 0u);
  EXPECT_EQ(d.name, "headroom stand-in GPU");
  EXPECT_EQ(d.uuid, "GPU-00000000-0000-0000-0000-0000000000f0");
  EXPECT_EQ(d.total_bytes, 80ULL << 30);
  EXPECT_EQ(d.used_bytes, (3ULL << 30) + (512ULL << 20)) << "its process and the driver's own";
  ASSERT_EQ(d.processes.size(), 1u);
  EXPECT_EQ(d.processes[0].pid, ::getpid());
  EXPECT_EQ(d.processes[0].used_bytes, 3ULL << 30);
  EXPECT_EQ(r->processBytes(::getpid()), 3ULL << 30);
  EXPECT_FALSE(r->processBytes(1).has_value()) << "a process on no GPU";
}

TEST(Nvml, MoreProcessesThanTheFirstCallHasRoomForAreAllRead) {
  FakeGpuDir gpu;
  for (int i = 0; i < 70; ++i) gpu.child((static_cast<std::uint64_t>(i) + 1) << 20);
  auto n = Nvml::open(HEADROOM_NVML_FAKE);
  ASSERT_TRUE(n) << n.error().describe();
  auto r = (*n)->read();
  ASSERT_TRUE(r) << r.error().describe();
  ASSERT_EQ(r->devices.size(), 1u);
  EXPECT_EQ(r->devices[0].processes.size(), 70u) << "asked again with room for all";
  for (std::size_t i = 0; i < gpu.children.size(); ++i) EXPECT_EQ(r->processBytes(gpu.children[i]), (i + 1) << 20);
}

TEST(Nvml, AMissingLibraryIsNotFoundAndADriverNotLoadedIsUnsupportedInItsOwnWords) {
  auto missing = Nvml::open("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().kind, ErrorKind::kNotFound);
  EXPECT_NE(missing.error().describe().find("/nonexistent/libnvidia-ml.so.1"), std::string::npos);

  FakeGpuDir gpu;
  ::setenv("HEADROOM_FAKE_NVML_INIT", "9", 1);
  auto no_driver = Nvml::open(HEADROOM_NVML_FAKE);
  ASSERT_FALSE(no_driver);
  EXPECT_EQ(no_driver.error().kind, ErrorKind::kUnsupported);
  EXPECT_NE(no_driver.error().describe().find("nvmlInit through"), std::string::npos);
  EXPECT_NE(no_driver.error().describe().find("Driver Not Loaded (9)"), std::string::npos)
      << no_driver.error().describe();

  // A library without NVML's calls (libc, say) is refused, naming what it lacks.
  auto other = Nvml::open("libc.so.6");
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().kind, ErrorKind::kUnsupported);
  EXPECT_NE(other.error().describe().find("lacks the calls"), std::string::npos);
}

}  // namespace
}  // namespace headroom
