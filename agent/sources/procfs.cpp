#include "headroom/sources/procfs.h"

#include <unistd.h>

#include "headroom/util/clock.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace headroom {
namespace {

std::uint64_t bytesOr0(const StatMap& m, std::string_view key) { return m.getOr(key, 0); }

}  // namespace

Result<ProcStatus> parseProcStatus(std::string_view text) {
  StatMap m = parseColonKbLines(text);
  if (!m.contains("Pid") || !m.contains("Tgid")) return badData("no Pid:/Tgid: line (truncated or not a status file)");
  ProcStatus s;
  s.tgid = static_cast<pid_t>(m.getOr("Tgid"));
  s.ppid = static_cast<pid_t>(m.getOr("PPid"));
  // "Uid:\treal\teffective\tsaved\tfs" has several numbers: parseColonKbLines skips it.
  for (std::string_view line : splitLines(text)) {
    if (line.substr(0, 4) == "Uid:") {
      auto f = splitFields(line.substr(4));
      if (!f.empty()) {
        if (auto u = parseU64(f[0])) s.uid = static_cast<uid_t>(*u);
      }
    }
  }
  s.kernel_thread = m.getOr("Kthread", 0) == 1 || !m.contains("VmRSS");
  s.vm_size = bytesOr0(m, "VmSize");
  s.vm_rss = bytesOr0(m, "VmRSS");
  s.vm_hwm = bytesOr0(m, "VmHWM");
  s.rss_anon = bytesOr0(m, "RssAnon");
  s.rss_file = bytesOr0(m, "RssFile");
  s.rss_shmem = bytesOr0(m, "RssShmem");
  s.vm_pte = bytesOr0(m, "VmPTE");
  s.vm_lck = bytesOr0(m, "VmLck");
  s.vm_pin = bytesOr0(m, "VmPin");
  s.vm_swap = bytesOr0(m, "VmSwap");
  s.threads = static_cast<std::uint32_t>(m.getOr("Threads", 0));
  return s;
}

Result<SmapsRollup> parseSmapsRollup(std::string_view text) {
  StatMap m = parseColonKbLines(text);
  if (!m.contains("Rss") || !m.contains("Pss")) return badData("no Rss:/Pss: line (truncated?)");
  SmapsRollup r;
  r.rss = m.getOr("Rss");
  r.pss = m.getOr("Pss");
  r.pss_anon = m.getOr("Pss_Anon");
  r.pss_file = m.getOr("Pss_File");
  r.pss_shmem = m.getOr("Pss_Shmem");
  r.swap = m.getOr("Swap");
  r.swap_pss = m.getOr("SwapPss");
  r.locked = m.getOr("Locked");
  r.anon_huge = m.getOr("AnonHugePages");
  return r;
}

Result<std::uint64_t> parseStatmResidentBytes(std::string_view text, std::uint64_t page_bytes) {
  const auto fields = splitFields(text);
  if (fields.size() < 2) return badData(fmt::format("statm: {} field(s), not 7", fields.size()));
  auto pages = parseU64(fields[1]);
  if (!pages) return pages.error().wrap("statm resident");
  if (page_bytes != 0 && *pages > UINT64_MAX / page_bytes) return badData("statm resident: out of range");
  return *pages * page_bytes;
}

Result<std::uint64_t> readResidentBytes(const FsRoot& fs, pid_t pid) {
  static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  auto text = fs.readFile(fmt::format("/proc/{}/statm", pid));
  if (!text) return text.error();
  return parseStatmResidentBytes(*text, page);
}

Result<ProcStat> parseProcStat(std::string_view text) {
  // "pid (comm) state ppid ...": comm may contain spaces and ')', so split at the last ')'.
  auto open = text.find('(');
  auto close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open)
    return badData("no (comm) field (truncated?)");
  ProcStat st;
  auto pid = parseI64(text.substr(0, open));
  if (!pid) return pid.error().wrap("pid field");
  st.pid = static_cast<pid_t>(*pid);
  st.comm = std::string(text.substr(open + 1, close - open - 1));
  auto f = splitFields(text.substr(close + 1));
  // Fields after comm, 0-based here: 0 state, 1 ppid, 7 minflt, 9 majflt, 11 utime, 12 stime,
  // 19 starttime (field 22 of proc(5)), 20 vsize, 21 rss.
  if (f.size() < 22) return badData(fmt::format("only {} fields after comm, need 22 (truncated?)", f.size()));
  st.state = f[0].empty() ? '?' : f[0][0];
  auto num = [&](std::size_t i, const char* what) -> Result<std::uint64_t> {
    auto v = parseU64(f[i]);
    if (!v) return v.error().wrap(what);
    return v;
  };
  auto ppid = parseI64(f[1]);
  if (!ppid) return ppid.error().wrap("ppid field");
  st.ppid = static_cast<pid_t>(*ppid);
  auto minflt = num(7, "minflt field");
  auto majflt = num(9, "majflt field");
  auto utime = num(11, "utime field");
  auto stime = num(12, "stime field");
  auto threads = num(17, "num_threads field");
  auto start = num(19, "starttime field");
  auto vsize = num(20, "vsize field");
  auto rss = num(21, "rss field");
  for (auto* r : {&minflt, &majflt, &utime, &stime, &threads, &start, &vsize, &rss}) {
    if (!*r) return r->error();
  }
  st.minflt = *minflt;
  st.majflt = *majflt;
  st.utime_ticks = *utime;
  st.stime_ticks = *stime;
  st.start_time_ticks = *start;
  st.threads = static_cast<std::uint32_t>(*threads);
  st.vsize_bytes = *vsize;
  st.rss_pages = *rss;
  return st;
}

