#include "headroom/exporter/exporter.h"
#include "headroom/controller/budget_document.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "headroom/model/snapshot.h"
#include "headroom/sources/collector.h"
#include "testing/fixture_tree.h"

namespace headroom {
namespace {

constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::uint64_t kGiB = 1ULL << 30;

// ---- a tiny reader of the text exposition format --------------------------------------------

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct Exposition {
  std::vector<Sample> samples;
  std::map<std::string, std::string> help;  // family -> HELP text
  std::map<std::string, std::string> type;  // family -> TYPE
  std::vector<std::string> errors;          // lines that are not well formed

  // The value of the one sample with exactly these labels, or nullopt.
  // The series of `name` with exactly `labels`, where a label not given matches "" as in PromQL
  // (the workload labels of a cgroup that has none).
  std::optional<double> get(const std::string& name, const std::map<std::string, std::string>& labels = {}) const {
    auto matches = [&labels](const std::map<std::string, std::string>& have) {
      for (const auto& [k, v] : labels) {
        auto it = have.find(k);
        if (it == have.end() || it->second != v) return false;
      }
      return std::all_of(have.begin(), have.end(),
                         [&labels](const auto& kv) { return labels.contains(kv.first) || kv.second.empty(); });
    };
    for (const Sample& s : samples) {
      if (s.name == name && matches(s.labels)) return s.value;
    }
    return std::nullopt;
  }
  std::vector<const Sample*> all(const std::string& name) const {
    std::vector<const Sample*> out;
    for (const Sample& s : samples) {
      if (s.name == name) out.push_back(&s);
    }
    return out;
  }
};

bool isNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':'; }
bool isNameChar(char c) { return isNameStart(c) || (c >= '0' && c <= '9'); }
bool validName(std::string_view n) {
  if (n.empty() || !isNameStart(n[0])) return false;
  for (char c : n) {
    if (!isNameChar(c)) return false;
  }
  return true;
}
bool validLabelName(std::string_view n) { return validName(n) && n.find(':') == std::string_view::npos; }

// Parses one sample line `name{l="v",...} value`; false when it is not well formed.
bool parseSampleLine(std::string_view line, Sample& out) {
  std::size_t i = 0;
  while (i < line.size() && isNameChar(line[i])) ++i;
  out.name = std::string(line.substr(0, i));
  if (!validName(out.name)) return false;
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (i < line.size() && line[i] != '}') {
      std::size_t start = i;
      while (i < line.size() && isNameChar(line[i])) ++i;
      std::string label(line.substr(start, i - start));
      if (!validLabelName(label)) return false;
      if (line.substr(i, 2) != "=\"") return false;
      i += 2;
      std::string value;
      while (i < line.size() && line[i] != '"') {
        if (line[i] == '\\') {
          if (i + 1 >= line.size()) return false;
          const char e = line[i + 1];
          if (e == 'n') {
            value += '\n';
          } else if (e == '\\' || e == '"') {
            value += e;
          } else {
            return false;
          }
          i += 2;
        } else {
          value += line[i++];
        }
      }
      if (i >= line.size()) return false;
      ++i;                                                         // closing quote
      if (!out.labels.emplace(label, value).second) return false;  // a label twice
      if (i < line.size() && line[i] == ',') ++i;
    }
    if (i >= line.size()) return false;
    ++i;  // '}'
  }
  if (i >= line.size() || line[i] != ' ') return false;
  const std::string value(line.substr(i + 1));
  // NaN as the format spells it, and as prometheus-cpp does (Prometheus reads either: Go's
  // ParseFloat ignores case).
  if (value == "+Inf" || value == "-Inf" || value == "NaN" || value == "Nan") {
    out.value = value == "+Inf" ? HUGE_VAL : value == "-Inf" ? -HUGE_VAL : std::nan("");
    return true;
  }
  char* end = nullptr;
  out.value = std::strtod(value.c_str(), &end);
  return end != value.c_str() && *end == '\0';
}

Exposition parseExposition(const std::string& text) {
  Exposition e;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      const std::string rest = line.substr(7);
      const auto sp = rest.find(' ');
      const std::string name = rest.substr(0, sp);
      const std::string what = sp == std::string::npos ? "" : rest.substr(sp + 1);
      if (!validName(name)) e.errors.push_back(line);
      (line[2] == 'H' ? e.help : e.type)[name] = what;
      continue;
    }
    if (line[0] == '#') continue;
    Sample s;
    if (parseSampleLine(line, s)) {
      e.samples.push_back(std::move(s));
    } else {
      e.errors.push_back(line);
    }
  }
  return e;
}

// Every sample's family in the catalogue with that type and those labels, HELP and TYPE lines
// for each, and every line well formed.
void expectConsistentWithCatalog(const Exposition& e) {
  EXPECT_TRUE(e.errors.empty()) << "malformed line: " << (e.errors.empty() ? "" : e.errors.front());
  for (const Sample& s : e.samples) {
    const MetricInfo* info = findMetric(s.name);
    ASSERT_NE(info, nullptr) << s.name << " is not in metricCatalog()";
    ASSERT_TRUE(e.type.contains(s.name)) << "no TYPE line for " << s.name;
    EXPECT_EQ(e.type.at(s.name), toString(info->type)) << s.name;
    ASSERT_TRUE(e.help.contains(s.name)) << "no HELP line for " << s.name;
    EXPECT_FALSE(e.help.at(s.name).empty()) << s.name;
    std::set<std::string> want(info->labels.begin(), info->labels.end());
    std::set<std::string> got;
    for (const auto& [k, v] : s.labels) got.insert(k);
    EXPECT_EQ(got, want) << "labels of " << s.name;
  }
}

// ---- models ----------------------------------------------------------------------------------

std::shared_ptr<const Snapshot> provingSnapshotWithRoles(const testing::FixtureTree& t) {
  return testing::provingSnapshot(t, {"prover=comm:cuzk", "colocated=cmdline:^curio run"});
}

ProcessSnapshot syntheticProcess(pid_t pid, std::string comm, Role role, const std::string& cgroup,
                                 std::uint64_t rss_anon) {
  ProcessSnapshot p;
  p.sample.pid = pid;
  p.sample.comm = std::move(comm);
  p.sample.memory_cgroup = cgroup;
  p.sample.minflt = 7;
  p.sample.majflt = 1;
  p.role = role;
  p.cgroup = cgroup;
  p.attribution.rss = p.attribution.rss_anon = rss_anon;
  p.attribution.pss = rss_anon;
  p.attribution.page_tables = 4096;
  return p;
}

CgroupSnapshot syntheticCgroup(const std::string& path, std::uint64_t usage) {
  CgroupSnapshot c;
  c.memory.version = 2;
  c.memory.path = path;
  c.memory.usage = usage;
  c.attribution.usage = usage;
  c.attribution.parts.push_back({PartKind::kAnon, usage, Accuracy::kExact, "memory.stat anon"});
  c.tightest = Bound{"host", 64 * kGiB, 32 * kGiB};
  return c;
}

