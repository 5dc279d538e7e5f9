// The process's log: spdlog to stderr (stdout carries tables and JSON), as text or as one JSON
// object per line for log shippers. Every subcommand sets it up; the agent again at a reload.
#pragma once

#include <string>

namespace headroom {

enum class LogFormat { kText, kJson };
const char* toString(LogFormat f);

// `level`: trace, debug, info, warn, error. Callable again (a config reload).
void setupLogging(LogFormat format, const std::string& level);

}  // namespace headroom
