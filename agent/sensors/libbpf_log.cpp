#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <spdlog/spdlog.h>

#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <string>

#include "headroom/sensors/libbpf_log.h"

namespace headroom {
namespace {

// Set while a LibbpfLogCapture lives on this thread: load failures are read back from it.
thread_local std::string* t_capture = nullptr;

__attribute__((format(printf, 2, 0))) int libbpfPrint(enum libbpf_print_level level, const char* format, va_list args) {
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

std::string failedMap(const std::string& log) {
  // libbpf: "map 'NAME': failed to create: Invalid argument(-22)" (programs' attachments fail
  // with "prog 'NAME': failed to create ...": not a map's).
  static constexpr std::string_view kHead = "map '";
  static constexpr std::string_view kTail = "': failed to create";
  for (auto start = log.find(kHead); start != std::string::npos; start = log.find(kHead, start + 1)) {
    auto name = start + kHead.size();
    auto end = log.find('\'', name);
    if (end == std::string::npos) break;
    if (log.compare(end, kTail.size(), kTail) == 0) return log.substr(name, end - name);
  }
  return "";
}
}  // namespace detail

void routeLibbpfLogToSpdlog() {
  static std::once_flag once;
  std::call_once(once, [] { libbpf_set_print(libbpfPrint); });
}

}  // namespace headroom