// One cgroup of `n` processes with distinct comms, alternating prover and system.
Snapshot manyProcesses(std::size_t n) {
  Snapshot s;
  s.host.meminfo.mem_total = 64 * kGiB;
  s.host.meminfo.mem_available = 32 * kGiB;
  CgroupSnapshot c = syntheticCgroup("/jobs", 0);
  for (std::size_t i = 0; i < n; ++i) {
    const Role role = i % 2 == 0 ? Role::kProver : Role::kSystem;
    s.processes.push_back(
        syntheticProcess(static_cast<pid_t>(i + 1), fmt::format("w{}", i), role, "/jobs", (i + 1) * 4096));
    c.processes.push_back(i);
    c.memory.usage += (i + 1) * 4096;
  }
  s.cgroups.push_back(std::move(c));
  return s;
}

std::string lbl(const Sample& s, const std::string& k) {
  auto it = s.labels.find(k);
  return it == s.labels.end() ? "" : it->second;
}

// ---- the catalogue and its documentation -------------------------------------------------

TEST(MetricsCatalog, NamesFollowPrometheusConventions) {
  std::set<std::string> seen;
  for (const MetricInfo& m : metricCatalog()) {
    EXPECT_TRUE(seen.insert(m.name).second) << m.name << " twice";
    EXPECT_TRUE(validName(m.name)) << m.name;
    EXPECT_FALSE(m.help.empty()) << m.name;
    // TextSerializer writes HELP text as it is: none may need escaping.
    EXPECT_EQ(m.help.find_first_of("\\\n"), std::string::npos) << m.name << ": a backslash or newline in HELP";
    EXPECT_EQ(findMetric(m.name), &m);
    const bool total = m.name.ends_with("_total");
    EXPECT_EQ(total, m.type == MetricType::kCounter) << m.name << ": counters and only counters end in _total";
    for (const char* reserved : {"_count", "_sum", "_bucket"}) EXPECT_FALSE(m.name.ends_with(reserved)) << m.name;
    std::set<std::string> labels;
    for (const std::string& l : m.labels) {
      EXPECT_TRUE(validLabelName(l) && !l.starts_with("__")) << m.name << " label " << l;
      EXPECT_TRUE(labels.insert(l).second) << m.name << " label " << l << " twice";
    }
  }
  EXPECT_EQ(findMetric("headroom_no_such_metric"), nullptr);
  EXPECT_STREQ(toString(MetricType::kGauge), "gauge");
  EXPECT_STREQ(toString(MetricType::kCounter), "counter");
}

struct DocRow {
  std::string type;
  std::vector<std::string> labels;
};

std::vector<std::string> splitCells(const std::string& line) {
  std::vector<std::string> cells;
  std::string cell;
  for (std::size_t i = 1; i < line.size(); ++i) {  // past the leading '|'
    if (line[i] == '|') {
      const auto b = cell.find_first_not_of(' ');
      const auto e = cell.find_last_not_of(' ');
      cells.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
      cell.clear();
    } else {
      cell += line[i];
    }
  }
  return cells;
}

// The rows of the catalogue table in docs/metrics.md: | `name` | type | `l1`, `l2` | ...
std::map<std::string, DocRow> readDocTable() {
  std::ifstream in(std::string(HEADROOM_DOCS_DIR) + "/metrics.md");
  if (!in) throw std::runtime_error("cannot open docs/metrics.md");
  std::map<std::string, DocRow> rows;
  bool in_table = false;
  std::string line;
  const std::regex backticked("`([^`]*)`");
  while (std::getline(in, line)) {
    if (line.starts_with("| metric | type | labels | unit | meaning | complements |")) {
      in_table = true;
      continue;
    }
    if (!in_table) continue;
    if (!line.starts_with("|")) break;  // the table ends
    if (line.starts_with("| ---")) continue;
    const std::vector<std::string> cells = splitCells(line);
    if (cells.size() != 6) throw std::runtime_error("catalogue row without 6 cells: " + line);
    std::smatch m;
    if (!std::regex_match(cells[0], m, std::regex("`([a-zA-Z_:][a-zA-Z0-9_:]*)`")))
      throw std::runtime_error("first cell is not a `name`: " + line);
    DocRow row;
    row.type = cells[1];
    const std::string& lc = cells[2];
    for (auto it = std::sregex_iterator(lc.begin(), lc.end(), backticked); it != std::sregex_iterator(); ++it) {
      row.labels.push_back((*it)[1]);
    }
    if (!rows.emplace(m[1], row).second) throw std::runtime_error("listed twice: " + line);
  }
  return rows;
}

TEST(MetricsDocs, DocsAgree) {
  const std::map<std::string, DocRow> doc = readDocTable();
  ASSERT_FALSE(doc.empty()) << "no catalogue table in docs/metrics.md";
  for (const MetricInfo& m : metricCatalog()) {
    auto it = doc.find(m.name);
    if (it == doc.end()) {
      ADD_FAILURE() << m.name << " is in metricCatalog() but not in docs/metrics.md";
      continue;
    }
    EXPECT_EQ(it->second.type, toString(m.type)) << "type of " << m.name;
    EXPECT_EQ(it->second.labels, m.labels) << "labels of " << m.name;
  }
  for (const auto& [name, row] : doc) {
    EXPECT_NE(findMetric(name), nullptr) << name << " is in docs/metrics.md but not in metricCatalog()";
  }
}

// ---- rendering a fixture's model ---------------------------------------------------------

