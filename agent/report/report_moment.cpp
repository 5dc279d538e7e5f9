// The report's first section: the moment of the kill as the kernel saw it (the record's
// at_kill), in a sentence and a table; and the parts table every breakdown shares.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>

#include "headroom/util/text.h"
#include "headroom/util/units.h"
#include "report_parts.h"

namespace headroom::report_detail {

// The parts of an attribution as a table, each with its share of `usage`.
Table partsTable(const json& att, std::optional<std::uint64_t> usage) {
  Table t{{"PART", "SIDE", "BYTES", "SHARE", "ACCURACY", "SOURCE"}, "llrrll", {}, {}};
  for (const json& p : arrayAt(att, "parts")) {
    if (!p.is_object()) continue;
    std::string kind = textAt(p, "kind");
    std::optional<bool> visible;
    if (const json* v = field(p, "visible"); v && v->is_boolean()) visible = v->get<bool>();
    if (!visible) visible = kindVisible(kind);
    auto b = bytesAt(p, "bytes");
    std::string acc = textAt(p, "accuracy");
    std::string share = "-";
    if (b && usage && *usage > 0)
      share = fmt::format("{:.1f}%", 100.0 * static_cast<double>(*b) / static_cast<double>(*usage));
    t.rows.push_back({kind.empty() ? "?" : kind, visible ? (*visible ? "visible" : "invisible") : "?",
                      bytesText(b) + (acc == "estimated" ? "~" : ""), share, acc.empty() ? "-" : acc,
                      textAt(p, "source")});
  }
  return t;
}

void addNotes(Section& s, const json& att) {
  for (const json& n : arrayAt(att, "notes")) {
    if (n.is_string()) s.blocks.emplace_back("note: " + printableText(n.get_ref<const std::string&>()));
  }
}

namespace {

// How a part is said in a sentence.
std::string partWords(const std::string& kind) {
  static const std::map<std::string, std::string> kWords = {
      {"anon", "anon"},
      {"file", "page cache"},
      {"shmem_mapped", "mapped shmem"},
      {"shmem_unmapped", "shmem nobody maps"},
      {"pagetables", "page tables"},
      {"sec_pagetables", "secondary page tables"},
      {"slab_reclaimable", "reclaimable slab"},
      {"slab_unreclaimable", "unreclaimable slab"},
      {"kernel_stack", "kernel stacks"},
      {"sock", "socket buffers"},
      {"percpu", "per-CPU"},
      {"zswap", "zswap"},
      {"kernel_other", "other kernel memory"},
  };
  auto it = kWords.find(kind);
  return it == kWords.end() ? kind : it->second;
}

// "the prover believed it used X; the kernel charged Y to D: anon A, page tables P, ..." (the
// invisible parts largest first, after the visible).
std::string momentSentence(const json& rec, const json& at) {
  std::vector<std::pair<std::uint64_t, std::string>> visible, invisible;
  for (const json& p : arrayAt(at, "parts")) {
    if (!p.is_object()) continue;
    auto b = bytesAt(p, "bytes");
    std::string kind = textAt(p, "kind");
    if (!b || *b == 0 || kind.empty()) continue;
    bool vis = flagAt(p, "visible") || kindVisible(kind).value_or(false);
    (vis ? visible : invisible).emplace_back(*b, fmt::format("{} {}", partWords(kind), formatBytes(*b)));
  }
  auto bySize = [](const auto& a, const auto& b) { return a.first > b.first; };
  std::stable_sort(visible.begin(), visible.end(), bySize);
  std::stable_sort(invisible.begin(), invisible.end(), bySize);
  std::string s;
  if (auto self = bytesAt(rec, "self_reported_bytes"))
    s = fmt::format("the prover believed it used {}; ", formatBytes(*self));
  const std::string cgroup = textAt(at, "cgroup");
  auto usage = bytesAt(at, "usage_bytes");
  const std::string source = textAt(at, "source");
  if (source == "kernel report (Mem-Info)") {
    s += fmt::format("the machine had {} in use", bytesText(usage, "an amount not known"));
  } else if (source == "files read after the kill") {
    auto after = numberAt(at, "read_after_seconds");
    s += fmt::format("{} the kill {} held {}",
                     after ? fmt::format("{:.1f} ms after", *after * 1e3) : std::string("just after"),
                     cgroup.empty() ? std::string("the domain") : cgroup, bytesText(usage, "an amount not known"));
  } else {
    s += fmt::format("the kernel charged {}{}", bytesText(usage, "an amount not known"),
                     cgroup.empty() ? "" : " to " + cgroup);
  }
  if (auto lim = bytesAt(at, "limit_bytes")) s += fmt::format(" (limit {})", formatBytes(*lim));
  std::vector<std::string> words;
  words.reserve(invisible.size() + visible.size());
  for (auto& v : invisible) words.push_back(std::move(v.second));
  for (auto& v : visible) words.push_back(std::move(v.second));
  if (!invisible.empty())
    s += fmt::format(": {} invisible to any process — ",
                     formatBytes(static_cast<std::uint64_t>(numberAt(at, "invisible_bytes").value_or(0))));
  else if (!words.empty())
    s += ": ";
  std::string list;
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (i == invisible.size() && i > 0)
      list += "; besides ";
    else if (i > 0)
      list += ", ";
    list += words[i];
  }
  return s + list;
}

}  // namespace

