// One tick's controller inputs from a snapshot (pure): the prover's bounds, its usage, the
// neighbours under each bound, and the prover cgroup's invisible overhead.
#include <fmt/format.h>

#include "headroom/controller/controller.h"

namespace headroom {
namespace {

// What the kernel charges for one process: its PSS (RSS without smaps), its share of the
// cgroup's kernel memory (page tables included), and pinned pages that sit outside its RSS.
std::uint64_t chargeOf(const ProcessSnapshot& p) {
  const ProcessSample& s = p.sample;
  std::uint64_t c = s.smaps ? s.smaps->pss : s.status.vm_rss;
  c += p.attribution.overhead_share;
  if (p.attribution.pinned && p.attribution.pinned->residency == PinnedOverlay::Residency::kOutsideRss)
    c += p.attribution.pinned->live_bytes;
  return c;
}

}  // namespace

Result<BudgetInputs> budgetInputs(const Snapshot& snap, const ProverScope& scope) {
  std::string path = normaliseCgroupPath(scope.cgroup);
  const CgroupSnapshot* cg = snap.findCgroup(path);
  if (cg == nullptr)
    return unexpected(
        notFound(fmt::format("the prover's cgroup {} is not in the sample (not watched, or gone)", path)));
  BudgetInputs in;
  in.time_ns = snap.monotonic_time_ns;
  in.cgroup = path;
  for (std::size_t i : cg->processes) {
    const ProcessSnapshot& p = snap.processes[i];
    if (p.role == Role::kSelf) continue;
    bool prover = scope.pids ? scope.pids->count(p.sample.pid) > 0 : p.role == Role::kProver;
    if (!prover) continue;
    in.prover_usage += chargeOf(p);
    ++in.prover_processes;
  }
  in.overhead = cg->attribution.invisibleBytes();
  auto neighbours = [&](std::uint64_t usage, std::uint64_t reclaimable) {
    std::uint64_t held = usage > reclaimable ? usage - reclaimable : 0;
    return held > in.prover_usage ? held - in.prover_usage : 0;
  };
  for (const Bound& b : cg->bounds) {
    BudgetBound bb;
    bb.name = b.name;
    bb.kind = b.name == "host" ? "MemAvailable" : "limit";
    bb.limit = b.limit;
    bb.usage = b.usage;
    bb.reclaimable = b.reclaimable;
    bb.neighbours = neighbours(b.usage, b.reclaimable);
    in.bounds.push_back(std::move(bb));
  }
  // v2 memory.high throttles before the limit: a bound the prover feels first.
  if (cg->memory.high && (!cg->memory.limit || *cg->memory.high < *cg->memory.limit)) {
    BudgetBound bb{path, "memory.high", *cg->memory.high, cg->memory.usage, reclaimableBytes(cg->memory), 0};
    bb.neighbours = neighbours(bb.usage, bb.reclaimable);
    // Own bounds first: rebuilt rather than inserted at the front.
    std::vector<BudgetBound> bounds;
    bounds.reserve(in.bounds.size() + 1);
    bounds.push_back(std::move(bb));
    for (BudgetBound& b : in.bounds) bounds.push_back(std::move(b));
    in.bounds = std::move(bounds);
  }
  return in;
}

}  // namespace headroom
