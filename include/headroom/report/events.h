// OOM records off the machine (docs/events.md): the versioned envelope each journal record travels
// in as one JSON line, the reader of what log stores give back, and the journald fields. Pure;
// the file they are appended to is incidents/event_file.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/util/result.h"

namespace headroom {

// The envelope's schema: "headroom.event.v<major>". Fields added to the envelope or the record
// keep the major; a change that would make an older reader misread a line takes the next one.
inline constexpr std::string_view kEventSchema = "headroom.event.v1";
inline constexpr std::string_view kEventSchemaPrefix = "headroom.event.v";
inline constexpr int kEventSchemaMajor = 1;
inline constexpr std::string_view kOomKillKind = "oom_kill";
// journald's MESSAGE_ID of an OOM kill record, fixed for ever (made once with systemd-id128 new).
inline constexpr std::string_view kOomKillMessageId = "78cbe2b375704b3eaa519cd951e0e16e";

inline constexpr std::string_view kOomWarningKind = "oom_warning";
// journald's MESSAGE_ID of a warning before an OOM kill (fixed for ever).
inline constexpr std::string_view kOomWarningMessageId = "396d6b21f90c4bb8a259541405d6307b";

// ---- writing (pure) ----
// {"schema", "kind", "time" (the kill, RFC 3339 UTC), "host", "id", "message" (the report's
// summary sentence), "record" (the journal record exactly as journaled)}.
nlohmann::json makeEventEnvelope(const nlohmann::json& record);
// The envelope on one line, newline-terminated: what the file and stdout get.
std::string eventLine(const nlohmann::json& record);

// The record's journald fields, "NAME=value" each (docs/events.md): MESSAGE (the summary),
// MESSAGE_ID, PRIORITY, SYSLOG_IDENTIFIER, the victims, cgroup, OOM domain, workload names, the
// breakdown at the kill (HEADROOM_AT_KILL_<KIND>_BYTES), HEADROOM_RECORD_ID and HEADROOM_RECORD
// (the whole record's JSON, for the round trip). A value may hold newlines (the native protocol
// carries them); a name is [A-Z0-9_], at most 64 characters.
std::vector<std::string> journaldFields(const nlohmann::json& record);

// A warning before an OOM kill (its start or its end), as one JSON line:
// {"schema", "kind": "oom_warning", "time", "host", "message", "warning" (the /v1/warnings entry,
// with "state": "started" | "ended")}, newline-terminated; and its journald fields (MESSAGE,
// MESSAGE_ID, PRIORITY 4, HEADROOM_EVENT_KIND, HEADROOM_CGROUP, HEADROOM_ETA_SECONDS,
// HEADROOM_WARNING_STATE, HEADROOM_WARNING (the whole JSON)).
struct WarningEvent {
  std::string line;
  std::vector<std::string> fields;
};
WarningEvent makeWarningEvent(const nlohmann::json& warning, const std::string& hostname, double unix_time,
                              const std::string& message);

// ---- reading (pure) ----
// What `headroom report --from-json` reads: one JSON document per line, or one document for the
// whole text (an array of documents, or an Elasticsearch search response's hits.hits). Each
// document is one of:
//  - an envelope (schema "headroom.event.v1");
//  - a wrapper holding an envelope line as a string: a Loki `logcli --output=jsonl` line
//    ({"labels", "line"}), a container runtime's log line ({"log"}), a shipper's {"message"};
//  - an Elasticsearch hit ({"_source": an envelope or a wrapper});
//  - a journalctl -o json entry carrying HEADROOM_RECORD;
//  - a record as `headroom report --json` prints it (version, event).
// A line that is none of these (a log line of something else mixed in) is skipped and counted.
// One that is ours but broken (an envelope cut short, a newer schema, a record that is not an
// object, HEADROOM_RECORD left out by journalctl) is an error naming `source`, the line (or the
// element) and what is wrong.
struct EventRead {
  std::vector<nlohmann::json> records;  // in input order
  std::size_t skipped = 0;              // documents that are not headroom events
  std::size_t blank = 0;                // empty lines
};
Result<EventRead> readEvents(std::string_view text, std::string_view source);

// One document already parsed: its record, nothing (not an event), or an error (ours, broken;
// without the source and line, which the caller adds).
Result<std::optional<nlohmann::json>> recordOfEventDocument(const nlohmann::json& doc);

}  // namespace headroom
