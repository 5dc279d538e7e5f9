// HTTP at the socket level, for tests that must send what no client library would: half a
// request, a byte at a time, garbage, or a thousand connections at once.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

namespace headroom::testing {

// A blocking TCP connection to 127.0.0.1:port; -1 when refused.
int connectLoopback(int port);
// Sends `raw` on a new connection and reads until the server closes it or `limit` passes.
std::string rawRequest(int port, const std::string& raw,
                       std::chrono::milliseconds limit = std::chrono::milliseconds(5000));
// "HTTP/1.1 200 OK" of a response.
std::string statusLine(const std::string& response);

// A server on 127.0.0.1 (a free port) that answers as no HTTP library would: too much, a byte at
// a time, or never. Connections are taken one at a time; `answer` gets each one's socket once
// the request's head has come, writes what it likes, and returns (when stopping() at the latest);
// the connection is closed after.
class RawServer {
 public:
  using Answer = std::function<void(int fd, const RawServer& server)>;
  explicit RawServer(Answer answer);
  ~RawServer();  // stops taking connections and waits for the one being answered
  RawServer(const RawServer&) = delete;
  RawServer& operator=(const RawServer&) = delete;

  int port() const { return port_; }
  std::string url(const std::string& path = "/") const;
  bool stopping() const { return stop_; }
  int connections() const { return connections_; }

 private:
  void serve();
  Answer answer_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

}  // namespace headroom::testing
