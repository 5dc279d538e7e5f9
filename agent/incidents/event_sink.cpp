// The events' writer thread and its sinks (docs/events.md). See incidents/event_sink.h.
#include "headroom/incidents/event_sink.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/uio.h>
#include <systemd/sd-journal.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "headroom/incidents/event_file.h"
#include "headroom/report/events.h"
#include "headroom/util/files.h"

namespace headroom {
namespace {

constexpr const char* kFile = "file";
constexpr const char* kStdout = "stdout";
constexpr const char* kJournald = "journald";

int sdJournalSend(const std::vector<std::string>& fields) {
  std::vector<iovec> iov;
  iov.reserve(fields.size());
  for (const std::string& f : fields)
    iov.push_back(
        iovec{const_cast<char*>(f.data()), f.size()});  // NOLINT(cppcoreguidelines-pro-type-const-cast): iovec's type
  return sd_journal_sendv(iov.data(), static_cast<int>(iov.size()));
}

}  // namespace

bool journaldWanted(JournaldMode mode, const char* invocation_id, const char* journal_stream, bool socket_exists) {
  switch (mode) {
    case JournaldMode::kOn: return true;
    case JournaldMode::kOff: return false;
    case JournaldMode::kAuto: break;
  }
  const bool under_systemd =
      (invocation_id != nullptr && *invocation_id != '\0') || (journal_stream != nullptr && *journal_stream != '\0');
  return under_systemd && socket_exists;
}

struct EventSink::State {
  struct Item {
    std::string line;                 // for the file and stdout
    std::vector<std::string> fields;  // for journald
    std::size_t bytes = 0;
  };
  // What the writer writes to; handed over whole at each configure().
  struct Sinks {
    std::unique_ptr<EventFile> file;
    bool to_stdout = false;
    bool journald = false;
  };
  struct Counts {
    std::uint64_t written = 0, failures = 0;
    std::string failing;  // the last error while the sink fails; "" when it works
  };

  std::mutex mu;
  std::condition_variable work;  // an item, new sinks, or stop
  std::condition_variable idle;  // the queue is written
  std::deque<Item> queue;
  std::size_t queued_bytes = 0;
  bool busy = false;  // the writer holds an item
  bool stop = false;
  bool done = false;  // the writer returned
  std::optional<Sinks> next;
  // What emit() builds, and what the state says (the writer's sinks may lag by one handover).
  bool want_line = false, want_fields = false;
  std::string output;
  bool journald = false;
  std::vector<std::string> names;        // the configured sinks
  std::map<std::string, Counts> counts;  // by sink, for as long as the agent runs
  std::uint64_t dropped = 0, rotations = 0;
  JournaldSend send;

