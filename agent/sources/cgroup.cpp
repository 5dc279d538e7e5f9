#include "headroom/sources/cgroup.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <set>
#include <string_view>
#include <utility>

namespace headroom {

const char* toString(CgroupMode m) {
  switch (m) {
    case CgroupMode::kNone: return "none";
    case CgroupMode::kV1: return "v1";
    case CgroupMode::kV2: return "v2";
    case CgroupMode::kHybrid: return "hybrid";
  }
  return "unknown";
}

CgroupMode CgroupMounts::mode() const {
  if (v1_memory && v2) return CgroupMode::kHybrid;
  if (v1_memory) return CgroupMode::kV1;
  if (v2) return CgroupMode::kV2;
  return CgroupMode::kNone;
}

int CgroupMounts::memoryVersion() const {
  // A controller binds to one hierarchy at a time: v1's memory mount wins when it exists.
  if (v1_memory) return 1;
  if (v2 && v2_has_memory) return 2;
  return 0;
}

const CgroupMount* CgroupMounts::memoryMount() const {
  switch (memoryVersion()) {
    case 1: return &*v1_memory;
    case 2: return &*v2;
    default: return nullptr;
  }
}

namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescapeMountField(std::string_view s) {
  auto octal = [](char c) { return c >= '0' && c <= '7'; };
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && octal(s[i + 1]) && octal(s[i + 2]) && octal(s[i + 3])) {
      out.push_back(static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
      continue;
    }
    out.push_back(s[i]);
  }
  return out;
}

bool hasOption(std::string_view opts, std::string_view want) {
  while (!opts.empty()) {
    auto comma = opts.find(',');
    std::string_view tok = opts.substr(0, comma);
    if (tok == want) return true;
    if (comma == std::string_view::npos) break;
    opts.remove_prefix(comma + 1);
  }
  return false;
}

// Mountinfo's root field names the mount's root from the reader's cgroup namespace root: each
// leading ".." is a level above it (more shown), each name a level below (less shown).
bool mountRootShowsMore(std::string_view a, std::string_view b) {
  auto breadth = [](std::string_view root) {
    std::string p = normaliseCgroupPath(root);
    int ups = 0;
    int names = 0;
    for (std::size_t i = 1; i < p.size();) {
      std::size_t end = std::min(p.find('/', i), p.size());
      std::string_view c = std::string_view(p).substr(i, end - i);
      if (c == ".." && names == 0)
        ++ups;
      else
        ++names;
      i = end + 1;
    }
    return std::pair{ups, -names};
  };
  return breadth(a) > breadth(b);
}

}  // namespace

Result<CgroupMounts> parseMountinfo(std::string_view text) {
  CgroupMounts out;
  std::size_t lineno = 0;
  for (std::string_view line : splitLines(text)) {
    ++lineno;
    auto fields = splitFields(line);
    if (fields.empty()) continue;
    // "ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS": the
    // separator after the six fixed fields, and three fields after it.
    auto dash = fields.size() < 6 ? fields.end() : std::find(fields.begin() + 6, fields.end(), std::string_view("-"));
    if (dash == fields.end() || fields.end() - dash < 4)
      return badData(fmt::format("mountinfo line {} is malformed: \"{}\"", lineno, line.substr(0, 120)));
    std::string_view fstype = *(dash + 1);
    std::string_view super_opts = *(dash + 3);
    CgroupMount m{unescapeMountField(fields[4]), unescapeMountField(fields[3])};
    // Of several mounts of a hierarchy, the one that shows the most: bind mounts of a subtree,
    // and a cgroup namespace's own mount, lose to one of the host's whole tree.
    if (fstype == "cgroup2") {
      if (!out.v2 || mountRootShowsMore(m.root, out.v2->root)) out.v2 = m;
    } else if (fstype == "cgroup" && hasOption(super_opts, "memory")) {
      if (!out.v1_memory || mountRootShowsMore(m.root, out.v1_memory->root)) out.v1_memory = m;
    }
  }
  return out;
}

