// The lines of a global OOM's report: Mem-Info (the machine, its nodes, hugepages, swap, RAM)
// and the largest unreclaimable slab caches.
#include "headroom/sources/oom_report.h"
#include "headroom/sources/parse.h"
#include "headroom/util/numbers.h"
#include "oom_log_parts.h"

namespace headroom {
namespace oom_log_detail {
namespace {

// A figure of Mem-Info: "123kB" in bytes, or a bare number of pages.
std::optional<std::uint64_t> pagesOrKb(std::string_view v) {
  if (v.size() > 2 && (v.substr(v.size() - 2) == "kB" || v.substr(v.size() - 2) == "KB")) {
    auto n = parseU64(v.substr(0, v.size() - 2));
    if (!n) return std::nullopt;
    return *n * 1024;
  }
  auto n = parseU64(v);
  if (!n) return std::nullopt;
  return *n * kPage;
}

// "key:value key:value ..." (a key may end its token and its value start the next one:
// "shmem_thp: 0kB"); tokens that are not key:number are skipped ("all_unreclaimable? yes").
void colonPairs(std::string_view line, StatMap& out) {
  auto f = splitFields(line);
  for (std::size_t i = 0; i < f.size(); ++i) {
    std::string_view tok = f[i];
    std::string_view key, value;
    if (!tok.empty() && tok.back() == ':' && i + 1 < f.size()) {
      key = tok.substr(0, tok.size() - 1);
      value = f[++i];
    } else {
      auto colon = tok.find(':');
      if (colon == std::string_view::npos || colon == 0) continue;
      key = tok.substr(0, colon);
      value = tok.substr(colon + 1);
    }
    if (auto v = pagesOrKb(value)) out.set(key, *v);
  }
}

// "81 total pagecache pages" and the like: the number before `suffix`, in pages.
std::optional<std::uint64_t> pagesBefore(std::string_view line, std::string_view suffix) {
  if (line.size() <= suffix.size() || line.substr(line.size() - suffix.size()) != suffix) return std::nullopt;
  auto n = parseU64(trim(line.substr(0, line.size() - suffix.size())));
  if (!n) return std::nullopt;
  return *n * kPage;
}

// "Free swap  = 0kB"
std::optional<std::uint64_t> afterEquals(std::string_view line) {
  auto eq = line.find('=');
  if (eq == std::string_view::npos) return std::nullopt;
  return kbValue(trim(line.substr(eq + 1)));
}

}  // namespace

void parseMachineLine(std::string_view line, OomMachineState& m) {
  line = trim(line);
  if (line.empty() || line.rfind("lowmem_reserve[]", 0) == 0) return;
  if (line.rfind("Node ", 0) == 0) {
    auto f = splitFields(line);
    if (f.size() < 3) return;
    auto node = parseU64(f[1]);
    if (!node) return;
    std::string_view first = f[2];
    if (first.rfind("hugepages_total=", 0) == 0) {
      OomHugepages h;
      h.node = static_cast<int>(*node);
      for (std::size_t i = 2; i < f.size(); ++i) {
        auto eq = f[i].find('=');
        if (eq == std::string_view::npos) continue;
        std::string_view k = f[i].substr(0, eq), v = f[i].substr(eq + 1);
        if (k == "hugepages_size") {
          h.page_bytes = kbValue(v).value_or(0);
        } else if (auto n = parseU64(v)) {
          if (k == "hugepages_total") h.total = *n;
          if (k == "hugepages_free") h.free = *n;
          if (k == "hugepages_surp") h.surplus = *n;
        }
      }
      m.hugepages.push_back(h);
      return;
    }
    // The node's summary ("Node 0 active_anon:16kB ..."); a zone's line ("Node 0 DMA free:...")
    // and its free lists ("Node 0 DMA: 3*4kB ...") are not kept.
    if (first.find(':') == std::string_view::npos || first.back() == ':') return;
    StatMap node_stats;
    auto at = line.find(first);
    colonPairs(line.substr(at), node_stats);
    m.nodes.emplace_back(static_cast<int>(*node), std::move(node_stats));
    return;
  }
  if (auto v = pagesBefore(line, " total pagecache pages")) {
    m.pagecache_bytes = v;
  } else if (auto sc = pagesBefore(line, " pages in swap cache")) {
    m.swap_cache_bytes = sc;
  } else if (auto ram = pagesBefore(line, " pages RAM")) {
    m.ram_bytes = ram;
  } else if (auto res = pagesBefore(line, " pages reserved")) {
    m.reserved_bytes = res;
  } else if (line.rfind("Free swap", 0) == 0) {
    m.swap_free_bytes = afterEquals(line);
  } else if (line.rfind("Total swap", 0) == 0) {
    m.swap_total_bytes = afterEquals(line);
  } else if (line.find(" pages ") == std::string_view::npos) {
    colonPairs(line, m.counters);  // "active_anon:4 inactive_anon:737181 ..." in pages
  }
}

// "kmalloc-4k            123KB       456KB"
void parseSlabLine(std::string_view line, std::vector<OomSlabCache>& out) {
  auto f = splitFields(line);
  if (f.size() < 3 || f[0] == "Name") return;
  auto used = pagesOrKb(f[f.size() - 2]);
  auto total = pagesOrKb(f[f.size() - 1]);
  std::string_view u = f[f.size() - 2];
  if (!used || !total || u.size() < 2 || (u.substr(u.size() - 2) != "KB" && u.substr(u.size() - 2) != "kB")) return;
  std::string name;
  for (std::size_t i = 0; i + 2 < f.size(); ++i) {
    if (!name.empty()) name += ' ';
    name.append(f[i]);
  }
  out.push_back({std::move(name), *used, *total});
}

std::optional<std::uint64_t> kbValue(std::string_view v) {
  if (v.size() <= 2 || v.substr(v.size() - 2) != "kB") return std::nullopt;
  v.remove_suffix(2);
  auto n = parseU64(v);
  if (!n) return std::nullopt;
  return *n * 1024;
}

}  // namespace oom_log_detail

std::optional<std::uint64_t> OomMachineState::nodeSum(std::string_view key) const {
  std::optional<std::uint64_t> sum;
  for (const auto& [node, stats] : nodes) {
    if (auto v = stats.get(key)) sum = sum.value_or(0) + *v;
  }
  return sum;
}

}  // namespace headroom
