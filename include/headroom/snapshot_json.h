// The Snapshot as JSON: the schema of `headroom snapshot --json` and of the agent's
// /v1/snapshot. Bytes are integers in bytes; absent values are null or left out.
#pragma once

#include <nlohmann/json.hpp>

#include "headroom/oom.h"
#include "headroom/snapshot.h"

namespace headroom {

inline constexpr int kSnapshotSchemaVersion = 1;

nlohmann::json toJson(const Snapshot& s);
nlohmann::json toJson(const Attribution& a);
nlohmann::json toJson(const Meminfo& m);
nlohmann::json toJson(const Psi& p);
nlohmann::json toJson(const OomEvent& e);
nlohmann::json toJson(const ExitEvent& e);

// Dumps JSON without ever throwing on bytes that are not UTF-8 (comms, command lines).
std::string dumpJson(const nlohmann::json& j, int indent = -1);

}  // namespace headroom
