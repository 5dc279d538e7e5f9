// Each kind of line an OOM report holds, read on its own (oom_log_parts.h), in every form the
// kernels print it: the forms' dates are in the comments, the real reports in
// tests/fixtures/oom-logs/.
#include <algorithm>

#include "headroom/sources/parse.h"
#include "headroom/util/numbers.h"
#include "oom_log_parts.h"

namespace headroom::oom_log_detail {
namespace {

bool startsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// Tokens split at spaces and commas ("anon-rss:2kB,file-rss:3kB" when a wrap lost the space).
std::vector<std::string_view> figureTokens(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == ',' || s[i] == '\t')) ++i;
    std::size_t start = i;
    while (i < s.size() && s[i] != ' ' && s[i] != ',' && s[i] != '\t') ++i;
    if (i > start) out.push_back(s.substr(start, i - start));
  }
  return out;
}

// "key=value,key=value"; values may hold '/' but not ','.
std::vector<std::pair<std::string_view, std::string_view>> commaPairs(std::string_view s) {
  std::vector<std::pair<std::string_view, std::string_view>> out;
  while (!s.empty()) {
    auto comma = s.find(',');
    std::string_view tok = trim(s.substr(0, comma));
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

// The leading digits of `s` as a pid, and what follows them.
std::optional<pid_t> leadingPid(std::string_view s, std::string_view& rest) {
  std::size_t n = 0;
  while (n < s.size() && s[n] >= '0' && s[n] <= '9') ++n;
  if (n == 0 || n > 10) return std::nullopt;
  auto v = parseU64(s.substr(0, n));
  if (!v || *v == 0 || *v > 0x3FFFFFFF) return std::nullopt;
  rest = s.substr(n);
  return static_cast<pid_t>(*v);
}

// "WORDS P (comm)...": the pid right after `words`, the comm in parentheses (up to the last ')'
// before `until`; empty when the line ends first), where the words are and what follows the comm.
struct NamedPid {
  pid_t pid = 0;
  std::string comm;
  std::size_t at = 0;
  std::string_view after;
};
std::optional<NamedPid> namedPid(std::string_view msg, std::string_view words, std::string_view until);

// The victim's figures ("total-vm:210472kB, anon-rss:65280kB, ..., UID:0 pgtables:176kB
// oom_score_adj:0"; 2.6's "vsz:"): a figure cut short stays unknown.
void victimFigures(std::string_view s, OomVictim& v) {
  for (auto f : figureTokens(s)) {
    auto colon = f.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view k = f.substr(0, colon);
    std::string_view val = f.substr(colon + 1);
    if (k == "total-vm" || k == "vsz")
      v.total_vm = kbValue(val);
    else if (k == "anon-rss")
      v.anon_rss = kbValue(val);
    else if (k == "file-rss")
      v.file_rss = kbValue(val);
    else if (k == "shmem-rss")
      v.shmem_rss = kbValue(val);
    else if (k == "pgtables")
      v.pgtables = kbValue(val);
    else if (k == "UID") {
      if (auto u = parseU64(val)) v.uid = static_cast<uid_t>(*u);
    } else if (k == "oom_score_adj") {
      if (auto a = parseI64(val)) v.oom_score_adj = static_cast<int>(*a);
    }
  }
}

// "(comm)" then what follows, the comm ending at the last ')' before `until` (a comm may hold
// ')' and spaces). Nothing when there is no '(' or no ')'.
std::optional<std::string> parenComm(std::string_view s, std::string_view until, std::string_view& rest) {
  auto open = s.find('(');
  if (open == std::string_view::npos) return std::nullopt;
  std::string_view in = s.substr(open + 1);
  std::size_t close = std::string_view::npos;
  if (!until.empty()) {
    auto u = in.find(until);
    if (u != std::string_view::npos) close = in.rfind(')', u);
  }
  if (close == std::string_view::npos) close = in.find(')');
  if (close == std::string_view::npos) return std::nullopt;
  rest = in.substr(close + 1);
  return std::string(in.substr(0, close));
}

std::optional<NamedPid> namedPid(std::string_view msg, std::string_view words, std::string_view until) {
  NamedPid n;
  n.at = msg.find(words);
  if (n.at == std::string_view::npos) return std::nullopt;
  std::string_view rest;
  auto pid = leadingPid(msg.substr(n.at + words.size()), rest);
  if (!pid) return std::nullopt;
  n.pid = *pid;
  if (auto comm = parenComm(rest, until, n.after)) n.comm = *comm;
  return n;
}

}  // namespace

std::optional<HeaderLine> headerLine(std::string_view msg) {
  static constexpr std::string_view kInvoked = " invoked oom-killer";
  auto at = msg.find(kInvoked);
  if (at == std::string_view::npos || at == 0) return std::nullopt;
  HeaderLine h;
  h.comm = std::string(msg.substr(0, at));
  std::string_view rest = msg.substr(at + kInvoked.size());
  if (!rest.empty() && rest.front() == ':') rest.remove_prefix(1);
  for (auto [k, v] : commaPairs(rest)) {
    if (k == "gfp_mask")
      h.gfp_mask = std::string(v);
    else if (k == "order") {
      if (auto o = parseI64(v)) h.order = static_cast<int>(*o);
    } else if (k == "oom_score_adj") {
      if (auto o = parseI64(v)) h.oom_score_adj = static_cast<int>(*o);
    }
  }
  return h;
}

std::optional<CpuLine> cpuLine(std::string_view msg) {
  std::string_view pid_key, comm_key;
  if (startsWith(msg, "CPU: ")) {
    pid_key = " PID: ";
    comm_key = " Comm: ";
  } else if (startsWith(msg, "Pid: ")) {  // 2.6.32
    pid_key = "Pid: ";
    comm_key = ", comm: ";
  } else {
    return std::nullopt;
  }
  auto p = msg.find(pid_key);
  auto c = msg.find(comm_key);
  if (p == std::string_view::npos || c == std::string_view::npos || c < p) return std::nullopt;
  std::string_view rest;
  auto pid = leadingPid(msg.substr(p + pid_key.size()), rest);
  if (!pid) return std::nullopt;
  CpuLine out;
  out.pid = *pid;
  std::string_view after = msg.substr(c + comm_key.size());
  // The comm ends where the taint begins; the release is the first word after it that starts
  // with a digit ("Tainted: G    B   O      6.8.0-45-generic #45-Ubuntu").
  std::size_t taint = after.find(" Not tainted ");
  std::size_t skip = 13;
  if (taint == std::string_view::npos) {
    taint = after.find(" Tainted: ");
    skip = 10;
  }
  if (taint == std::string_view::npos) {
    out.comm = std::string(trim(after));
    return out;
  }
  out.comm = std::string(after.substr(0, taint));
  for (auto f : splitFields(after.substr(taint + skip))) {
    if (!f.empty() && f.front() >= '0' && f.front() <= '9' && f.find('.') != std::string_view::npos) {
      out.release = std::string(f);
      break;
    }
  }
  return out;
}

std::optional<KilledLine> killedLine(std::string_view msg) {
  static constexpr std::string_view kKilled = "Killed process";
  auto at = msg.find(kKilled);
  if (at == std::string_view::npos) return std::nullopt;
  KilledLine k;
  k.memcg = msg.substr(0, at).find("Memory cgroup out of memory") != std::string_view::npos;
  std::string_view rest;
  auto pid = leadingPid(trim(msg.substr(at + kKilled.size())), rest);
  if (!pid) return std::nullopt;
  k.victim.pid = k.victim.tgid = *pid;  // the kernel names the thread group leader
  // 2.6.32: "Killed process 1234, UID 0, (java) total-vm:..."
  if (startsWith(rest, ", UID ")) {
    std::size_t n = 6;
    while (n < rest.size() && rest[n] >= '0' && rest[n] <= '9') ++n;
    if (auto u = parseU64(rest.substr(6, n - 6))) k.victim.uid = static_cast<uid_t>(*u);
    rest = rest.substr(n);
  }
  std::string_view figures;
  auto comm = parenComm(rest, "total-vm:", figures);
  if (!comm) comm = parenComm(rest, "vsz:", figures);
  if (!comm) {
    k.cut = true;  // "Killed process 62769 (" or "Killed process 62769 (jav"
    return k;
  }
  k.victim.comm = *comm;
  victimFigures(figures, k.victim);
  k.cut = !k.victim.anon_rss.has_value();
  return k;
}

std::optional<KillLine> killLine(std::string_view msg) {
  auto n = namedPid(msg, "Kill process ", ") score ");
  if (!n) return std::nullopt;
  return KillLine{n->pid, n->comm, msg.substr(0, n->at).find("Memory cgroup out of memory") != std::string_view::npos};
}

std::optional<KillLine> oomKillLine(std::string_view msg, KernelOomReport& r) {
  auto at = msg.find("oom-kill:");
  if (at == std::string_view::npos || msg.find('=', at) == std::string_view::npos) return std::nullopt;
  KillLine k;
  auto pairs = commaPairs(msg.substr(at + 9));
  // The kernel ends the line with ",pid=P,uid=U": a line without its uid was cut, and its last
  // value may be a part of one (a pid cut short is another pid: not taken).
  r.oom_kill_line_cut = true;
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    auto [key, v] = pairs[i];
    if (key == "constraint")
      r.constraint = std::string(v);
    else if (key == "oom_memcg")
      r.oom_memcg = std::string(v);
    else if (key == "task_memcg")
      r.task_memcg = std::string(v);
    else if (key == "global_oom")
      r.global_oom = true;
    else if (key == "task")
      k.comm = std::string(v);
    else if (key == "uid")
      r.oom_kill_line_cut = false;
    else if (key == "pid" && i + 1 < pairs.size()) {
      std::string_view rest;
      if (auto p = leadingPid(v, rest)) k.pid = *p;
    }
  }
  return k;
}