Result<CgroupMounts> discoverCgroupMounts(const FsRoot& fs) {
  auto text = fs.readFile("/proc/self/mountinfo");
  if (!text) return text.error();
  auto mounts = parseMountinfo(*text);
  if (!mounts) return mounts.error().wrap(fmt::format("parsing {}", fs.display("/proc/self/mountinfo")));
  if (mounts->v2) {
    auto ctl = fs.readFile(mounts->v2->mount_point + "/cgroup.controllers");
    if (ctl) {
      for (auto c : splitFields(*ctl)) {
        if (c == "memory") mounts->v2_has_memory = true;
      }
    }
  }
  return mounts;
}

std::optional<std::string> ProcCgroups::memoryPath(int version) const {
  if (version == 1) return v1_memory;
  if (version == 2) return v2;
  return std::nullopt;
}

Result<ProcCgroups> parseProcCgroup(std::string_view text) {
  ProcCgroups out;
  std::size_t lineno = 0;
  for (std::string_view line : splitLines(text)) {
    ++lineno;
    if (trim(line).empty()) continue;
    auto c1 = line.find(':');
    auto c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos)
      return badData(fmt::format("cgroup line {} is malformed: \"{}\"", lineno, line.substr(0, 120)));
    std::string_view id = line.substr(0, c1);
    std::string_view controllers = line.substr(c1 + 1, c2 - c1 - 1);
    std::string_view path = line.substr(c2 + 1);
    if (path.empty() || path.front() != '/')
      return badData(fmt::format("cgroup line {} has no absolute path: \"{}\"", lineno, line.substr(0, 120)));
    if (id == "0" && controllers.empty()) {
      out.v2 = normaliseCgroupPath(path);
    } else if (hasOption(controllers, "memory")) {
      out.v1_memory = normaliseCgroupPath(path);
    }
  }
  return out;
}

std::vector<std::string_view> cgroupPathComponents(std::string_view path) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < path.size()) {
    while (i < path.size() && path[i] == '/') ++i;
    std::size_t start = i;
    while (i < path.size() && path[i] != '/') ++i;
    if (i > start) out.push_back(path.substr(start, i - start));
  }
  return out;
}

std::string normaliseCgroupPath(std::string_view path) {
  std::string out;
  for (std::string_view c : cgroupPathComponents(path)) {
    out.push_back('/');
    out.append(c);
  }
  return out.empty() ? "/" : out;
}

std::string cgroupDirectory(const CgroupMount& mount, std::string_view path) {
  return path == "/" ? mount.mount_point : fmt::format("{}{}", mount.mount_point, path);
}

std::optional<std::string> parentCgroup(std::string_view path) {
  std::string p = normaliseCgroupPath(path);
  if (p == "/") return std::nullopt;
  auto slash = p.rfind('/');
  return slash == 0 ? std::string("/") : p.substr(0, slash);
}

bool cgroupIsWithin(std::string_view path, std::string_view ancestor) {
  if (ancestor == "/") return true;
  if (path.size() < ancestor.size() || path.substr(0, ancestor.size()) != ancestor) return false;
  return path.size() == ancestor.size() || path[ancestor.size()] == '/';
}

std::optional<std::uint64_t> CgroupMemory::effectiveLimitHint() const {
  if (version == 1) {
    if (hierarchical_limit && *hierarchical_limit < kV1UnlimitedThreshold) return hierarchical_limit;
    if (hierarchical_limit) return std::nullopt;
  }
  return limit;
}

