// `headroom explain` (report/explain.h): the incidents of a saved kernel log made into records
// of the journal's shape, rendered by the report's own sections.
#include "headroom/report/explain.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <limits>
#include <variant>

#include "headroom/journal/oom_record.h"
#include "headroom/report/report.h"
#include "headroom/sensors/oom_event.h"
#include "headroom/sensors/oom_joiner.h"
#include "headroom/util/text.h"
#include "headroom/util/units.h"
#include "report_parts.h"

namespace headroom {

using namespace report_detail;  // the report's own parts
using nlohmann::json;

namespace {

template <typename T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

json textOrNull(const std::string& s) { return s.empty() ? json(nullptr) : json(printableText(s)); }

// The incident as the sensors join it from /dev/kmsg alone.
OomEvent eventOf(const std::vector<KernelOomReport>& kills) {
  OomJoiner::Options o;
  o.expect_bpf = false;
  o.settle_ns = 0;
  OomJoiner joiner(o);
  for (const auto& k : kills) joiner.addReport(k, static_cast<std::int64_t>(k.ts_us) * 1000, 0);
  auto ready = joiner.takeReady(std::numeric_limits<std::int64_t>::max(), 0);
  OomEvent e = ready.empty() ? OomEvent{} : std::move(ready.front());
  // A report without a kill names no victim.
  std::erase_if(e.victims, [](const OomVictim& v) { return v.pid == 0; });
  return e;
}

// What the text does not show, as the reader needs to hear it.
std::vector<std::string> missingOf(const std::vector<KernelOomReport>& kills) {
  const KernelOomReport& r = kills.front();
  std::vector<std::string> m;
  if (!r.header_seen) {
    m.push_back(r.trigger_pid ? "the text starts after the report's header (\"invoked oom-killer\"): gfp mask and "
                                "order unknown; the trigger is the task of the stack that follows"
                              : "the text starts after the report's header (\"invoked oom-killer\"): trigger unknown");
  } else if (!r.trigger_pid) {
    m.emplace_back("no \"CPU: ... PID:\" line: the trigger's pid unknown");
  }
  if (r.kernel_release.empty()) m.emplace_back("no \"CPU: ... Comm:\" line with the kernel's release: kernel unknown");
  if (r.constraint.empty())
    m.emplace_back("no \"oom-kill:\" line (kernels before 4.19 print none): constraint unknown");
  if (r.memcg_report || r.constraint == "CONSTRAINT_MEMCG") {
    if (!r.oom_memcg) m.emplace_back("the OOM domain (the cgroup at its limit) is not named in the text");
    if (!r.memcg_usage_bytes) m.emplace_back("no \"memory: usage\" line: the domain's usage and limit unknown");
    if (!r.memcg || r.memcg->stats.empty())
      m.emplace_back("no statistics block (\"Memory cgroup stats for\"): the breakdown at the kill is unknown");
    else if (r.memcg->stats_cut)
      m.emplace_back("the statistics block is cut short: its keys after the cut are missing");
  } else if (!r.machine) {
    m.emplace_back("no Mem-Info block: the machine's memory at the kill is unknown");
  }
  if (r.tasks.empty()) m.emplace_back("no task dump: who held what at the kill is unknown");
  for (const auto& k : kills) {
    std::string who = fmt::format("pid {}", k.victim.pid);
    switch (k.proof) {
      case KillProof::kNone:
        m.emplace_back("no kill line: the text ends before the kill, or nothing was killable");
        break;
      case KillProof::kKilledLine:
        if (k.victim_line_cut)
          m.push_back(fmt::format("the \"Killed process\" line of {} is cut short: {} unknown", who,
                                  k.victim.comm.empty() ? "its name and memory" : "part of its memory"));
        break;
      default:
        m.push_back(
            fmt::format("no \"Killed process\" line for {}: its memory at the kill is unknown (the kill is "
                        "proven by the {})",
                        who, toString(k.proof)));
    }
  }
  if (r.lost_records > 0)
    m.push_back(fmt::format("{} record(s) of the report were lost before they were read", r.lost_records));
  return m;
}

json killJson(const KernelOomReport& k) {
  const OomVictim& v = k.victim;
  json reaped = nullptr;
  if (k.reaped)
    reaped = {{"anon_rss_bytes", k.reaped->anon_rss},
              {"file_rss_bytes", k.reaped->file_rss},
              {"shmem_rss_bytes", k.reaped->shmem_rss}};
  return {{"pid", v.pid},
          {"comm", textOrNull(v.comm)},
          {"uid", opt(v.uid)},
          {"cgroup", textOrNull(v.cgroup)},
          {"anon_rss_bytes", opt(v.anon_rss)},
          {"file_rss_bytes", opt(v.file_rss)},
          {"shmem_rss_bytes", opt(v.shmem_rss)},
          {"pgtables_bytes", opt(v.pgtables)},
          {"total_vm_bytes", opt(v.total_vm)},
          {"oom_score_adj", opt(v.oom_score_adj)},
          {"proof", toString(k.proof)},
          {"line", k.last_line},
          {"time", textOrNull(k.stamp)},
          {"uptime_seconds", k.ts_us > 0 ? json(static_cast<double>(k.ts_us) / 1e6) : json(nullptr)},
          {"chosen_pid", opt(k.chosen_pid)},
          {"reaped", reaped}};
}

json incidentJson(const ExplainedIncident& inc) {
  const KernelOomReport& r = inc.kills.front();
  json kills = json::array();
  for (const auto& k : inc.kills) {
    if (k.proof != KillProof::kNone) kills.push_back(killJson(k));
  }
  json tasks = json::array();
  std::vector<const OomTaskDumpEntry*> sorted;
  for (const auto& t : r.tasks) sorted.push_back(&t);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto* a, const auto* b) { return a->rss_bytes > b->rss_bytes; });
  for (const auto* t : sorted)
    tasks.push_back({{"pid", t->pid},
                     {"tgid", t->tgid},
                     {"uid", t->uid},
                     {"name", printableText(t->name)},
                     {"rss_bytes", t->rss_bytes},
                     {"rss_anon_bytes", opt(t->rss_anon_bytes)},
                     {"rss_file_bytes", opt(t->rss_file_bytes)},
                     {"rss_shmem_bytes", opt(t->rss_shmem_bytes)},
                     {"pgtables_bytes", t->pgtables_bytes},
                     {"swap_bytes", t->swap_bytes},
                     {"total_vm_bytes", t->total_vm_bytes},
                     {"oom_score_adj", t->oom_score_adj}});
  json stats = nullptr;
  if (r.memcg && !r.memcg->stats.empty()) {
    stats = json::object();
    for (auto [k, v] : r.memcg->stats.entries()) stats[std::string(k)] = v;
  }
  const json& ev = objectAt(inc.record, "event");
  return {
      {"source", {{"file", inc.source}, {"first_line", r.first_line}, {"last_line", inc.kills.back().last_line}}},
      {"host", textOrNull(r.host)},
      {"kernel", textOrNull(r.kernel_release)},
      {"time", textOrNull(inc.kills.back().stamp)},
      {"trigger",
       {{"pid", r.trigger_pid ? json(*r.trigger_pid) : json(nullptr)}, {"comm", textOrNull(r.trigger_comm)}}},
      {"gfp_mask", textOrNull(r.gfp_mask)},
      {"order", opt(r.order)},
      {"constraint", textOrNull(r.constraint)},
      {"oom_memcg", r.oom_memcg ? json(printableText(*r.oom_memcg)) : json(nullptr)},
      {"task_memcg", r.task_memcg ? json(printableText(*r.task_memcg)) : json(nullptr)},
      {"memcg_usage_bytes", opt(r.memcg_usage_bytes)},
      {"memcg_limit_bytes", opt(r.memcg_limit_bytes)},
      {"memcg_failcnt", opt(r.memcg_failcnt)},
      {"oom_group",
       std::any_of(inc.kills.begin(), inc.kills.end(), [](const auto& k) { return k.oom_group_incident; })},
      {"kills", kills},
      {"tasks", tasks},
      {"memcg_stats", stats},
      {"kernel_report", ev.contains("kernel_report") ? ev["kernel_report"] : json(nullptr)},
      {"at_kill", inc.record.contains("at_kill") ? inc.record["at_kill"] : json(nullptr)},
      {"ledger", inc.record.contains("ledger") ? inc.record["ledger"] : json::array()},
      {"summary", inc.killed() ? json(reportSummary(inc.record)) : json(nullptr)},
      {"missing", inc.missing},
  };
}

