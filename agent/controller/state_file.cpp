// The controller's state file: read whole, written atomically (temporary file, fsync, rename,
// fsync of the directory), so a crash leaves the old state or the new one, never half.
#include <fmt/format.h>

#include "headroom/controller/controller.h"
#include "headroom/util/files.h"

namespace headroom {

std::string defaultStatePath(std::string_view cgroup, std::string_view dir) {
  std::string name = normaliseCgroupPath(cgroup);
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  if (name == "_") name.clear();  // the root cgroup: "budget.json"
  return fmt::format("{}/budget{}.json", dir, name);
}

Result<std::optional<ControllerState>> loadState(const std::string& path) {
  auto text = readSmallFile(path, 1U << 20, "state file");
  if (!text) return unexpected(text.error());
  if (!*text) return std::optional<ControllerState>{};
  auto s = parseState(**text, path);
  if (!s) return unexpected(s.error());
  return std::optional<ControllerState>(std::move(*s));
}

Status saveState(const std::string& path, const ControllerState& s) { return writeFileAtomic(path, serialiseState(s)); }

}  // namespace headroom
