// The OOM reports of the kernel log assembled from their lines (sources/oom_log.h). The kernel
// prints one report under its OOM lock, in this order: the header ("invoked oom-killer"), the
// trigger's stack (its "CPU: ... Comm:" line names the kernel), the domain (pre-4.19 "Task in X
// killed as a result of limit of Y"; the counters; the statistics, or Mem-Info for the machine),
// the task dump, "oom-kill:" (4.19+), the kill ("Kill process ... or sacrifice child" before 5.0,
// then "Killed process"), memory.oom.group's further kills, and later the reaper's line. Any of
// these may be where a saved text starts: a line of a later stage opens a report of its own
// ("headless"), and the lines just before it are searched for the trigger's stack.
#include <fmt/format.h>

#include <algorithm>

#include "headroom/sources/oom_log.h"
#include "headroom/sources/parse.h"
#include "oom_log_parts.h"

namespace headroom {

using namespace oom_log_detail;  // the lines of a report (oom_log_parts.h)

namespace {

// Lines of one report's blocks kept at most: a report whose end the log lost must not take every
// later kernel message into its statistics.
constexpr std::size_t kMaxBlockLines = 1024;
// Kernel lines kept before a report, to find the trigger's stack of one whose header is missing.
constexpr std::size_t kRecentLines = 96;
// Victims of closed reports whose reaper's line may still come (live).
constexpr std::size_t kRecentKills = 64;

bool startsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// A frame of the OOM killer's own stack: the "CPU:" line before it is the trigger's.
bool oomFrame(std::string_view s) {
  return s.find("out_of_memory") != std::string_view::npos || s.find("oom_kill_process") != std::string_view::npos ||
         s.find("dump_header") != std::string_view::npos || s.find("mem_cgroup_oom") != std::string_view::npos;
}

}  // namespace

const char* toString(KillProof p) {
  switch (p) {
    case KillProof::kNone: return "none";
    case KillProof::kKilledLine: return "killed process line";
    case KillProof::kKillLine: return "kill process line";
    case KillProof::kOomKillLine: return "oom-kill line";
    case KillProof::kReaperLine: return "oom_reaper line";
  }
  return "none";
}

void OomLogAssembler::remember(const LogLine& line) {
  recent_.push_back(line);
  if (recent_.size() > kRecentLines) recent_.pop_front();
}

void OomLogAssembler::open(const LogLine& line, bool header) {
  cur_ = KernelOomReport{};
  kills_.clear();
  pending_.reset();
  group_armed_ = false;
  task_columns_.clear();
  block_ = Block::kNone;
  block_lines_ = 0;
  KernelOomReport& r = *cur_;
  r.incident = next_incident_++;
  r.first_seq = r.last_seq = line.seq.value_or(line.line);
  r.first_line = r.last_line = line.line;
  r.host = line.host;
  r.header_seen = header;
}

void OomLogAssembler::openHeadless(const LogLine& line) {
  open(line, false);
  // The trigger's stack may be just before: its "CPU:" line followed by the OOM killer's frames.
  bool frames = false;
  for (auto it = recent_.rbegin(); it != recent_.rend(); ++it) {
    if (oomFrame(it->text)) frames = true;
    if (auto cpu = cpuLine(it->text)) {
      if (frames) {
        cur_->trigger_pid = cpu->pid;
        cur_->trigger_comm = cpu->comm;
        cur_->kernel_release = cpu->release;
        cur_->first_seq = it->seq.value_or(it->line);
        cur_->first_line = it->line;
      }
      break;
    }
  }
  recent_.clear();
}

std::vector<KernelOomReport> OomLogAssembler::close() {
  std::vector<KernelOomReport> out;
  if (!cur_) return out;
  if (pending_) {
    // A kill proven by a line before "Killed process", whose own line never came.
    KernelOomReport k = *cur_;
    k.victim.pid = k.victim.tgid = pending_->pid;
    k.victim.comm = pending_->comm;
    k.proof = pending_->proof;
    if (k.task_memcg) k.victim.cgroup = *k.task_memcg;
    if (emit_ == Emit::kAtKill) {
      out.push_back(k);
      done_pids_.push_back(k.victim.pid);
      if (done_pids_.size() > kRecentKills) done_pids_.pop_front();
    }
    kills_.push_back(std::move(k));
    pending_.reset();
  }
  if (kills_.empty()) ++abandoned_;
  if (emit_ == Emit::kAtEnd) {
    if (kills_.empty()) done_.push_back(std::move(*cur_));
    for (auto& k : kills_) done_.push_back(std::move(k));
  }
  cur_.reset();
  kills_.clear();
  group_armed_ = false;
  task_columns_.clear();
  block_ = Block::kNone;
  return out;
}

std::vector<KernelOomReport> OomLogAssembler::addKill(KernelOomReport kill, const LogLine& line) {
  kill.last_seq = line.seq.value_or(line.line);
  kill.last_line = line.line;
  kill.ts_us = line.ts_us.value_or(0);
  kill.stamp = line.stamp;
  if (kill.host.empty()) kill.host = line.host;
  if (kill.task_memcg && kill.victim.cgroup.empty()) kill.victim.cgroup = *kill.task_memcg;
  if (kill.machine)
    std::stable_sort(kill.machine->unreclaimable_slab.begin(), kill.machine->unreclaimable_slab.end(),
                     [](const OomSlabCache& a, const OomSlabCache& b) { return a.total_bytes > b.total_bytes; });
  std::vector<KernelOomReport> out;
  // memory.oom.group kills every member, the victim again among them: each process once.
  for (const auto& k : kills_) {
    if (k.proof != KillProof::kNone && k.victim.pid == kill.victim.pid) return out;
  }
  if (emit_ == Emit::kAtKill) {
    out.push_back(kill);
    kills_.clear();  // only the last is kept
    done_pids_.push_back(kill.victim.pid);
    if (done_pids_.size() > kRecentKills) done_pids_.pop_front();
  }
  kills_.push_back(std::move(kill));
  return out;
}

void OomLogAssembler::feedBlockLine(std::string_view text, bool maybe_cut) {
  KernelOomReport& r = *cur_;
  if (++block_lines_ > kMaxBlockLines) {
    block_ = Block::kNone;
    return;
  }
  switch (block_) {
    case Block::kStats: {
      // "key number"; a key alone or with a part of its number is the line the log cut (another
      // driver's message in between has more words, and is not the block's).
      auto f = splitFields(text);
      if (f.empty() || f.size() > 2) return;
      auto v = f.size() == 2 && !maybe_cut ? parseU64(f[1]) : Result<std::uint64_t>(badData("no value"));
      if (v)
        r.memcg->stats.set(f[0], *v);
      else
        r.memcg->stats_cut = true;
      return;
    }
    case Block::kMachine:
      if (!maybe_cut) parseMachineLine(text, *r.machine);
      return;
    case Block::kSlab:
      if (!maybe_cut) parseSlabLine(text, r.machine->unreclaimable_slab);
      return;
    case Block::kTasks:
      if (auto row = taskRow(text, task_columns_)) r.tasks.push_back(std::move(*row));
      return;
    case Block::kNone: return;
  }
}

std::vector<KernelOomReport> OomLogAssembler::feed(const LogLine& line) {
  std::vector<KernelOomReport> out;
  auto take = [&out](std::vector<KernelOomReport> more) {
    for (auto& r : more) out.push_back(std::move(r));
  };
  // Records the log lost between two reads: counted into the report they fall in.
  std::uint64_t gap = line.seq && last_seq_ && *line.seq > *last_seq_ + 1 ? *line.seq - *last_seq_ - 1 : 0;
  if (line.seq) last_seq_ = line.seq;
  if (!line.kernel) return out;
  std::string_view msg = line.text;
  const bool has_kill = !kills_.empty();
  // A report without a kill reaches as far as the text goes before the next one.
  if (cur_ && !has_kill) cur_->last_line = line.line;
  // A kill proven already (its line, or one before "Killed process"): a line of an earlier
  // stage of a report begins the next report (a grep of these lines, reports whose headers
  // the text lacks), unless memory.oom.group's kills follow.
  const bool past_kill = (has_kill || pending_.has_value()) && !group_armed_;

  if (auto h = headerLine(msg)) {
    take(close());
    open(line, true);
    recent_.clear();
    cur_->trigger_comm = h->comm;
    cur_->gfp_mask = h->gfp_mask;
    cur_->order = h->order;
    cur_->trigger_oom_score_adj = h->oom_score_adj;
    return out;
  }
  if (auto reaped = reaperLine(msg)) {
    // The victim's kill is in this report, or in one before (the next report may come first).
    auto victim = [&](const KernelOomReport& k) { return k.victim.pid == reaped->pid || k.victim.tgid == reaped->pid; };
    for (auto& k : kills_) {
      if (victim(k)) {
        k.reaped = reaped->left;
        return out;
      }
    }
    if (cur_ && pending_ && pending_->pid == reaped->pid) {
      KernelOomReport k = *cur_;
      k.victim.pid = k.victim.tgid = pending_->pid;
      k.victim.comm = pending_->comm;
      k.proof = pending_->proof;
      k.reaped = reaped->left;
      pending_.reset();
      take(addKill(std::move(k), line));
      return out;
    }
    for (auto it = done_.rbegin(); it != done_.rend(); ++it) {
      if (victim(*it)) {
        it->reaped = reaped->left;
        return out;
      }
    }
    if (std::find(done_pids_.begin(), done_pids_.end(), reaped->pid) != done_pids_.end()) return out;
    // Nothing else of its report is in the text: the reaper's line proves the kill alone.
    take(close());
    openHeadless(line);
    KernelOomReport k = *cur_;
    k.victim.pid = k.victim.tgid = reaped->pid;
    k.victim.comm = reaped->comm;
    k.proof = KillProof::kReaperLine;
    k.reaped = reaped->left;
    take(addKill(std::move(k), line));
    return out;
  }
  if (auto group = groupLine(msg)) {
    if (!cur_) openHeadless(line);
    cur_->oom_group = true;
    cur_->oom_group_incident = true;
    for (auto& k : kills_) k.oom_group_incident = true;
    group_armed_ = true;
    return out;
  }
  if (msg.find("Out of memory and no killable processes") != std::string_view::npos) {
    if (cur_ && past_kill) take(close());
    if (!cur_) openHeadless(line);
    cur_->nothing_killable = true;
    take(close());
    return out;
  }

  auto stage = [&](bool before_kill) {
    if (cur_ && before_kill && past_kill) take(close());
    if (!cur_) openHeadless(line);
    block_ = Block::kNone;
    cur_->last_seq = line.seq.value_or(line.line);
    cur_->last_line = line.line;
    cur_->lost_records += gap;
  };

  if (auto in = taskInLine(msg)) {
    stage(true);
    cur_->task_memcg = in->task;
    cur_->oom_memcg = in->limit;
    if (cur_->constraint.empty()) cur_->constraint = "CONSTRAINT_MEMCG";
    return out;
  }
  if (startsWith(msg, "memory: usage ")) {
    stage(true);
    if (!cur_->memcg) cur_->memcg.emplace();
    cur_->memcg->memory = counterLine(msg.substr(8));
    cur_->memcg_usage_bytes = cur_->memcg->memory.usage;
    cur_->memcg_limit_bytes = cur_->memcg->memory.limit;
    cur_->memcg_failcnt = cur_->memcg->memory.failcnt;
    return out;
  }
  if (cur_ && cur_->memcg && startsWith(msg, "memory+swap: usage ")) {
    cur_->memcg->memsw = counterLine(msg.substr(13));
    return out;
  }
  if (cur_ && cur_->memcg && startsWith(msg, "swap: usage ")) {
    cur_->memcg->swap = counterLine(msg.substr(6));
    return out;
  }
  if (cur_ && cur_->memcg && startsWith(msg, "kmem: usage ")) {
    cur_->memcg->kmem = counterLine(msg.substr(6));
    return out;
  }
  {
    StatMap one_line_stats;
    bool one_line = false;
    if (auto path = statsHeader(msg, one_line_stats, one_line)) {
      // Before 4.19 a line for each cgroup of the domain's tree follows the first: not a new report.
      const bool more_of_tree = one_line && cur_ && cur_->memcg && !cur_->memcg->stats_cgroup.empty() && !has_kill;
      if (!more_of_tree) stage(true);
      if (!cur_->memcg) cur_->memcg.emplace();
      OomMemcgState& m = *cur_->memcg;
      if (m.stats_cgroup.empty()) m.stats_cgroup = *path;
      for (auto [k, v] : one_line_stats.entries()) m.stats.set(k, m.stats.getOr(k) + v);
      block_ = one_line ? Block::kNone : Block::kStats;
      block_lines_ = 0;
      return out;
    }
  }
  if (cur_ && startsWith(msg, "Mem-Info:")) {
    if (has_kill && !group_armed_) take(close());
    if (cur_) {
      cur_->machine.emplace();
      block_ = Block::kMachine;
      block_lines_ = 0;
      return out;
    }
  }
  if (cur_ && startsWith(msg, "Unreclaimable slab info:")) {
    if (!cur_->machine) cur_->machine.emplace();
    block_ = Block::kSlab;
    block_lines_ = 0;
    return out;
  }
  if (startsWith(msg, "Tasks state (memory values in pages)")) {
    stage(true);
    return out;
  }
  if (auto cols = taskHeader(msg)) {
    stage(true);
    task_columns_ = std::move(*cols);
    block_ = Block::kTasks;
    block_lines_ = 0;
    return out;
  }
  {
    KernelOomReport probe;
    if (auto k = oomKillLine(msg, probe)) {
      stage(true);
      if (cur_->constraint.empty() || !probe.constraint.empty()) cur_->constraint = probe.constraint;
      if (probe.oom_memcg) cur_->oom_memcg = probe.oom_memcg;
      if (probe.task_memcg) cur_->task_memcg = probe.task_memcg;
      if (probe.global_oom) cur_->global_oom = true;
      cur_->oom_kill_line_cut = probe.oom_kill_line_cut;
      if (k->pid > 0) pending_ = Pending{k->pid, k->comm, KillProof::kOomKillLine};
      return out;
    }
  }
  if (auto k = killLine(msg)) {
    // 4.19's oom-kill: line names the same pid just before.
    if (cur_ && (has_kill || (pending_ && (pending_->proof != KillProof::kOomKillLine || pending_->pid != k->pid))) &&
        !group_armed_)
      take(close());
    if (!cur_) openHeadless(line);
    block_ = Block::kNone;
    cur_->memcg_report = cur_->memcg_report || k->memcg;
    if (k->memcg && cur_->constraint.empty()) cur_->constraint = "CONSTRAINT_MEMCG";
    cur_->chosen_pid = k->pid;
    if (!pending_ || pending_->proof != KillProof::kOomKillLine || pending_->pid == k->pid)
      pending_ = Pending{k->pid, k->comm, KillProof::kKillLine};
    return out;
  }
  if (auto k = killedLine(msg)) {
    // A second kill belongs to this incident only after memory.oom.group's line; the child
    // killed instead of the process "Kill process" chose belongs to it.
    if (cur_ && !group_armed_ &&
        (has_kill || (pending_ && pending_->proof != KillProof::kKillLine && pending_->pid != k->victim.pid)))
      take(close());
    if (!cur_) openHeadless(line);
    block_ = Block::kNone;
    cur_->lost_records += gap;
    if (k->memcg) {
      cur_->memcg_report = true;
      if (cur_->constraint.empty()) cur_->constraint = "CONSTRAINT_MEMCG";
    }
    KernelOomReport kill = *cur_;
    kill.victim = k->victim;
    kill.victim_line_cut = k->cut;
    kill.proof = KillProof::kKilledLine;
    kill.oom_group = cur_->oom_group;
    if (!kills_.empty() && group_armed_) {
      kill.tasks.clear();  // the dump is the first kill's
      kill.lost_records = 0;
    }
    // The oom-kill: line's comm is whole where the kill line was cut.
    if (pending_ && pending_->pid == k->victim.pid && kill.victim.comm.empty()) kill.victim.comm = pending_->comm;
    pending_.reset();
    take(addKill(std::move(kill), line));
    return out;
  }
  // "Memory cgroup out of memory:" or "Out of memory:" cut before its kill: an OOM kill whose
  // victim the text does not name.
  if (startsWith(msg, "Memory cgroup out of memory") || startsWith(msg, "Out of memory")) {
    if (cur_ && past_kill) take(close());
    if (!cur_) openHeadless(line);
    if (startsWith(msg, "Memory cgroup") && cur_->constraint.empty()) cur_->constraint = "CONSTRAINT_MEMCG";
    cur_->memcg_report = cur_->memcg_report || startsWith(msg, "Memory cgroup");
    return out;
  }
  if (auto cpu = cpuLine(msg)) {
    if (cur_ && !has_kill && !cur_->trigger_pid) {
      cur_->trigger_pid = cpu->pid;
      if (cur_->trigger_comm.empty()) cur_->trigger_comm = cpu->comm;
      cur_->kernel_release = cpu->release;
    } else if (!cur_ || has_kill) {
      remember(line);
    }
    return out;
  }
  if (cur_ && block_ != Block::kNone) {
    cur_->lost_records += gap;
    feedBlockLine(msg, line.maybe_cut);
    return out;
  }
  if (!cur_ || has_kill) remember(line);
  return out;
}

std::vector<KernelOomReport> OomLogAssembler::finish() {
  std::vector<KernelOomReport> out = close();
  for (auto& r : done_) out.push_back(std::move(r));
  done_.clear();
  return out;
}

std::vector<KernelOomReport> parseOomLog(const LogText& text) {
  OomLogAssembler a(OomLogAssembler::Emit::kAtEnd);
  std::vector<KernelOomReport> out;
  for (const auto& l : text.lines) {
    for (auto& r : a.feed(l)) out.push_back(std::move(r));
  }
  for (auto& r : a.finish()) out.push_back(std::move(r));
  return out;
}

std::vector<KernelOomReport> parseOomLog(std::string_view text) { return parseOomLog(readLogText(text)); }

}  // namespace headroom