std::string heading(const ExplainedIncident& inc, std::size_t n, std::size_t total) {
  const KernelOomReport& r = inc.kills.front();
  std::string h = fmt::format("OOM incident {} of {}: {} line{} {}", n, total, inc.source == "-" ? "stdin" : inc.source,
                              r.first_line == inc.kills.back().last_line ? "" : "s",
                              r.first_line == inc.kills.back().last_line
                                  ? std::to_string(r.first_line)
                                  : fmt::format("{}-{}", r.first_line, inc.kills.back().last_line));
  std::vector<std::string> more;
  if (!inc.kills.back().stamp.empty()) more.push_back(printableText(inc.kills.back().stamp));
  if (!r.host.empty()) more.push_back("host " + printableText(r.host));
  if (!r.kernel_release.empty()) more.push_back("kernel " + printableText(r.kernel_release));
  if (!more.empty()) h += fmt::format("  ({})", fmt::join(more, ", "));
  return h;
}

Section textSection(const Explanation& ex, const ExplainedIncident& inc) {
  Section s{"FROM THE TEXT", "what the kernel's lines say, and what they do not", {}};
  const KernelOomReport& r = inc.kills.front();
  s.blocks.emplace_back("read as " + ex.form.describe());
  if (r.header_seen) {
    std::string trig = fmt::format("{} (pid {})", r.trigger_comm.empty() ? "?" : printableText(r.trigger_comm),
                                   r.trigger_pid ? std::to_string(*r.trigger_pid) : "?");
    s.blocks.emplace_back(fmt::format("triggered by {}: gfp_mask={}, order={}", trig,
                                      r.gfp_mask.empty() ? "?" : printableText(r.gfp_mask),
                                      r.order ? std::to_string(*r.order) : "?"));
  }
  if (!r.constraint.empty()) s.blocks.emplace_back("constraint " + r.constraint);
  if (r.task_memcg) s.blocks.emplace_back("the victim's cgroup: " + printableText(*r.task_memcg));
  if (std::any_of(inc.kills.begin(), inc.kills.end(), [](const auto& k) { return k.oom_group_incident; }))
    s.blocks.emplace_back("memory.oom.group: every task of the group was killed with the victim");
  for (const auto& k : inc.kills) {
    if (k.proof == KillProof::kNone) continue;
    std::string line =
        fmt::format("pid {} ({}) killed: proven by the {} (line {})", k.victim.pid,
                    k.victim.comm.empty() ? "?" : printableText(k.victim.comm), toString(k.proof), k.last_line);
    if (k.chosen_pid && *k.chosen_pid != k.victim.pid)
      line += fmt::format("; the kernel chose pid {} and killed its child instead", *k.chosen_pid);
    if (k.reaped)
      line += fmt::format("; the reaper left anon {}, file {}, shmem {}", formatBytes(k.reaped->anon_rss),
                          formatBytes(k.reaped->file_rss), formatBytes(k.reaped->shmem_rss));
    s.blocks.emplace_back(std::move(line));
  }
  if (inc.missing.empty())
    s.blocks.emplace_back(std::string("the report is whole"));
  else
    for (const auto& m : inc.missing) s.blocks.emplace_back("not in the text: " + m);
  return s;
}

