#include "headroom/controller/kill_evidence.h"

#include <fmt/format.h>

#include <algorithm>

#include "headroom/model/at_kill.h"

namespace headroom {

ChargedFigures& ChargedFigures::operator+=(const ChargedFigures& o) {
  charge += o.charge;
  pinned += o.pinned;
  page_tables += o.page_tables;
  kernel += o.kernel;
  processes += o.processes;
  return *this;
}

ChargedFigures chargedFigures(const ProcessSnapshot& p) {
  const ProcStatus& s = p.sample.status;
  const ProcessAttribution& a = p.attribution;
  const std::uint64_t pinned = a.pinned ? a.pinned->live_bytes : 0;
  ChargedFigures f;
  f.charge = s.vm_rss + s.vm_pte;
  if (a.pinned && a.pinned->residency == PinnedOverlay::Residency::kOutsideRss) f.charge += pinned;
  f.pinned = std::max(s.vm_lck, pinned);
  f.page_tables = s.vm_pte;
  // The overhead share holds the process's own page tables: counted once, above.
  f.kernel = a.overhead_share > s.vm_pte ? a.overhead_share - s.vm_pte : 0;
  f.processes = 1;
  return f;
}

KillEvidence killEvidence(std::span<const KillVictim> victims, const OomEvent* event, std::string_view prover_cgroup,
                          std::int64_t time_ns, std::string what) {
  KillEvidence k;
  k.time_ns = time_ns;
  k.prover_victim = std::any_of(victims.begin(), victims.end(), [](const KillVictim& v) { return v.prover; });
  for (const KillVictim& v : victims) {
    // The prover's own kill is the evidence; a kill beside it counts only when none of its
    // processes was a victim.
    if (k.prover_victim && !v.prover) continue;
    const std::optional<std::uint64_t> charge = v.kernel != nullptr ? v.kernel->charge() : std::nullopt;
    k.charge += charge.value_or(v.sampled.charge);
    k.page_tables += charge && v.kernel->pgtables ? *v.kernel->pgtables : v.sampled.page_tables;
    k.pinned += v.sampled.pinned;
    k.kernel += v.sampled.kernel;
  }
  // The kill's own numbers, when the domain is the prover's: its charge and overhead at the
  // moment, not a sample seconds old.
  if (event != nullptr) {
    if (auto b = breakdownAtKill(*event)) {
      if (auto o = overheadAtKill(*b, prover_cgroup)) {
        k.charge = std::max(k.charge, o->charge);
        // Where the report has no page tables (before 5.11), the victims' own figures stand.
        k.page_tables = o->exact && o->page_tables_known ? o->page_tables : std::max(k.page_tables, o->page_tables);
        k.kernel = o->exact ? o->kernel : std::max(k.kernel, o->kernel);
        what += fmt::format("; overhead at the kill from {}", o->source);
      }
    }
  }
  k.what = std::move(what);
  return k;
}

}  // namespace headroom
