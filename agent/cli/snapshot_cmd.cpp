#include <fmt/format.h>

#include <ostream>

#include "agent/cli/commands.h"
#include "headroom/collector.h"
#include "headroom/snapshot_json.h"

namespace headroom::cli {

int runSnapshot(const SnapshotOptions& opts, std::ostream& out, std::ostream& err) {
  std::vector<RoleRule> rules;
  for (const auto& spec : opts.role_rules) {
    auto r = parseRoleRule(spec);
    if (!r) {
      err << "headroom snapshot: --role-rule: " << r.error().describe() << "\n";
      return kExitBadInput;
    }
    rules.push_back(std::move(*r));
  }
  auto fs = FsRoot::open(opts.root);
  if (!fs) {
    err << "headroom snapshot: --root: " << fs.error().describe() << "\n";
    return kExitBadInput;
  }
  auto collector = Collector::create(*fs);
  if (!collector) {
    err << "headroom snapshot: " << collector.error().describe() << "\n";
    return kExitBadInput;
  }
  CollectOptions co;
  co.cgroup = opts.cgroup;
  co.pid = opts.pid;
  co.read_smaps = opts.smaps;
  auto raw = collector->collect(co);
  if (!raw) {
    err << "headroom snapshot: " << raw.error().describe() << "\n";
    return kExitBadInput;
  }
  auto snap = buildSnapshot(std::move(*raw), RoleMatcher(std::move(rules)));
  if (opts.json) {
    // Command lines and comms are bytes, not always UTF-8: replace what is invalid, never throw.
    out << toJson(*snap).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    out << renderSnapshotTable(*snap, opts.top);
  }
  return kExitOk;
}

}  // namespace headroom::cli
