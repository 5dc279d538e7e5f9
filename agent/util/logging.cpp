#include "headroom/util/logging.h"

#include <spdlog/formatter.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "headroom/util/json.h"
#include "headroom/util/text.h"

namespace headroom {
namespace {

// {"time":"2026-12-02T11:02:44.123Z","level":"info","logger":"headroom","msg":"..."}
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(msg.time.time_since_epoch()).count();
    nlohmann::json j = {
        {"time", formatUtcMs(ms, UtcFormat::kIsoMillis)},
        {"level",
         std::string(spdlog::level::to_string_view(msg.level).data(), spdlog::level::to_string_view(msg.level).size())},
        {"logger", std::string(msg.logger_name.data(), msg.logger_name.size())},
        {"msg", std::string(msg.payload.data(), msg.payload.size())},
    };
    std::string line = dumpJson(j);  // a message may quote bytes that are not UTF-8 (a comm)
    line.push_back('\n');
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<JsonFormatter>(); }
};

}  // namespace

const char* toString(LogFormat f) {
  switch (f) {
    case LogFormat::kText: return "text";
    case LogFormat::kJson: return "json";
  }
  return "?";
}

void setupLogging(LogFormat format, const std::string& level) {
  auto logger = spdlog::get("headroom");
  if (!logger) {
    logger = spdlog::stderr_color_mt("headroom");
    spdlog::set_default_logger(logger);
  }
  if (format == LogFormat::kJson) {
    logger->set_formatter(std::make_unique<JsonFormatter>());
  } else {
    logger->set_formatter(std::make_unique<spdlog::pattern_formatter>("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v"));
  }
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::info);
}

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
