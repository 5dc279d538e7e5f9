// OOM post-mortems from journal records (docs/journal.md): one summary sentence, the breakdown,
// what grew in the last minute (terminal sparklines), the budget explanation; and pictures (SVG,
// self-contained HTML) of the last minute's stacked components with the limit and the kill.
// Pure: records in, text out. A record from an older or partial agent renders what it has.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/util/result.h"

namespace headroom {

// "▁▂▃▄▅▆▇█": one character per value, scaled between the smallest and largest; all equal
// (flat, or a single value): "▄" each. A value that is not finite is a blank.
std::string sparkline(const std::vector<double>& values);

// The one summary sentence: who was killed, where, at what usage of what limit, who triggered it.
// The limit is the OOM domain's (the cgroup that hit it), never the victim's own size.
std::string reportSummary(const nlohmann::json& record);
// The whole human report (summary, breakdown table, who holds what, what grew, budget).
std::string renderReport(const nlohmann::json& record);
// One line per record for --list (under a header line): id, time (UTC), victim, cgroup,
// usage/limit of the OOM domain, trigger, in the order given. Records of more than one host
// (read back from a log store) lead with HOST and WORKLOAD columns and are grouped by host, then
// workload, the newest first in each group.
std::string renderRecordList(const std::vector<nlohmann::json>& records);
// The workload a record is about: its `workload` object, with what it does not name taken from
// the first victim's (a pod's OOM domain names the pod, the victim its container); empty
// strings (nothing read) for a record written before workloads were recorded.
nlohmann::json recordWorkloadObject(const nlohmann::json& record);
// The same as one label: "pod NAMESPACE/POD CONTAINER", "container NAME", "unit NAME"; else
// "cgroup PATH" ("-": none known).
std::string recordWorkload(const nlohmann::json& record);
// The last minute's stacked components for the cgroup, with the limit line (id="limit") and
// the kill marked (id="kill"): a standalone SVG 1.1 document.
std::string renderReportSvg(const nlohmann::json& record);
// A self-contained page: the report's text parts as HTML tables and the SVG inline.
std::string renderReportHtml(const nlohmann::json& record);

// When a record happened, in unix seconds: the kill itself (`kill_time`), else the event's wall
// time, else the record's `time`.
std::optional<double> recordTime(const nlohmann::json& record);

// `--since`: "2026-12-02T14:00:00Z" (a fraction and a ±HH:MM offset allowed), "2026-12-02
// 14:00[:SS]" or "2026-12-02" (read as UTC), a unix time, or an age ("90s", "30m", "2h", "1d")
// meaning `now_seconds` minus that. In unix seconds; an error names the text.
Result<double> parseSinceTime(std::string_view text, double now_seconds);

}  // namespace headroom