namespace detail {
namespace {

Status setU64(std::optional<std::uint64_t>& field, std::string_view text) {
  auto v = parseU64(text);
  if (!v) return v.error();
  field = *v;
  return ok();
}

Status setStat(CgroupMemory& cg, StatMap& out, std::string_view file, std::string_view text) {
  auto parsed = parseKeyValueLines(text);
  out = std::move(parsed.values);
  if (!parsed.malformed.empty()) {
    cg.warnings.push_back(fmt::format("{}: {} malformed line(s), first \"{}\"", file, parsed.malformed.size(),
                                      parsed.malformed.front().substr(0, 60)));
  }
  return ok();
}

}  // namespace

Status applyCgroupFile(CgroupMemory& cg, std::string_view file, std::string_view text) {
  if (file == "memory.current" || file == "memory.usage_in_bytes") {
    auto v = parseU64(text);
    if (!v) return v.error();
    cg.usage = *v;
    return ok();
  }
  if (file == "memory.max" || file == "memory.limit_in_bytes") {
    auto v = parseLimit(text);
    if (!v) return v.error();
    cg.limit = *v;
    return ok();
  }
  if (file == "memory.high") {
    auto v = parseLimit(text);
    if (!v) return v.error();
    cg.high = *v;
    return ok();
  }
  if (file == "memory.peak" || file == "memory.max_usage_in_bytes") return setU64(cg.peak, text);
  if (file == "memory.swap.current") return setU64(cg.swap_current, text);
  if (file == "memory.failcnt") return setU64(cg.failcnt, text);
  if (file == "memory.kmem.usage_in_bytes") return setU64(cg.kmem_usage, text);
  if (file == "memory.stat") {
    auto st = setStat(cg, cg.stat, file, text);
    if (cg.stat.empty()) return badData("no \"key value\" line");
    if (cg.version == 1) cg.hierarchical_limit = cg.stat.get("hierarchical_memory_limit");
    return st;
  }
  if (file == "memory.events") {
    auto st = setStat(cg, cg.events, file, text);
    cg.oom_events = cg.events.get("oom");
    cg.oom_kills = cg.events.get("oom_kill");
    return st;
  }
  if (file == "memory.events.local") return setStat(cg, cg.events_local, file, text);
  if (file == "memory.swap.events") return setStat(cg, cg.swap_events, file, text);
  if (file == "memory.oom_control") {
    auto st = setStat(cg, cg.oom_control, file, text);
    cg.under_oom = cg.oom_control.getOr("under_oom") != 0;
    cg.oom_kills = cg.oom_control.get("oom_kill");
    return st;
  }
  if (file == "memory.pressure") {
    auto p = parsePsi(text);
    if (!p) return p.error();
    cg.pressure = *p;
    return ok();
  }
  return badInput(fmt::format("unknown cgroup file {}", file));
}

}  // namespace detail

namespace {
struct FileSpec {
  const char* name;
  bool required;
};
constexpr std::array kV2Files = {
    FileSpec{"memory.current", true},   FileSpec{"memory.max", true},
    FileSpec{"memory.stat", true},      FileSpec{"memory.peak", false},
    FileSpec{"memory.high", false},     FileSpec{"memory.swap.current", false},
    FileSpec{"memory.events", false},   FileSpec{"memory.events.local", false},
    FileSpec{"memory.pressure", false}, FileSpec{"memory.swap.events", false},
};
constexpr std::array kV1Files = {
    FileSpec{"memory.usage_in_bytes", true},
    FileSpec{"memory.limit_in_bytes", true},
    FileSpec{"memory.stat", true},
    FileSpec{"memory.max_usage_in_bytes", false},
    FileSpec{"memory.oom_control", false},
    FileSpec{"memory.failcnt", false},
    FileSpec{"memory.kmem.usage_in_bytes", false},
};
// What a light read reads again: the usage, the limit and the OOM counters.
constexpr std::array kV2LightFiles = {FileSpec{"memory.current", true}, FileSpec{"memory.max", true},
                                      FileSpec{"memory.events", false}};
constexpr std::array kV1LightFiles = {FileSpec{"memory.usage_in_bytes", true}, FileSpec{"memory.limit_in_bytes", true},
                                      FileSpec{"memory.oom_control", false}};

// Reads `files` into `cg`: a required file unreadable or malformed is the error, an optional one
// a warning (absent: listed in `absent`, no warning).
template <std::size_t N>
Status readFiles(const CgroupFileReader& read, std::string_view dir_path, CgroupMemory& cg,
                 const std::array<FileSpec, N>& files, bool root, std::set<std::string_view>& absent) {
  for (FileSpec f : files) {
    // The v2 hierarchy's root has no memory.current or memory.max; a cgroup namespace's root (a
    // container's own cgroup) is no root to the kernel and has both, the limit among them.
    if (root && cg.version == 2 &&
        (f.name == std::string_view("memory.current") || f.name == std::string_view("memory.max")))
      f.required = false;
    auto text = read(f.name);
    if (!text) {
      if (!f.required && text.error().code == ENOENT) {
        absent.insert(f.name);
        continue;
      }
      if (!f.required) {
        cg.warnings.push_back(text.error().describe());
        continue;
      }
      return text.error();
    }
    auto st = detail::applyCgroupFile(cg, f.name, *text);
    if (!st) {
      Error e = st.error().wrap(fmt::format("parsing {}/{}", dir_path, f.name));
      if (f.required) return e;
      cg.warnings.push_back(e.describe());
    }
  }
  return ok();
}
}  // namespace