TEST(ExporterRender, FixtureCgroupsAndProcesses) {
  testing::FixtureTree t;
  auto snap = provingSnapshotWithRoles(t);
  Exporter ex(ExporterLimits{});
  SensorCounters counters;
  counters.oom_ring_drops = 3;
  AgentSelf self;
  self.rss_bytes = 20 * kMiB;
  self.samples_total = 5;
  ex.update(*snap, counters, self);
  const std::string text = ex.render(0.25);
  if (const char* dump = std::getenv("HEADROOM_METRICS_DUMP")) std::ofstream(dump) << text;
  const Exposition e = parseExposition(text);
  expectConsistentWithCatalog(e);

  // Cgroups: usage, own limit (none when unlimited), the tightest bound and the room under it.
  EXPECT_EQ(e.get("headroom_cgroup_usage_bytes", {{"cgroup", "/proving/prover"}}), 4.0 * kGiB);
  // The watched cgroups (/, /proving/prover, /proving/curio) have no limit of their own: no
  // series. /proving's 8 GiB bounds its children, as their effective limit.
  EXPECT_TRUE(e.all("headroom_cgroup_limit_bytes").empty()) << "unlimited: no series";
  EXPECT_FALSE(e.get("headroom_cgroup_usage_bytes", {{"cgroup", "/proving"}})) << "an ancestor, not watched";
  EXPECT_EQ(e.get("headroom_cgroup_effective_limit_bytes", {{"cgroup", "/proving/prover"}}), 8.0 * kGiB);
  EXPECT_EQ(e.get("headroom_cgroup_effective_limit_bytes", {{"cgroup", "/"}}), 16.0 * kGiB) << "the host";
  EXPECT_EQ(e.get("headroom_cgroup_headroom_bytes", {{"cgroup", "/proving/prover"}}), 3.0 * kGiB);
  EXPECT_EQ(e.get("headroom_cgroup_headroom_bytes", {{"cgroup", "/"}}), 8.0 * kGiB) << "the host bound";
  EXPECT_EQ(e.get("headroom_cgroup_processes", {{"cgroup", "/"}}), 3.0);

  // Every part of every cgroup, plus unattributed, adding up to usage.
  for (const CgroupSnapshot& c : snap->cgroups) {
    const std::string& path = c.memory.path;
    double sum = 0;
    for (const Part& p : c.attribution.parts) {
      auto v = e.get("headroom_cgroup_memory_bytes", {{"cgroup", path}, {"kind", toString(p.kind)}});
      ASSERT_TRUE(v) << path << " " << toString(p.kind);
      EXPECT_EQ(*v, static_cast<double>(p.bytes)) << path << " " << toString(p.kind);
      sum += *v;
    }
    auto un = e.get("headroom_cgroup_memory_bytes", {{"cgroup", path}, {"kind", "unattributed"}});
    ASSERT_TRUE(un) << path;
    EXPECT_EQ(*un, static_cast<double>(c.attribution.unattributed));
    EXPECT_EQ(sum + *un, static_cast<double>(c.memory.usage)) << path << ": parts add up to usage";
    EXPECT_EQ(e.get("headroom_cgroup_invisible_bytes", {{"cgroup", path}}),
              static_cast<double>(c.attribution.invisibleBytes()));
  }
  for (const Sample* s : e.all("headroom_cgroup_memory_bytes")) {
    const std::string kind = lbl(*s, "kind");
    bool known = kind == "unattributed";
    for (PartKind k : allPartKinds()) known = known || kind == toString(k);
    EXPECT_TRUE(known) << kind;
  }
  EXPECT_EQ(e.get("headroom_cgroup_memory_bytes", {{"cgroup", "/proving/curio"}, {"kind", "shmem_mapped"}}),
            256.0 * kMiB);

  // Processes: labels {cgroup, role, process}, the attributed (deepest) cgroup.
  const std::map<std::string, std::string> cuzk = {
      {"cgroup", "/proving/prover"}, {"role", "prover"}, {"process", "cuzk"}};
  auto with = [](std::map<std::string, std::string> l, const char* k, const char* v) {
    l[k] = v;
    return l;
  };
  EXPECT_EQ(e.get("headroom_process_rss_bytes", with(cuzk, "kind", "anon")), 3900.0 * kMiB);
  EXPECT_EQ(e.get("headroom_process_rss_bytes", with(cuzk, "kind", "shmem")), 0.0);
  EXPECT_EQ(e.get("headroom_process_pss_bytes", cuzk), 3900.0 * kMiB);
  EXPECT_EQ(e.get("headroom_process_page_tables_bytes", cuzk), 8.0 * kMiB);
  EXPECT_EQ(e.get("headroom_process_group_size", cuzk), 1.0);
  EXPECT_EQ(e.get("headroom_process_page_faults_total", with(cuzk, "kind", "minor")), 10.0);
  EXPECT_FALSE(e.get("headroom_process_device_bytes", cuzk)) << "no CUDA sensor data: no series";
  const std::map<std::string, std::string> curio = {
      {"cgroup", "/proving/curio"}, {"role", "colocated"}, {"process", "curio"}};
  EXPECT_EQ(e.get("headroom_process_rss_bytes", with(curio, "kind", "shmem")), 256.0 * kMiB);
  const std::map<std::string, std::string> sshd = {{"cgroup", "/"}, {"role", "system"}, {"process", "sshd"}};
  EXPECT_EQ(e.get("headroom_process_rss_bytes", with(sshd, "kind", "anon")), 4.0 * kMiB);

  // Host, sensors, the agent.
  EXPECT_EQ(e.get("headroom_host_memory_bytes", {{"kind", "mem_available"}}), 8.0 * kGiB);
  EXPECT_EQ(e.get("headroom_host_memory_bytes", {{"kind", "mem_total"}}), 16.0 * kGiB);
  EXPECT_EQ(e.get("headroom_ring_buffer_drops_total", {{"ring", "oom"}}), 3.0);
  EXPECT_EQ(e.get("process_resident_memory_bytes"), 20.0 * kMiB);
  EXPECT_EQ(e.get("headroom_samples_total"), 5.0);
  EXPECT_EQ(e.get("headroom_scrape_duration_seconds"), 0.25);
  ASSERT_EQ(e.all("headroom_build_info").size(), 1u);
  EXPECT_FALSE(lbl(*e.all("headroom_build_info")[0], "version").empty());
  EXPECT_EQ(e.get("headroom_series"), static_cast<double>(e.samples.size()));
  EXPECT_EQ(ex.seriesCount(), e.samples.size()) << "every sample line counted";
  EXPECT_EQ(ex.seriesDropped(), 0u);
  EXPECT_EQ(e.get("headroom_series_dropped"), 0.0);
}

