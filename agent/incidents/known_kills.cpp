// The kills a journal holds, looked up by boot and kernel log sequence, or victim and time. See
// incidents/known_kills.h.
#include "headroom/incidents/known_kills.h"

#include <algorithm>
#include <cstdlib>

#include "headroom/model/snapshot_json.h"

namespace headroom {

std::string KnownKills::bootIdOf(const nlohmann::json& record) {
  // Looked up by contains() and at(), not through iterators (g++ 12 sees a null dereference in
  // nlohmann's const iterators at -O3).
  if (!record.is_object() || !record.contains("host")) return {};
  const nlohmann::json& host = record.at("host");
  if (!host.is_object() || !host.contains("boot_id")) return {};
  const nlohmann::json& id = host.at("boot_id");
  return id.is_string() ? id.get<std::string>() : std::string();
}

void KnownKills::add(const nlohmann::json& record) {
  if (!record.is_object() || !record.contains("event")) return;
  const nlohmann::json& ev = record.at("event");
  if (!ev.is_object()) return;
  if (record.contains("key") && record.at("key").is_string()) keys_.insert(record.at("key").get<std::string>());
  const OomEvent e = oomEventFromJson(ev);
  Kill k;
  k.boot_id = bootIdOf(record);
  k.kmsg_seq = e.kmsg_seq;
  k.monotonic_ns = e.monotonic_time_ns;
  for (const OomVictim& v : e.victims) k.victims.push_back(v.process());
  if (k.kmsg_seq && !k.boot_id.empty()) seqs_.emplace(k.boot_id, *k.kmsg_seq);
  kills_.push_back(std::move(k));
}

bool KnownKills::holds(const OomEvent& e, const std::string& boot_id) const {
  if (e.kmsg_seq && seqs_.count({boot_id, *e.kmsg_seq}) != 0) return true;
  for (const Kill& k : kills_) {
    if (!k.boot_id.empty() && k.boot_id != boot_id) continue;
    // One report, one sequence number: a record that has one and differs is another kill.
    if (!k.boot_id.empty() && k.kmsg_seq && e.kmsg_seq) continue;
    if (e.monotonic_time_ns == 0 || std::llabs(k.monotonic_ns - e.monotonic_time_ns) > kSameKillNs) continue;
    for (const OomVictim& v : e.victims) {
      if (std::find(k.victims.begin(), k.victims.end(), v.process()) != k.victims.end()) return true;
    }
  }
  return false;
}

}  // namespace headroom
