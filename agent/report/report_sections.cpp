// The report's sections, each read from a record (report_parts.h reads defensively): what was
// killed, the breakdown at the kill, the kernel's task dump, the processes, what grew, the
// budget and the sensors; buildDoc puts them in order for both renderers.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>

#include "headroom/model/snapshot.h"
#include "headroom/report/report.h"
#include "headroom/sources/parse.h"
#include "headroom/util/text.h"
#include "headroom/util/units.h"
#include "report_parts.h"

namespace headroom::report_detail {

Section killedSection(const json& rec) {
  Section s{"KILLED", "the victim's own memory when the kernel chose it; the limit above is the OOM domain's", {}};
  const json& ev = objectAt(rec, "event");
  Table t{{"PID", "COMM", "ANON", "FILE", "SHMEM", "PAGE TABLES", "SWAP", "VM", "OOM_SCORE_ADJ"}, "rlrrrrrrr", {}, {}};
  std::set<std::string> cgroups;
  std::vector<std::string> notes;
  for (const json& v : arrayAt(ev, "victims")) {
    if (!v.is_object()) continue;
    Task k = taskOf(v);
    auto adj = intAt(v, "oom_score_adj");
    if (!k.cgroup.empty()) cgroups.insert(k.cgroup);
    t.rows.push_back({k.pid > 0 ? std::to_string(k.pid) : "?", k.comm.empty() ? "?" : k.comm,
                      bytesText(bytesAt(v, "anon_rss_bytes")), bytesText(bytesAt(v, "file_rss_bytes")),
                      bytesText(bytesAt(v, "shmem_rss_bytes")), bytesText(bytesAt(v, "pgtables_bytes")),
                      bytesText(bytesAt(v, "swap_bytes")), bytesText(bytesAt(v, "total_vm_bytes")),
                      adj ? std::to_string(*adj) : "-"});
    if (flagAt(v, "kill_skipped"))
      notes.push_back(fmt::format("{} was already exiting: the kernel marked it but sent no SIGKILL", who(k)));
    if (flagAt(v, "inferred"))
      notes.push_back(fmt::format(
          "{} is inferred, not named by the kernel: it left the cgroup whose OOM-kill counter rose", who(k)));
  }
  if (t.rows.empty())
    s.blocks.emplace_back(std::string("not known: the record names no victim"));
  else
    s.blocks.emplace_back(std::move(t));
  for (auto& n : notes) s.blocks.emplace_back(std::move(n));
  for (const std::string& c : cgroups) s.blocks.emplace_back("in " + c);

  const json& src = objectAt(ev, "sources");
  std::vector<std::string> told;
  if (flagAt(src, "bpf")) told.emplace_back("the BPF tracepoint oom:mark_victim");
  if (flagAt(src, "kmsg")) told.emplace_back("the kernel's OOM report in /dev/kmsg");
  if (flagAt(src, "counter")) {
    const json& c = objectAt(ev, "counter");
    auto kills = intAt(c, "kills");
    const json* cgroup = field(c, "cgroup");
    told.push_back(fmt::format("the OOM-kill counter of {} (+{}; no BPF or /dev/kmsg to name the victim)",
                               cgroup != nullptr && cgroup->is_string() ? cgroup->get<std::string>() : "?",
                               kills.value_or(0)));
  }
  if (!told.empty()) s.blocks.emplace_back("told by " + joinList(told));
  auto rs = intAt(ev, "reap_start_ns");
  auto rf = intAt(ev, "reap_finish_ns");
  if (rs && rf && *rf >= *rs)
    s.blocks.emplace_back(
        fmt::format("the OOM reaper freed its memory in {:.1f} ms", static_cast<double>(*rf - *rs) / 1e6));
  return s;
}

Section breakdownSection(const json& rec) {
  Section s{"BEFORE THE KILL", "", {}};
  const json* cgp = field(rec, "cgroup");
  if (!cgp || !cgp->is_object()) {
    s.blocks.emplace_back(std::string("not known: the cgroup was never sampled before the kill"));
    return s;
  }
  const json& cg = *cgp;
  const json& mem = objectAt(cg, "memory");
  const json& att = objectAt(cg, "attribution");
  std::string path = recordCgroup(rec);
  std::string when;
  auto sampled = secondsOf(numberAt(cg, "sampled_at"));
  auto kill = recordTime(rec);
  if (sampled && kill)
    when = fmt::format(", {} before the kill", secondsText(*kill - *sampled));
  else if (sampled)
    when = ", at " + utcTime(*sampled);
  s.subtitle = fmt::format("{} at the last sample{}; ~ estimated", path.empty() ? "the cgroup" : path, when);

  auto usage = bytesAt(att, "usage_bytes");
  if (!usage) usage = bytesAt(mem, "usage_bytes");
  auto unattributed = intAt(att, "unattributed_bytes");
  s.blocks.emplace_back(fmt::format(
      "usage {}: visible {} + invisible {}, unattributed {}", bytesText(usage, "not known"),
      bytesText(bytesAt(att, "visible_bytes"), "not known"), bytesText(bytesAt(att, "invisible_bytes"), "not known"),
      unattributed ? formatSignedBytes(*unattributed) : std::string("not known")));
  const json& tb = objectAt(cg, "tightest_bound");
  if (!tb.empty()) {
    std::string name = textAt(tb, "name");
    s.blocks.emplace_back(fmt::format("tightest bound: {} (limit {}, usage {}, room {})", name.empty() ? "?" : name,
                                      bytesText(bytesAt(tb, "limit_bytes")), bytesText(bytesAt(tb, "usage_bytes")),
                                      bytesText(bytesAt(tb, "room_bytes"))));
  } else if (auto lim = bytesAt(mem, "limit_bytes")) {
    s.blocks.emplace_back(fmt::format("limit {}", formatBytes(*lim)));
  }
  Table t = partsTable(att, usage);
  if (t.rows.empty())
    s.blocks.emplace_back(std::string("the parts are not known: the sample has no attribution"));
  else
    s.blocks.emplace_back(std::move(t));
  addNotes(s, att);
  auto charged = bytesAt(rec, "charged_bytes");
  if (charged && usage) {
    auto delta = static_cast<double>(*charged) - static_cast<double>(*usage);
    s.blocks.emplace_back(fmt::format("at the kill the kernel charged {}: {} since this sample", formatBytes(*charged),
                                      changeText(delta)));
  }
  return s;
}

Section taskDumpSection(const json& rec) {
  Section s{"WHO HELD WHAT AT THE KILL", "the kernel's task dump of the OOM domain: exact", {}};
  const json& ev = objectAt(rec, "event");
  std::vector<const json*> tasks;
  for (const json& t : arrayAt(ev, "tasks")) {
    if (t.is_object()) tasks.push_back(&t);
  }
  if (tasks.empty()) {
    s.blocks.emplace_back(
        std::string("not known: the record has no task dump (the kernel's OOM report in /dev/kmsg was not read)"));
    return s;
  }
  std::stable_sort(tasks.begin(), tasks.end(), [](const json* a, const json* b) {
    return bytesAt(*a, "rss_bytes").value_or(0) > bytesAt(*b, "rss_bytes").value_or(0);
  });
  std::set<std::int64_t> killed;
  for (const Task& v : victimsOf(rec)) killed.insert(v.pid);
  auto trig = triggerOf(rec);
  Table t{{"PID", "NAME", "RSS", "ANON", "FILE", "SHMEM", "PAGE TABLES", "SWAP", "OOM_SCORE_ADJ", ""},
          "rlrrrrrrrl",
          {},
          {}};
  std::uint64_t rss = 0, pte = 0;
  for (const json* p : tasks) {
    auto tgid = intAt(*p, "tgid").value_or(0);
    auto pid = intAt(*p, "pid").value_or(0);
    std::int64_t proc = tgid > 0 ? tgid : pid;
    std::vector<std::string> marks;
    if (killed.count(proc) || killed.count(pid)) marks.emplace_back("killed");
    if (trig && (trig->pid == proc || trig->pid == pid)) marks.emplace_back("trigger");
    std::string mark;
    for (const auto& m : marks) mark += (mark.empty() ? "" : ", ") + m;
    auto adj = intAt(*p, "oom_score_adj");
    std::string name = textAt(*p, "name");
    rss += bytesAt(*p, "rss_bytes").value_or(0);
    pte += bytesAt(*p, "pgtables_bytes").value_or(0);
    t.rows.push_back({pid > 0 ? std::to_string(pid) : "?", name.empty() ? "?" : name,
                      bytesText(bytesAt(*p, "rss_bytes")), bytesText(bytesAt(*p, "rss_anon_bytes")),
                      bytesText(bytesAt(*p, "rss_file_bytes")), bytesText(bytesAt(*p, "rss_shmem_bytes")),
                      bytesText(bytesAt(*p, "pgtables_bytes")), bytesText(bytesAt(*p, "swap_bytes")),
                      adj ? std::to_string(*adj) : "-", mark});
  }
  s.blocks.emplace_back(std::move(t));
  s.blocks.emplace_back(fmt::format("{} task{}: RSS {}, page tables {} in all", tasks.size(),
                                    tasks.size() == 1 ? "" : "s", formatBytes(rss), formatBytes(pte)));
  return s;
}

namespace {

int roleRank(const std::string& role) {
  static const std::array<const char*, 4> kOrder = {"prover", "colocated", "system", "self"};
  for (std::size_t i = 0; i < kOrder.size(); ++i) {
    if (role == kOrder[i]) return static_cast<int>(i);
  }
  return static_cast<int>(kOrder.size());
}

Section processesSection(const json& rec) {
  Section s{"PROCESSES AT THE LAST SAMPLE", "top per role by PSS; pinned is an overlay on RSS, never added to it", {}};
  std::vector<const json*> procs;
  for (const json& p : arrayAt(rec, "processes")) {
    if (p.is_object()) procs.push_back(&p);
  }
  if (procs.empty()) {
    s.blocks.emplace_back(std::string("not known: no process of this cgroup was sampled before the kill"));
    return s;
  }
  auto size = [](const json* p) {
    auto pss = bytesAt(*p, "pss_bytes");
    return pss ? *pss : bytesAt(*p, "rss_bytes").value_or(0);
  };
  std::stable_sort(procs.begin(), procs.end(), [&](const json* a, const json* b) {
    int ra = roleRank(textAt(*a, "role")), rb = roleRank(textAt(*b, "role"));
    if (ra != rb) return ra < rb;
    return size(a) > size(b);
  });
  Table t{
      {"ROLE", "PID", "COMM", "RSS", "PSS", "PAGE TABLES", "LOCKED", "PINNED", "PINNED IN RSS", "DEVICE", "OVERHEAD"},
      "lrlrrrrrlrr",
      {},
      {}};
  for (const json* p : procs) {
    Task k = taskOf(*p);
    std::string role = textAt(*p, "role");
    const json& pin = objectAt(*p, "pinned");
    std::string in_rss = "-";
    std::string pinned = "-";
    if (!pin.empty()) {
      pinned = bytesText(bytesAt(pin, "live_bytes"));
      std::string res = textAt(pin, "residency");
      in_rss = res == "inside_rss" ? "yes" : res == "outside_rss" ? "no" : "not known";
    }
    t.rows.push_back({role.empty() ? "?" : role, k.pid > 0 ? std::to_string(k.pid) : "?", k.comm.empty() ? "?" : k.comm,
                      bytesText(bytesAt(*p, "rss_bytes")), bytesText(bytesAt(*p, "pss_bytes")),
                      bytesText(bytesAt(*p, "page_tables_bytes")), bytesText(bytesAt(*p, "locked_bytes")), pinned,
                      in_rss, bytesText(bytesAt(*p, "device_bytes")), bytesText(bytesAt(*p, "overhead_share_bytes"))});
  }
  s.blocks.emplace_back(std::move(t));
  s.blocks.emplace_back(std::string(
      "overhead: the process's share of the cgroup's invisible memory; device: GPU memory, not charged to the cgroup"));
  return s;
}

bool recordFlightLastIsKill(const json& rec) {
  const json& points = arrayAt(objectAt(rec, "flight"), "points");
  return !points.empty() && points.back().is_object() && flagAt(points.back(), "at_kill");
}

Section grewSection(const json& rec) {
  Section s{"WHAT GREW", "", {}};
  Flight f = readFlight(rec);
  std::string cg = f.cgroup.empty() ? recordCgroup(rec) : f.cgroup;
  if (f.t.empty()) {
    s.blocks.emplace_back(std::string("not known: the flight recorder kept no samples of this cgroup before the kill"));
    return s;
  }
  if (f.t.size() == 1) {
    s.blocks.emplace_back(fmt::format(
        "one point only ({}): nothing to compare; the cgroup lived between two samples or the recorder had just "
        "started",
        recordFlightLastIsKill(rec) ? "the kill itself" : "the last sample"));
    return s;
  }
  double window = f.window.value_or(std::max(1.0, -f.t.front()));
  s.subtitle = fmt::format("the last {} before the kill: {} sample{} of {}", secondsText(window), f.t.size(),
                           f.t.size() == 1 ? "" : "s", cg.empty() ? "the cgroup" : cg);
  s.blocks.emplace_back(f.kill_time_known
                            ? fmt::format("from {} to {} before the kill", secondsText(-f.t.front()),
                                          secondsText(std::max(0.0, -f.t.back())))
                            : std::string("the kill's time is not known: times are relative to the last sample"));

  constexpr std::size_t kWidth = 48;
  Table t{{"COMPONENT", "TREND", "FIRST", "LAST", "CHANGE"}, "llrrr", {}, {1}};
  auto row = [&](const std::string& name, const std::vector<std::optional<double>>& series) {
    std::vector<double> v;
    for (const auto& x : series) {
      if (x) v.push_back(*x);
    }
    if (v.empty()) return;
    t.rows.push_back({name, sparkline(resample(v, kWidth)), bytesText(v.front()), bytesText(v.back()),
                      changeText(v.back() - v.front())});
  };
  row("usage", f.usage);
  row("limit", f.limit);
  row("self-reported", f.self);
  std::vector<std::string> kinds = f.kinds;
  auto growth = [&](const std::string& k) { return f.parts[k].back() - f.parts[k].front(); };
  std::stable_sort(kinds.begin(), kinds.end(),
                   [&](const std::string& a, const std::string& b) { return growth(a) > growth(b); });
  for (const std::string& k : kinds) {
    std::vector<std::optional<double>> series(f.parts[k].begin(), f.parts[k].end());
    row(k, series);
  }
  s.blocks.emplace_back(std::move(t));
  if (f.without_time > 0)
    s.blocks.emplace_back(
        fmt::format("{} sample{} without a time left out", f.without_time, f.without_time == 1 ? "" : "s"));
  return s;
}

Section budgetSection(const json& rec) {
  Section s{"BUDGET", "", {}};
  const json* bp = field(rec, "budget");
  auto charged = bytesAt(rec, "charged_bytes");
  Domain d = domainOf(rec);
  if (!charged && !d.usage_sampled) charged = d.usage;
  auto self = bytesAt(rec, "self_reported_bytes");
  std::optional<std::uint64_t> budget, margin;
  if (!bp || !bp->is_object()) {
    s.blocks.emplace_back(std::string("budget: not known (no budget from headroom was in force for this prover)"));
  } else {
    budget = bytesAt(*bp, "budget_bytes");
    margin = bytesAt(*bp, "margin_bytes");
    std::string src = textAt(*bp, "margin_source");
    auto gen = intAt(*bp, "generation");
    std::string extra;
    if (!src.empty()) extra += "margin from " + src;
    if (gen) extra += (extra.empty() ? "" : "; ") + fmt::format("generation {}", *gen);
    s.blocks.emplace_back(fmt::format("budget {}, margin {}{}", bytesText(budget, "not known"),
                                      bytesText(margin, "not known"), extra.empty() ? "" : " (" + extra + ")"));
    if (budget && margin && d.limit) {
      s.blocks.emplace_back(fmt::format("budget + margin = {} of the {} limit{}", formatBytes(*budget + *margin),
                                        formatBytes(*d.limit), d.cgroup.empty() ? "" : " of " + d.cgroup));
    }
    std::string reason = textAt(*bp, "reason");
    if (!reason.empty()) s.blocks.emplace_back("why: " + reason);
  }
  if (self && charged) {
    auto diff = static_cast<double>(*charged) - static_cast<double>(*self);
    std::string gap = diff >= 0 ? fmt::format("{} beyond what it saw", bytesText(diff))
                                : fmt::format("{} less than it believed", bytesText(-diff));
    s.blocks.emplace_back(fmt::format("the prover believed it used {}; the kernel charged {}: {}", formatBytes(*self),
                                      formatBytes(*charged), gap));
  } else if (charged) {
    s.blocks.emplace_back(
        fmt::format("what the prover believed it used: not known (it reported nothing); the kernel charged {}",
                    formatBytes(*charged)));
  } else if (self) {
    s.blocks.emplace_back(
        fmt::format("the prover believed it used {}; what the kernel charged is not known", formatBytes(*self)));
  } else {
    s.blocks.emplace_back(std::string("what the prover believed it used and what the kernel charged: not known"));
  }
  if (budget && charged && *charged > *budget) {
    s.blocks.emplace_back(fmt::format("the cgroup was charged {} beyond the budget", formatBytes(*charged - *budget)));
  }
  if (margin) {
    auto invisible = bytesAt(objectAt(objectAt(rec, "cgroup"), "attribution"), "invisible_bytes");
    if (invisible) {
      s.blocks.emplace_back(
          *invisible > *margin
              ? fmt::format("the invisible overhead at the last sample ({}) was {} more than the margin",
                            formatBytes(*invisible), formatBytes(*invisible - *margin))
              : fmt::format("the margin covered the invisible overhead at the last sample ({})",
                            formatBytes(*invisible)));
    }
  }
  return s;
}

Section sensorsSection(const json& rec) {
  Section s{"SENSORS", "active at the kill", {}};
  std::vector<std::string> active, others;
  for (const json& ss : arrayAt(rec, "sensors")) {
    if (!ss.is_object()) continue;
    std::string name = textAt(ss, "name"), state = textAt(ss, "state"), reason = textAt(ss, "reason");
    if (state == "active") {
      active.push_back(name);
    } else {
      others.push_back(fmt::format("{}: {}{}", name.empty() ? "?" : name, state.empty() ? "state not known" : state,
                                   reason.empty() ? "" : " (" + reason + ")"));
    }
  }
  // The active ones first, then each of the others on its line.
  if (!active.empty()) s.blocks.emplace_back(fmt::format("active: {}", joinList(active)));
  for (std::string& o : others) s.blocks.emplace_back(std::move(o));
  if (s.blocks.empty()) s.blocks.emplace_back(std::string("not known: the record lists no sensors"));
  return s;
}

// A kill the agent did not see happen (docs/journal.md, "Kills found after the fact"): how it was
// found and when, and what such a record cannot hold.
std::optional<Section> foundAfterSection(const json& rec) {
  const json& found = objectAt(rec, "found_after");
  const std::string how = textAt(found, "how");
  if (how.empty()) return std::nullopt;
  Section s{"FOUND AFTER THE FACT", "", {}};
  std::string line =
      how == "kernel_log" ? "found in the kernel's log, read from the start of its ring when the agent started"
      : how == "in_flight"
          ? "seen by an agent that stopped before writing its record: recorded by the next one as far as it went"
      : how == "counters" ? "found by the cgroup's OOM-kill counter, which rose while no agent ran"
                          : "found after the fact (" + how + ")";
  if (auto at = secondsOf(numberAt(found, "at"))) {
    line += " at " + utcTime(*at);
    if (auto kill = secondsOf(numberAt(rec, "kill_time")); kill && *at >= *kill)
      line += ", " + secondsText(*at - *kill) + " after the kill";
  }
  s.blocks.emplace_back(std::move(line));
  if (how != "in_flight")
    s.blocks.emplace_back(
        std::string("no sample of the agent's is of the moments before the kill: the breakdown before it, the flight "
                    "and the budget "
                    "are not in this record; the kernel's own figures are"));
  return s;
}

}  // namespace

Doc buildDoc(const json& rec) {
  Doc d;
  std::string heading = "headroom report";
  if (auto id = intAt(rec, "id")) heading += fmt::format("  record {}", *id);
  if (auto t = recordTime(rec)) heading += "  " + utcTime(*t);
  const json& host = objectAt(rec, "host");
  std::string hostname = textAt(host, "hostname");
  if (!hostname.empty()) {
    heading += "  host " + hostname;
    std::string kernel = textAt(host, "kernel"), agent = textAt(host, "agent_version");
    std::vector<std::string> more;
    if (!kernel.empty()) more.push_back("kernel " + kernel);
    if (!agent.empty()) more.push_back("agent " + agent);
    if (more.size() == 2)
      heading += " (" + more[0] + ", " + more[1] + ")";
    else if (more.size() == 1)
      heading += " (" + more[0] + ")";
  }
  d.heading = heading;
  d.summary = reportSummary(rec);
  if (auto found = foundAfterSection(rec)) d.sections.push_back(std::move(*found));
  d.sections.push_back(momentSection(rec));
  d.sections.push_back(killedSection(rec));
  if (auto ledger = ledgerSection(rec)) d.sections.push_back(std::move(*ledger));
  d.sections.push_back(taskDumpSection(rec));
  d.sections.push_back(breakdownSection(rec));
  d.sections.push_back(processesSection(rec));
  if (auto warned = warningSection(rec)) d.sections.push_back(std::move(*warned));
  d.sections.push_back(grewSection(rec));
  d.sections.push_back(budgetSection(rec));
  d.sections.push_back(sensorsSection(rec));
  return d;
}

}  // namespace headroom::report_detail