std::optional<TaskInLine> taskInLine(std::string_view msg) {
  static constexpr std::string_view kIn = "Task in ", kAs = " killed as a result of limit of ";
  auto as = msg.find(kAs);
  if (as == std::string_view::npos) return std::nullopt;
  // A paste may have lost the line's first words: the path is still the task's cgroup.
  std::string_view task = startsWith(msg, kIn) ? msg.substr(kIn.size(), as - kIn.size()) : msg.substr(0, as);
  if (task.empty() || task.front() != '/') return std::nullopt;
  return TaskInLine{std::string(task), std::string(trim(msg.substr(as + kAs.size())))};
}

std::optional<ReaperLine> reaperLine(std::string_view msg) {
  auto n = namedPid(msg, "oom_reaper: reaped process ", "), now ");
  if (!n) return std::nullopt;
  ReaperLine r;
  r.pid = n->pid;
  r.comm = n->comm;
  OomVictim v;
  victimFigures(n->after, v);
  r.left = OomReaped{v.anon_rss.value_or(0), v.file_rss.value_or(0), v.shmem_rss.value_or(0)};
  return r;
}

std::optional<std::string> groupLine(std::string_view msg) {
  static constexpr std::string_view kIn = "Tasks in ", kSet = " are going to be killed due to memory.oom.group set";
  auto set = msg.find(kSet);
  if (!startsWith(msg, kIn) || set == std::string_view::npos) return std::nullopt;
  return std::string(msg.substr(kIn.size(), set - kIn.size()));
}