std::string parseCmdline(std::string_view text) {
  while (!text.empty() && text.back() == '\0') text.remove_suffix(1);
  std::string out(text);
  for (char& c : out) {
    if (c == '\0') c = ' ';
  }
  return out;
}

Result<Meminfo> parseMeminfo(std::string_view text) {
  Meminfo mi;
  mi.all = parseColonKbLines(text);
  const StatMap& m = mi.all;
  if (!m.contains("MemTotal")) return badData("no MemTotal: line (truncated or not a meminfo file)");
  mi.mem_total = m.getOr("MemTotal");
  mi.mem_free = m.getOr("MemFree");
  mi.buffers = m.getOr("Buffers");
  mi.cached = m.getOr("Cached");
  mi.shmem = m.getOr("Shmem");
  mi.anon_pages = m.getOr("AnonPages");
  mi.mlocked = m.getOr("Mlocked");
  mi.page_tables = m.getOr("PageTables");
  mi.sec_page_tables = m.getOr("SecPageTables");
  mi.kernel_stack = m.getOr("KernelStack");
  mi.slab = m.getOr("Slab");
  mi.s_reclaimable = m.getOr("SReclaimable");
  mi.s_unreclaim = m.getOr("SUnreclaim");
  mi.percpu = m.getOr("Percpu");
  mi.swap_total = m.getOr("SwapTotal");
  mi.swap_free = m.getOr("SwapFree");
  mi.hugepages_total = m.getOr("HugePages_Total");  // a count, not bytes
  mi.hugepages_free = m.getOr("HugePages_Free");
  mi.hugepage_size = m.getOr("Hugepagesize");
  // Hugetlb (4.16+) covers every huge page size; older kernels give only the default size.
  mi.hugetlb = m.contains("Hugetlb") ? m.getOr("Hugetlb") : mi.hugepages_total * mi.hugepage_size;
  if (auto a = m.get("MemAvailable")) {
    mi.mem_available = *a;
  } else {
    // Before 3.14: the free pages plus what reclaim can take back easily, never above total.
    mi.mem_available = std::min(mi.mem_total, mi.mem_free + mi.cached + mi.buffers + mi.s_reclaimable - mi.shmem);
    mi.mem_available_estimated = true;
  }
  return mi;
}

ProcessSample procfsSample(pid_t pid, const ProcStat& st, const ProcStatus& status) {
  ProcessSample s;
  s.pid = pid;
  s.start_time_ticks = st.start_time_ticks;
  s.ppid = st.ppid;
  s.uid = status.uid;
  s.comm = st.comm;
  s.status = status;
  s.minflt = st.minflt;
  s.majflt = st.majflt;
  s.status.threads = st.threads;  // stat is read at each sample; status may be older
  return s;
}

