#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "headroom/model/snapshot.h"

namespace headroom {

const CgroupSnapshot* Snapshot::findCgroup(std::string_view path) const {
  for (const auto& c : cgroups) {
    if (c.memory.path == path) return &c;
  }
  return nullptr;
}

const ProcessSnapshot* Snapshot::findProcess(pid_t pid) const {
  if (columns && columns->pid_order && columns->pids.size() == processes.size() &&
      columns->cgroup_count == cgroups.size()) {
    auto it = std::lower_bound(columns->pids.begin(), columns->pids.end(), pid);
    if (it == columns->pids.end() || *it != pid) return nullptr;
    return &processes[static_cast<std::size_t>(it - columns->pids.begin())];
  }
  for (const auto& p : processes) {
    if (p.sample.pid == pid) return &p;
  }
  return nullptr;
}

std::shared_ptr<const Snapshot::ProcessColumns> columnsOf(const Snapshot& snap) {
  if (snap.columns && snap.columns->pids.size() == snap.processes.size() &&
      snap.columns->cgroup_count == snap.cgroups.size())
    return snap.columns;
  std::unordered_map<std::string_view, std::uint32_t> cgroup_at;
  for (std::size_t ci = 0; ci < snap.cgroups.size(); ++ci)
    cgroup_at.emplace(snap.cgroups[ci].memory.path, static_cast<std::uint32_t>(ci));
  auto c = std::make_shared<Snapshot::ProcessColumns>();
  for (const ProcessSnapshot& p : snap.processes) {
    c->pids.push_back(p.sample.pid);
    c->sizes.push_back(p.attribution.pss.value_or(p.attribution.rss));
    c->rss.push_back(p.attribution.rss);
    c->roles.push_back(p.role);
    auto it = cgroup_at.find(p.cgroup.str());
    c->cgroup.push_back(it == cgroup_at.end() ? Snapshot::ProcessColumns::kNoCgroup : it->second);
  }
  c->cgroup_count = snap.cgroups.size();
  c->pid_order = std::is_sorted(c->pids.begin(), c->pids.end());
  return c;
}

std::uint64_t reclaimableBytes(const CgroupMemory& cg) {
  const StatMap& st = cg.stat;
  // v1's usage is hierarchical, and so are its total_* keys; v2's memory.stat is hierarchical.
  bool v1 = cg.version == 1;
  std::uint64_t lru =
      st.getOr(v1 ? "total_inactive_file" : "inactive_file") + st.getOr(v1 ? "total_active_file" : "active_file");
  std::uint64_t busy = st.getOr(v1 ? "total_dirty" : "file_dirty") +
                       st.getOr(v1 ? "total_writeback" : "file_writeback") +
                       st.getOr(v1 ? "total_mapped_file" : "file_mapped");
  return lru > busy ? lru - busy : 0;
}

VictimPlace placeVictim(const OomVictim& v, const Snapshot* snap, const RoleMatcher& roles) {
  pid_t tgid = v.process();
  if (snap != nullptr) {
    // Labelled like its process series (the watched cgroup it is attributed to), so that
    // PromQL can join the two.
    if (const ProcessSnapshot* p = snap->findProcess(tgid); p != nullptr && p->sample.comm == v.comm)
      return {p->cgroup, p->role, p};
  }
  // Normalised like the snapshot's paths, so that its series join the cgroup's.
  return {v.cgroup.empty() ? std::string() : normaliseCgroupPath(v.cgroup), roles.match(tgid, 0, v.comm, "", v.cgroup),
          nullptr};
}

std::vector<pid_t> processesToSumExactly(const Snapshot& snap, const std::function<bool(const Bound&)>& near,
                                         std::size_t max) {
  const auto columns = columnsOf(snap);
  const Snapshot::ProcessColumns& col = *columns;
  std::vector<std::pair<int, std::size_t>> chosen;  // (0: prover, 1: near a bound; index)
  for (std::size_t i = 0; i < col.roles.size(); ++i) {
    if (col.roles[i] == Role::kProver) chosen.emplace_back(0, i);
  }
  for (const CgroupSnapshot& c : snap.cgroups) {
    if (std::none_of(c.bounds.begin(), c.bounds.end(), [&](const Bound& b) { return b.name != "host" && near(b); }))
      continue;
    for (std::size_t i : c.processes) {
      if (col.roles[i] != Role::kProver) chosen.emplace_back(1, i);
    }
  }
  // Each group largest first by VmRSS (the RSS column).
  std::stable_sort(chosen.begin(), chosen.end(), [&](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : col.rss[a.second] > col.rss[b.second];
  });
  std::vector<pid_t> out;
  std::unordered_set<pid_t> seen;  // a process is under each of its cgroup's ancestors too
  for (const auto& [group, i] : chosen) {
    if (out.size() == max) break;
    if (seen.insert(col.pids[i]).second) out.push_back(col.pids[i]);
  }
  return out;
}

}  // namespace headroom