  void run();
  void write(Sinks& sinks, const Item& item);
  void outcome(const char* sink, const Status& st);
};

void EventSink::State::outcome(const char* sink, const Status& st) {
  std::lock_guard lock(mu);
  Counts& c = counts[sink];
  if (st) {
    ++c.written;
    if (!c.failing.empty()) spdlog::info("events: {} works again", sink);
    c.failing.clear();
    return;
  }
  ++c.failures;
  // Said once while it fails: a sink that stays broken does not flood the log.
  if (c.failing.empty())
    spdlog::error("events: {}: {} (the record stays in the journal; counted in headroom_events_failures_total)", sink,
                  st.error().describe());
  c.failing = st.error().describe();
}

void EventSink::State::write(Sinks& sinks, const Item& item) {
  if (sinks.file) {
    const std::uint64_t rotated = sinks.file->stats().rotations;
    Status st = sinks.file->append(item.line);
    {
      std::lock_guard lock(mu);
      rotations += sinks.file->stats().rotations - rotated;
    }
    outcome(kFile, st);
  }
  if (sinks.to_stdout) outcome(kStdout, writeAll(STDOUT_FILENO, item.line, "an event to stdout"));
  if (sinks.journald && !item.fields.empty()) {
    const int r = send ? send(item.fields) : sdJournalSend(item.fields);
    outcome(kJournald, r >= 0 ? ok() : Status(sysError(-r, fmt::format("sending to journald ({})", kJournaldSocket))));
  }
}

void EventSink::State::run() {
  Sinks sinks;
  std::unique_lock lock(mu);
  for (;;) {
    work.wait(lock, [&] { return stop || next.has_value() || !queue.empty(); });
    if (next) {
      Sinks old = std::move(sinks);
      sinks = std::move(*next);
      next.reset();
      lock.unlock();
      old = Sinks{};  // the old file closed outside the lock
      lock.lock();
      continue;
    }
    if (queue.empty()) break;  // stopping, and everything written
    Item item = std::move(queue.front());
    queue.pop_front();
    queued_bytes -= item.bytes;
    busy = true;
    lock.unlock();
    write(sinks, item);
    lock.lock();
    busy = false;
    if (queue.empty()) idle.notify_all();
  }
  done = true;
  idle.notify_all();
}

EventSink::EventSink(JournaldSend send) : state_(std::make_shared<State>()) {
  state_->send = std::move(send);
  std::thread([state = state_] { state->run(); }).detach();
}

EventSink::~EventSink() {
  std::unique_lock lock(state_->mu);
  state_->stop = true;
  state_->work.notify_all();
  // A sink stuck in a write (stdout nobody reads) must not hold the agent's exit: after 2 s the
  // writer is left to end on its own (it holds its state).
  state_->idle.wait_for(lock, std::chrono::seconds(2), [&] { return state_->done; });
}

Status EventSink::configure(const EventsConfig& cfg) {
  State::Sinks sinks;
  Status result = ok();
  std::vector<std::string> names;
  if (cfg.output == "stdout") {
    sinks.to_stdout = true;
    names.emplace_back(kStdout);
  } else if (!cfg.output.empty()) {
    auto f = EventFile::open(EventFileOptions{cfg.output, cfg.max_bytes, cfg.max_files});
    if (f) {
      sinks.file = std::move(*f);
      names.emplace_back(kFile);
    } else {
      result = f.error();
    }
  }
  const bool socket = ::access(kJournaldSocket, W_OK) == 0;
  sinks.journald = journaldWanted(cfg.journald, std::getenv("INVOCATION_ID"), std::getenv("JOURNAL_STREAM"), socket);
  if (sinks.journald) names.emplace_back(kJournald);
  if (sinks.journald && !socket)
    spdlog::warn("events.journald = on, but journald's socket {} is not there: each record sent to it fails, counted",
                 kJournaldSocket);
  if (!names.empty())
    spdlog::info("events: each OOM record also goes to {}{}", fmt::join(names, " and "),
                 sinks.file ? fmt::format(" ({})", cfg.output) : std::string());
  std::lock_guard lock(state_->mu);
  state_->want_line = sinks.file != nullptr || sinks.to_stdout;
  state_->want_fields = sinks.journald;
  state_->output = cfg.output;
  state_->journald = sinks.journald;
  state_->names = names;
  for (const std::string& n : names) state_->counts[n];  // a series from the start
  state_->next = std::move(sinks);
  state_->work.notify_all();
  return result;
}

void EventSink::emit(const nlohmann::json& record) {
  bool line = false, fields = false;
  {
    std::lock_guard lock(state_->mu);
    line = state_->want_line;
    fields = state_->want_fields;
  }
  if (!line && !fields) return;
  emitPrepared(line ? eventLine(record) : std::string(), fields ? journaldFields(record) : std::vector<std::string>{});
}

void EventSink::emitPrepared(std::string line, std::vector<std::string> fields) {
  {
    std::lock_guard lock(state_->mu);
    if (!state_->want_line) line.clear();
    if (!state_->want_fields) fields.clear();
    if (line.empty() && fields.empty()) return;
  }
  State::Item item;
  item.line = std::move(line);
  item.fields = std::move(fields);
  item.bytes = item.line.size();
  for (const std::string& f : item.fields) item.bytes += f.size();
  std::lock_guard lock(state_->mu);
  state_->queued_bytes += item.bytes;
  state_->queue.push_back(std::move(item));
  // The newest stay, as the journal's backlog keeps them; at least the one that just came.
  while (state_->queue.size() > 1 && (state_->queue.size() > kMaxQueued || state_->queued_bytes > kMaxQueuedBytes)) {
    state_->queued_bytes -= state_->queue.front().bytes;
    state_->queue.pop_front();
    if (++state_->dropped == 1 || state_->dropped % 64 == 0)
      spdlog::error("events: {} record(s) given up so far: the sinks do not keep up (the journal has them)",
                    state_->dropped);
  }
  state_->work.notify_all();
}

bool EventSink::drain(std::chrono::milliseconds limit) {
  std::unique_lock lock(state_->mu);
  return state_->idle.wait_for(lock, limit, [&] { return state_->queue.empty() && !state_->busy; });
}

EventSinkStats EventSink::stats() const {
  std::lock_guard lock(state_->mu);
  EventSinkStats s;
  for (const std::string& n : state_->names) {
    const State::Counts& c = state_->counts[n];
    s.sinks.push_back({n, c.written, c.failures});
  }
  s.dropped = state_->dropped;
  s.queued = state_->queue.size();
  s.rotations = state_->rotations;
  return s;
}

nlohmann::json EventSink::state() const {
  std::lock_guard lock(state_->mu);
  nlohmann::json failing = nlohmann::json::array();
  for (const std::string& n : state_->names) {
    const State::Counts& c = state_->counts[n];
    if (!c.failing.empty()) failing.push_back(fmt::format("{}: {}", n, c.failing));
  }
  return {{"output", state_->output},
          {"journald", state_->journald},
          {"queued", state_->queue.size()},
          {"dropped", state_->dropped},
          {"failing", std::move(failing)}};
}

}  // namespace headroom