TEST(ExporterRender, TextIsWellFormed) {
  Snapshot s = manyProcesses(20);
  s.host.pressure = Psi{PsiLine{0, 0, 0, 1500000}, PsiLine{0, 0, 0, 250000}};
  s.cgroups[0].memory.pressure = Psi{PsiLine{0, 0, 0, 3000000}, std::nullopt};
  s.cgroups[0].memory.oom_events = 2;
  s.cgroups[0].memory.oom_kills = 1;
  s.cgroups[0].memory.limit = 48 * kGiB;
  s.cgroups[0].memory.peak = 40 * kGiB;
  s.cgroups[0].memory.events.set("max", 9);
  // A comm cut in the middle of a UTF-8 character, with a quote and a backslash in it.
  s.processes[0].sample.comm = "a\"b\\c\xE2\x82";
  s.processes[1].sample.comm = "\xC3\xA9t\xC3\xA9\n";
  ProcessActivity activity;
  activity.mmap_bytes = 1 << 20;
  s.processes[2].activity = std::make_shared<const ProcessActivity>(activity);
  s.processes[3].attribution.device_bytes = 2 * kGiB;
  PinnedOverlay pin;
  pin.live_bytes = 512 * kMiB;
  s.processes[3].attribution.pinned = std::make_shared<const PinnedOverlay>(pin);
  s.sensors.push_back({SensorId::kOom, SensorState::kActive, "tp"});
  s.sensors.push_back({SensorId::kCuda, SensorState::kDegraded, "no libcuda"});
  Exporter ex(ExporterLimits{});
  SensorCounters counters;
  counters.last_oom_mark_latency_ns = 1500000;
  ex.recordOomKill("/jobs", {}, Role::kProver, "w0", 1700000000.5);
  AgentSelf self;
  self.start_time_seconds = 1700000000;
  self.last_sample_timestamp_s = 1700000100;
  ex.update(s, counters, self);
  const std::string text = ex.render(0.001);
  if (const char* dump = std::getenv("HEADROOM_METRICS_DUMP")) std::ofstream(std::string(dump) + ".full") << text;
  const Exposition e = parseExposition(text);
  expectConsistentWithCatalog(e);
  // Each family's samples are contiguous, after its HELP and TYPE.
  std::set<std::string> done;
  std::string current;
  for (const Sample& smp : e.samples) {
    if (smp.name != current) {
      EXPECT_TRUE(done.insert(smp.name).second) << smp.name << " split in two";
      current = smp.name;
    }
  }
  EXPECT_EQ(e.get("headroom_host_pressure_seconds_total", {{"kind", "some"}}), 1.5);
  EXPECT_EQ(e.get("headroom_host_pressure_seconds_total", {{"kind", "full"}}), 0.25);
  EXPECT_EQ(e.get("headroom_cgroup_pressure_seconds_total", {{"cgroup", "/jobs"}, {"kind", "some"}}), 3.0);
  EXPECT_FALSE(e.get("headroom_cgroup_pressure_seconds_total", {{"cgroup", "/jobs"}, {"kind", "full"}}));
  EXPECT_EQ(e.get("headroom_cgroup_oom_events_total", {{"cgroup", "/jobs"}}), 2.0);
  EXPECT_EQ(e.get("headroom_cgroup_oom_kills_total", {{"cgroup", "/jobs"}}), 1.0);
  EXPECT_EQ(e.get("headroom_cgroup_limit_bytes", {{"cgroup", "/jobs"}}), 48.0 * kGiB);
  EXPECT_EQ(e.get("headroom_cgroup_peak_bytes", {{"cgroup", "/jobs"}}), 40.0 * kGiB);
  EXPECT_EQ(e.get("headroom_cgroup_limit_hits_total", {{"cgroup", "/jobs"}}), 9.0);
  EXPECT_EQ(e.get("headroom_oom_event_latency_seconds"), 0.0015);
  EXPECT_EQ(e.get("headroom_sensor_state", {{"sensor", "cuda"}, {"state", "degraded"}}), 1.0);
  EXPECT_EQ(e.get("headroom_sensor_state", {{"sensor", "cuda"}, {"state", "active"}}), 0.0);
  EXPECT_EQ(e.get("headroom_sensor_state", {{"sensor", "cuda"}, {"state", "off"}}), 0.0);
  EXPECT_EQ(e.get("headroom_sensor_state", {{"sensor", "oom"}, {"state", "active"}}), 1.0);
  const std::map<std::string, std::string> w0 = {{"cgroup", "/jobs"}, {"role", "prover"}, {"process", "w0"}};
  EXPECT_EQ(e.get("headroom_oom_kills_total", w0), 1.0);
  EXPECT_EQ(e.get("headroom_oom_kill_last_timestamp_seconds", w0), 1700000000.5);
  // Label values: escaped, invalid bytes and control characters replaced.
  std::set<std::string> comms;
  for (const Sample* smp : e.all("headroom_process_group_size")) comms.insert(lbl(*smp, "process"));
  EXPECT_TRUE(comms.contains("a\"b\\c??")) << text;
  EXPECT_TRUE(comms.contains("\xC3\xA9t\xC3\xA9?"));
  const std::map<std::string, std::string> w2 = {{"cgroup", "/jobs"}, {"role", "prover"}, {"process", "w2"}};
  auto op = [&](const char* o) {
    auto l = w2;
    l["op"] = o;
    return e.get("headroom_process_mmap_bytes_total", l);
  };
  EXPECT_EQ(op("mmap"), 1048576.0);
  EXPECT_EQ(op("munmap"), 0.0);
  const std::map<std::string, std::string> w3 = {{"cgroup", "/jobs"}, {"role", "system"}, {"process", "w3"}};
  EXPECT_EQ(e.get("headroom_process_device_bytes", w3), 2.0 * kGiB);
  EXPECT_EQ(e.get("headroom_process_pinned_bytes", w3), 512.0 * kMiB);
  EXPECT_EQ(e.get("headroom_process_pinned_peak_bytes", w3), 0.0);
}

// Exact lines: labels in name order, quotes and backslashes escaped, NaN and the infinities as
// Prometheus reads them.
TEST(ExporterRender, ExactLines) {
  Exporter ex(ExporterLimits{});
  Exporter::ProbeFigures p;
  p.allocatable_bytes = 3 * kGiB;
  p.bytes_per_second = std::nan("");
  p.duration_seconds = HUGE_VAL;
  p.others_growth_bytes = -HUGE_VAL;
  p.timestamp_s = 1700000000.25;
  Workload w;
  w.identity.unit = "a\"b\\c.scope";
  ex.recordProbe("/jobs", p);
  ex.recordOomKill("/jobs", w, Role::kProver, "cuzk", 1700000000.5);
  ex.update(Snapshot{}, {}, {});
  const std::string text = ex.render(0.5);
  const std::string cg = R"(cgroup="/jobs",container="",namespace="",pod="",unit="")";
  const std::vector<std::string> lines = {
      "# HELP headroom_probe_allocatable_bytes What the latest probe found allocatable in the cgroup, in bytes.\n"
      "# TYPE headroom_probe_allocatable_bytes gauge\n",
      "headroom_probe_allocatable_bytes{" + cg + "} 3221225472\n",
      "headroom_probe_touch_bytes_per_second{" + cg + "} Nan\n",
      "headroom_probe_duration_seconds{" + cg + "} +Inf\n",
      R"(headroom_probe_overhead_bytes{cgroup="/jobs",container="",kind="others",namespace="",pod="",unit=""} -Inf)",
      "headroom_probe_last_timestamp_seconds{" + cg + "} 1700000000.25\n",
      "# TYPE headroom_oom_kills_total counter\n",
      R"(headroom_oom_kills_total{cgroup="/jobs",container="",namespace="",pod="",process="cuzk",role="prover",)"
      R"(unit="a\"b\\c.scope"} 1)",
      "# TYPE headroom_scrape_duration_seconds gauge\nheadroom_scrape_duration_seconds 0.5\n",
  };
  for (const std::string& line : lines) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\nnot in\n" << text;
  }
  const Exposition e = parseExposition(text);
  expectConsistentWithCatalog(e);
  EXPECT_TRUE(std::isnan(e.get("headroom_probe_touch_bytes_per_second", {{"cgroup", "/jobs"}}).value_or(0)));
}

TEST(ExporterRender, GoneCgroupsAndProcessesLeaveNoSeries) {
  Exporter ex(ExporterLimits{});
  Snapshot a;
  a.cgroups.push_back(syntheticCgroup("/a", kGiB));
  a.cgroups.push_back(syntheticCgroup("/b", kGiB));
  a.processes.push_back(syntheticProcess(1, "gone", Role::kProver, "/a", kMiB));
  a.cgroups[0].processes.push_back(0);
  ex.update(a, {}, {});
  EXPECT_NE(ex.render(0).find("cgroup=\"/a\""), std::string::npos);
  Snapshot b;
  b.cgroups.push_back(syntheticCgroup("/b", kGiB));
  ex.update(b, {}, {});
  const std::string text = ex.render(0);
  EXPECT_EQ(text.find("cgroup=\"/a\""), std::string::npos) << text;
  EXPECT_EQ(text.find("gone"), std::string::npos);
  EXPECT_NE(text.find("cgroup=\"/b\""), std::string::npos);
}

