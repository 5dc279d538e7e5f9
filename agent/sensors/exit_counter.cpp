#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdarg>
#include <mutex>

#include "exitcount.skel.h"
#include "events.h"
#include "headroom/sensors.h"

namespace headroom {
namespace {

// Set while a LibbpfLogCapture lives on this thread: load failures are read back from it.
thread_local std::string* t_capture = nullptr;

int libbpfPrint(enum libbpf_print_level level, const char* format, va_list args) {
  // Verifier logs arrive as one multi-line message: size the buffer to fit.
  va_list copy;
  va_copy(copy, args);
  int n = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  if (n < 0) return n;
  std::string buf(static_cast<std::size_t>(n) + 1, '\0');
  std::vsnprintf(buf.data(), buf.size(), format, args);
  buf.resize(static_cast<std::size_t>(n));
  while (!buf.empty() && buf.back() == '\n') buf.pop_back();
  if (t_capture != nullptr && level == LIBBPF_WARN) t_capture->append(buf).push_back('\n');
  switch (level) {
    case LIBBPF_WARN: spdlog::warn("libbpf: {}", buf); break;
    case LIBBPF_INFO: spdlog::info("libbpf: {}", buf); break;
    default: spdlog::debug("libbpf: {}", buf); break;
  }
  return n;
}

}  // namespace

namespace detail {
LibbpfLogCapture::LibbpfLogCapture() : previous_(t_capture) { t_capture = &text_; }
LibbpfLogCapture::~LibbpfLogCapture() { t_capture = previous_; }

std::string failedProgram(const std::string& log) {
  // libbpf: "prog 'NAME': failed to load: -22"
  static constexpr std::string_view kTail = "': failed to load";
  auto end = log.find(kTail);
  if (end == std::string::npos) return "";
  auto start = log.rfind("prog '", end);
  if (start == std::string::npos) return "";
  return log.substr(start + 6, end - start - 6);
}
}  // namespace detail

void routeLibbpfLogToSpdlog() {
  static std::once_flag once;
  std::call_once(once, [] { libbpf_set_print(libbpfPrint); });
}

bool kernelHasTracepoint(const std::string& name) {
  btf* vmlinux = btf__load_vmlinux_btf();
  if (vmlinux == nullptr) return false;
  bool found = btf__find_by_name_kind(vmlinux, ("btf_trace_" + name).c_str(), BTF_KIND_TYPEDEF) >= 0;
  btf__free(vmlinux);
  return found;
}

void ExitCounter::SkelDeleter::operator()(exitcount_bpf* s) const { exitcount_bpf__destroy(s); }

Result<ExitCounter> ExitCounter::start(std::uint32_t max_groups) {
  routeLibbpfLogToSpdlog();
  if (!kernelHasTracepoint("sched_process_exit"))
    return makeError(ENOENT, "tracepoint sched:sched_process_exit not in this kernel's BTF");
  std::unique_ptr<exitcount_bpf, SkelDeleter> skel(exitcount_bpf__open());
  if (!skel) return errnoError("opening the exitcount BPF object");
  if (int err = bpf_map__set_max_entries(skel->maps.exit_counts, max_groups); err != 0)
    return makeError(-err, fmt::format("sizing exit_counts to {} entries", max_groups));
  if (int err = exitcount_bpf__load(skel.get()); err != 0) return makeError(-err, "loading the exitcount BPF programs");
  if (int err = exitcount_bpf__attach(skel.get()); err != 0)
    return makeError(-err, "attaching tp_btf/sched_process_exit");
  return ExitCounter(std::move(skel));
}

std::optional<ExitCount> ExitCounter::lookup(pid_t tgid) const {
  __u32 key = static_cast<__u32>(tgid);
  exit_count v{};
  if (bpf_map__lookup_elem(skel_->maps.exit_counts, &key, sizeof key, &v, sizeof v, 0) != 0) return std::nullopt;
  return ExitCount{v.thread_exits, v.group_exits != 0, v.exit_code};
}

std::uint64_t ExitCounter::totalExits() const {
  return __atomic_load_n(&skel_->bss->total_exits, __ATOMIC_RELAXED);
}

}  // namespace headroom
