// The server's connections between requests: one epoll thread watches every waiting connection
// (a handshake, a request's bytes, a kept-alive connection's next request) under the limits and
// deadlines of HttpLimits, and a few workers answer whole requests. Private to agent/net.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "connection.h"

namespace headroom::net_detail {

// Waiting connections cost no thread of their own; a request arrived whole goes to one of a few
// workers. Waiting connections beyond max_connections: the one waiting longest is closed. Whole
// requests beyond max_pending: 503.
class Poller {
 public:
  using Serve = std::function<bool(Connection&)>;  // true: keep the connection for the next request

  Poller(const HttpLimits& limits, Counters& counters, Serve serve);
  ~Poller() { stop(); }
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;

  // A new connection (the listen thread) or one kept alive after its answer (a worker).
  void watch(std::unique_ptr<Connection> c);
  // Closes every connection and joins the threads; a worker waiting on a slow client is woken.
  void stop();

 private:
  void loop();
  void admit(std::unique_ptr<Connection> c);
  // What a waiting connection's new bytes make of it.
  void progress(Connection& c);
  void expire(Clock::time_point now);
  void close(Connection& c);
  void dispatch(Connection& c);
  void work();

  HttpLimits limits_;
  Counters& counters_;
  Serve serve_;
  int epoll_ = -1, wake_ = -1;
  std::mutex m_;
  bool stopping_ = false;
  std::vector<std::unique_ptr<Connection>> incoming_;
  std::unordered_map<Connection*, std::unique_ptr<Connection>> waiting_;  // the poller thread's alone
  std::mutex ready_m_;
  std::condition_variable ready_cv_;
  bool ready_stop_ = false;
  std::deque<std::unique_ptr<Connection>> ready_;
  std::vector<Connection*> serving_;                            // by the workers now
  Clock::time_point next_deadline_ = Clock::time_point::max();  // the poller thread's alone
  std::thread poller_;
  std::vector<std::thread> workers_;
};

}  // namespace headroom::net_detail
