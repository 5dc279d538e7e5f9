#include "headroom/sources/cgroup_index.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <set>

#include "headroom/util/clock.h"

namespace headroom {
namespace {

constexpr std::size_t kMaxDirectories = 100000;
constexpr std::int64_t kMinRebuildNs = 100'000'000;

std::optional<std::uint64_t> inodeOf(const Dir& dir) {
  struct stat st {};
  if (::fstat(dir.fd(), &st) != 0) return std::nullopt;
  return static_cast<std::uint64_t>(st.st_ino);
}

}  // namespace

std::optional<std::uint64_t> CgroupIndex::idOf(const std::string& path) const {
  auto dir = h_->open(normaliseCgroupPath(path));
  if (!dir) return std::nullopt;
  return inodeOf(*dir);
}

std::vector<std::uint64_t> CgroupIndex::idsOf(const std::vector<std::string>& paths) const {
  std::set<std::uint64_t> ids;
  for (const std::string& p : paths) {
    if (auto id = idOf(p)) ids.insert(*id);
  }
  return {ids.begin(), ids.end()};
}

void CgroupIndex::rebuild() {
  paths_.clear();
  // Breadth-first over the memory hierarchy.
  std::vector<std::string> queue = {"/"};
  for (std::size_t i = 0; i < queue.size() && i < kMaxDirectories; ++i) {
    auto dir = h_->open(queue[i]);
    if (!dir) continue;
    if (auto id = inodeOf(*dir)) paths_[*id] = queue[i];
    auto subs = dir->list(true);
    if (!subs) continue;
    for (const auto& s : *subs) queue.push_back(queue[i] == "/" ? "/" + s : queue[i] + "/" + s);
  }
  built_ns_ = monotonicNs();
}

std::string CgroupIndex::pathOf(std::uint64_t id) {
  if (id == 0) return "";
  auto it = paths_.find(id);
  if (it == paths_.end() && monotonicNs() - built_ns_ > kMinRebuildNs) {
    rebuild();
    it = paths_.find(id);
  }
  return it == paths_.end() ? fmt::format("cgroup-id:{}", id) : it->second;
}

}  // namespace headroom
