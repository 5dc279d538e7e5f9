// The controller's state file: read whole, written atomically (temporary file, fsync, rename,
// fsync of the directory), so a crash leaves the old state or the new one, never half.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <cerrno>

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
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<ControllerState>{};
    return unexpected(errnoError(fmt::format("reading state file {}", path)));
  }
  std::string text;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Error e = errnoError(fmt::format("reading state file {}", path));
      ::close(fd);
      return unexpected(e);
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > (1U << 20)) {
      ::close(fd);
      return unexpected(badData(fmt::format("state file {}: larger than 1 MiB, not a state file", path)));
    }
  }
  ::close(fd);
  auto s = parseState(text, path);
  if (!s) return unexpected(s.error());
  return std::optional<ControllerState>(std::move(*s));
}

Status saveState(const std::string& path, const ControllerState& s) { return writeFileAtomic(path, serialiseState(s)); }

}  // namespace headroom
