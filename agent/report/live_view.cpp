// `headroom top`'s view model: the agent's documents read into plain rows, sorted, and the keys
// that change what is shown. Pure: no terminal, no clock, no I/O; live_screen.cpp lays it out.
#include "headroom/report/live_view.h"

#include <map>

#include <fmt/format.h>

#include <algorithm>

#include "headroom/util/text.h"

namespace headroom {
namespace {

using nlohmann::json;

std::optional<std::uint64_t> u64(const json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return std::nullopt;
  if (it->is_number_unsigned()) return it->get<std::uint64_t>();
  const auto v = it->get<std::int64_t>();  // a document built in code holds small counts as signed
  return v < 0 ? std::nullopt : std::optional<std::uint64_t>(static_cast<std::uint64_t>(v));
}

std::uint64_t u64Or0(const json& j, const char* key) { return u64(j, key).value_or(0); }

std::optional<std::int64_t> i64(const json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<std::int64_t>();
}

std::string str(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? printableText(it->get<std::string>()) : std::string();
}

const json& member(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

TopMachine readMachine(const json& host) {
  const json& mi = member(host, "meminfo");
  TopMachine m;
  m.total = u64Or0(mi, "mem_total_bytes");
  m.available = u64Or0(mi, "mem_available_bytes");
  m.available_estimated =
      member(mi, "mem_available_estimated").is_boolean() && mi["mem_available_estimated"].get<bool>();
  m.free = u64Or0(mi, "mem_free_bytes");
  m.swap_total = u64Or0(mi, "swap_total_bytes");
  m.swap_used = m.swap_total - std::min(m.swap_total, u64Or0(mi, "swap_free_bytes"));
  m.page_tables = u64Or0(mi, "page_tables_bytes");
  m.slab = u64Or0(mi, "slab_bytes");
  m.kernel_stack = u64Or0(mi, "kernel_stack_bytes");
  m.percpu = u64Or0(mi, "percpu_bytes");
  m.mlocked = u64Or0(mi, "mlocked_bytes");
  const json& some = member(member(host, "pressure"), "some");
  if (const json& avg = member(some, "avg10"); avg.is_number()) m.pressure_some_avg10 = avg.get<double>();
  return m;
}

Result<TopCgroup> readCgroup(const json& c) {
  const json& mem = member(c, "memory");
  TopCgroup g;
  g.path = str(mem, "path");
  auto usage = u64(mem, "usage_bytes");
  if (g.path.empty() || !usage) return badData("a cgroup without memory.path or memory.usage_bytes");
  g.usage = *usage;
  g.limit = u64(mem, "limit_bytes");
  g.headroom = u64(c, "headroom_bytes");
  g.bound = str(member(c, "tightest_bound"), "name");
  g.oom_kills = u64(mem, "oom_kills");
  const json& a = member(c, "attribution");
  g.visible = u64Or0(a, "visible_bytes");
  g.invisible = u64Or0(a, "invisible_bytes");
  if (const json& parts = member(a, "parts"); parts.is_array()) {
    for (const json& p : parts) {
      const json& visible = member(p, "visible");
      if (!visible.is_boolean() || visible.get<bool>()) continue;
      TopPart part{str(p, "kind"), u64Or0(p, "bytes"), str(p, "accuracy") == "estimated"};
      if (part.bytes > 0) g.invisible_parts.push_back(std::move(part));
    }
  }
  std::stable_sort(g.invisible_parts.begin(), g.invisible_parts.end(),
                   [](const TopPart& x, const TopPart& y) { return x.bytes > y.bytes; });
  if (const json& pids = member(c, "pids"); pids.is_array()) g.processes = pids.size();
  g.workload = workloadName(member(c, "workload"));
  return g;
}

TopProcess readProcess(const json& p) {
  return {.pid = i64(p, "pid").value_or(0),
          .comm = str(p, "comm"),
          .cgroup = str(p, "cgroup"),
          .role = str(p, "role"),
          .rss = u64Or0(p, "rss_bytes"),
          .rss_drift = u64Or0(p, "rss_drift_bytes"),
          .pss = u64(p, "pss_bytes"),
          .page_tables = u64Or0(p, "page_tables_bytes"),
          .pinned = u64(member(p, "pinned"), "live_bytes"),
          .locked = u64Or0(p, "locked_bytes")};
}

}  // namespace

std::string workloadName(const json& w) {
  if (!w.is_object()) return "";
  std::string pod = str(w, "pod");
  if (!pod.empty()) {
    std::string ns = str(w, "namespace");
    return ns.empty() ? pod : ns + "/" + pod;
  }
  std::string container = str(w, "container");
  if (!container.empty()) return container;
  return str(w, "unit");
}

Status readSnapshotDocument(const json& doc, TopData& data) {
  if (!doc.is_object()) return badData("the snapshot is not a JSON object");
  const json& cgroups = member(doc, "cgroups");
  const json& processes = member(doc, "processes");
  if (!cgroups.is_array() || !processes.is_array())
    return badData("the snapshot has no \"cgroups\" or \"processes\" list");
  data.wall_time_ns = i64(doc, "wall_time_ns").value_or(0);
  data.machine = readMachine(member(doc, "host"));
  data.cgroups.clear();
  for (const json& c : cgroups) {
    auto g = readCgroup(c);
    if (!g) return g.error().wrap(fmt::format("the snapshot's cgroup {}", data.cgroups.size()));
    data.cgroups.push_back(std::move(*g));
  }
  data.processes.clear();
  for (const json& p : processes) data.processes.push_back(readProcess(p));
  return ok();
}

Result<TopOom> readOomEvent(const json& e) {
  if (!e.is_object()) return badData("an OOM event that is not a JSON object");
  TopOom o;
  o.wall_time_ns = i64(e, "wall_time_ns").value_or(0);
  const json& victims = member(e, "victims");
  const json& trigger = member(e, "trigger");
  if (victims.is_array() && !victims.empty()) {
    const json& v = victims.front();
    o.victim_pid = i64(v, "tgid").value_or(0);
    if (o.victim_pid <= 0) o.victim_pid = i64(v, "pid").value_or(0);
    o.victim_comm = str(v, "comm");
    o.victim_cgroup = str(v, "cgroup");
    auto anon = u64(v, "anon_rss_bytes");
    auto file = u64(v, "file_rss_bytes");
    auto shmem = u64(v, "shmem_rss_bytes");
    if (anon || file || shmem) o.victim_rss = anon.value_or(0) + file.value_or(0) + shmem.value_or(0);
  }
  if (o.victim_cgroup.empty()) o.victim_cgroup = str(trigger, "cgroup");
  if (o.victim_cgroup.empty()) o.victim_cgroup = str(member(e, "counter"), "cgroup");
  const json& domain = member(e, "oom_domain");
  const json& global = member(domain, "global");
  const bool is_global = global.is_boolean() && global.get<bool>();
  std::string cgroup = is_global ? std::string() : str(domain, "cgroup");
  o.domain = is_global ? std::string("global") : cgroup.empty() ? std::string("?") : std::move(cgroup);
  o.domain_usage = u64(domain, "usage_bytes");
  o.domain_limit = u64(domain, "limit_bytes");
  return o;
}

Status readOomsDocument(const json& doc, TopData& data) {
  const json& events = member(doc, "events");
  if (!events.is_array()) return badData("the OOM list has no \"events\"");
  std::vector<TopOom> ooms;
  for (const json& e : events) {
    auto o = readOomEvent(e);
    if (!o) return o.error();
    ooms.push_back(std::move(*o));
  }
  std::reverse(ooms.begin(), ooms.end());  // the agent lists them oldest first
  data.ooms = std::move(ooms);
  data.ooms_total = u64(doc, "total").value_or(data.ooms.size());
  return ok();
}

Status readWarningsDocument(const json& doc, TopData& data) {
  data.warnings.clear();
  const json& warnings = member(doc, "warnings");
  const json& cgroups = member(doc, "cgroups");
  if (!warnings.is_array() || !cgroups.is_array()) return badData("no \"warnings\" or \"cgroups\" list");
  for (const json& w : warnings) {
    const json& latest = member(w, "latest");
    TopWarning t;
    t.bound = str(w, "bound");
    if (const json& eta = member(latest, "eta_seconds"); eta.is_number()) t.eta = eta.get<double>();
    t.held = u64Or0(latest, "held_bytes");
    t.limit = u64Or0(latest, "limit_bytes");
    if (const json& g = member(latest, "growth_bytes_per_second"); g.is_number()) t.growth = g.get<double>();
    t.confidence = str(latest, "confidence");
    data.warnings.push_back(std::move(t));
  }
  std::map<std::string, const json*> by_path;
  for (const json& c : cgroups) by_path[str(c, "cgroup")] = &c;
  for (TopCgroup& g : data.cgroups) {
    auto it = by_path.find(g.path);
    g.oom_eta.reset();
    g.warned = false;
    if (it == by_path.end()) continue;
    if (const json& eta = member(*it->second, "eta_seconds"); eta.is_number()) g.oom_eta = eta.get<double>();
    const json& warned = member(*it->second, "warning");
    g.warned = warned.is_boolean() && warned.get<bool>();
  }
  return ok();
}

void readBudgetDocument(int http_status, const json& doc, TopData& data) {
  data.budget.reset();
  data.budget_note.clear();
  if (http_status == 200 && doc.is_object() && u64(doc, "budget_bytes")) {
    TopBudget b;
    const json& valid = member(doc, "valid");
    b.valid = !valid.is_boolean() || valid.get<bool>();
    b.budget = u64Or0(doc, "budget_bytes");
    b.margin = u64Or0(doc, "margin_bytes");
    b.generation = u64Or0(doc, "generation");
    b.cgroup = str(doc, "cgroup");
    b.reason = str(doc, "reason");
    data.budget = std::move(b);
    return;
  }
  std::string why = str(doc, "error");
  data.budget_note = why.empty() ? fmt::format("the agent answered HTTP {}", http_status) : why;
}

const char* toString(CgroupSort s) {
  switch (s) {
    case CgroupSort::kUsage: return "usage";
    case CgroupSort::kHeadroom: return "headroom";
    case CgroupSort::kInvisible: return "invisible";
    case CgroupSort::kName: return "name";
  }
  return "?";
}

const char* toString(ProcessSort s) {
  switch (s) {
    case ProcessSort::kPss: return "PSS";
    case ProcessSort::kPageTables: return "page tables";
    case ProcessSort::kPinned: return "pinned";
  }
  return "?";
}

void sortCgroups(std::vector<TopCgroup>& cgroups, CgroupSort by, bool reversed) {
  auto less = [by](const TopCgroup& a, const TopCgroup& b) {
    switch (by) {
      case CgroupSort::kUsage:
        if (a.usage != b.usage) return a.usage > b.usage;
        break;
      case CgroupSort::kHeadroom:
        // The least room first: those closest to a bound are the ones to watch; none last.
        if (a.headroom.has_value() != b.headroom.has_value()) return a.headroom.has_value();
        if (a.headroom != b.headroom) return *a.headroom < *b.headroom;
        break;
      case CgroupSort::kInvisible:
        if (a.invisible != b.invisible) return a.invisible > b.invisible;
        break;
      case CgroupSort::kName: break;
    }
    return a.path < b.path;
  };
  std::sort(cgroups.begin(), cgroups.end(), less);
  if (reversed) std::reverse(cgroups.begin(), cgroups.end());
}

void sortProcesses(std::vector<TopProcess>& processes, ProcessSort by, bool reversed) {
  auto less = [by](const TopProcess& a, const TopProcess& b) {
    switch (by) {
      case ProcessSort::kPss: break;
      case ProcessSort::kPageTables:
        if (a.page_tables != b.page_tables) return a.page_tables > b.page_tables;
        break;
      case ProcessSort::kPinned:
        if (a.pinned.value_or(0) != b.pinned.value_or(0)) return a.pinned.value_or(0) > b.pinned.value_or(0);
        if (a.locked != b.locked) return a.locked > b.locked;
        break;
    }
    if (a.pssOrRss() != b.pssOrRss()) return a.pssOrRss() > b.pssOrRss();
    return a.pid < b.pid;
  };
  std::sort(processes.begin(), processes.end(), less);
  if (reversed) std::reverse(processes.begin(), processes.end());
}

TopKeyResult applyTopKey(int key, TopViewState& state) {
  auto cgroupBy = [&](CgroupSort by) {
    state.cgroup_reversed = state.cgroup_sort == by && !state.cgroup_reversed;
    state.cgroup_sort = by;
    return TopKeyResult::kRedraw;
  };
  auto processBy = [&](ProcessSort by) {
    state.process_reversed = state.process_sort == by && !state.process_reversed;
    state.process_sort = by;
    return TopKeyResult::kRedraw;
  };
  constexpr int kEscape = 27;
  constexpr int kCtrlL = 12;
  switch (key) {
    case 'q':
    case 'Q': return TopKeyResult::kQuit;
    case 'u': return cgroupBy(CgroupSort::kUsage);
    case 'r': return cgroupBy(CgroupSort::kHeadroom);
    case 'i': return cgroupBy(CgroupSort::kInvisible);
    case 'n': return cgroupBy(CgroupSort::kName);
    case 'p': return processBy(ProcessSort::kPss);
    case 't': return processBy(ProcessSort::kPageTables);
    case 'l': return processBy(ProcessSort::kPinned);
    case ' ': state.paused = !state.paused; return state.paused ? TopKeyResult::kRedraw : TopKeyResult::kRefresh;
    case 'h':
    case '?': state.help = !state.help; return TopKeyResult::kRedraw;
    case kEscape:
      if (!state.help) return TopKeyResult::kNone;
      state.help = false;
      return TopKeyResult::kRedraw;
    case kCtrlL:
    case kTopKeyResize: return TopKeyResult::kRedraw;
    default: return TopKeyResult::kNone;
  }
}
}  // namespace headroom
