// `headroom top`'s view model: what a screen shows, made from the agent's JSON documents (or the
// same documents built locally) without a terminal, and the keys that change it. The screen's
// layout is live_screen.h.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "headroom/util/result.h"

namespace headroom {

struct TopMachine {
  std::uint64_t total = 0, available = 0, free = 0;
  bool available_estimated = false;
  std::uint64_t swap_used = 0, swap_total = 0;
  std::uint64_t page_tables = 0, slab = 0, kernel_stack = 0, percpu = 0, mlocked = 0;
  std::optional<double> pressure_some_avg10;
};

struct TopPart {
  std::string kind;  // "pagetables", "slab", ...
  std::uint64_t bytes = 0;
  bool estimated = false;
};

struct TopCgroup {
  std::string path;
  std::string workload;  // a short name of what runs there ("" unknown)
  std::uint64_t usage = 0;
  std::optional<std::uint64_t> limit;     // its own
  std::optional<std::uint64_t> headroom;  // under its tightest bound
  std::string bound;                      // the tightest bound's name ("" none)
  std::uint64_t visible = 0, invisible = 0;
  std::vector<TopPart> invisible_parts;  // largest first
  std::optional<std::uint64_t> oom_kills;
  std::size_t processes = 0;
  std::optional<double> oom_eta;  // seconds to OOM at its nearest bound (a trusted trend only)
  bool warned = false;            // a warning is in force for one of its bounds
};

struct TopProcess {
  std::int64_t pid = 0;
  std::string comm, cgroup, role;
  std::uint64_t rss = 0;
  std::uint64_t rss_drift = 0;  // how far `rss` may be off (0: exact)
  std::optional<std::uint64_t> pss;
  std::uint64_t page_tables = 0;
  std::optional<std::uint64_t> pinned;  // the pinned overlay's live bytes (CUDA host memory)
  std::uint64_t locked = 0;             // mlock'ed
  std::uint64_t pssOrRss() const { return pss.value_or(rss); }
};

struct TopOom {
  std::int64_t wall_time_ns = 0;
  std::int64_t victim_pid = 0;  // 0: not known
  std::string victim_comm;
  std::string victim_cgroup;
  std::string domain;  // the cgroup whose limit was hit, or "global"
  std::optional<std::uint64_t> domain_usage, domain_limit;
  std::optional<std::uint64_t> victim_rss;  // anon + file + shmem at the kill
};

struct TopBudget {
  bool valid = false;
  std::uint64_t budget = 0, margin = 0, generation = 0;
  std::string cgroup, reason;
};

// Everything one frame shows.
// A warning in force (/v1/warnings).
struct TopWarning {
  std::string bound;
  std::optional<double> eta;
  std::uint64_t held = 0, limit = 0;
  double growth = 0;  // bytes per second
  std::string confidence;
};

struct TopData {
  std::int64_t wall_time_ns = 0;
  TopMachine machine;
  std::vector<TopCgroup> cgroups;
  std::vector<TopProcess> processes;
  std::vector<TopOom> ooms;      // newest first
  std::uint64_t ooms_total = 0;  // seen by the source (more than `ooms` when it keeps fewer)
  std::optional<TopBudget> budget;
  std::string budget_note;  // why there is no budget
  std::string ooms_note;    // where the kills come from, or why none can be shown
  std::vector<TopWarning> warnings;
  std::string warnings_note;  // why no time to OOM can be shown ("" when it can)
};

// /v1/snapshot (or `headroom snapshot --json`) into `data`'s machine, cgroups and processes.
// Errors are bad data naming what is missing; optional fields may be absent or null.
Status readSnapshotDocument(const nlohmann::json& doc, TopData& data);
// One OOM event as /v1/ooms and the journal's records ("event") write it.
Result<TopOom> readOomEvent(const nlohmann::json& event);
// /v1/ooms's document: its events, newest first, and its total.
Status readOomsDocument(const nlohmann::json& doc, TopData& data);
// /v1/budget's document (200: a decision; otherwise {"error": ...}).
void readBudgetDocument(int http_status, const nlohmann::json& doc, TopData& data);
// /v1/warnings (model/oom_forecast.h's warningsDocument): the warnings in force, and each cgroup's
// time to OOM onto the cgroups already read (after readSnapshotDocument).
Status readWarningsDocument(const nlohmann::json& doc, TopData& data);
// A workload object ({"unit", "container", "pod", "namespace"}) as a short name: the pod
// (namespace/pod), else the container, else the unit; "" when none is there.
std::string workloadName(const nlohmann::json& workload);

enum class CgroupSort { kUsage, kHeadroom, kInvisible, kName };
enum class ProcessSort { kPss, kPageTables, kPinned };
const char* toString(CgroupSort s);
const char* toString(ProcessSort s);

struct TopViewState {
  CgroupSort cgroup_sort = CgroupSort::kUsage;
  bool cgroup_reversed = false;
  ProcessSort process_sort = ProcessSort::kPss;
  bool process_reversed = false;
  bool paused = false;
  bool help = false;
  int rows = 24, cols = 80;
  std::string source;     // "agent http://..." or "local"
  double interval_s = 1;  // between refreshes
  std::string error;      // the last refresh's failure ("" none): said on screen, data kept
  std::string log;        // the latest log line while the screen is up ("" none)
};

enum class TopKeyResult { kNone, kRedraw, kRefresh, kQuit };
// A key pressed (a character, or kTopKeyResize / kTopKeyRefresh): the state changed.
inline constexpr int kTopKeyResize = -2;
TopKeyResult applyTopKey(int key, TopViewState& state);

// The cgroups and processes in the order the state asks for.
void sortCgroups(std::vector<TopCgroup>& cgroups, CgroupSort by, bool reversed);
void sortProcesses(std::vector<TopProcess>& processes, ProcessSort by, bool reversed);

}  // namespace headroom