// The exporter keeps its series from one update to the next (no per-update rebuild): what it
// writes must still be exactly what a fresh exporter writes for the same snapshot, whatever
// came, went or changed value since, and under a cap that cuts differently each time.
TEST(ExporterRender, AnUpdateReadsAsAFreshExportersFirst) {
  Snapshot a = manyProcesses(300);
  a.cgroups.push_back(syntheticCgroup("/gone", kGiB));
  Snapshot b = manyProcesses(120);
  b.cgroups.push_back(syntheticCgroup("/new", 2 * kGiB));
  b.processes.push_back(syntheticProcess(999, "fresh\ttab", Role::kColocated, "/new", 7 * kMiB));
  b.cgroups.back().processes.push_back(b.processes.size() - 1);
  for (std::size_t max : {std::size_t{40}, ExporterLimits{}.max_series}) {
    ExporterLimits limits;
    limits.max_series = max;
    Exporter kept(limits);
    kept.update(a, {}, {});
    kept.update(b, {}, {});
    kept.update(a, {}, {});
    kept.update(b, {}, {});
    Exporter fresh(limits);
    fresh.update(b, {}, {});
    EXPECT_EQ(kept.render(0.5), fresh.render(0.5)) << "max_series " << max;
    EXPECT_EQ(kept.seriesCount(), fresh.seriesCount());
    EXPECT_EQ(kept.seriesDropped(), fresh.seriesDropped());
  }
}

// The page is written by the scrape, from the last update's families: updates no scrape asked
// for are never written, a scrape during an update reads the last whole one, and two scrapes of
// one update read the same page.
TEST(ExporterRender, AScrapeWritesTheLastWholeUpdate) {
  const Snapshot a = manyProcesses(200);
  Snapshot b = manyProcesses(50);
  b.cgroups.push_back(syntheticCgroup("/b-only", 3 * kGiB));
  Exporter fresh_a(ExporterLimits{});
  fresh_a.update(a, {}, {});
  Exporter fresh_b(ExporterLimits{});
  fresh_b.update(b, {}, {});
  const std::string page_a = fresh_a.render(0.25);
  const std::string page_b = fresh_b.render(0.25);
  ASSERT_NE(page_a, page_b);

  Exporter ex(ExporterLimits{});
  EXPECT_EQ(ex.render(0.25).find("cgroup="), std::string::npos) << "no update yet: no cgroup series";
  ex.update(a, {}, {});
  EXPECT_EQ(ex.render(0.25), page_a);
  ex.update(b, {}, {});  // never scraped
  ex.update(a, {}, {});
  EXPECT_EQ(ex.render(0.25), page_a);
  EXPECT_EQ(ex.render(0.25), page_a);
  ex.update(b, {}, {});
  EXPECT_EQ(ex.render(0.25), page_b);

  std::atomic<bool> done{false};
  std::thread sampler([&] {
    for (int i = 0; i < 60; ++i) ex.update(i % 2 == 0 ? a : b, {}, {});
    done = true;
  });
  int scrapes = 0;
  while (!done || scrapes == 0) {
    const std::string page = ex.render(0.25);
    ASSERT_TRUE(page == page_a || page == page_b) << "a page of no one update";
    ++scrapes;
  }
  sampler.join();
  EXPECT_EQ(ex.render(0.25), page_b) << "the last update, 59: b";
}

// A page keeps the text of the families an update changed nothing in: one value changed alone is
// still written anew, as a fresh exporter writes it.
TEST(ExporterRender, OneValueChangedAloneIsWrittenAnew) {
  Snapshot a = manyProcesses(100);
  Exporter ex(ExporterLimits{});
  ex.update(a, {}, {});
  const std::string before = ex.render(0.25);
  ex.update(a, {}, {});
  EXPECT_EQ(ex.render(0.25), before) << "nothing changed";
  a.cgroups.front().memory.usage += 4096;
  a.processes[7].attribution.rss_anon += 8192;
  ex.update(a, {}, {});
  Exporter fresh(ExporterLimits{});
  fresh.update(a, {}, {});
  const std::string after = ex.render(0.25);
  EXPECT_EQ(after, fresh.render(0.25));
  EXPECT_NE(after, before);
}

// Between two walks a snapshot shares the last one's processes but for those read again: the
// exporter moves only those between its sums, and its page reads as a fresh exporter's. Here one
// process changed group (its comm), one lost its PSS, one gained pinned and device bytes and one
// went to another role, in the same list otherwise shared.
TEST(ExporterRender, ProcessesReadAgainMoveBetweenTheSumsAlone) {
  Snapshot a = manyProcesses(300);
  a.cgroups.push_back(syntheticCgroup("/other", kGiB));
  a.processes.push_back(syntheticProcess(999, "lone", Role::kColocated, "/other", 3 * kMiB));
  a.cgroups.back().processes.push_back(a.processes.size() - 1);
  Exporter ex(ExporterLimits{});
  ex.update(a, {}, {});
  Snapshot b = a;  // the same processes, shared
  b.processes[3].sample.comm = "renamed";
  b.processes[4].attribution.pss.reset();
  PinnedOverlay pinned;
  pinned.live_bytes = 2 * kMiB;
  pinned.peak_bytes = 3 * kMiB;
  b.processes[5].attribution.pinned = std::make_shared<const PinnedOverlay>(pinned);
  b.processes[5].attribution.device_bytes = 5 * kMiB;
  b.processes[6].role = Role::kColocated;
  b.processes[300].attribution.rss += kMiB;  // the group of one process, grown
  ASSERT_EQ(std::as_const(a.processes).shared(0), std::as_const(b.processes).shared(0));
  ASSERT_NE(std::as_const(a.processes).shared(3), std::as_const(b.processes).shared(3));
  ex.update(b, {}, {});
  Exporter fresh(ExporterLimits{});
  fresh.update(b, {}, {});
  EXPECT_EQ(ex.render(0.5), fresh.render(0.5));
  // And back: the moved processes leave their new groups empty (gone from the page).
  ex.update(a, {}, {});
  Exporter fresh_a(ExporterLimits{});
  fresh_a.update(a, {}, {});
  const std::string page = ex.render(0.5);
  EXPECT_EQ(page, fresh_a.render(0.5));
  EXPECT_EQ(page.find("renamed"), std::string::npos);
}

