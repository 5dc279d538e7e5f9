#include "process_groups.h"

#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>

#include "families.h"

namespace headroom::exporter_detail {

void GroupSums::update(const Snapshot& snap, const std::unordered_set<std::string_view>& left_out_cgroups) {
  std::set<std::string, std::less<>> left_out(left_out_cgroups.begin(), left_out_cgroups.end());
  const ProcessList& now = snap.processes;
  std::optional<std::vector<std::size_t>> changed;
  if (valid_ && left_out == left_out_cgroups_)
    changed = now.changedFrom(list_, now.size() / 4 + 16);  // most changed: summed anew
  if (changed) {
    for (std::size_t i : *changed) {
      move(std::as_const(list_)[i], false);
      move(now[i], true);
    }
  } else {
    left_out_cgroups_ = std::move(left_out);
    rebuild(now);
  }
  list_ = now;  // the processes the sums are of, shared: no copy of any
  valid_ = true;
}

GroupSums::Groups& GroupSums::into(const ProcessSnapshot& p) {
  return left_out_cgroups_.contains(std::string_view(p.cgroup)) ? left_out_ : groups_;
}

ProcessGroup& GroupSums::groupOf(const ProcessSnapshot& p) {
  key_.assign(p.cgroup.str());
  key_ += '\0';
  key_ += static_cast<char>('0' + static_cast<int>(p.role));
  key_ += p.sample.comm;
  auto [it, inserted] = into(p).try_emplace(key_);
  if (inserted) it->second = ProcessGroup{.cgroup = p.cgroup, .role = p.role, .process = p.sample.comm};
  return it->second;
}

void GroupSums::move(const ProcessSnapshot& p, bool in) {
  ProcessGroup& g = groupOf(p);
  if (in) {
    g.add(p);
  } else {
    g.remove(p);
    if (g.count == 0) into(p).erase(key_);
  }
}

void GroupSums::rebuild(const ProcessList& processes) {
  groups_.clear();
  left_out_.clear();
  // A cgroup's processes, and a program's, mostly come in a row: the previous process's group
  // is tried first (the snapshot shares one path among a cgroup's processes: no byte compared).
  const ProcessSnapshot* previous = nullptr;
  ProcessGroup* group = nullptr;
  for (const ProcessSnapshot& p : processes) {
    if (previous == nullptr || !p.cgroup.sharesWith(previous->cgroup) || p.role != previous->role ||
        p.sample.comm != previous->sample.comm)
      group = &groupOf(p);
    group->add(p);
    previous = &p;
  }
}

ProcessGroups pickGroups(const GroupSums& sums, std::size_t top) {
  const auto by_rss = [](const ProcessGroup* a, const ProcessGroup* b) { return a->rss > b->rss; };
  std::map<Role, std::vector<const ProcessGroup*>> by_role;
  for (const auto& [key, g] : sums.shown()) by_role[g.role].push_back(&g);
  std::map<GroupKey, ProcessGroup> kept;
  for (auto& [role, list] : by_role) {
    std::stable_sort(list.begin(), list.end(), by_rss);
    for (std::size_t i = 0; i < list.size(); ++i) {
      const ProcessGroup& g = *list[i];
      const std::string_view process = i < top ? std::string_view(g.process) : kOther;
      auto [it, inserted] = kept.try_emplace(GroupKey{g.cgroup, g.role, process});
      if (inserted) it->second = ProcessGroup{.cgroup = g.cgroup, .role = g.role, .process = std::string(process)};
      it->second.merge(g);
    }
  }
  std::vector<const ProcessGroup*> order;
  order.reserve(kept.size());
  for (const auto& [key, g] : kept) order.push_back(&g);
  std::stable_sort(order.begin(), order.end(), by_rss);
  ProcessGroups out;
  out.shown.reserve(order.size());
  for (const ProcessGroup* g : order) out.shown.push_back(*g);
  for (const auto& [key, g] : sums.leftOut()) out.left_out.push_back(g);
  return out;
}

}  // namespace headroom::exporter_detail
