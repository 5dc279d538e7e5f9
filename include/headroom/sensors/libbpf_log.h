// libbpf's own log routed into spdlog, and caught while a load runs to learn which program the
// kernel refused: what every BPF owner in headroom shares.
#pragma once

#include <string>

namespace headroom {

// Routes libbpf's log lines into spdlog (once per process; idempotent).
void routeLibbpfLogToSpdlog();

namespace detail {
// Keeps libbpf's warnings on this thread while it lives.
class LibbpfLogCapture {
 public:
  LibbpfLogCapture();
  ~LibbpfLogCapture();
  LibbpfLogCapture(const LibbpfLogCapture&) = delete;
  LibbpfLogCapture& operator=(const LibbpfLogCapture&) = delete;
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  std::string* previous_;
};
// The program named in libbpf's "prog 'NAME': failed to load", or "".
std::string failedProgram(const std::string& log);
// The map named in libbpf's "map 'NAME': failed to create", or "".
std::string failedMap(const std::string& log);
}  // namespace detail

}  // namespace headroom