Section momentSection(const json& rec) {
  Section s{"AT THE KILL", "", {}};
  const json* atp = field(rec, "at_kill");
  if (atp == nullptr || !atp->is_object()) {
    s.subtitle = "the OOM domain as the kernel saw it";
    s.blocks.emplace_back(std::string(
        "not known: the record has no picture of the moment (no kernel report, and no files read at the kill)"));
    return s;
  }
  const json& at = *atp;
  std::string source = textAt(at, "source");
  if (source == "files read after the kill") {
    auto after = numberAt(at, "read_after_seconds");
    s.subtitle = fmt::format("the OOM domain's files, read {} after the kill; derived, not the kernel's own report",
                             !after         ? std::string("just")
                             : *after < 1.0 ? fmt::format("{:.1f} ms", *after * 1e3)
                                            : secondsText(*after));
  } else if (source == "kernel report (Mem-Info)") {
    s.subtitle = "the whole machine, from the kernel's OOM report (Mem-Info)";
  } else {
    s.subtitle = "the OOM domain, from the kernel's own OOM report";
  }
  s.blocks.emplace_back(momentSentence(rec, at));
  auto usage = bytesAt(at, "usage_bytes");
  s.blocks.emplace_back(partsTable(at, usage));
  auto unattributed = intAt(at, "unattributed_bytes");
  const bool machine = source == "kernel report (Mem-Info)";
  if (machine)
    s.blocks.emplace_back(std::string("kernel_other is the rest of the memory in use: Mem-Info does not list it"));
  else if (flagAt(at, "adds_up"))
    s.blocks.emplace_back(fmt::format("the parts add up to the charge within 1% (unattributed {})",
                                      unattributed ? formatSignedBytes(*unattributed) : std::string("0")));
  else if (unattributed)
    s.blocks.emplace_back(fmt::format("the parts do not add up: {} unattributed", formatSignedBytes(*unattributed)));
  if (auto fc = intAt(at, "failcnt")) s.blocks.emplace_back(fmt::format("the limit was hit {} times", *fc));
  if (auto peak = bytesAt(at, "peak_bytes")) s.blocks.emplace_back(fmt::format("peak {}", formatBytes(*peak)));
  if (source == "kernel report (Mem-Info)") {
    s.blocks.emplace_back(fmt::format(
        "RAM {}, free {}{}", bytesText(bytesAt(at, "ram_bytes"), "not known"),
        bytesText(bytesAt(at, "free_bytes"), "not known"),
        bytesAt(at, "hugetlb_bytes") ? fmt::format(", hugetlb pools {}", formatBytes(*bytesAt(at, "hugetlb_bytes")))
                                     : std::string()));
    Table slab{{"UNRECLAIMABLE SLAB CACHE", "USED", "TOTAL"}, "lrr", {}, {}};
    for (const json& c : arrayAt(at, "unreclaimable_slab")) {
      if (c.is_object())
        slab.rows.push_back(
            {textAt(c, "name"), bytesText(bytesAt(c, "used_bytes")), bytesText(bytesAt(c, "total_bytes"))});
    }
    if (!slab.rows.empty()) s.blocks.emplace_back(std::move(slab));
    Table largest{{"LARGEST CGROUPS AT THE LAST SAMPLE", "USAGE", "INVISIBLE"}, "lrr", {}, {}};
    for (const json& c : arrayAt(rec, "largest_cgroups")) {
      if (c.is_object())
        largest.rows.push_back(
            {textAt(c, "path"), bytesText(bytesAt(c, "usage_bytes")), bytesText(bytesAt(c, "invisible_bytes"))});
    }
    if (!largest.rows.empty()) s.blocks.emplace_back(std::move(largest));
  }
  addNotes(s, at);
  return s;
}

}  // namespace headroom::report_detail
