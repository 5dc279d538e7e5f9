#include "headroom/model/oom_counter.h"

#include <algorithm>
#include <set>

namespace headroom {

std::optional<std::uint64_t> localOomKills(const CgroupMemory& cg) {
  if (cg.version == 2) {
    if (auto v = cg.events_local.get("oom_kill")) return v;
    return cg.events.get("oom_kill");  // before 5.7: no memory.events.local
  }
  return cg.oom_kills;
}

namespace {

// A kill whose victim has not left /proc yet (it is still exiting when the counter is read) is
// looked for this many samples more before it is told without a victim.
constexpr int kDeferSamples = 2;

// The victims of `kills` kills: of the processes given, the largest first, one per kill.
void inferVictims(OomEvent& e, std::vector<const ProcessSnapshot*> gone, std::uint64_t kills,
                  const std::string& cgroup) {
  std::sort(gone.begin(), gone.end(),
            [](const ProcessSnapshot* a, const ProcessSnapshot* b) { return a->attribution.rss > b->attribution.rss; });
  for (std::size_t i = 0; i < gone.size() && i < kills; ++i) {
    const ProcessSnapshot& p = *gone[i];
    OomVictim v;
    v.pid = p.sample.pid;
    v.tgid = p.sample.pid;
    v.comm = p.sample.comm;
    v.cgroup = cgroup;
    v.inferred = true;
    v.anon_rss = p.attribution.rss_anon;
    v.file_rss = p.attribution.rss_file;
    v.shmem_rss = p.attribution.rss_shmem;
    v.pgtables = p.attribution.page_tables;
    v.swap = p.attribution.swap;
    e.victims.push_back(std::move(v));
  }
}

// Whether `p` (of an earlier sample) is no longer in `now`: gone, or its pid another process's.
bool goneFrom(const ProcessSnapshot& p, const Snapshot& now) {
  const ProcessSnapshot* still = now.findProcess(p.sample.pid);
  return still == nullptr || still->sample.start_time_ticks != p.sample.start_time_ticks;
}

}  // namespace

std::vector<OomEvent> OomCounterWatch::update(const Snapshot* previous, const Snapshot& now) {
  std::vector<OomEvent> out;
  std::set<pid_t> named;  // victims named this time: a process is one kill's victim, not two
  // Kills of earlier samples whose victims were still there: gone now?
  for (auto it = deferred_.begin(); it != deferred_.end();) {
    std::vector<const ProcessSnapshot*> gone;
    for (const ProcessSnapshot& p : it->candidates) {
      if (goneFrom(p, now) && named.count(p.sample.pid) == 0) gone.push_back(&p);
    }
    // Carried processes cannot have gone: such a sample does not count against the wait.
    if (!gone.empty() || (!now.stats.processes_carried && --it->samples_left <= 0)) {
      inferVictims(it->event, gone, it->event.counted_kills, it->event.counter_cgroup);
      for (const OomVictim& v : it->event.victims) named.insert(v.pid);
      out.push_back(std::move(it->event));
      it = deferred_.erase(it);
    } else {
      ++it;
    }
  }
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
    // Where the kill was; which limit was hit (this cgroup's or an ancestor's) the counter does
    // not say, and nothing is guessed: the OOM domain stays unknown.
    e.counter_cgroup = c.memory.path;
    e.counted_kills = kills;
    if (previous != nullptr) {
      // Who went: the cgroup's processes of the last sample that this one no longer has
      // (pid and start time, so that a reused pid is not taken for the one that died).
      std::vector<const ProcessSnapshot*> gone;
      std::vector<ProcessSnapshot> still;
      for (const ProcessSnapshot& p : previous->processes) {
        if (p.sample.memory_cgroup != c.memory.path || named.count(p.sample.pid) != 0) continue;
        if (goneFrom(p, now))
          gone.push_back(&p);
        else
          still.push_back(p);
      }
      if (gone.empty() && !still.empty()) {
        // The counter is read before the victim has left /proc: look again at the next samples.
        deferred_.push_back(Deferred{std::move(e), std::move(still), kDeferSamples});
        continue;
      }
      inferVictims(e, gone, kills, c.memory.path);
    }
    out.push_back(std::move(e));
  }
  last_ = std::move(seen);
  primed_ = true;
  return out;
}

void OomCounterWatch::prime(std::map<std::string, std::uint64_t> counts) {
  last_ = std::move(counts);
  primed_ = true;
}

}  // namespace headroom
