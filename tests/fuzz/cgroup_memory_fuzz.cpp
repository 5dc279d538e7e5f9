// One cgroup's memory files (v1 and v2: memory.stat, events, pressure, limits, usage) through the
// real reader. The input: a byte that picks the version (bit 0: v1, else v2) and the root cgroup
// (bit 1), then the files' texts in the reader's order, cut at NULs; a file past the last part is
// absent (ENOENT), as on kernels that lack it.
#include <cerrno>
#include <set>
#include <string>

#include "fuzz_support.h"
#include "headroom/sources/cgroup.h"

namespace {

constexpr const char* kV2Files[] = {"memory.current", "memory.max",          "memory.stat",
                                    "memory.peak",    "memory.high",         "memory.swap.current",
                                    "memory.events",  "memory.events.local", "memory.pressure"};
constexpr const char* kV1Files[] = {"memory.usage_in_bytes",     "memory.limit_in_bytes", "memory.stat",
                                    "memory.max_usage_in_bytes", "memory.oom_control",    "memory.failcnt",
                                    "memory.kmem.usage_in_bytes"};

// Every key of a parsed file is found again under its value, once.
void checkStatMap(const headroom::StatMap& m) {
  std::set<std::string_view> keys;
  for (auto [k, v] : m.entries()) {
    headroom::fuzz::require(keys.insert(k).second, "each key once in the map");
    auto got = m.get(k);
    headroom::fuzz::require(got.has_value() && *got == v, "each key's value found by its key");
  }
  headroom::fuzz::require(keys.size() == m.size(), "size() counts the entries");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace headroom;
  if (size == 0) return 0;
  const int version = (data[0] & 1) != 0 ? 1 : 2;
  const std::string path = (data[0] & 2) != 0 ? "/" : "/kubepods.slice/prover";
  auto texts = fuzz::parts(fuzz::text(data + 1, size - 1));
  auto read = [&](const char* name) -> Result<std::string> {
    std::size_t i = 0;
    if (version == 2) {
      while (i < std::size(kV2Files) && std::string_view(kV2Files[i]) != name) ++i;
    } else {
      while (i < std::size(kV1Files) && std::string_view(kV1Files[i]) != name) ++i;
    }
    if (i >= texts.size()) return sysError(ENOENT, std::string("opening ") + name);
    return std::string(texts[i]);
  };
  auto cg = readCgroupMemory(read, "/sys/fs/cgroup/fuzz", version, path);
  if (!cg) return 0;
  fuzz::require(cg->version == version && cg->path == path, "the cgroup read is the one asked for");
  for (const StatMap* m : {&cg->stat, &cg->events, &cg->events_local, &cg->oom_control}) checkStatMap(*m);
  (void)cg->effectiveLimitHint();
  (void)v2RootUsage(cg->stat);
  return 0;
}
