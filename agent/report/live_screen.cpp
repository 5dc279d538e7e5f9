// `headroom top`'s screen: the view model laid out as lines for a terminal of a given size.
// Pure: no terminal, no clock, no I/O.
#include "headroom/report/live_screen.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "headroom/util/text.h"
#include "headroom/util/units.h"

namespace headroom {
namespace {

// ---- layout ----

// `s` cut or padded to exactly `width` bytes; the text is printable ASCII by now, or UTF-8 that
// printableText let through, which is cut at a byte (a terminal shows a '?' at worst).
std::string cell(std::string_view s, std::size_t width, bool right = false) {
  if (s.size() > width) return std::string(s.substr(0, width));
  std::string pad(width - s.size(), ' ');
  return right ? pad + std::string(s) : std::string(s) + pad;
}

// Keeps the end of a long path, where the distinguishing part is.
std::string tailCell(const std::string& s, std::size_t width) {
  if (s.size() <= width) return cell(s, width);
  if (width <= 3) return s.substr(s.size() - width);
  return "..." + s.substr(s.size() - (width - 3));
}

std::string bytesOr(const std::optional<std::uint64_t>& v, const char* none = "-") {
  return v ? formatBytes(*v) : std::string(none);
}

std::string fitLine(std::string s, int cols) {
  std::size_t w = static_cast<std::size_t>(std::max(cols, 0));
  if (s.size() > w) s.resize(w);
  return s;
}

struct Lines {
  std::vector<TopLine> lines;
  int cols;
  void add(std::string s, TopStyle style = TopStyle::kNormal) { lines.push_back({fitLine(std::move(s), cols), style}); }
};

std::string sortLabel(const char* by, bool reversed) {
  return fmt::format("by {}{}", by, reversed ? ", reversed" : "");
}

std::string titleLine(const TopData& d, const TopViewState& s) {
  std::string t =
      fmt::format("headroom top  {}  {}  every {:g}s", s.source,
                  d.wall_time_ns > 0 ? formatUtcMs(d.wall_time_ns / 1'000'000) : "no sample yet", s.interval_s);
  if (s.paused) t += "  PAUSED (space resumes)";
  return t;
}

std::string machineLine(const TopMachine& m) {
  std::string l =
      fmt::format("machine  total {}  available {}{}  free {}  swap {} of {}  page tables {}  slab {}",
                  formatBytes(m.total), formatBytes(m.available), m.available_estimated ? "~" : "", formatBytes(m.free),
                  formatBytes(m.swap_used), formatBytes(m.swap_total), formatBytes(m.page_tables), formatBytes(m.slab));
  l += fmt::format("  kernel stacks {}  mlocked {}", formatBytes(m.kernel_stack), formatBytes(m.mlocked));
  if (m.pressure_some_avg10) l += fmt::format("  pressure some avg10 {:.2f}", *m.pressure_some_avg10);
  return l;
}

std::string budgetLine(const TopData& d) {
  if (!d.budget) return "budget   none" + (d.budget_note.empty() ? std::string() : ": " + d.budget_note);
  const TopBudget& b = *d.budget;
  if (!b.valid) return fmt::format("budget   none for {}: {}", b.cgroup, b.reason);
  return fmt::format("budget   {} for {}  (margin {}, generation {})  {}", formatBytes(b.budget), b.cgroup,
                     formatBytes(b.margin), b.generation, b.reason);
}

std::string partsText(const TopCgroup& g) {
  std::string s;
  for (const TopPart& p : g.invisible_parts) {
    if (!s.empty()) s += "  ";
    s += fmt::format("{} {}{}", p.kind, formatBytes(p.bytes), p.estimated ? "~" : "");
  }
  return s;
}

std::string percent(std::uint64_t part, std::uint64_t whole) {
  if (whole == 0) return "-";
  return fmt::format("{:.1f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

// A time to OOM in a few characters: "45s", "12m", "3h", "-" when not growing toward a bound; "!"
// after it while a warning is in force.
std::string etaText(const TopCgroup& g) {
  std::string t = "-";
  if (g.oom_eta) {
    const double e = std::max(0.0, *g.oom_eta);
    t = e < 120    ? fmt::format("{:.0f}s", e)
        : e < 7200 ? fmt::format("{:.0f}m", e / 60)
                   : fmt::format("{:.0f}h", e / 3600);
  }
  return g.warned ? t + "!" : t;
}

// The warnings in force, one line each (at most `max`).
void warningLines(Lines& out, const TopData& d, std::size_t max) {
  for (std::size_t i = 0; i < d.warnings.size() && i < max; ++i) {
    const TopWarning& w = d.warnings[i];
    out.add(fmt::format("OOM WARNING  {} runs out of memory in {}: {} held of {}, +{}/s (confidence {})", w.bound,
                        w.eta ? fmt::format("~{:.0f} s", *w.eta) : std::string("?"), formatBytes(w.held),
                        formatBytes(w.limit), formatBytes(static_cast<std::uint64_t>(std::max(0.0, w.growth))),
                        w.confidence),
            TopStyle::kWarning);
  }
  if (d.warnings.size() > max)
    out.add(fmt::format("... {} more OOM warnings", d.warnings.size() - max), TopStyle::kWarning);
}

// The cgroups' section in at most `rows` lines (at least 3: title, header, one row).
void cgroupSection(Lines& out, const TopData& d, const TopViewState& s, int rows) {
  std::vector<TopCgroup> cg = d.cgroups;
  sortCgroups(cg, s.cgroup_sort, s.cgroup_reversed);
  bool workloads = std::any_of(cg.begin(), cg.end(), [](const TopCgroup& g) { return !g.workload.empty(); });
  std::size_t longest = 6;
  for (const TopCgroup& g : cg) longest = std::max(longest, g.path.size());
  // Fixed columns: 5 sizes, INVIS%, OOMS, PROCS; the parts take what the path leaves.
  const int fixed = 2 + 11 * 5 + 8 + 7 + 6 + 6 + (workloads ? 17 : 0);
  const std::size_t path_w =
      std::min<std::size_t>(longest, static_cast<std::size_t>(std::max(16, s.cols - fixed - 24)));
  out.add(fmt::format("CGROUPS  {}  {}  (visible: anon, file, shmem; invisible: what no process's RSS shows)",
                      cg.size(), sortLabel(toString(s.cgroup_sort), s.cgroup_reversed)),
          TopStyle::kSection);
  out.add(fmt::format("  {} {}{:>10} {:>10} {:>10} {:>7} {:>10} {:>10} {:>6} {:>5} {:>5}  {}", cell("CGROUP", path_w),
                      workloads ? cell("WORKLOAD", 16) + " " : "", "USAGE", "LIMIT", "HEADROOM", "OOM IN", "VISIBLE",
                      "INVISIBLE", "INVIS%", "OOMS", "PROCS", "INVISIBLE PARTS (~ estimated)"),
          TopStyle::kHeader);
  int room = rows - 2;
  std::size_t shown = cg.size() <= static_cast<std::size_t>(room) ? cg.size() : static_cast<std::size_t>(room - 1);
  if (cg.empty()) out.add("  (no memory cgroup with a process in it)");
  for (std::size_t i = 0; i < shown; ++i) {
    const TopCgroup& g = cg[i];
    out.add(fmt::format("  {} {}{:>10} {:>10} {:>10} {:>7} {:>10} {:>10} {:>6} {:>5} {:>5}  {}",
                        tailCell(g.path, path_w), workloads ? cell(g.workload, 16) + " " : "", formatBytes(g.usage),
                        bytesOr(g.limit, "none"), bytesOr(g.headroom), etaText(g), formatBytes(g.visible),
                        formatBytes(g.invisible), percent(g.invisible, g.usage),
                        g.oom_kills ? std::to_string(*g.oom_kills) : "-", g.processes, partsText(g)));
  }
  if (shown < cg.size())
    out.add(fmt::format("  ... {} more cgroups (a taller terminal shows them)", cg.size() - shown));
}

void processSection(Lines& out, const TopData& d, const TopViewState& s, int rows) {
  std::vector<TopProcess> ps = d.processes;
  sortProcesses(ps, s.process_sort, s.process_reversed);
  const int fixed = 2 + 8 + 17 + 10 + 11 * 3 + 12 + 11 + 11;
  const std::size_t cg_w = static_cast<std::size_t>(std::clamp(s.cols - fixed, 12, 60));
  out.add(fmt::format("PROCESSES  {}  {}  (PSS: shared memory split between its users; - not read)", ps.size(),
                      sortLabel(toString(s.process_sort), s.process_reversed)),
          TopStyle::kSection);
  out.add(fmt::format("  {:>7} {} {} {} {:>10} {:>10} {:>11} {:>10} {:>10}", "PID", cell("COMM", 16), cell("ROLE", 9),
                      cell("CGROUP", cg_w), "RSS", "PSS", "PAGE TABLES", "PINNED", "LOCKED"),
          TopStyle::kHeader);
  int room = rows - 2;
  std::size_t shown = ps.size() <= static_cast<std::size_t>(room) ? ps.size() : static_cast<std::size_t>(room - 1);
  for (std::size_t i = 0; i < shown; ++i) {
    const TopProcess& p = ps[i];
    out.add(fmt::format("  {:>7} {} {} {} {:>10} {:>10} {:>11} {:>10} {:>10}", p.pid, cell(p.comm, 16), cell(p.role, 9),
                        tailCell(p.cgroup, cg_w), formatBytes(p.rss) + (p.rss_drift > 0 ? "~" : ""), bytesOr(p.pss),
                        formatBytes(p.page_tables), bytesOr(p.pinned), formatBytes(p.locked)));
  }
  if (shown < ps.size()) out.add(fmt::format("  ... {} more processes", ps.size() - shown));
}

void oomSection(Lines& out, const TopData& d, const TopViewState& s, int rows) {
  std::string title = fmt::format("OOM KILLS  {} kept of {} seen", d.ooms.size(), d.ooms_total);
  if (!d.ooms_note.empty()) title += "  (" + d.ooms_note + ")";
  out.add(title, TopStyle::kSection);
  if (d.ooms.empty()) {
    out.add("  none");
    return;
  }
  const int fixed = 2 + 24 + 8 + 17 + 11;
  const std::size_t cg_w = static_cast<std::size_t>(std::clamp((s.cols - fixed) / 2, 12, 60));
  out.add(fmt::format("  {} {:>7} {} {:>10} {} {}", cell("TIME", 23), "PID", cell("VICTIM", 16), "RSS",
                      cell("VICTIM'S CGROUP", cg_w), "OOM DOMAIN (the limit that was hit)"),
          TopStyle::kHeader);
  const std::size_t room = static_cast<std::size_t>(std::max(rows - 2, 1));
  const std::size_t shown = d.ooms.size() <= room ? d.ooms.size() : std::max<std::size_t>(room - 1, 1);
  for (std::size_t i = 0; i < shown; ++i) {
    const TopOom& o = d.ooms[i];
    std::string domain = o.domain == o.victim_cgroup && !o.domain.empty() ? "its own" : o.domain;
    if (o.domain_usage || o.domain_limit)
      domain += fmt::format(" at {} of {}", bytesOr(o.domain_usage, "?"), bytesOr(o.domain_limit, "?"));
    out.add(fmt::format("  {} {:>7} {} {:>10} {} {}", cell(formatUtcMs(o.wall_time_ns / 1'000'000), 23),
                        o.victim_pid > 0 ? std::to_string(o.victim_pid) : "?", cell(o.victim_comm, 16),
                        bytesOr(o.victim_rss), tailCell(o.victim_cgroup, cg_w), domain));
  }
  if (shown < d.ooms.size()) out.add(fmt::format("  ... {} older kills", d.ooms.size() - shown));
}

// The longest that fits: a wide terminal gets the words, a narrow one the letters.
std::string keysLine(const TopViewState& s) {
  static const std::array<const char*, 3> kVariants = {
      "cgroups by: u usage  r headroom  i invisible  n name | processes by: p PSS  t page tables  l pinned | "
      "again: reverse | space pause | ? help | q quit",
      "u usage r headroom i invisible n name | p PSS t ptables l pinned | space pause ? help q quit",
      "u r i n | p t l sort  spc pause  ? help  q quit",
  };
  for (const char* v : kVariants) {
    if (static_cast<int>(std::string_view(v).size()) <= s.cols) return v;
  }
  return "q quit ? help";
}

const std::vector<std::string>& helpText() {
  static const std::vector<std::string> kHelp = {
      "HELP  (? or h again, or Esc, closes this)",
      "",
      "  u   cgroups by usage, largest first",
      "  r   cgroups by headroom (room under the tightest bound), least first; no bound last",
      "  i   cgroups by invisible memory (page tables, slab, kernel stacks, sockets, unmapped shmem)",
      "  n   cgroups by name",
      "  p   processes by PSS (RSS where PSS was not read)",
      "  t   processes by page tables",
      "  l   processes by pinned memory (CUDA host allocations), then locked",
      "      the key of the order in use reverses it",
      "  space   pause: the figures stay as they are until space again",
      "  Ctrl-L  draw the screen again",
      "  q   quit (Ctrl-C too)",
      "",
      "  Sizes are binary (KiB, MiB, GiB); ~ marks an estimate; - a figure not known.",
      "  HEADROOM: what the cgroup can still take before its tightest bound (its own limit, an",
      "  ancestor's, or the machine's available memory).",
      "  OOM IN: the time to OOM at the growth of what cannot be reclaimed (a steady trend only);",
      "  ! while a warning is in force (docs/warnings.md).",
  };
  return kHelp;
}

}  // namespace

std::vector<TopLine> renderTop(const TopData& d, const TopViewState& s) {
  Lines out{{}, s.cols};
  const int rows = std::max(s.rows, 1);
  constexpr int kMinRows = 14;
  constexpr int kMinCols = 60;
  out.add(titleLine(d, s), TopStyle::kTitle);
  if (s.rows < kMinRows || s.cols < kMinCols) {
    // Too small for the sections: the largest cgroups, one short line each.
    out.add(fmt::format("terminal {}x{}: {}x{} shows every section", s.cols, s.rows, kMinCols, kMinRows),
            TopStyle::kWarning);
    if (!s.error.empty()) out.add("! " + s.error, TopStyle::kWarning);
    std::vector<TopCgroup> cg = d.cgroups;
    sortCgroups(cg, s.cgroup_sort, s.cgroup_reversed);
    for (const TopCgroup& g : cg) {
      if (static_cast<int>(out.lines.size()) >= rows - 1) break;
      std::string figures = fmt::format(" {} of {}", formatBytes(g.usage), bytesOr(g.limit, "none"));
      int path_w = std::max(s.cols - static_cast<int>(figures.size()), 4);
      out.add(tailCell(g.path, static_cast<std::size_t>(path_w)) + figures);
    }
  } else {
    out.add(machineLine(d.machine));
    out.add(budgetLine(d));
    warningLines(out, d, 3);
    if (!s.error.empty()) out.add("! " + s.error + " (the figures shown are older)", TopStyle::kWarning);
    if (!s.log.empty()) out.add("log: " + printableText(s.log), TopStyle::kWarning);
    if (s.help) {
      out.add("");
      for (const std::string& h : helpText()) out.add(h);
    } else {
      int avail = rows - static_cast<int>(out.lines.size()) - 1;  // the keys' line
      int oom_rows = d.ooms.empty() ? 2 : 2 + static_cast<int>(std::min<std::size_t>(d.ooms.size(), 5));
      // Blank lines before each of the three sections.
      int rest = avail - oom_rows - 3;
      int cg_want = 2 + std::max<int>(1, static_cast<int>(d.cgroups.size()));
      int proc_want = 2 + std::max<int>(1, static_cast<int>(d.processes.size()));
      int cg_rows = std::min(cg_want, std::max(3, rest - std::min(proc_want, rest / 2)));
      int proc_rows = std::min(proc_want, std::max(3, rest - cg_rows));
      if (cg_rows + proc_rows > rest) {
        // Too short for all three at their least: the OOM kills keep their title and one line.
        oom_rows = 2;
        proc_rows = std::max(3, avail - oom_rows - 3 - cg_rows);
      } else {
        oom_rows = avail - 3 - cg_rows - proc_rows;  // what the others leave, for older kills
      }
      out.add("");
      cgroupSection(out, d, s, cg_rows);
      out.add("");
      processSection(out, d, s, proc_rows);
      out.add("");
      oomSection(out, d, s, oom_rows);
    }
  }
  // Exactly `rows` lines, the keys on the last.
  if (static_cast<int>(out.lines.size()) > rows - 1) out.lines.resize(static_cast<std::size_t>(rows - 1));
  while (static_cast<int>(out.lines.size()) < rows - 1) out.add("");
  out.add(keysLine(s), TopStyle::kKeys);
  return std::move(out.lines);
}

}  // namespace headroom
