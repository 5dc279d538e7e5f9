// `headroom explain`: the OOM incidents of saved kernel logs (files, .gz, standard input),
// explained as the report explains a witnessed kill. Reads only.
#include <fmt/format.h>

#include <istream>
#include <ostream>

#include "headroom/cli/commands.h"
#include "headroom/report/explain.h"
#include "headroom/sources/log_file.h"
#include "headroom/util/exit_codes.h"
#include "headroom/util/json.h"

namespace headroom::cli {
namespace {

// "oom.svg" -> "oom-2.svg" (the second incident's).
std::string numbered(const std::string& path, std::size_t n) {
  auto slash = path.rfind('/');
  auto dot = path.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return fmt::format("{}-{}", path, n);
  return fmt::format("{}-{}{}", path.substr(0, dot), n, path.substr(dot));
}

}  // namespace

int runExplainCommand(const ExplainOptions& opts, std::istream& in, std::ostream& out, std::ostream& err) {
  auto fail = [&](const Error& e) { return cli::fail(err, "explain", e); };
  std::vector<std::string> files = opts.files.empty() ? std::vector<std::string>{"-"} : opts.files;
  std::size_t stdin_uses = 0;
  for (const auto& f : files) stdin_uses += f == "-" ? 1 : 0;
  if (stdin_uses > 1) return fail(badInput("\"-\" (standard input) given more than once"));

  std::vector<Explanation> all;
  std::size_t incidents = 0;
  for (const auto& f : files) {
    auto text = readLogFile(f, in);
    if (!text) return fail(text.error());
    all.push_back(explainLog(*text, f));
    incidents += all.back().incidents.size();
  }
  if (opts.json)
    out << dumpJson(explanationJson(all), 2) << "\n";  // a log's bytes need not be UTF-8
  else
    out << renderExplanation(all);
  if (!opts.svg.empty()) {
    std::size_t n = 0;
    for (const auto& ex : all) {
      for (const auto& inc : ex.incidents) {
        ++n;
        std::string path = incidents == 1 ? opts.svg : numbered(opts.svg, n);
        if (auto s = writeOutputFile(path, renderIncidentSvg(inc), "SVG"); !s) return fail(s.error());
      }
    }
  }
  if (!opts.html.empty()) {
    if (auto s = writeOutputFile(opts.html, renderExplanationHtml(all), "HTML page"); !s) return fail(s.error());
  }
  return incidents > 0 ? kExitOk : kExitFailure;
}

}  // namespace headroom::cli