TEST(ExporterRender, SameCommSummed) {
  Snapshot s;
  s.cgroups.push_back(syntheticCgroup("/jobs", kGiB));
  s.processes.push_back(syntheticProcess(1, "worker", Role::kColocated, "/jobs", 10 * kMiB));
  s.processes.push_back(syntheticProcess(2, "worker", Role::kColocated, "/jobs", 30 * kMiB));
  s.processes.push_back(syntheticProcess(3, "worker", Role::kSystem, "/jobs", 5 * kMiB));
  s.processes[1].attribution.pss.reset();  // one without smaps: no partial PSS sum
  Exporter ex(ExporterLimits{});
  ex.update(s, {}, {});
  const Exposition e = parseExposition(ex.render(0));
  const std::map<std::string, std::string> co = {{"cgroup", "/jobs"}, {"role", "colocated"}, {"process", "worker"}};
  EXPECT_EQ(e.get("headroom_process_group_size", co), 2.0);
  auto rss = co;
  rss["kind"] = "anon";
  EXPECT_EQ(e.get("headroom_process_rss_bytes", rss), 40.0 * kMiB);
  auto minor = co;
  minor["kind"] = "minor";
  EXPECT_EQ(e.get("headroom_process_page_faults_total", minor), 14.0);
  EXPECT_FALSE(e.get("headroom_process_pss_bytes", co));
  const std::map<std::string, std::string> sys = {{"cgroup", "/jobs"}, {"role", "system"}, {"process", "worker"}};
  EXPECT_EQ(e.get("headroom_process_group_size", sys), 1.0) << "another role: another group";
  EXPECT_EQ(e.get("headroom_process_pss_bytes", sys), 5.0 * kMiB);
}

// ---- cardinality -----------------------------------------------------------------------------

TEST(ExporterCardinality, TopProcessesPerRoleRestIsOther) {
  const Snapshot s = manyProcesses(2000);
  ExporterLimits limits;
  limits.top_processes = 10;
  Exporter ex(limits);
  ex.update(s, {}, {});
  const Exposition e = parseExposition(ex.render(0));
  expectConsistentWithCatalog(e);
  std::map<std::string, std::set<std::string>> names_by_role;
  std::map<std::string, double> size_by_role, rss_by_role;
  for (const Sample* smp : e.all("headroom_process_group_size")) {
    names_by_role[lbl(*smp, "role")].insert(lbl(*smp, "process"));
    size_by_role[lbl(*smp, "role")] += smp->value;
  }
  for (const Sample* smp : e.all("headroom_process_rss_bytes")) rss_by_role[lbl(*smp, "role")] += smp->value;
  ASSERT_EQ(names_by_role.size(), 2u);
  double want_rss[2] = {0, 0};  // prover, system
  for (const ProcessSnapshot& p : s.processes)
    want_rss[p.role == Role::kProver ? 0 : 1] += static_cast<double>(p.attribution.rss);
  for (const auto& [role, names] : names_by_role) {
    EXPECT_EQ(names.size(), limits.top_processes + 1) << role << ": the top ones and \"other\"";
    EXPECT_TRUE(names.contains("other")) << role;
    EXPECT_EQ(size_by_role[role], 1000.0) << role << ": every process counted once";
    EXPECT_EQ(rss_by_role[role], want_rss[role == "prover" ? 0 : 1]) << role << ": totals stay honest";
  }
  // The largest processes keep their names: w1999 (system) and w1998 (prover).
  EXPECT_TRUE(names_by_role["system"].contains("w1999"));
  EXPECT_TRUE(names_by_role["prover"].contains("w1998"));
  EXPECT_FALSE(names_by_role["prover"].contains("w0"));
  EXPECT_EQ(ex.seriesDropped(), 0u) << "folding into \"other\" drops nothing";
  EXPECT_EQ(ex.seriesCount(), e.samples.size());
}

TEST(ExporterCardinality, MaxSeriesIsAHardCap) {
  const Snapshot s = manyProcesses(2000);
  Exporter uncapped(ExporterLimits{});
  uncapped.update(s, {}, {});
  for (std::size_t max : {0, 1, 2, 3, 20, 60, 100}) {
    ExporterLimits limits;
    limits.max_series = max;
    Exporter ex(limits);
    ex.update(s, {}, {});
    const Exposition e = parseExposition(ex.render(0));
    EXPECT_TRUE(e.errors.empty());
    EXPECT_LE(e.samples.size(), max);
    EXPECT_EQ(ex.seriesCount(), e.samples.size()) << max;
    EXPECT_GT(ex.seriesDropped(), 0u) << max;
    EXPECT_EQ(ex.seriesCount() + ex.seriesDropped(), uncapped.seriesCount()) << max << ": each left out is counted";
    if (max >= 3) {
      EXPECT_EQ(e.get("headroom_series_dropped"), static_cast<double>(ex.seriesDropped()));
      EXPECT_EQ(e.get("headroom_series"), static_cast<double>(e.samples.size()));
    }
    if (max >= 60) {
      // Priority: the agent, sensors and host come before cgroups and processes.
      EXPECT_TRUE(e.get("headroom_build_info", {{"version", lbl(*e.all("headroom_build_info").at(0), "version")}}));
      EXPECT_TRUE(e.get("headroom_host_memory_bytes", {{"kind", "mem_available"}}));
      EXPECT_TRUE(e.get("headroom_cgroup_usage_bytes", {{"cgroup", "/jobs"}}));
    }
  }
  // With room for everything nothing is dropped, and the count is the same as uncapped.
  ExporterLimits exact;
  exact.max_series = uncapped.seriesCount();
  Exporter ex(exact);
  ex.update(s, {}, {});
  EXPECT_EQ(ex.seriesDropped(), 0u);
  EXPECT_EQ(ex.seriesCount(), uncapped.seriesCount());
  exact.max_series -= 1;
  ex.setLimits(exact);
  ex.update(s, {}, {});
  EXPECT_EQ(ex.seriesDropped(), 1u);
  EXPECT_EQ(ex.seriesCount(), exact.max_series);
}

TEST(ExporterCardinality, MaxCgroupsKeepsTheLargest) {
  Snapshot s;
  for (int i = 1; i <= 5; ++i) s.cgroups.push_back(syntheticCgroup("/c" + std::to_string(i), i * kGiB));
  s.processes.push_back(syntheticProcess(1, "small", Role::kSystem, "/c1", kMiB));
  s.cgroups[0].processes.push_back(0);
  ExporterLimits limits;
  limits.max_cgroups = 2;
  Exporter ex(limits);
  ex.update(s, {}, {});
  const Exposition e = parseExposition(ex.render(0));
  std::set<std::string> cgroups;
  for (const Sample* smp : e.all("headroom_cgroup_usage_bytes")) cgroups.insert(lbl(*smp, "cgroup"));
  EXPECT_EQ(cgroups, (std::set<std::string>{"/c4", "/c5"}));
  EXPECT_TRUE(e.all("headroom_process_group_size").empty()) << "processes of a left-out cgroup are left out too";
  EXPECT_GT(ex.seriesDropped(), 0u);
  EXPECT_EQ(e.get("headroom_series_dropped"), static_cast<double>(ex.seriesDropped()));
  // The left-out cgroups and their processes are counted, series by series, and none is shown.
  Exporter uncapped(ExporterLimits{});
  uncapped.update(s, {}, {});
  EXPECT_EQ(ex.seriesCount() + ex.seriesDropped(), uncapped.seriesCount());
  const Exposition all = parseExposition(uncapped.render(0));
  std::size_t left_out = 0;
  const std::set<std::string> smaller = {"/c1", "/c2", "/c3"};
  for (const Sample& smp : all.samples) left_out += smaller.contains(lbl(smp, "cgroup")) ? 1 : 0;
  EXPECT_EQ(ex.seriesDropped(), left_out);
  for (const Sample& smp : e.samples) EXPECT_NE(lbl(smp, "cgroup"), "/c1") << smp.name;
  // Again with other cgroups left out: a series counted once is not shown later by mistake.
  s.cgroups[0].memory.usage = 9 * kGiB;
  ex.update(s, {}, {});
  const Exposition again = parseExposition(ex.render(0));
  std::set<std::string> now;
  for (const Sample* smp : again.all("headroom_cgroup_usage_bytes")) now.insert(lbl(*smp, "cgroup"));
  EXPECT_EQ(now, (std::set<std::string>{"/c1", "/c5"}));
  for (const Sample& smp : again.samples) EXPECT_NE(lbl(smp, "cgroup"), "/c4") << smp.name;
  EXPECT_EQ(again.all("headroom_process_group_size").size(), 1u) << "/c1's process, shown with its cgroup";
}

