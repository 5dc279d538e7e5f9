// The process's log: spdlog to stderr (stdout carries tables and JSON), as text or as one JSON
// object per line for log shippers; every subcommand sets it up, the agent again at a reload.
// And WarnOnce: a condition said once while it lasts, not at every tick (a failing sample, an
// unwritable state file, a missing self-report), said again when its text changes, its end
// said once too.
#pragma once

#include <spdlog/common.h>

#include <map>
#include <string>
#include <string_view>

namespace headroom {

enum class LogFormat { kText, kJson };
const char* toString(LogFormat f);

// `level`: trace, debug, info, warn, error. Callable again (a config reload).
void setupLogging(LogFormat format, const std::string& level);

class WarnOnce {
 public:
  // Logs `text` at `level` unless `key` said exactly that last; true when it logged.
  bool say(const std::string& key, const std::string& text, spdlog::level::level_enum level = spdlog::level::warn);
  // The condition of `key` is over: when it had been said, logs `recovered` (unless empty) at
  // info level and returns true.
  bool clear(const std::string& key, std::string_view recovered = {});
  // Whether `key` is said now, and as what.
  bool active(const std::string& key) const { return said_.count(key) != 0; }
  const std::string* text(const std::string& key) const;

 private:
  std::map<std::string, std::string, std::less<>> said_;
};

}  // namespace headroom