std::uint64_t v2RootUsage(const StatMap& st) {
  std::uint64_t kernel = 0;
  if (auto k = st.get("kernel")) {
    kernel = *k;
  } else {  // before 5.18: the kernel's parts one by one
    for (const char* key :
         {"pagetables", "sec_pagetables", "slab_reclaimable", "slab_unreclaimable", "kernel_stack", "percpu"})
      kernel += st.getOr(key);
  }
  return st.getOr("anon") + st.getOr("file") + kernel + st.getOr("sock") + st.getOr("zswap");
}

Result<CgroupMemory> readCgroupMemory(const Dir& dir, int version, const std::string& path) {
  return readCgroupMemory([&](const char* name) { return dir.readFile(name); }, dir.path(), version, path);
}

Result<CgroupMemory> readCgroupMemory(const CgroupFileReader& read, std::string_view dir_path, int version,
                                      const std::string& path) {
  if (version != 1 && version != 2) return badInput(fmt::format("cgroup version {} is not 1 or 2", version));
  CgroupMemory cg;
  cg.version = version;
  cg.path = path;
  std::set<std::string_view> absent;  // optional files that are not there
  const bool root = path == "/";
  if (version == 2) {
    if (auto st = readFiles(read, dir_path, cg, kV2Files, root, absent); !st) return st.error();
    if (root && absent.count("memory.current") != 0) {
      cg.usage = v2RootUsage(cg.stat);
      cg.usage_from_stat = true;
    }
  } else if (auto st = readFiles(read, dir_path, cg, kV1Files, root, absent); !st) {
    return st.error();
  }
  return cg;
}

Result<CgroupMemory> readCgroupMemoryLight(const CgroupFileReader& read, std::string_view dir_path,
                                           const CgroupMemory& last) {
  if (last.usage_from_stat) return readCgroupMemory(read, dir_path, last.version, last.path);
  CgroupMemory cg = last;
  cg.warnings.clear();
  cg.light = true;
  std::set<std::string_view> absent;
  auto st = last.version == 2 ? readFiles(read, dir_path, cg, kV2LightFiles, last.path == "/", absent)
                              : readFiles(read, dir_path, cg, kV1LightFiles, last.path == "/", absent);
  if (!st) return st.error();
  return cg;
}

std::string CgroupHierarchy::directoryOf(std::string_view path) const {
  return cgroupDirectory(mount_, normaliseCgroupPath(path));
}

Result<Dir> CgroupHierarchy::open(std::string_view path) const {
  std::string p = normaliseCgroupPath(path);
  if (joinCgroupPath("/", p).path != p) {  // "." or ".." in it
    return badInput(
        fmt::format("cgroup path {} climbs with \"..\" or holds \".\": paths in the hierarchy "
                    "mounted at {} have neither",
                    p, fs_->display(mount_.mount_point)));
  }
  return fs_->openDir(directoryOf(p));
}

Result<CgroupMemory> CgroupHierarchy::read(std::string_view path) const {
  auto dir = open(path);
  if (!dir) return dir.error();
  return readCgroupMemory(*dir, version_, normaliseCgroupPath(path));
}

Result<std::string> callersMemoryCgroup(const FsRoot& fs, const CgroupHierarchy& h) {
  auto text = fs.readFile("/proc/self/cgroup");
  if (!text) return text.error();
  auto cg = parseProcCgroup(*text);
  if (!cg) return cg.error();
  auto p = cg->memoryPath(h.version());
  if (!p) return notFound(fmt::format("this process is in no v{} memory cgroup", h.version()));
  return h.toMountRelative(*p).wrap("this process's own memory cgroup");
}

}  // namespace headroom
