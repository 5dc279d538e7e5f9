// The probe's child: a process that allocates and touches memory on command, chunk by chunk,
// and releases it all at the end, while the parent watches every bound. Commands, one per line:
// "A <bytes>" allocate and touch; "R" release everything; "W" warm up. Private to agent/probe.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>

#include "headroom/probe/probe.h"
#include "headroom/util/result.h"

namespace headroom::detail {

class ProbeChild {
 public:
  // Forks the child (it touches with `mode` on `threads` threads).
  static Result<ProbeChild> start(TouchMode mode, unsigned threads);
  ProbeChild(ProbeChild&& o) noexcept;
  ProbeChild& operator=(ProbeChild&&) = delete;
  ProbeChild(const ProbeChild&) = delete;
  ProbeChild& operator=(const ProbeChild&) = delete;
  ~ProbeChild();  // kills and reaps a child still there

  pid_t pid() const { return pid_; }
  void send(const std::string& line);
  // The next reply line, or nullopt when the child died (or said nothing in time).
  std::optional<std::string> reply(std::chrono::milliseconds timeout);
  // Ends the child (stdin closed) and returns its wait status.
  int finish();

 private:
  ProbeChild(pid_t pid, int to, int from) : pid_(pid), to_(to), from_(from) {}
  pid_t pid_;
  int to_, from_;
  std::string buf_;
};

}  // namespace headroom::detail