TEST(ExporterCardinality, OomLabelSetsAreCapped) {
  ExporterLimits limits;
  limits.max_oom_label_sets = 3;
  Exporter ex(limits);
  ex.recordOomKill("/jobs", {}, Role::kProver, "a", 10);
  ex.recordOomKill("/jobs", {}, Role::kProver, "b", 11);
  ex.recordOomKill("/jobs", {}, Role::kProver, "other", 12);  // a comm that happens to be "other"
  ex.recordOomKill("/jobs", {}, Role::kProver, "a", 13);      // known: counted under its own name
  ex.recordOomKill("/jobs", {}, Role::kProver, "c", 14);      // new past the cap: the cgroup's "other"
  ex.recordOomKill("/else", {}, Role::kProver, "d", 15);      // its cgroup's "other" is new too
  ex.recordOomKill("/else", {}, Role::kSystem, "e", 16);
  ex.recordOomKill("/more", {}, Role::kSystem, "f", 9);
  for (int i = 0; i < 100; ++i) ex.recordOomKill("/x" + std::to_string(i), {}, Role::kProver, "p", 20);
  ex.update(Snapshot{}, {}, {});
  const Exposition e = parseExposition(ex.render(0));
  expectConsistentWithCatalog(e);
  std::map<std::tuple<std::string, std::string, std::string>, double> kills;
  double total = 0;
  for (const Sample* smp : e.all("headroom_oom_kills_total")) {
    kills[{lbl(*smp, "cgroup"), lbl(*smp, "role"), lbl(*smp, "process")}] = smp->value;
    total += smp->value;
  }
  EXPECT_EQ(total, 108.0) << "no kill lost";
  EXPECT_LE(kills.size(), limits.max_oom_label_sets + 4) << "the cap, plus one set per role";
  using K = std::tuple<std::string, std::string, std::string>;
  EXPECT_EQ(kills[K("/jobs", "prover", "a")], 2.0);
  EXPECT_EQ(kills[K("/jobs", "prover", "other")], 2.0) << "the existing \"other\" of that cgroup and role";
  EXPECT_EQ(kills[K("other", "prover", "other")], 101.0);
  EXPECT_EQ(kills[K("other", "system", "other")], 2.0);
  EXPECT_EQ(kills.size(), 5u);
  EXPECT_EQ(e.get("headroom_oom_kill_last_timestamp_seconds",
                  {{"cgroup", "other"}, {"role", "system"}, {"process", "other"}}),
            16.0);
  // Counted for the agent's lifetime: still there after more updates.
  ex.update(Snapshot{}, {}, {});
  EXPECT_NE(ex.render(0).find("headroom_oom_kills_total{cgroup=\"/jobs\""), std::string::npos);
}

TEST(ExporterCardinality, ANameLearntAfterAKillStartsASetOfItsOwn) {
  // The engine answered after the first kill: that kill stays counted unnamed, the next one under
  // the name; no count moves between label sets (a rule would count it twice).
  Exporter ex(ExporterLimits{});
  Workload named;
  named.identity.runtime = "podman";
  named.identity.unit = "libpod-x.scope";
  named.container = "web";
  ex.recordOomKill("/machine.slice/libpod-x.scope", {}, Role::kSystem, "hog", 10);
  ex.recordOomKill("/machine.slice/libpod-x.scope", named, Role::kSystem, "hog", 11);
  ex.recordOomKill("/machine.slice/libpod-x.scope", named, Role::kSystem, "hog", 12);
  ex.update(Snapshot{}, {}, {});
  const Exposition e = parseExposition(ex.render(0));
  expectConsistentWithCatalog(e);
  EXPECT_EQ(e.get("headroom_oom_kills_total",
                  {{"cgroup", "/machine.slice/libpod-x.scope"}, {"role", "system"}, {"process", "hog"}}),
            1.0);
  EXPECT_EQ(e.get("headroom_oom_kills_total", {{"cgroup", "/machine.slice/libpod-x.scope"},
                                               {"unit", "libpod-x.scope"},
                                               {"container", "web"},
                                               {"role", "system"},
                                               {"process", "hog"}}),
            2.0);
}

}  // namespace
}  // namespace headroom

