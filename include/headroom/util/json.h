// JSON out of headroom: dumped without ever throwing on bytes that are not UTF-8 (comms, command
// lines, cgroup paths): each such byte becomes U+FFFD.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace headroom {

inline std::string dumpJson(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A value read from outside, for a message: a scalar as JSON (a long one cut short), an array or
// an object by its kind alone. Never dump such a value whole: its nesting is its writer's choice,
// and dump() recurses once per level (a self-report of 400000 nested arrays overflowed the stack).
inline std::string jsonExcerpt(const nlohmann::json& j) {
  if (j.is_array()) return "an array";
  if (j.is_object()) return "an object";
  std::string s = dumpJson(j);
  if (s.size() > 64) s = s.substr(0, 61) + "...";
  return s;
}

}  // namespace headroom
