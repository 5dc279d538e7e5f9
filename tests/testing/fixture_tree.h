// Builds small /proc and /sys trees in a temporary directory for the readers' unit tests, and
// names the committed real snapshots under tests/fixtures.
#pragma once

#include <memory>

#include "headroom/model/snapshot.h"

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/sources/fs_root.h"

namespace headroom::testing {

// A committed fixture directory, found through the compile definition (never the cwd).
std::string fixturePath(std::string_view name);

// A whole file's bytes ("" when it cannot be read): what the tests compare against.
std::string fileText(const std::string& path);

// A process as the fake /proc shows it. Sizes in bytes (written in kB, as the kernel does).
struct FakeProcess {
  pid_t pid = 100;
  pid_t ppid = 1;
  std::string comm = "worker";
  std::string cmdline = "worker --flag";  // spaces become NULs
  std::string memory_cgroup = "/";        // path in the memory hierarchy
  int memory_version = 1;                 // which /proc/<pid>/cgroup line carries it
  std::uint64_t start_time = 1000;
  std::uint64_t rss_anon = 0, rss_file = 0, rss_shmem = 0;
  std::uint64_t pss_anon = 0, pss_file = 0, pss_shmem = 0;
  std::uint64_t vm_pte = 4096;
  std::uint64_t vm_lck = 0;
  std::uint32_t threads = 1;
  std::uint64_t minflt = 10, majflt = 0;
  bool with_smaps = true;
};

class FixtureTree {
 public:
  FixtureTree();
  ~FixtureTree();
  FixtureTree(const FixtureTree&) = delete;
  FixtureTree& operator=(const FixtureTree&) = delete;

  const std::string& root() const { return root_; }
  FsRoot fs() const;

  // Writes a file (parents created) at an absolute path of the fake system.
  void write(std::string_view abs_path, std::string_view content) const;
  void mkdir(std::string_view abs_path) const;
  void symlink(std::string_view target, std::string_view abs_path) const;
  void remove(std::string_view abs_path) const;

  // Common shapes.
  void mountV1() const;      // v1 hierarchies only (memory at /sys/fs/cgroup/memory)
  void mountV2() const;      // unified only, memory enabled (at /sys/fs/cgroup)
  void mountHybrid() const;  // v1 memory + v2 at /sys/fs/cgroup/unified without memory
  void meminfo(std::uint64_t total = 16ULL << 30, std::uint64_t available = 8ULL << 30) const;
  void process(const FakeProcess& p) const;
  void self(pid_t pid) const;  // /proc/self -> pid

  // A v1 memory cgroup with consistent files; `extra_stat` is appended to memory.stat.
  void cgroupV1(std::string_view path, std::uint64_t usage, std::uint64_t limit, std::uint64_t rss, std::uint64_t cache,
                std::uint64_t shmem, std::uint64_t kmem, std::string_view extra_stat = "") const;
  // A cgroup's cgroup.procs (v1: in the memory hierarchy), one pid a line.
  void cgroupProcs(int version, std::string_view path, const std::vector<pid_t>& pids) const;
  // A v2 memory cgroup; `stat` is the whole memory.stat.
  void cgroupV2(std::string_view path, std::uint64_t current, std::string_view max, std::string_view stat) const;

 private:
  std::string root_;
};

// A v1 proving host: / (sshd), /proving with an 8 GiB limit holding /proving/prover (cuzk,
// pid 100, 3900 MiB anon, 8 MiB page tables, 18 threads) and /proving/curio (curio, pid 101,
// 256 MiB shmem); 16 GiB RAM, 8 GiB available; pid 103 vanished, pid 2 a kernel thread.
void provingHostV1(const FixtureTree& t);
// Its prover and curio, with `anon` bytes of anonymous memory (3900 MiB and 100 MiB there): a
// test writes them again to have them grow.
FakeProcess provingProver(std::uint64_t anon);
FakeProcess provingCurio(std::uint64_t anon);
// provingHostV1 collected and built into a Snapshot with these role rules ("ROLE=KIND:VALUE").
std::shared_ptr<const Snapshot> provingSnapshot(const FixtureTree& t, const std::vector<std::string>& rules = {});
// The host's prover (cuzk, pid 100, /proving/prover) OOM-killed as mark_victim tells it, at
// `at_ns` (CLOCK_MONOTONIC), holding `anon` bytes and `pgtables` of page tables.
OomEvent proverKill(std::int64_t at_ns, std::uint64_t anon, std::uint64_t pgtables);

}  // namespace headroom::testing
