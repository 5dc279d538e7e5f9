// What the kill path has published for the HTTP threads: the recent OOM kills (/v1/ooms) and the
// states of the journal and of the events' sinks (/healthz). The kill path writes it on the main
// thread; the handlers read it on theirs, under its one lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "headroom/model/snapshot.h"
#include "headroom/sensors/oom_event.h"

namespace headroom {

class KillBoard {
 public:
  // A global OOM on a big host dumps every task: /v1/ooms keeps the largest (the journal all).
  static constexpr std::size_t kTasksKept = 256;

  // How many kills /v1/ooms keeps (api.recent_ooms); the oldest go beyond.
  void setCapacity(std::size_t recent);
  void addOom(const OomEvent& e, const OomWorkloads& workloads);
  void setJournal(nlohmann::json state);  // IncidentJournal::state()
  void setEvents(nlohmann::json state);   // EventSink::state()

  // {"total", "kept", "events": [the `limit` most recent, oldest first]}
  std::string oomsPage(std::size_t limit) const;
  nlohmann::json journal() const;  // null before the journal was configured
  nlohmann::json events() const;

 private:
  mutable std::mutex mu_;
  std::size_t capacity_ = 256;
  std::deque<std::string> ooms_;  // each event dumped, so its size is what it costs
  std::uint64_t ooms_total_ = 0;
  nlohmann::json journal_{nlohmann::json::value_t::null};
  nlohmann::json events_{nlohmann::json::value_t::null};
};

}  // namespace headroom