// The report's sentences for what a record lacks speak of the agent's sources; here the source
// is the saved text.
void sayTheText(Section& s) {
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 2> kSaid{{
      {" (the kernel's OOM report in /dev/kmsg was not read)", " (not in the text)"},
      {" (no kernel report, and no files read at the kill)",
       " (the text holds neither the domain's statistics nor its usage)"},
  }};
  for (auto& b : s.blocks) {
    auto* text = std::get_if<std::string>(&b);
    if (text == nullptr) continue;
    for (auto [from, to] : kSaid) {
      if (auto at = text->find(from); at != std::string::npos) text->replace(at, from.size(), to);
    }
  }
}

Doc incidentDoc(const Explanation& ex, const ExplainedIncident& inc, std::size_t n, std::size_t total) {
  Doc d;
  d.heading = heading(inc, n, total);
  d.summary = inc.killed() ? reportSummary(inc.record)
                           : "An OOM report without a kill: the text ends before it, or nothing was killable.";
  d.sections.push_back(momentSection(inc.record));
  d.sections.push_back(killedSection(inc.record));
  if (auto ledger = ledgerSection(inc.record)) d.sections.push_back(std::move(*ledger));
  d.sections.push_back(taskDumpSection(inc.record));
  for (auto& s : d.sections) sayTheText(s);
  d.sections.push_back(textSection(ex, inc));
  return d;
}

