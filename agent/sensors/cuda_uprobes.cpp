// The CUDA sensor: uprobes on the driver API of libcuda.so.1 (and optionally on the runtime API,
// for statically linked runtimes), attached by file offset from the library's own symbol tables,
// every variant of each entry point that the library has; libraries found in the maps of the
// processes sampled, configured, or in the usual places.
#include <fcntl.h>
#include <fmt/format.h>
#include <gelf.h>
#include <libelf.h>
#include <limits.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>

#include "headroom/sensors/detail/program_table.h"
#include "headroom/sources/parse.h"
#include "sensors_impl.h"

namespace headroom {
namespace {

// Where distributions and the NVIDIA container toolkit put the driver library.
constexpr std::array<const char*, 4> kUsualLibcuda = {"/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                                                      "/usr/lib64/libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1",
                                                      "/usr/lib/aarch64-linux-gnu/libcuda.so.1"};

// Function symbols of an ELF file (dynamic and static tables) with their file offsets, read
// once per file: uprobes attach by offset, so a missing variant costs nothing and logs nothing.
Result<std::map<std::string, std::size_t>> elfFunctionOffsets(const std::string& path) {
  std::map<std::string, std::size_t> out;
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return errnoError(fmt::format("opening {}", path));
  if (elf_version(EV_CURRENT) == EV_NONE) return unsupported("libelf version mismatch");
  Elf* elf = elf_begin(fd.get(), ELF_C_READ, nullptr);
  if (elf == nullptr) return badInput(fmt::format("{} is not an ELF file", path));
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == nullptr || (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM)) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (data == nullptr || sh.sh_entsize == 0) continue;
    std::size_t n = sh.sh_size / sh.sh_entsize;
    for (std::size_t i = 0; i < n; ++i) {
      GElf_Sym sym;
      if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr) continue;
      if (GELF_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_shndx == SHN_UNDEF || sym.st_value == 0) continue;
      const char* name = elf_strptr(elf, sh.sh_link, sym.st_name);
      if (name == nullptr) continue;
      // The symbol's address made a file offset through its section.
      GElf_Shdr target;
      Elf_Scn* tscn = elf_getscn(elf, sym.st_shndx);
      if (tscn == nullptr || gelf_getshdr(tscn, &target) == nullptr) continue;
      out.emplace(name, sym.st_value - target.sh_addr + target.sh_offset);
    }
  }
  elf_end(elf);
  return out;
}

}  // namespace

void Sensors::Impl::cudaFailed(const std::string& library, const Error& e) {
  cuda_failed.emplace(library, e.describe());
  if (status(SensorId::kCuda).state != SensorState::kActive) {
    std::vector<std::string> why;
    for (const auto& [lib, reason] : cuda_failed) why.push_back(reason);
    set(SensorId::kCuda, SensorState::kDegraded, fmt::format("{}", fmt::join(why, "; ")));
  } else {
    spdlog::warn("cuda: {}", e.describe());
  }
}

void Sensors::Impl::attachConfiguredCuda() {
  std::optional<Error> failure;
  for (const auto& lib : cfg.cuda_libraries) {
    if (auto st = attachCudaNow(lib, false); !st && !failure) failure = st.error();
  }
  for (const auto& t : cfg.cuda_runtime_targets) {
    if (auto st = attachCudaNow(t, true); !st && !failure) failure = st.error();
  }
  if (cuda_attached.empty()) {
    if (failure)
      set(SensorId::kCuda, SensorState::kDegraded, failure->describe());
    else
      set(SensorId::kCuda, SensorState::kOff, "no CUDA library found yet (libcuda.so.1)");
  }
}

Status Sensors::Impl::attachCudaNow(const std::string& path, bool runtime) {
  if (!skel) return unsupported("BPF is not loaded");
  if (path.empty() || path.front() != '/')
    return badInput(fmt::format("CUDA target \"{}\" is not an absolute path", path));
  if (cuda_attached.count(path)) return ok();
  if (!canAccess(path.c_str(), R_OK)) return errnoError(fmt::format("CUDA target {}", path));
  auto symbols = elfFunctionOffsets(path);
  if (!symbols) return symbols.error();
  std::size_t attached = 0;
  std::vector<std::string> names;
  for (const detail::UprobeTarget& p : detail::cudaUprobes()) {
    if (p.runtime != runtime) continue;
    bpf_program* entry = program(p.program);
    if (entry == nullptr || !bpf_program__autoload(entry)) continue;
    for (const char* sym : p.symbols) {
      auto it = symbols->find(sym);
      if (it == symbols->end()) continue;  // this variant is not in the file
      bpf_uprobe_opts in{};
      in.sz = sizeof(in);
      bpf_link* l = bpf_program__attach_uprobe_opts(entry, -1, path.c_str(), it->second, &in);
      bpf_uprobe_opts out{};
      out.sz = sizeof(out);
      out.retprobe = true;
      bpf_link* r = l == nullptr
                        ? nullptr
                        : bpf_program__attach_uprobe_opts(skel->progs.cuda_return, -1, path.c_str(), it->second, &out);
      if (l == nullptr || r == nullptr) {
        int err = errno;
        if (l != nullptr) bpf_link__destroy(l);
        // Linux took uprobes back from CAP_PERFMON in 2025 ("perf: Revert to requiring
        // CAP_SYS_ADMIN for uprobes", 6.16 and the stable kernels since).
        return sysError(
            err, fmt::format("attaching a uprobe to {} in {}{}", sym, path,
                             err == EACCES || err == EPERM
                                 ? " (uprobes need CAP_SYS_ADMIN; CAP_PERFMON sufficed on kernels before mid-2025)"
                                 : ""));
      }
      links.emplace_back(l);
      links.emplace_back(r);
      ++attached;
      names.emplace_back(sym);
    }
  }
  if (attached == 0)
    return notFound(fmt::format("no CUDA {} API symbol found in {}", runtime ? "runtime" : "driver", path));
  cuda_attached.insert(path);
  SensorStatus& st = status(SensorId::kCuda);
  std::string what = fmt::format("{} ({} functions)", path, attached);
  st.reason = st.state == SensorState::kActive ? st.reason + ", " + what : "uprobes on " + what;
  st.state = SensorState::kActive;
  spdlog::info("cuda: attached to {}: {}", path, fmt::join(names, " "));
  return ok();
}

Status Sensors::attachCuda(const std::string& path, bool runtime) { return impl_->attachCudaNow(path, runtime); }

void Sensors::discoverCuda(const std::vector<pid_t>& pids) {
  Impl& m = *impl_;
  if (!m.skel || !m.cfg.cuda) return;
  std::set<std::string> found;
  for (pid_t pid : pids) {
    auto maps = m.fs->readFile(fmt::format("/proc/{}/maps", pid));
    if (!maps) continue;
    for (auto line : splitLines(*maps)) {
      auto slash = line.find('/');
      if (slash == std::string_view::npos) continue;
      std::string_view path = line.substr(slash);
      auto base = path.substr(path.rfind('/') + 1);
      if (base.rfind("libcuda.so", 0) == 0) found.emplace(path);
    }
  }
  for (const char* usual : kUsualLibcuda) {
    if (canAccess(usual, R_OK)) {
      std::array<char, PATH_MAX> real{};
      if (::realpath(usual, real.data()) != nullptr) found.emplace(real.data());
    }
  }
  for (const auto& lib : found) {
    if (m.cuda_attached.count(lib) || m.cuda_failed.count(lib)) continue;
    if (auto st = m.attachCudaNow(lib, false); !st) m.cudaFailed(lib, st.error());
  }
}

}  // namespace headroom
