// Every journal record sent off the machine (docs/events.md): one JSON line to stdout or a rotated
// file, and a structured entry to the systemd journal, written by a thread of their own.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "headroom/config/config.h"
#include "headroom/util/result.h"

namespace headroom {

// journald's native socket, where sd_journal_sendv() writes.
inline constexpr const char* kJournaldSocket = "/run/systemd/journal/socket";

// Whether records go to the journal: on, off, or for auto, when systemd started the agent
// ($INVOCATION_ID or $JOURNAL_STREAM set) and journald's socket is there.
bool journaldWanted(JournaldMode mode, const char* invocation_id, const char* journal_stream, bool socket_exists);

// The sinks' figures, for /metrics; per sink ("file", "stdout", "journald").
struct EventSinkStats {
  struct Sink {
    std::string name;
    std::uint64_t written = 0;
    std::uint64_t failures = 0;
  };
  std::vector<Sink> sinks;      // those configured
  std::uint64_t dropped = 0;    // records given up: the queue was over its bounds
  std::uint64_t queued = 0;     // records waiting for the writer
  std::uint64_t rotations = 0;  // of the file
};

// The agent's thread never waits on a sink: emit() queues the record's line and fields (at most
// kMaxQueued records and kMaxQueuedBytes, the oldest given up beyond and counted) and a writer
// thread writes them. A sink that fails (a full disk, stdout nobody reads, journald gone) loses
// that record for that sink alone, counted and said once in the log; the journal has it still.
class EventSink {
 public:
  static constexpr std::size_t kMaxQueued = 64;
  static constexpr std::size_t kMaxQueuedBytes = 32ULL << 20;
  // The journald call: the fields "NAME=value" in, 0 or a negative errno out (sd_journal_sendv
  // by default; tests give another).
  using JournaldSend = std::function<int(const std::vector<std::string>& fields)>;

  explicit EventSink(JournaldSend send = {});
  ~EventSink();  // waits up to 2 s for the queue to be written
  EventSink(const EventSink&) = delete;
  EventSink& operator=(const EventSink&) = delete;

  // (Re)configures; the file is opened again each time (SIGHUP after an external rotation). A
  // file that cannot be opened is an error naming it, and the other sinks go on.
  Status configure(const EventsConfig& cfg);
  void emit(const nlohmann::json& record);
  // Another kind of event, made by its writer: the line (newline-terminated) for the file or
  // stdout, the fields for journald. Queued as emit() queues.
  void emitPrepared(std::string line, std::vector<std::string> fields);
  // Waits until every queued record is written (or `limit` passed); true when none waits.
  bool drain(std::chrono::milliseconds limit);

  EventSinkStats stats() const;
  // For /healthz: {"output", "journald", "queued", "dropped", "failing": ["file: why", ...]}.
  nlohmann::json state() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace headroom
