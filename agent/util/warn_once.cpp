#include "headroom/util/warn_once.h"

#include <spdlog/spdlog.h>

namespace headroom {

bool WarnOnce::say(const std::string& key, const std::string& text, spdlog::level::level_enum level) {
  auto it = said_.find(key);
  if (it != said_.end() && it->second == text) return false;
  said_[key] = text;
  spdlog::log(level, "{}", text);
  return true;
}

bool WarnOnce::clear(const std::string& key, std::string_view recovered) {
  auto it = said_.find(key);
  if (it == said_.end()) return false;
  said_.erase(it);
  if (!recovered.empty()) spdlog::info("{}", recovered);
  return true;
}

const std::string* WarnOnce::text(const std::string& key) const {
  auto it = said_.find(key);
  return it == said_.end() ? nullptr : &it->second;
}

}  // namespace headroom