namespace headroom {
namespace {

// A real decision: the fixture's prover under /proving's 8 GiB, by the controller itself.
BudgetDecision fixtureDecision(const testing::FixtureTree& t, BudgetController& c) {
  auto snap = provingSnapshotWithRoles(t);
  auto in = budgetInputs(*snap, ProverScope{"/proving/prover", std::nullopt});
  EXPECT_TRUE(in) << in.error().describe();
  return c.decide(*in);
}

TEST(ExporterBudget, GaugesFollowTheDecisionAndGoWhenCleared) {
  testing::FixtureTree t;
  BudgetController c(BudgetPolicy{});
  const BudgetDecision d = fixtureDecision(t, c);
  ASSERT_TRUE(d.valid) << d.reason;
  ASSERT_GT(d.budget, 0u);
  Exporter ex(ExporterLimits{});
  ex.recordBudget(d);
  ex.countMarginChange("/proving/prover", "oom_kill");
  ex.countMarginChange("/proving/prover", "oom_kill");
  ex.countMarginChange("/proving/prover", "give_back");
  ex.update(Snapshot{}, {}, {});
  Exposition e = parseExposition(ex.render(0));
  expectConsistentWithCatalog(e);
  const std::map<std::string, std::string> cg = {{"cgroup", "/proving/prover"}};
  EXPECT_EQ(e.get("headroom_budget_bytes", cg), static_cast<double>(d.budget));
  EXPECT_EQ(e.get("headroom_margin_bytes", cg), static_cast<double>(d.margin));
  EXPECT_EQ(e.get("headroom_budget_generation", cg), static_cast<double>(d.generation));
  EXPECT_EQ(e.get("headroom_budget_margin_changes_total", {{"cgroup", "/proving/prover"}, {"reason", "oom_kill"}}),
            2.0);
  EXPECT_EQ(e.get("headroom_budget_margin_changes_total", {{"cgroup", "/proving/prover"}, {"reason", "give_back"}}),
            1.0);

  // No room: margin and generation stay visible, the budget has no series (not a budget of 0).
  BudgetDecision none = d;
  none.valid = false;
  none.budget = 0;
  none.generation = d.generation + 1;
  ex.recordBudget(none);
  ex.update(Snapshot{}, {}, {});
  e = parseExposition(ex.render(0));
  EXPECT_FALSE(e.get("headroom_budget_bytes", cg));
  EXPECT_EQ(e.get("headroom_budget_generation", cg), static_cast<double>(d.generation + 1));
  EXPECT_EQ(e.get("headroom_margin_bytes", cg), static_cast<double>(d.margin));

  // Another prover cgroup replaces the first; clearing removes the gauges, not the counters.
  BudgetDecision other = d;
  other.inputs.cgroup = "/other";
  ex.recordBudget(other);
  ex.update(Snapshot{}, {}, {});
  e = parseExposition(ex.render(0));
  EXPECT_EQ(e.all("headroom_budget_bytes").size(), 1u);
  EXPECT_EQ(e.get("headroom_budget_bytes", {{"cgroup", "/other"}}), static_cast<double>(d.budget));
  ex.clearBudget();
  ex.update(Snapshot{}, {}, {});
  e = parseExposition(ex.render(0));
  EXPECT_TRUE(e.all("headroom_budget_bytes").empty());
  EXPECT_TRUE(e.all("headroom_margin_bytes").empty());
  EXPECT_TRUE(e.all("headroom_budget_generation").empty());
  EXPECT_EQ(e.all("headroom_budget_margin_changes_total").size(), 2u);
}

TEST(ExporterBudget, MarginChangeLabelSetsAreCapped) {
  Exporter ex(ExporterLimits{});
  for (int i = 0; i < 200; ++i) ex.countMarginChange("/p" + std::to_string(i), "oom_kill");
  ex.update(Snapshot{}, {}, {});
  const Exposition e = parseExposition(ex.render(0));
  double total = 0;
  for (const Sample* s : e.all("headroom_budget_margin_changes_total")) total += s->value;
  EXPECT_EQ(total, 200.0) << "no change lost";
  EXPECT_LE(e.all("headroom_budget_margin_changes_total").size(), 65u);
  EXPECT_GT(e.get("headroom_budget_margin_changes_total", {{"cgroup", "other"}, {"reason", "oom_kill"}}).value_or(0),
            0.0);
}

TEST(BudgetJson, MirrorsTheDecisionItsInputsAndWhatWasLearned) {
  testing::FixtureTree t;
  BudgetController c(BudgetPolicy{});
  KillEvidence k;
  k.what = "mark_victim: pid 100 (cuzk) in /proving/prover";
  k.budget = 3 * kGiB;
  k.charge = 3 * kGiB + 512 * kMiB;
  k.page_tables = 8 * kMiB;
  k.self_reported = 3 * kGiB;
  c.onOomKill(k);
  BudgetDecision d = fixtureDecision(t, c);
  d.inputs.probe = ProbeFinding{2 * kGiB, 3 * kGiB, d.time_ns - 5'000'000'000};
  const nlohmann::json j = budgetDocument(d, c.state(), 1700000000.5);

  EXPECT_EQ(j["valid"], d.valid);
  EXPECT_EQ(j["budget_bytes"], d.budget);
  EXPECT_EQ(j["margin_bytes"], d.margin);
  EXPECT_EQ(j["generation"], d.generation);
  EXPECT_EQ(j["cgroup"], "/proving/prover");
  EXPECT_EQ(j["tightest_bound"], d.tightest);
  EXPECT_EQ(j["room_bytes"], d.room);
  EXPECT_EQ(j["neighbour_growth_bytes"], d.neighbour_growth);
  EXPECT_EQ(j["overhead_growth_bytes"], d.overhead_growth);
  EXPECT_TRUE(j["probe_cap_bytes"].is_null()) << "this decision had no probe";
  EXPECT_EQ(j["capped_by_probe"], false);
  EXPECT_EQ(j["margin_source"], d.margin_source);
  EXPECT_EQ(j["reason"], d.reason);
  EXPECT_EQ(j["time"], 1700000000.5);

  const auto& in = j["inputs"];
  ASSERT_EQ(in["bounds"].size(), d.inputs.bounds.size());
  ASSERT_FALSE(d.inputs.bounds.empty());
  for (std::size_t i = 0; i < d.inputs.bounds.size(); ++i) {
    const BudgetBound& b = d.inputs.bounds[i];
    const auto& jb = in["bounds"][i];
    EXPECT_EQ(jb["name"], b.name);
    EXPECT_EQ(jb["kind"], b.kind);
    EXPECT_EQ(jb["limit_bytes"], b.limit);
    EXPECT_EQ(jb["usage_bytes"], b.usage);
    EXPECT_EQ(jb["reclaimable_bytes"], b.reclaimable);
    EXPECT_EQ(jb["neighbours_bytes"], b.neighbours);
    EXPECT_EQ(jb["room_bytes"], b.room());
  }
  EXPECT_EQ(in["bounds"].back()["name"], "host");
  EXPECT_EQ(in["prover_usage_bytes"], d.inputs.prover_usage);
  EXPECT_EQ(in["prover_processes"], 1);
  EXPECT_TRUE(in["self_reported_bytes"].is_null());
  EXPECT_EQ(in["overhead_bytes"], d.inputs.overhead);
  EXPECT_EQ(in["probe"]["allocatable_bytes"], 2 * kGiB);
  EXPECT_EQ(in["probe"]["prover_usage_bytes"], 3 * kGiB);
  EXPECT_DOUBLE_EQ(in["probe"]["age_seconds"].get<double>(), 5.0);

  const auto& l = j["learned"];
  EXPECT_EQ(l["learned_margin_bytes"], c.state().learned_margin);
  EXPECT_GT(c.state().learned_margin, BudgetPolicy{}.margin_floor) << "the kill grew it";
  EXPECT_EQ(l["oom_kills"], 1);
  EXPECT_EQ(l["clean_runs"], 0);
  EXPECT_EQ(l["last_kill"]["what"], k.what);
  EXPECT_EQ(l["last_kill"]["charge_bytes"], k.charge);
  EXPECT_EQ(l["last_kill"]["self_reported_bytes"], 3 * kGiB);
  EXPECT_EQ(l["last_kill"]["prover_victim"], true);
  ASSERT_EQ(l["history"].size(), 1u);
  EXPECT_EQ(l["history"][0]["after_bytes"], c.state().learned_margin);

  // Nothing learned, no probe: nulls, not missing keys.
  testing::FixtureTree t2;
  BudgetController fresh(BudgetPolicy{});
  const nlohmann::json f = budgetDocument(fixtureDecision(t2, fresh), fresh.state(), 0);
  EXPECT_TRUE(f["inputs"]["probe"].is_null());
  EXPECT_TRUE(f["learned"]["last_kill"].is_null());
  EXPECT_TRUE(f["learned"]["history"].empty());
}

}  // namespace
}  // namespace headroom
