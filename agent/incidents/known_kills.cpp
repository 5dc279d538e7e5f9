// The kills a journal holds, looked up by boot and kernel log sequence, or victim and time. See
// incidents/known_kills.h.
#include "headroom/incidents/known_kills.h"

#include <algorithm>
#include <cstdlib>

#include "headroom/model/snapshot_json.h"

namespace headroom {

void KnownKills::add(const nlohmann::json& record) {
  if (!record.is_object()) return;
  auto ev = record.find("event");
  if (ev == record.end() || !ev->is_object()) return;
  if (auto key = record.find("key"); key != record.end() && key->is_string()) keys_.insert(key->get<std::string>());
  const OomEvent e = oomEventFromJson(*ev);
  Kill k;
  if (auto h = record.find("host"); h != record.end() && h->is_object()) {
    if (auto b = h->find("boot_id"); b != h->end() && b->is_string()) k.boot_id = b->get<std::string>();
  }
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
