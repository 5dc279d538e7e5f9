// The processes summed by (cgroup, role, comm) for the exporter's per-process series, and the
// groups kept by name (the largest per role) or summed into "other". Private to agent/exporter.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_set>
#include <vector>

#include "headroom/model/roles.h"
#include "headroom/model/snapshot.h"

namespace headroom::exporter_detail {

// Processes with the same (cgroup, role, comm), summed. What only some members have (PSS, pinned
// or device bytes, activity) is counted by member: a member taken out again leaves the group as
// a sum made anew would be.
struct ProcessGroup {
  std::string cgroup;
  Role role = Role::kSystem;
  std::string process;
  std::uint64_t rss = 0, rss_anon = 0, rss_file = 0, rss_shmem = 0;
  std::uint64_t pss = 0;
  std::uint64_t page_tables = 0, swap = 0;
  std::uint64_t pinned = 0, pinned_peak = 0, device = 0, device_peak = 0;
  std::uint64_t minflt = 0, majflt = 0, mmap = 0, munmap = 0;
  std::size_t count = 0;
  std::size_t without_pss = 0, with_pinned = 0, with_device = 0, with_device_peak = 0, with_activity = 0;

  bool pssKnown() const { return without_pss == 0; }  // every member's (a partial sum would mislead)
  void add(const ProcessSnapshot& p) { take(p, true); }
  void remove(const ProcessSnapshot& p) { take(p, false); }

  void merge(const ProcessGroup& g) {
    rss += g.rss;
    rss_anon += g.rss_anon;
    rss_file += g.rss_file;
    rss_shmem += g.rss_shmem;
    pss += g.pss;
    page_tables += g.page_tables;
    swap += g.swap;
    pinned += g.pinned;
    pinned_peak += g.pinned_peak;
    device += g.device;
    device_peak += g.device_peak;
    minflt += g.minflt;
    majflt += g.majflt;
    mmap += g.mmap;
    munmap += g.munmap;
    count += g.count;
    without_pss += g.without_pss;
    with_pinned += g.with_pinned;
    with_device += g.with_device;
    with_device_peak += g.with_device_peak;
    with_activity += g.with_activity;
  }

 private:
  // The member's figures added (in) or taken out.
  void take(const ProcessSnapshot& p, bool in) {
    const auto put = [in](auto& field, auto v) { field = in ? field + v : field - v; };
    const ProcessAttribution& a = p.attribution;
    put(rss, a.rss);
    put(rss_anon, a.rss_anon);
    put(rss_file, a.rss_file);
    put(rss_shmem, a.rss_shmem);
    if (a.pss)
      put(pss, *a.pss);
    else
      put(without_pss, std::size_t{1});
    put(page_tables, a.page_tables);
    put(swap, a.swap);
    if (a.pinned) {
      put(with_pinned, std::size_t{1});
      put(pinned, a.pinned->live_bytes);
      put(pinned_peak, a.pinned->peak_bytes);
    }
    if (a.device_bytes) {
      put(with_device, std::size_t{1});
      put(device, *a.device_bytes);
    }
    if (a.device_peak_bytes) {
      put(with_device_peak, std::size_t{1});
      put(device_peak, *a.device_peak_bytes);
    }
    put(minflt, p.sample.minflt);
    put(majflt, p.sample.majflt);
    if (p.activity) {
      put(with_activity, std::size_t{1});
      put(mmap, p.activity->mmap_bytes);
      put(munmap, p.activity->munmap_bytes);
    }
    put(count, std::size_t{1});
  }
};

// Every process summed into its (cgroup, role, comm) group, kept from one update to the next.
// Between two walks a snapshot's processes are the last one's objects but for the few read
// again: only those move between the sums (a pointer compared per chunk of the list the two
// share, not every process's figures summed again); a walk, or other cgroups left out, sums them
// all anew.
class GroupSums {
 public:
  // Groups keyed "cgroup\0<role>comm": in the order of (cgroup, role, comm).
  using Groups = std::map<std::string, ProcessGroup>;

  // The sums of `snap`'s processes, the cgroups in `left_out_cgroups` apart.
  void update(const Snapshot& snap, const std::unordered_set<std::string_view>& left_out_cgroups);
  const Groups& shown() const { return groups_; }
  const Groups& leftOut() const { return left_out_; }

 private:
  Groups& into(const ProcessSnapshot& p);
  ProcessGroup& groupOf(const ProcessSnapshot& p);
  // One process into (in) or out of its group; a group left empty goes.
  void move(const ProcessSnapshot& p, bool in);
  void rebuild(const ProcessList& processes);

  bool valid_ = false;
  ProcessList list_;  // the processes the sums are of, shared with their snapshot
  std::set<std::string, std::less<>> left_out_cgroups_;
  Groups groups_, left_out_;
  std::string key_;
};

// (cgroup, role, process): views of the groups' strings, which outlive the picking.
using GroupKey = std::tuple<std::string_view, Role, std::string_view>;

struct ProcessGroups {
  std::vector<ProcessGroup> shown;     // by RSS, largest first
  std::vector<ProcessGroup> left_out;  // of cgroups max_cgroups left out: counted, not shown
};

// Per role, the `top` largest groups by RSS (across cgroups) keep their name; the rest of the
// role is summed into process="other" of its cgroup, so every byte stays in some series.
ProcessGroups pickGroups(const GroupSums& sums, std::size_t top);

}  // namespace headroom::exporter_detail
