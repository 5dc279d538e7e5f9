// `headroom explain`: every OOM incident in a saved kernel log (any form: sources/log_text.h,
// any kernel: sources/oom_log.h) explained as a witnessed kill is: the same record shape
// (docs/journal.md) and the same report sections (the moment of the kill from the kernel's
// statistics, the victims, the task dump), with what the text does not show said plainly.
// Schema of --json in docs/explain.md. Pure: text in, documents out.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/sources/log_text.h"
#include "headroom/sources/oom_log.h"

namespace headroom {

struct ExplainedIncident {
  std::string source;                  // the file it came from ("-": standard input)
  std::vector<KernelOomReport> kills;  // one per kill, in order; one with proof kNone: no kill
  nlohmann::json record;               // as the journal would hold it (docs/journal.md)
  std::vector<std::string> missing;    // what the text does not show, one sentence each
  bool killed() const { return !kills.empty() && kills.front().proof != KillProof::kNone; }
};

struct Explanation {
  std::string source;
  LogTextForm form;
  std::vector<ExplainedIncident> incidents;
};

// Every incident of one text, in order.
Explanation explainLog(std::string_view text, const std::string& source);

// {"incidents": [...]} of every explanation (docs/explain.md).
nlohmann::json explanationJson(const std::vector<Explanation>& all);
// The text report: a header per incident, the report's sections, what the text does not show.
std::string renderExplanation(const std::vector<Explanation>& all);
// One self-contained page of every incident.
std::string renderExplanationHtml(const std::vector<Explanation>& all);
// The incident's moment as a standalone SVG (the parts charged at the kill, the limit).
std::string renderIncidentSvg(const ExplainedIncident& incident);

}  // namespace headroom
