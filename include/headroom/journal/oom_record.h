// The journal's record of one OOM kill (schema in docs/journal.md), built from the kernel's
// incident, the samples before it, the flight recorder's points and the budget in force. Pure.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "headroom/controller/controller.h"
#include "headroom/journal/flight_recorder.h"
#include "headroom/model/snapshot.h"
#include "headroom/model/snapshot_json.h"
#include "headroom/sensors/oom_event.h"

namespace headroom {

struct HostIdentity {
  std::string hostname, kernel, agent_version;
  std::string boot_id;  // /proc/sys/kernel/random/boot_id ("" where unreadable)
};
// The cgroup a record is about, normalised like snapshot paths: the OOM domain when the kernel
// named one, else the (first) victim's cgroup, else the trigger's. With the last sample: the
// domain when that sample holds it (the agent samples the cgroups its processes live in, which
// the domain, often an ancestor holding the limit, need not be), else the victim's cgroup or
// its nearest sampled ancestor inside the domain; when none was sampled, the path as above.
// Use it for RecordContext::cgroup and FlightRecorder::points.
std::string oomRecordCgroup(const OomEvent& e, const Snapshot* last = nullptr);

struct RecordContext {
  const OomEvent* event = nullptr;                 // required
  const Snapshot* last = nullptr;                  // the last sample before the kill (may be null)
  std::vector<FlightPoint> flight;                 // for the cgroup that died
  std::int64_t flight_window_ns = 60'000'000'000;  // the recorder's window (flight.window_seconds)
  std::string cgroup;                              // that cgroup; empty: oomRecordCgroup(*event, last)
  const BudgetDecision* budget = nullptr;          // the budget in force (an invalid one is recorded as null)
  std::optional<std::uint64_t> self_reported;      // what the prover believed it used at the kill
  std::vector<SensorStatus> sensors;               // empty: the last sample's
  HostIdentity host;
  std::size_t top_per_role = 10;
  std::int64_t kill_wall_ns = 0;          // the kill on the wall clock (0: the event's time)
  OomWorkloads workloads;                 // of `cgroup` and of each victim's (empty: from the paths alone)
  std::int64_t found_wall_ns = 0;         // a kill found after the fact (event->found_after): when it was found
  std::optional<nlohmann::json> warning;  // whether the kill was warned of, and how long before
};
// The record's JSON (schema in docs/journal.md): version, time, at_kill (the OOM domain's
// breakdown at the kill: the primary one), event (with the kernel's task dump and report), cgroup
// (memory, attribution, bounds at the last sample: before the kill), processes (top per role with
// RSS/PSS parts, page tables, pinned, device), largest_cgroups (a global OOM: the last sample's
// largest), budget, self_reported vs charged, sensors, host, flight (the recorder's points, the
// kill itself the last when the breakdown is of the flight's cgroup), found_after (how and when a
// kill the agent did not see happen was found; null for one seen live), warning (whether the kill
// was warned of and how long before; null where the agent did not forecast).
nlohmann::json makeOomRecord(const RecordContext& ctx);

}  // namespace headroom
