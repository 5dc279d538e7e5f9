// The OOM kills a journal holds, by what names a kill for good: its boot and the kernel log
// sequence number of its report; where a record has none (BPF's word alone, an older agent's
// record), its victims and its time on the kernel's clock; a record completed from an incident in
// flight, by that incident's key. What a kill found after the fact is looked up in, so that no
// kill is journaled twice.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "headroom/sensors/oom_event.h"

namespace headroom {

class KnownKills {
 public:
  // Two sightings of one kill on the kernel's clock are at most this far apart (the joiner's
  // window for its two sources).
  static constexpr std::int64_t kSameKillNs = 5'000'000'000;

  // A journal record (its "host"."boot_id" and "event"); records of other kinds are ignored.
  void add(const nlohmann::json& record);
  // `e` of the boot `boot_id`: the same kernel report, or a victim of it killed within
  // kSameKillNs (in the same boot, or in a record that does not say its boot).
  bool holds(const OomEvent& e, const std::string& boot_id) const;
  // A record made from an incident in flight under `key` (its "key").
  bool holdsKey(const std::string& key) const { return keys_.count(key) != 0; }
  std::size_t size() const { return kills_.size(); }
  // A record's "host"."boot_id" ("" when it has none, or not a string).
  static std::string bootIdOf(const nlohmann::json& record);

 private:
  struct Kill {
    std::string boot_id;  // "" when the record does not say
    std::optional<std::uint64_t> kmsg_seq;
    std::int64_t monotonic_ns = 0;
    std::vector<pid_t> victims;  // tgids (pids where no tgid was known)
  };
  std::vector<Kill> kills_;
  std::set<std::pair<std::string, std::uint64_t>> seqs_;
  std::set<std::string> keys_;
};

}  // namespace headroom