OomCounterLine counterLine(std::string_view rest) {
  OomCounterLine c;
  auto f = figureTokens(rest);
  for (std::size_t i = 0; i + 1 < f.size(); i += 2) {
    std::string_view v = f[i + 1];
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

std::optional<std::vector<std::string>> taskHeader(std::string_view msg) {
  if (msg.empty() || msg.front() != '[') return std::nullopt;
  auto close = msg.find(']');
  if (close == std::string_view::npos || trim(msg.substr(1, close - 1)) != "pid") return std::nullopt;
  std::vector<std::string> cols;
  for (auto c : splitFields(msg.substr(close + 1))) cols.emplace_back(c);
  if (cols.size() < 3 || cols.back() != "name") return std::nullopt;
  return cols;
}

std::optional<OomTaskDumpEntry> taskRow(std::string_view msg, const std::vector<std::string>& cols) {
  auto close = msg.find(']');
  if (msg.empty() || msg.front() != '[' || close == std::string_view::npos) return std::nullopt;
  OomTaskDumpEntry e;
  auto pid = parseU64(trim(msg.substr(1, close - 1)));
  if (!pid) return std::nullopt;
  e.pid = static_cast<pid_t>(*pid);
  auto f = splitFields(msg.substr(close + 1));
  // cols: uid tgid total_vm rss [rss_anon rss_file rss_shmem] [nr_ptes [nr_pmds] | pgtables_bytes]
  // swapents oom_score_adj name (2.6.32: uid tgid total_vm rss cpu oom_adj oom_score_adj name)
  if (cols.empty() || f.size() < cols.size()) return std::nullopt;
  for (std::size_t i = 0; i + 1 < cols.size(); ++i) {
    const std::string& c = cols[i];
    auto sv = parseI64(f[i]);
    if (!sv) return std::nullopt;  // not a row of this table
    if (c == "oom_score_adj") {
      e.oom_score_adj = static_cast<int>(*sv);
      continue;
    }
    if (*sv < 0) continue;  // oom_adj, and nothing else may be negative
    auto v = static_cast<std::uint64_t>(*sv);
    if (c == "uid")
      e.uid = static_cast<uid_t>(v);
    else if (c == "tgid")
      e.tgid = static_cast<pid_t>(v);
    else if (c == "total_vm")
      e.total_vm_bytes = v * kPage;
    else if (c == "rss")
      e.rss_bytes = v * kPage;
    else if (c == "rss_anon")
      e.rss_anon_bytes = v * kPage;
    else if (c == "rss_file")
      e.rss_file_bytes = v * kPage;
    else if (c == "rss_shmem")
      e.rss_shmem_bytes = v * kPage;
    else if (c == "pgtables_bytes")
      e.pgtables_bytes = v;
    else if (c == "nr_ptes" || c == "nr_pmds")
      e.pgtables_bytes += v * kPage;  // kernels before 4.15 count page-table pages
    else if (c == "swapents")
      e.swap_bytes = v * kPage;
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

std::optional<std::string> statsHeader(std::string_view msg, StatMap& stats, bool& one_line) {
  static constexpr std::string_view kStats = "Memory cgroup stats for ";
  if (!startsWith(msg, kStats)) return std::nullopt;
  std::string_view rest = msg.substr(kStats.size());
  auto sep = rest.find(": ");
  one_line = sep != std::string_view::npos;
  if (!one_line) {
    while (!rest.empty() && (rest.back() == ':' || rest.back() == ' ')) rest.remove_suffix(1);
    return std::string(rest);
  }
  std::string path(rest.substr(0, sep));
  for (auto f : splitFields(rest.substr(sep + 2))) {
    auto colon = f.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view k = f.substr(0, colon), v = f.substr(colon + 1);
    if (v.size() <= 2 || (v.substr(v.size() - 2) != "KB" && v.substr(v.size() - 2) != "kB")) continue;
    if (auto n = parseU64(v.substr(0, v.size() - 2))) stats.set(k, stats.getOr(k) + *n * 1024);
  }
  return path;
}

}  // namespace headroom::oom_log_detail
