#include "testing/fixture_tree.h"

#include "headroom/model/roles.h"
#include "headroom/sources/collector.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

namespace headroom::testing {

namespace fs = std::filesystem;

std::string fixturePath(std::string_view name) { return fmt::format("{}/{}", HEADROOM_FIXTURE_DIR, name); }

std::string fileText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return std::move(out).str();
}

FixtureTree::FixtureTree() {
  std::string tmpl = (fs::temp_directory_path() / "headroom-fixture-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  root_ = tmpl;
}

FixtureTree::~FixtureTree() {
  std::error_code ec;
  fs::remove_all(root_, ec);
}

FsRoot FixtureTree::fs() const {
  auto r = FsRoot::open(root_);
  if (!r) throw std::runtime_error(r.error().describe());
  return std::move(*r);
}

void FixtureTree::write(std::string_view abs_path, std::string_view content) const {
  fs::path p = fs::path(root_) / fs::path(abs_path).relative_path();
  fs::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(content.data(), static_cast<std::streamsize>(content.size()));
  if (!f) throw std::runtime_error("writing fixture " + p.string());
}

void FixtureTree::mkdir(std::string_view abs_path) const {
  fs::create_directories(fs::path(root_) / fs::path(abs_path).relative_path());
}

void FixtureTree::symlink(std::string_view target, std::string_view abs_path) const {
  fs::path p = fs::path(root_) / fs::path(abs_path).relative_path();
  fs::create_directories(p.parent_path());
  fs::create_symlink(target, p);
}

void FixtureTree::remove(std::string_view abs_path) const {
  fs::remove_all(fs::path(root_) / fs::path(abs_path).relative_path());
}

namespace {
constexpr std::string_view kV1Lines =
    "25 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
    "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "31 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
    "34 30 0:31 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,memory\n"
    "38 30 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n";
}  // namespace

void FixtureTree::mountV1() const {
  write("/proc/self/mountinfo", kV1Lines);
  mkdir("/sys/fs/cgroup/memory");
}

void FixtureTree::mountV2() const {
  write("/proc/self/mountinfo",
        "25 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
        "30 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
        "rw,nsdelegate,memory_recursiveprot\n");
  write("/sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n");
}

void FixtureTree::mountHybrid() const {
  write("/proc/self/mountinfo",
        std::string(kV1Lines) + "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n");
  mkdir("/sys/fs/cgroup/memory");
  write("/sys/fs/cgroup/unified/cgroup.controllers", "\n");
}

void FixtureTree::meminfo(std::uint64_t total, std::uint64_t available) const {
  write("/proc/meminfo", fmt::format("MemTotal:       {:>8} kB\n"
                                     "MemFree:        {:>8} kB\n"
                                     "MemAvailable:   {:>8} kB\n"
                                     "Buffers:           10240 kB\n"
                                     "Cached:          1048576 kB\n"
                                     "Shmem:            204800 kB\n"
                                     "Mlocked:            4096 kB\n"
                                     "KernelStack:       16384 kB\n"
                                     "PageTables:        65536 kB\n"
                                     "SecPageTables:         0 kB\n"
                                     "Slab:             307200 kB\n"
                                     "SReclaimable:     204800 kB\n"
                                     "SUnreclaim:       102400 kB\n"
                                     "Percpu:             8192 kB\n"
                                     "SwapTotal:             0 kB\n"
                                     "SwapFree:              0 kB\n"
                                     "HugePages_Total:       4\n"
                                     "HugePages_Free:        4\n"
                                     "Hugepagesize:       2048 kB\n"
                                     "Hugetlb:            8192 kB\n",
                                     total / 1024, available / 2048, available / 1024));
}

void FixtureTree::process(const FakeProcess& p) const {
  std::string dir = fmt::format("/proc/{}", p.pid);
  std::uint64_t rss = p.rss_anon + p.rss_file + p.rss_shmem;
  write(dir + "/stat",
        fmt::format("{} ({}) S {} {} {} 0 -1 4194560 {} 0 {} 0 5 3 0 0 20 0 {} 0 {} 123456789 {} "
                    "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n",
                    p.pid, p.comm, p.ppid, p.pid, p.pid, p.minflt, p.majflt, p.threads, p.start_time, rss / 4096));
  write(dir + "/status",
        fmt::format("Name:\t{}\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{}\nNgid:\t0\nPid:\t{}\nPPid:\t{}\n"
                    "TracerPid:\t0\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\n"
                    "VmPeak:\t  {} kB\nVmSize:\t  {} kB\nVmLck:\t  {} kB\nVmPin:\t       0 kB\nVmHWM:\t  {} kB\n"
                    "VmRSS:\t  {} kB\nRssAnon:\t  {} kB\nRssFile:\t  {} kB\nRssShmem:\t  {} kB\n"
                    "VmData:\t  1024 kB\nVmStk:\t  132 kB\nVmExe:\t  100 kB\nVmLib:\t  2000 kB\n"
                    "VmPTE:\t  {} kB\nVmSwap:\t       0 kB\nHugetlbPages:\t       0 kB\nCoreDumping:\t0\n"
                    "THP_enabled:\t1\nThreads:\t{}\nSigQ:\t0/95000\n",
                    p.comm, p.pid, p.pid, p.ppid, rss / 1024 * 4, rss / 1024 * 4, p.vm_lck / 1024, rss / 1024,
                    rss / 1024, p.rss_anon / 1024, p.rss_file / 1024, p.rss_shmem / 1024, p.vm_pte / 1024, p.threads));
  std::string cmd = p.cmdline;
  for (char& c : cmd) {
    if (c == ' ') c = '\0';
  }
  write(dir + "/cmdline", cmd + std::string(1, '\0'));
  write(dir + "/comm", p.comm + "\n");
  if (p.memory_version == 1) {
    write(dir + "/cgroup", fmt::format("9:pids:/\n4:memory:{}\n1:cpu,cpuacct:/\n0::/\n", p.memory_cgroup));
  } else {
    write(dir + "/cgroup", fmt::format("0::{}\n", p.memory_cgroup));
  }
  if (p.with_smaps) {
    std::uint64_t pss = p.pss_anon + p.pss_file + p.pss_shmem;
    write(dir + "/smaps_rollup",
          fmt::format("55d0c0a00000-7ffd1c3fe000 ---p 00000000 00:00 0                          [rollup]\n"
                      "Rss:            {:>8} kB\nPss:            {:>8} kB\nPss_Dirty:      {:>8} kB\n"
                      "Pss_Anon:       {:>8} kB\nPss_File:       {:>8} kB\nPss_Shmem:      {:>8} kB\n"
                      "Shared_Clean:          0 kB\nShared_Dirty:          0 kB\nPrivate_Clean:         0 kB\n"
                      "Private_Dirty:         0 kB\nReferenced:            0 kB\nAnonymous:      {:>8} kB\n"
                      "LazyFree:              0 kB\nAnonHugePages:         0 kB\nSwap:                  0 kB\n"
                      "SwapPss:               0 kB\nLocked:         {:>8} kB\n",
                      rss / 1024, pss / 1024, p.pss_anon / 1024, p.pss_anon / 1024, p.pss_file / 1024,
                      p.pss_shmem / 1024, p.rss_anon / 1024, p.vm_lck / 1024));
  }
}

void FixtureTree::self(pid_t pid) const {
  // Like the real /proc: "self" links to the pid's directory, which holds mountinfo.
  fs::path self_dir = fs::path(root_) / "proc/self";
  fs::path pid_dir = fs::path(root_) / "proc" / std::to_string(pid);
  fs::create_directories(pid_dir);
  if (fs::is_directory(self_dir) && !fs::is_symlink(self_dir)) {
    for (const auto& e : fs::directory_iterator(self_dir)) fs::rename(e.path(), pid_dir / e.path().filename());
    fs::remove_all(self_dir);
  }
  fs::create_symlink(std::to_string(pid), self_dir);
}

void FixtureTree::cgroupV1(std::string_view path, std::uint64_t usage, std::uint64_t limit, std::uint64_t rss,
                           std::uint64_t cache, std::uint64_t shmem, std::uint64_t kmem,
                           std::string_view extra_stat) const {
  std::string dir = path == "/" ? "/sys/fs/cgroup/memory" : fmt::format("/sys/fs/cgroup/memory{}", path);
  write(dir + "/memory.usage_in_bytes", fmt::format("{}\n", usage));
  write(dir + "/memory.limit_in_bytes", fmt::format("{}\n", limit));
  write(dir + "/memory.max_usage_in_bytes", fmt::format("{}\n", usage + 4096));
  write(dir + "/memory.failcnt", "0\n");
  write(dir + "/memory.kmem.usage_in_bytes", fmt::format("{}\n", kmem));
  write(dir + "/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n");
  write(dir + "/memory.stat",
        fmt::format("cache {0}\nrss {1}\nrss_huge 0\nshmem {2}\nmapped_file 0\ndirty 0\nwriteback 0\nswap 0\n"
                    "pgpgin 100\npgpgout 50\npgfault 1000\npgmajfault 0\ninactive_anon {1}\nactive_anon 0\n"
                    "inactive_file {0}\nactive_file 0\nunevictable 0\nhierarchical_memory_limit {3}\n"
                    "hierarchical_memsw_limit 9223372036854771712\ntotal_cache {0}\ntotal_rss {1}\n"
                    "total_rss_huge 0\ntotal_shmem {2}\ntotal_mapped_file 0\ntotal_dirty 0\ntotal_writeback 0\n"
                    "total_swap 0\ntotal_pgfault 1000\ntotal_pgmajfault 0\ntotal_inactive_anon {1}\n"
                    "total_active_anon 0\ntotal_inactive_file {0}\ntotal_active_file 0\ntotal_unevictable 0\n{4}",
                    cache, rss, shmem, limit, extra_stat));
}

void FixtureTree::cgroupProcs(int version, std::string_view path, const std::vector<pid_t>& pids) const {
  std::string base = version == 1 ? "/sys/fs/cgroup/memory" : "/sys/fs/cgroup";
  std::string text;
  for (pid_t p : pids) text += fmt::format("{}\n", p);
  write(path == "/" ? base + "/cgroup.procs" : fmt::format("{}{}/cgroup.procs", base, path), text);
}

void FixtureTree::cgroupV2(std::string_view path, std::uint64_t current, std::string_view max,
                           std::string_view stat) const {
  std::string dir = path == "/" ? "/sys/fs/cgroup" : fmt::format("/sys/fs/cgroup{}", path);
  write(dir + "/memory.current", fmt::format("{}\n", current));
  write(dir + "/memory.max", fmt::format("{}\n", max));
  write(dir + "/memory.peak", fmt::format("{}\n", current + 8192));
  write(dir + "/memory.high", "max\n");
  write(dir + "/memory.swap.current", "0\n");
  write(dir + "/memory.stat", stat);
  write(dir + "/memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n");
  write(dir + "/memory.events.local", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n");
  write(dir + "/memory.pressure",
        "some avg10=1.50 avg60=0.75 avg300=0.10 total=123456\nfull avg10=0.50 avg60=0.25 avg300=0.05 total=65432\n");
}

// A v1 proving host: /proving (8 GiB limit) holds the prover and a co-located neighbour.
FakeProcess provingProver(std::uint64_t anon) {
  FakeProcess prover;
  prover.pid = 100;
  prover.comm = "cuzk";
  prover.memory_cgroup = "/proving/prover";
  prover.rss_anon = prover.pss_anon = anon;
  prover.vm_pte = 8ULL << 20;
  prover.threads = 18;
  return prover;
}

FakeProcess provingCurio(std::uint64_t anon) {
  FakeProcess curio;
  curio.pid = 101;
  curio.comm = "curio";
  curio.cmdline = "curio run --layers=gui";
  curio.memory_cgroup = "/proving/curio";
  curio.rss_anon = curio.pss_anon = anon;
  curio.rss_shmem = curio.pss_shmem = 256ULL << 20;
  return curio;
}

void provingHostV1(const FixtureTree& t) {
  constexpr std::uint64_t kMiB = 1ULL << 20;
  constexpr std::uint64_t kGiB = 1ULL << 30;
  constexpr std::uint64_t kV1Max = 9223372036854771712ULL;
  t.mountV1();
  t.meminfo(16 * kGiB, 8 * kGiB);
  t.cgroupV1("/", 10 * kGiB, kV1Max, 6 * kGiB, 3 * kGiB, 512 * kMiB, 200 * kMiB);
  t.cgroupV1("/proving", 5 * kGiB, 8 * kGiB, 4 * kGiB, 900 * kMiB, 256 * kMiB, 100 * kMiB);
  t.cgroupV1("/proving/prover", 4 * kGiB, kV1Max, 3900 * kMiB, 50 * kMiB, 0, 50 * kMiB);
  t.cgroupV1("/proving/curio", 1 * kGiB, kV1Max, 100 * kMiB, 850 * kMiB, 256 * kMiB, 50 * kMiB);
  t.process(provingProver(3900 * kMiB));
  t.process(provingCurio(100 * kMiB));
  FakeProcess sshd;
  sshd.pid = 102;
  sshd.comm = "sshd";
  sshd.memory_cgroup = "/";
  sshd.rss_anon = sshd.pss_anon = 4 * kMiB;
  t.process(sshd);
  t.mkdir("/proc/103");  // exited between the listing and the read
  t.write("/proc/2/cgroup", "4:memory:/\n");
  t.write("/proc/2/stat",
          "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 0 0 0 1 0 0 0 0 0 0 0 0 0 0 0 0 "
          "17 0 0 0 0 0 0\n");
  t.write("/proc/2/status", "Name:\tkthreadd\nTgid:\t2\nPid:\t2\nPPid:\t0\nKthread:\t1\n");
}

std::shared_ptr<const Snapshot> provingSnapshot(const FixtureTree& t, const std::vector<std::string>& rules) {
  provingHostV1(t);
  auto fs = t.fs();
  auto c = Collector::create(fs);
  if (!c) throw std::runtime_error(c.error().describe());
  auto raw = c->collect({});
  if (!raw) throw std::runtime_error(raw.error().describe());
  std::vector<RoleRule> parsed;
  parsed.reserve(rules.size());
  for (const auto& r : rules) parsed.push_back(*parseRoleRule(r));
  return buildSnapshot(std::move(*raw), RoleMatcher(std::move(parsed)));
}

OomEvent proverKill(std::int64_t at_ns, std::uint64_t anon, std::uint64_t pgtables) {
  OomEvent e;
  e.from_bpf = true;
  e.monotonic_time_ns = at_ns;
  OomVictim v;
  v.pid = v.tgid = 100;
  v.comm = "cuzk";
  v.cgroup = "/proving/prover";
  v.anon_rss = anon;
  v.pgtables = pgtables;
  e.victims.push_back(v);
  return e;
}

}  // namespace headroom::testing
