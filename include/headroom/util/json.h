// JSON out of headroom: dumped without ever throwing on bytes that are not UTF-8 (comms, command
// lines, cgroup paths): each such byte becomes U+FFFD.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace headroom {

inline std::string dumpJson(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace headroom
