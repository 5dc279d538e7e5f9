#include "headroom/sources/kmsg.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>

#include "headroom/sources/parse.h"
#include "kmsg_parts.h"

namespace headroom {

using namespace kmsg_detail;  // the parser's shared parts (kmsg_parts.h)

namespace {

// A record this long may have been cut by printk (its text buffer is 1024 bytes less the prefix
// it may add: 992 with the level prefix, 975 with CONFIG_PRINTK_CALLER's caller id).
constexpr std::size_t kLogLineLimit = 1024 - 48 - 1;
// Lines of one report's blocks kept at most: a report whose end the log lost must not take every
// later kernel message into its statistics.
constexpr std::size_t kMaxBlockLines = 1024;
// A record's "pri" field: (facility << 3) | level, the facility a byte.
constexpr std::uint64_t kMaxPriority = (0xFFU << 3) | 7U;

// "key=value,key=value" (the oom-kill: line); values may hold '/' but not ','.
std::vector<std::pair<std::string_view, std::string_view>> commaPairs(std::string_view s) {
  std::vector<std::pair<std::string_view, std::string_view>> out;
  while (!s.empty()) {
    auto comma = s.find(',');
    std::string_view tok = s.substr(0, comma);
    auto eq = tok.find('=');
    if (eq == std::string_view::npos)
      out.emplace_back(tok, std::string_view{});
    else
      out.emplace_back(tok.substr(0, eq), tok.substr(eq + 1));
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return out;
}

// "Killed process 7060 (comm) total-vm:210472kB, anon-rss:65280kB, ..., UID:0 pgtables:176kB oom_score_adj:0"
bool parseKilledProcess(std::string_view msg, KernelOomReport& r) {
  auto at = msg.find("Killed process ");
  if (at == std::string_view::npos) return false;
  r.memcg_report = msg.find("Memory cgroup out of memory") != std::string_view::npos;
  std::string_view rest = msg.substr(at + 15);
  auto open = rest.find(" (");
  if (open == std::string_view::npos) return false;
  auto pid = parseU64(rest.substr(0, open));
  if (!pid) return false;
  r.victim.pid = static_cast<pid_t>(*pid);
  r.victim.tgid = r.victim.pid;  // "Killed process" names the thread group leader's pid
  // The comm ends at the last ") " before the figures (comm may hold ')').
  auto figures = rest.find(") total-vm:");
  if (figures == std::string_view::npos) figures = rest.rfind(')');
  if (figures == std::string_view::npos || figures < open + 2) return false;
  r.victim.comm = std::string(rest.substr(open + 2, figures - open - 2));
  for (auto f : splitFields(rest.substr(figures + 1))) {
    if (!f.empty() && f.back() == ',') f.remove_suffix(1);
    auto colon = f.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view k = f.substr(0, colon);
    std::string_view v = f.substr(colon + 1);
    if (k == "total-vm")
      r.victim.total_vm = kbValue(v);
    else if (k == "anon-rss")
      r.victim.anon_rss = kbValue(v);
    else if (k == "file-rss")
      r.victim.file_rss = kbValue(v);
    else if (k == "shmem-rss")
      r.victim.shmem_rss = kbValue(v);
    else if (k == "pgtables")
      r.victim.pgtables = kbValue(v);
    else if (k == "UID") {
      if (auto u = parseU64(v)) r.victim.uid = static_cast<uid_t>(*u);
    } else if (k == "oom_score_adj") {
      if (auto s = parseI64(v)) r.victim.oom_score_adj = static_cast<int>(*s);
    }
  }
  return true;
}

void parseOomKillLine(std::string_view msg, KernelOomReport& r) {
  // "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),...,oom_memcg=/a,task_memcg=/a/b,task=x,pid=1,uid=0"
  for (auto [k, v] : commaPairs(msg.substr(9))) {
    if (k == "constraint")
      r.constraint = std::string(v);
    else if (k == "oom_memcg")
      r.oom_memcg = std::string(v);
    else if (k == "task_memcg")
      r.task_memcg = std::string(v);
    else if (k == "global_oom")
      r.global_oom = true;
    else if (k == "task" && r.victim.comm.empty())
      r.victim.comm = std::string(v);
    else if (k == "pid") {
      if (auto p = parseU64(v)) r.victim.pid = r.victim.tgid = static_cast<pid_t>(*p);
    }
  }
  if (r.task_memcg) r.victim.cgroup = *r.task_memcg;
}

// "[   7060]     0  7060    52618    16903    16320      583         0   180224        0             0 name"
std::optional<OomTaskDumpEntry> parseTaskRow(std::string_view msg, const std::vector<std::string>& cols) {
  auto close = msg.find(']');
  if (msg.empty() || msg.front() != '[' || close == std::string_view::npos) return std::nullopt;
  OomTaskDumpEntry e;
  auto pid = parseU64(msg.substr(1, close - 1));
  if (!pid) return std::nullopt;
  e.pid = static_cast<pid_t>(*pid);
  auto f = splitFields(msg.substr(close + 1));
  // cols: uid tgid total_vm rss [rss_anon rss_file rss_shmem] pgtables_bytes swapents oom_score_adj name
  if (cols.empty() || f.size() < cols.size()) return std::nullopt;
  for (std::size_t i = 0; i + 1 < cols.size(); ++i) {
    const std::string& c = cols[i];
    if (c == "oom_score_adj") {
      auto v = parseI64(f[i]);
      if (!v) return std::nullopt;
      e.oom_score_adj = static_cast<int>(*v);
      continue;
    }
    auto v = parseU64(f[i]);
    if (!v) return std::nullopt;
    if (c == "uid")
      e.uid = static_cast<uid_t>(*v);
    else if (c == "tgid")
      e.tgid = static_cast<pid_t>(*v);
    else if (c == "total_vm")
      e.total_vm_bytes = *v * kPage;
    else if (c == "rss")
      e.rss_bytes = *v * kPage;
    else if (c == "rss_anon")
      e.rss_anon_bytes = *v * kPage;
    else if (c == "rss_file")
      e.rss_file_bytes = *v * kPage;
    else if (c == "rss_shmem")
      e.rss_shmem_bytes = *v * kPage;
    else if (c == "pgtables_bytes")
      e.pgtables_bytes = *v;
    else if (c == "nr_ptes")
      e.pgtables_bytes = *v * kPage;  // kernels before 4.15
    else if (c == "swapents")
      e.swap_bytes = *v * kPage;
  }
  // The name is the rest (a comm may hold spaces).
  std::string name;
  for (std::size_t i = cols.size() - 1; i < f.size(); ++i) {
    if (!name.empty()) name += ' ';
    name += std::string(f[i]);
  }
  e.name = name;
  return e;
}

// "usage 65536kB, limit 65536kB, failcnt 23" (after "memory: " / "memory+swap: " / "swap: " / "kmem: ").
OomCounterLine parseCounterLine(std::string_view rest) {
  OomCounterLine c;
  auto f = splitFields(rest);
  for (std::size_t i = 0; i + 1 < f.size(); i += 2) {
    std::string_view v = f[i + 1];
    if (!v.empty() && v.back() == ',') v.remove_suffix(1);
    if (f[i] == "usage")
      c.usage = kbValue(v);
    else if (f[i] == "limit") {
      c.limit = kbValue(v);
      if (c.limit && *c.limit >= kV1UnlimitedThreshold) c.limit.reset();  // the kernel's "no limit"
    } else if (f[i] == "failcnt") {
      if (auto n = parseU64(v)) c.failcnt = *n;
    }
  }
  return c;
}

}  // namespace

Result<KmsgRecord> parseKmsgRecord(std::string_view raw) {
  auto semi = raw.find(';');
  if (semi == std::string_view::npos) return badData("kmsg record without ';'");
  std::string_view prefix = raw.substr(0, semi);
  std::string_view msg = raw.substr(semi + 1);
  auto nl = msg.find('\n');
  if (nl != std::string_view::npos) msg = msg.substr(0, nl);
  std::vector<std::string_view> f;
  while (!prefix.empty()) {
    auto c = prefix.find(',');
    f.push_back(prefix.substr(0, c));
    if (c == std::string_view::npos) break;
    prefix.remove_prefix(c + 1);
  }
  if (f.size() < 3) return badData(fmt::format("kmsg record prefix has {} fields, need 3", f.size()));
  auto pri = parseU64(f[0]);
  auto seq = parseU64(f[1]);
  auto ts = parseU64(f[2]);
  if (!pri || !seq || !ts) return badData("kmsg record prefix is not numeric");
  // The kernel keeps a record's facility in one byte (printk_info.facility) beside its 3-bit
  // level: a larger number is no record's prefix (and would not fit `facility`).
  if (*pri > kMaxPriority) return badData(fmt::format("kmsg record priority {} out of range", *pri));
  KmsgRecord r;
  r.priority = static_cast<int>(*pri & 7);
  r.facility = static_cast<int>(*pri >> 3);
  r.seq = *seq;
  r.ts_us = *ts;
  r.message = std::string(msg);
  return r;
}

void KmsgOomParser::feedLine(std::string_view line) {
  KernelOomReport& r = *cur_;
  if (++block_lines_ > kMaxBlockLines) {
    block_ = Block::kNone;
    return;
  }
  switch (block_) {
    case Block::kStats: {
      // "key number"; a key alone or with a part of its number is the line the log cut (another
      // driver's message in between has more words, and is not the block's).
      auto f = splitFields(line);
      if (f.empty() || f.size() > 2) return;
      auto v = f.size() == 2 ? parseU64(f[1]) : Result<std::uint64_t>(badData("no value"));
      if (v)
        r.memcg->stats.set(f[0], *v);
      else
        r.memcg->stats_cut = true;
      return;
    }
    case Block::kMachine: parseMachineLine(line, *r.machine); return;
    case Block::kSlab: parseSlabLine(line, r.machine->unreclaimable_slab); return;
    case Block::kNone: return;
  }
}

std::optional<KernelOomReport> KmsgOomParser::feed(const KmsgRecord& rec) {
  // Records the log lost between two read: counted into the report they fall in.
  std::uint64_t gap = last_seq_ && rec.seq > *last_seq_ + 1 ? rec.seq - *last_seq_ - 1 : 0;
  last_seq_ = rec.seq;
  if (rec.facility != 0) return std::nullopt;  // user space's, not the kernel's
  std::string_view msg = rec.message;
  auto invoked = msg.find(" invoked oom-killer: ");
  if (invoked != std::string_view::npos) {
    if (cur_) ++abandoned_;
    group_.reset();
    group_armed_ = false;
    cur_ = KernelOomReport{};
    task_columns_.clear();
    block_ = Block::kNone;
    block_lines_ = 0;
    cur_->first_seq = rec.seq;
    cur_->trigger_comm = std::string(msg.substr(0, invoked));
    for (auto [k, v] : commaPairs(msg.substr(invoked + 21))) {
      std::string_view key = trim(k);
      if (key == "gfp_mask")
        cur_->gfp_mask = std::string(v);
      else if (key == "order") {
        if (auto o = parseI64(v)) cur_->order = static_cast<int>(*o);
      }
    }
    return std::nullopt;
  }
  if (!cur_) {
    if (msg.find("due to memory.oom.group set") != std::string_view::npos && group_) {
      group_armed_ = true;
      return std::nullopt;
    }
    if (!group_ || !group_armed_) return std::nullopt;
    // Another member of a memory.oom.group, killed with the first victim.
    if (msg.find("Killed process ") == std::string_view::npos) return std::nullopt;
    KernelOomReport member = *group_;
    member.victim = OomVictim{};
    member.oom_group = true;
    member.lost_records = 0;  // counted with the first victim's report
    if (!parseKilledProcess(msg, member)) return std::nullopt;
    member.ts_us = rec.ts_us;
    member.last_seq = rec.seq;
    if (member.task_memcg) member.victim.cgroup = *member.task_memcg;
    return member;
  }
  KernelOomReport& r = *cur_;
  r.last_seq = rec.seq;
  r.lost_records += gap;
  if (msg.rfind("Tasks state", 0) == 0 || msg.rfind("[  pid  ]", 0) == 0 || msg.rfind("oom-kill:", 0) == 0 ||
      msg.find("Killed process ") != std::string_view::npos)
    block_ = Block::kNone;  // the end of a block, even of one whose end the log lost
  if (msg.rfind("CPU: ", 0) == 0 && !r.trigger_pid) {
    // "CPU: 1 UID: 0 PID: 7060 Comm: x ..." (6.x) or "CPU: 1 PID: 7060 Comm: x ..."
    auto p = msg.find(" PID: ");
    if (p != std::string_view::npos) {
      auto f = splitFields(msg.substr(p + 6));
      if (!f.empty()) {
        if (auto v = parseU64(f[0])) r.trigger_pid = static_cast<pid_t>(*v);
      }
    }
  } else if (msg.rfind("memory: usage ", 0) == 0) {
    // "memory: usage 65536kB, limit 65536kB, failcnt 23"
    if (!r.memcg) r.memcg.emplace();
    r.memcg->memory = parseCounterLine(msg.substr(8));
    r.memcg_usage_bytes = r.memcg->memory.usage;
    r.memcg_limit_bytes = r.memcg->memory.limit;
    r.memcg_failcnt = r.memcg->memory.failcnt;
  } else if (r.memcg && msg.rfind("memory+swap: usage ", 0) == 0) {
    r.memcg->memsw = parseCounterLine(msg.substr(13));
  } else if (r.memcg && msg.rfind("swap: usage ", 0) == 0) {
    r.memcg->swap = parseCounterLine(msg.substr(6));
  } else if (r.memcg && msg.rfind("kmem: usage ", 0) == 0) {
    r.memcg->kmem = parseCounterLine(msg.substr(6));
  } else if (msg.rfind("Memory cgroup stats for ", 0) == 0) {
    if (!r.memcg) r.memcg.emplace();
    std::string_view path = msg.substr(24);
    if (!path.empty() && path.back() == ':') path.remove_suffix(1);
    r.memcg->stats_cgroup = std::string(path);
    block_ = Block::kStats;
  } else if (msg.rfind("Mem-Info:", 0) == 0) {
    r.machine.emplace();
    block_ = Block::kMachine;
  } else if (msg.rfind("Unreclaimable slab info:", 0) == 0) {
    if (!r.machine) r.machine.emplace();
    block_ = Block::kSlab;
  } else if (block_ != Block::kNone) {
    // One line a record, or (6.1) the whole block in one record with escaped newlines. Such a
    // record at the log's line limit lost its end: its last line may be a number cut short, so
    // it is not taken.
    std::size_t escapes = 0;
    for (auto at = msg.find("\\x"); at != std::string_view::npos; at = msg.find("\\x", at + 1)) ++escapes;
    const bool at_limit = escapes > 0 && msg.size() - 3 * escapes >= kLogLineLimit;
    for (std::string_view rest = msg;;) {
      auto nl = rest.find("\\x0a");
      if (nl == std::string_view::npos && at_limit) {
        if (block_ == Block::kStats) r.memcg->stats_cut = true;
        break;
      }
      feedLine(rest.substr(0, nl));
      if (nl == std::string_view::npos) break;
      rest.remove_prefix(nl + 4);
    }
  } else if (msg.rfind("[  pid  ]", 0) == 0) {
    task_columns_.clear();
    for (auto c : splitFields(msg.substr(9))) task_columns_.emplace_back(c);
  } else if (!task_columns_.empty() && !msg.empty() && msg.front() == '[') {
    if (auto row = parseTaskRow(msg, task_columns_)) r.tasks.push_back(std::move(*row));
  } else if (msg.rfind("oom-kill:", 0) == 0) {
    parseOomKillLine(msg, r);
  } else if (msg.find("Killed process ") != std::string_view::npos) {
    if (parseKilledProcess(msg, r)) {
      r.ts_us = rec.ts_us;
      r.last_seq = rec.seq;
      if (r.task_memcg) r.victim.cgroup = *r.task_memcg;
      KernelOomReport done = std::move(r);
      cur_.reset();
      group_ = done;  // kept only for the "memory.oom.group" kills that may follow
      group_->tasks.clear();
      group_armed_ = false;
      task_columns_.clear();
      block_ = Block::kNone;
      if (done.machine)
        std::stable_sort(done.machine->unreclaimable_slab.begin(), done.machine->unreclaimable_slab.end(),
                         [](const OomSlabCache& a, const OomSlabCache& b) { return a.total_bytes > b.total_bytes; });
      return done;
    }
  }
  return std::nullopt;
}

std::vector<KernelOomReport> parseKmsgOomReports(std::string_view text) {
  KmsgOomParser parser;
  std::vector<KernelOomReport> out;
  for (auto line : splitLines(text)) {
    auto rec = parseKmsgRecord(line);
    if (!rec) continue;
    if (auto r = parser.feed(*rec)) out.push_back(std::move(*r));
  }
  return out;
}

Result<KmsgReader> KmsgReader::open(const FsRoot& fs, bool from_start) {
  std::string path = fs.display("/dev/kmsg");
  Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) return errnoError(fmt::format("opening {} (reading the kernel log needs CAP_SYSLOG)", path));
  if (!from_start && ::lseek(fd.get(), 0, SEEK_END) < 0)
    return errnoError(fmt::format("seeking to the end of {}", path));
  return KmsgReader(std::move(fd));
}

std::vector<KmsgRecord> KmsgReader::readAvailable() {
  std::vector<KmsgRecord> out;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd_.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EPIPE) {  // overwritten before we read it: counted, and reading goes on
        ++lost_;
        continue;
      }
      break;  // EAGAIN: nothing more now
    }
    if (n == 0) break;
    auto rec = parseKmsgRecord(std::string_view(buf, static_cast<std::size_t>(n)));
    if (rec) out.push_back(std::move(*rec));
  }
  return out;
}

}  // namespace headroom