template <typename F>
void eachIncident(const std::vector<Explanation>& all, F&& f) {
  std::size_t total = 0, n = 0;
  for (const auto& ex : all) total += ex.incidents.size();
  for (const auto& ex : all) {
    for (const auto& inc : ex.incidents) f(ex, inc, ++n, total);
  }
}

}  // namespace

Explanation explainLog(std::string_view text, const std::string& source) {
  Explanation ex;
  ex.source = source;
  LogText lt = readLogText(text);
  ex.form = lt.form;
  auto reports = parseOomLog(lt);
  for (std::size_t i = 0; i < reports.size();) {
    ExplainedIncident inc;
    inc.source = source;
    std::size_t j = i;
    while (j < reports.size() && reports[j].incident == reports[i].incident)
      inc.kills.push_back(std::move(reports[j++]));
    i = j;
    OomEvent e = eventOf(inc.kills);
    e.id = ex.incidents.size() + 1;
    RecordContext ctx;
    ctx.event = &e;
    ctx.host.hostname = inc.kills.front().host;
    ctx.host.kernel = inc.kills.front().kernel_release;
    inc.record = makeOomRecord(ctx);
    // Not a time of this machine's clock: the text's own stamps are in the incident. Told by
    // the saved text, which the report's FROM THE TEXT section names, not by a live source.
    inc.record["time"] = nullptr;
    inc.record["kill_time"] = nullptr;
    inc.record["event"]["sources"] = json::object();
    inc.missing = missingOf(inc.kills);
    ex.incidents.push_back(std::move(inc));
  }
  return ex;
}

json explanationJson(const std::vector<Explanation>& all) {
  json incidents = json::array();
  json sources = json::array();
  for (const auto& ex : all)
    sources.push_back({{"file", ex.source},
                       {"read_as", ex.form.describe()},
                       {"lines", ex.form.lines},
                       {"incidents", ex.incidents.size()}});
  eachIncident(all, [&](const Explanation&, const ExplainedIncident& inc, std::size_t, std::size_t) {
    incidents.push_back(incidentJson(inc));
  });
  return {{"incidents", incidents}, {"sources", sources}};
}

std::string renderExplanation(const std::vector<Explanation>& all) {
  std::string out;
  eachIncident(all, [&](const Explanation& ex, const ExplainedIncident& inc, std::size_t n, std::size_t total) {
    if (!out.empty()) out += "\n\n";
    out += renderDocText(incidentDoc(ex, inc, n, total));
  });
  for (const auto& ex : all) {
    if (ex.incidents.empty())
      out += fmt::format("{}no OOM report in {} ({} lines, read as {})\n", out.empty() ? "" : "\n",
                         ex.source == "-" ? "standard input" : ex.source, ex.form.lines, ex.form.describe());
  }
  return out;
}

std::string renderExplanationHtml(const std::vector<Explanation>& all) {
  std::vector<std::pair<Doc, std::string>> docs;
  eachIncident(all, [&](const Explanation& ex, const ExplainedIncident& inc, std::size_t n, std::size_t total) {
    docs.emplace_back(incidentDoc(ex, inc, n, total),
                      inc.killed() ? momentSvgElement(inc.record, false) : std::string());
  });
  std::vector<std::string> names;
  names.reserve(all.size());
  for (const auto& ex : all) names.push_back(ex.source == "-" ? "stdin" : ex.source);
  return renderDocsHtml(fmt::format("headroom explain: {}", fmt::join(names, ", ")), docs);
}

std::string renderIncidentSvg(const ExplainedIncident& incident) { return momentSvgElement(incident.record, true); }

}  // namespace headroom
