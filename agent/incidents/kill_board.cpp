#include "headroom/incidents/kill_board.h"

#include <fmt/format.h>

#include <algorithm>

#include "headroom/model/snapshot_json.h"
#include "headroom/util/json.h"

namespace headroom {

void KillBoard::setCapacity(std::size_t recent) {
  std::lock_guard lock(mu_);
  capacity_ = recent;
  while (ooms_.size() > capacity_) ooms_.pop_front();
}

void KillBoard::addOom(const OomEvent& e, const OomWorkloads& workloads) {
  nlohmann::json j = toJson(e, workloads);
  j["tasks_total"] = e.tasks.size();
  if (e.tasks.size() > kTasksKept) {
    auto& tasks = j["tasks"];
    std::sort(tasks.begin(), tasks.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
      return a["rss_bytes"].get<std::uint64_t>() > b["rss_bytes"].get<std::uint64_t>();
    });
    tasks.erase(tasks.begin() + static_cast<std::ptrdiff_t>(kTasksKept), tasks.end());
  }
  std::string dumped = dumpJson(j);
  std::lock_guard lock(mu_);
  ooms_.push_back(std::move(dumped));
  ++ooms_total_;
  while (ooms_.size() > capacity_) ooms_.pop_front();
}

void KillBoard::setJournal(nlohmann::json state) {
  std::lock_guard lock(mu_);
  journal_ = std::move(state);
}

void KillBoard::setEvents(nlohmann::json state) {
  std::lock_guard lock(mu_);
  events_ = std::move(state);
}

std::string KillBoard::oomsPage(std::size_t limit) const {
  std::lock_guard lock(mu_);
  const std::size_t skip = ooms_.size() > limit ? ooms_.size() - limit : 0;
  std::string body = fmt::format(R"({{"total":{},"kept":{},"events":[)", ooms_total_, ooms_.size());
  for (std::size_t i = skip; i < ooms_.size(); ++i) {
    if (i > skip) body += ',';
    body += ooms_[i];
  }
  body += "]}\n";
  return body;
}

nlohmann::json KillBoard::journal() const {
  std::lock_guard lock(mu_);
  return journal_;
}

nlohmann::json KillBoard::events() const {
  std::lock_guard lock(mu_);
  return events_;
}

}  // namespace headroom