ProcessRead readProcess(const FsRoot& fs, pid_t pid, bool with_smaps,
                        const std::function<bool(const ProcCgroups&)>& want) {
  ProcessRead out;
  auto isGone = [](const Error& e) { return e.kind == ErrorKind::kNotFound; };
  auto fail = [&](const Error& e) {
    out.outcome = isGone(e) ? ReadOutcome::kVanished : ReadOutcome::kFailed;
    out.error = e;
    return out;
  };
  auto dir = fs.openDir(fmt::format("/proc/{}", pid));
  if (!dir) return fail(dir.error());

  // The cgroup first: a caller watching one cgroup reads nothing more of other processes.
  auto cg_text = dir->readFile("cgroup");
  if (!cg_text) return fail(cg_text.error());
  auto cg = parseProcCgroup(*cg_text);
  if (!cg) {
    if (cg_text->empty()) return fail(notFound(fmt::format("{}/cgroup is empty", dir->path())));
    return fail(cg.error().wrap(fmt::format("parsing {}/cgroup", dir->path())));
  }
  if (want && !want(*cg)) {
    out.outcome = ReadOutcome::kSkipped;
    return out;
  }

  auto stat_text = dir->readFile("stat");
  if (!stat_text) return fail(stat_text.error());
  auto st = parseProcStat(*stat_text);
  if (!st) {
    // A truncated read of a process that is exiting looks the same as garbage; only an empty
    // file is treated as vanished.
    if (stat_text->empty()) return fail(notFound(fmt::format("{}/stat is empty", dir->path())));
    return fail(st.error().wrap(fmt::format("parsing {}/stat", dir->path())));
  }
  auto status_text = dir->readFile("status");
  if (!status_text) return fail(status_text.error());
  auto status = parseProcStatus(*status_text);
  if (!status) {
    if (status_text->empty()) return fail(notFound(fmt::format("{}/status is empty", dir->path())));
    return fail(status.error().wrap(fmt::format("parsing {}/status", dir->path())));
  }
  if (status->kernel_thread) {
    out.outcome = ReadOutcome::kKernelThread;
    return out;
  }

  out.sample = procfsSample(pid, *st, *status);
  ProcessSample& s = out.sample;
  s.cgroups = std::make_shared<const ProcCgroups>(std::move(*cg));

  auto comm = dir->readFile("comm");
  if (!comm) return fail(comm.error());
  s.comm = std::string(trim(*comm));
  auto cmdline = dir->readFile("cmdline");
  if (!cmdline) return fail(cmdline.error());
  s.cmdline = parseCmdline(*cmdline);

  if (with_smaps) {
    auto smaps_text = dir->readFile("smaps_rollup");
    if (smaps_text) {
      auto sm = parseSmapsRollup(*smaps_text);
      // An empty smaps_rollup means the mm went away between reads: the process is exiting.
      if (sm) {
        s.smaps = *sm;
        s.smaps_read_ns = monotonicNs();
      } else if (smaps_text->empty())
        return fail(notFound(fmt::format("{}/smaps_rollup is empty", dir->path())));
      else
        return fail(sm.error().wrap(fmt::format("parsing {}/smaps_rollup", dir->path())));
    } else if (isGone(smaps_text.error()) && !dir->exists("stat")) {
      return fail(smaps_text.error());
    }
    // EACCES/EPERM (another user's process without CAP_SYS_PTRACE) or no smaps_rollup at all
    // (kernels before 4.14) while the process lives on: PSS unknown, not an error.
  }
  out.outcome = ReadOutcome::kOk;
  return out;
}

Result<std::vector<pid_t>> listPids(const FsRoot& fs) {
  auto dir = fs.openDir("/proc");
  if (!dir) return dir.error();
  auto names = dir->list(true);
  if (!names) return names.error();
  std::vector<pid_t> pids;
  for (const auto& n : *names) {
    pid_t pid = 0;
    auto [ptr, ec] = std::from_chars(n.data(), n.data() + n.size(), pid);
    if (ec == std::errc() && ptr == n.data() + n.size() && pid > 0) pids.push_back(pid);
  }
  std::sort(pids.begin(), pids.end());
  return pids;
}

pid_t selfPid(const FsRoot& fs) {
  if (fs.isLive()) return ::getpid();
  auto link = fs.readLink("/proc/self");
  if (!link) return 0;
  pid_t pid = 0;
  auto [ptr, ec] = std::from_chars(link->data(), link->data() + link->size(), pid);
  return ec == std::errc() && ptr == link->data() + link->size() ? pid : 0;
}

bool SmapsVma::hasFlag(std::string_view f) const { return std::find(flags.begin(), flags.end(), f) != flags.end(); }

std::vector<SmapsVma> parseSmapsVmas(std::string_view text) {
  std::vector<SmapsVma> out;
  for (std::string_view line : splitLines(text)) {
    if (line.rfind("VmFlags:", 0) == 0) {
      if (out.empty()) continue;
      for (auto f : splitFields(line.substr(8))) out.back().flags.emplace_back(f);
      continue;
    }
    // A mapping header: "start-end perms offset dev inode [path]", start and end in hex.
    auto dash = line.find('-');
    auto space = line.find(' ');
    if (dash == std::string_view::npos || space == std::string_view::npos || dash > space) continue;
    std::uint64_t start = 0, end = 0;
    auto a = std::from_chars(line.data(), line.data() + dash, start, 16);
    auto b = std::from_chars(line.data() + dash + 1, line.data() + space, end, 16);
    if (a.ec != std::errc() || b.ec != std::errc() || a.ptr != line.data() + dash || b.ptr != line.data() + space)
      continue;
    out.push_back(SmapsVma{start, end, {}});
  }
  return out;
}

std::optional<bool> pinnedInsideRss(const std::vector<SmapsVma>& vmas, const std::vector<std::uint64_t>& addrs) {
  bool any = false, outside = false;
  for (std::uint64_t addr : addrs) {
    for (const SmapsVma& v : vmas) {
      if (addr < v.start || addr >= v.end) continue;
      any = true;
      if (v.hasFlag("io") || v.hasFlag("pf")) outside = true;
    }
  }
  if (!any) return std::nullopt;
  return !outside;
}

}  // namespace headroom
