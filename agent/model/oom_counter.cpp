#include "headroom/model/oom_counter.h"

#include <algorithm>

namespace headroom {

std::optional<std::uint64_t> localOomKills(const CgroupMemory& cg) {
  if (cg.version == 2) {
    if (auto v = cg.events_local.get("oom_kill")) return v;
    return cg.events.get("oom_kill");  // before 5.7: no memory.events.local
  }
  return cg.oom_kills;
}

std::vector<OomEvent> OomCounterWatch::update(const Snapshot* previous, const Snapshot& now) {
  std::vector<OomEvent> out;
  std::map<std::string, std::uint64_t> seen;
  for (const CgroupSnapshot& c : now.cgroups) {
    auto count = localOomKills(c.memory);
    if (!count) continue;
    seen[c.memory.path] = *count;
    auto before = last_.find(c.memory.path);
    // A cgroup new to us starts from what it has counted; a count that fell is a cgroup
    // removed and made again under the same path.
    if (!primed_ || before == last_.end() || *count <= before->second) continue;
    const std::uint64_t kills = *count - before->second;

    OomEvent e;
    e.from_counter = true;
    e.wall_time_ns = now.wall_time_ns;
    e.monotonic_time_ns = now.monotonic_time_ns;  // seen at this sample; it happened after the last
    if (previous != nullptr) {
      // Who went: the cgroup's processes of the last sample that this one no longer has
      // (pid and start time, so that a reused pid is not taken for the one that died).
      std::vector<const ProcessSnapshot*> gone;
      for (const ProcessSnapshot& p : previous->processes) {
        if (p.sample.memory_cgroup != c.memory.path) continue;
        const ProcessSnapshot* still = now.findProcess(p.sample.pid);
        if (still != nullptr && still->sample.start_time_ticks == p.sample.start_time_ticks) continue;
        gone.push_back(&p);
      }
      std::sort(gone.begin(), gone.end(), [](const ProcessSnapshot* a, const ProcessSnapshot* b) {
        return a->attribution.rss > b->attribution.rss;
      });
      for (std::size_t i = 0; i < gone.size() && i < kills; ++i) {
        const ProcessSnapshot& p = *gone[i];
        OomVictim v;
        v.pid = p.sample.pid;
        v.tgid = p.sample.pid;
        v.comm = p.sample.comm;
        v.cgroup = c.memory.path;
        v.inferred = true;
        v.anon_rss = p.attribution.rss_anon;
        v.file_rss = p.attribution.rss_file;
        v.shmem_rss = p.attribution.rss_shmem;
        v.pgtables = p.attribution.page_tables;
        v.swap = p.attribution.swap;
        e.victims.push_back(std::move(v));
      }
    }
    // Where the kill was; which limit was hit (this cgroup's or an ancestor's) the counter does
    // not say, and nothing is guessed: the OOM domain stays unknown.
    e.counter_cgroup = c.memory.path;
    e.counted_kills = kills;
    out.push_back(std::move(e));
  }
  last_ = std::move(seen);
  primed_ = true;
  return out;
}

}  // namespace headroom
