// The Snapshot as JSON: the schema of `headroom snapshot --json` and of the agent's
// /v1/snapshot. Bytes are integers in bytes; absent values are null or left out.
#pragma once

#include <nlohmann/json.hpp>

#include "headroom/model/at_kill.h"
#include "headroom/model/snapshot.h"
#include "headroom/sensors/oom_event.h"
#include "headroom/util/json.h"

namespace headroom {

inline constexpr int kSnapshotSchemaVersion = 1;

nlohmann::json toJson(const Snapshot& s);
nlohmann::json toJson(const Attribution& a);
nlohmann::json toJson(const Meminfo& m);
nlohmann::json toJson(const Psi& p);
nlohmann::json toJson(const OomEvent& e);  // with its breakdown at the kill (at_kill.h)
nlohmann::json toJson(const KillBreakdown& b);
nlohmann::json toJson(const ExitEvent& e);
// The pieces of a snapshot, in the same forms as inside toJson(const Snapshot&).
nlohmann::json toJson(const CgroupMemory& c);     // a cgroup's "memory"
nlohmann::json toJson(const Bound& b);            // one of "bounds", "tightest_bound"
nlohmann::json toJson(const ProcessSnapshot& p);  // one of "processes"
nlohmann::json toJson(const SensorStatus& s);     // one of "sensors"
nlohmann::json toJson(const GpuSample& g);        // "gpus": {state, reason, driver_version, devices}
// A cgroup's "workload": unit, container, pod, namespace (the series' labels) and runtime,
// container_id, pod_uid, qos; "" where unknown.
nlohmann::json toJson(const Workload& w);
// The same read back; what is missing or not a string stays "".
Workload workloadFromJson(const nlohmann::json& j);
// toJson(e) with "workload" (the cgroup's) and each victim's "workload".
nlohmann::json toJson(const OomEvent& e, const OomWorkloads& w);
// The incident back from toJson's event (a journal record's "event"): who was killed where, by
// what, on what clocks, from which sources; the task dump and the kernel's report stay in the
// JSON. Fields missing or of another type are left as a new OomEvent has them.
OomEvent oomEventFromJson(const nlohmann::json& event);

}  // namespace headroom
