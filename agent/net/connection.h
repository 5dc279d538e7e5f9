// One client connection of the server: its bytes, plain or TLS, on a non-blocking socket, read by
// the poller until a request is whole and then by a worker through httplib's Stream; what the web
// config made of it; the server's counters. Private to agent/net.
#pragma once

#include <httplib.h>
#include <openssl/ssl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headroom/net/detail/basic_auth.h"
#include "headroom/net/http_server.h"
#include "tls.h"

namespace headroom::net_detail {

using Clock = std::chrono::steady_clock;

struct Counters {
  std::atomic<std::uint64_t> connections{0}, open{0}, requests{0}, timeouts{0}, evicted{0}, busy{0}, too_large{0},
      malformed{0}, tls_failures{0}, unauthorized{0};
};

// What the web config makes of each new connection; swapped whole at a reload.
struct Security {
  std::shared_ptr<TlsContext> tls;
  std::shared_ptr<BasicAuth> auth;
  std::vector<std::pair<std::string, std::string>> headers;
};

enum class Step { kDone, kAgain, kFailed };

// One connection's bytes, plain or TLS, on a non-blocking socket. The poller fills the buffer
// without ever waiting, until a request is whole; a worker then reads it from there, and reads
// past it (a body after "100 Continue", a pipelined request) only up to the request's deadline.
// A response is written within a deadline of its own.
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(int fd, const HttpLimits& limits, Counters& counters)
      : fd_(fd), limits_(limits), counters_(counters) {}
  ~ConnectionStream() override;
  ConnectionStream(const ConnectionStream&) = delete;
  ConnectionStream& operator=(const ConnectionStream&) = delete;

  SSL* ssl() const { return ssl_; }
  bool handshaken() const { return handshaken_; }
  std::size_t buffered() const { return buf_.size() - pos_; }
  bool done() const { return failed_ || close_after_; }
  bool failed() const { return failed_; }
  // After this response the connection closes: what follows a malformed request cannot be
  // trusted to be the next one.
  void closeAfter() { close_after_ = true; }

  // One step of the TLS handshake (the poller calls it again when the socket is ready).
  Step handshakeStep(SSL_CTX* ctx);
  // Reads what the socket holds now. kAgain: all of it (more may come); kDone: enough to judge
  // the request; kFailed: the peer closed or the connection broke.
  Step readAvailable();

  enum class Request { kPartial, kWhole, kTooLarge, kMalformed };
  // Whether the buffer holds a whole request: its headers within max_header_bytes, and its body
  // when one up to max_body_bytes is announced (a larger one is refused by the worker unread).
  // kMalformed: a line of its head ends in a bare LF (HTTP/1.1 lines end in CRLF; a reader that
  // takes LF alone splits requests where a proxy in front would not).
  Request request() const;

  // A worker starts on the next request in the buffer.
  void beginRequest() {
    read_deadline_ = Clock::now() + limits_.request_timeout;
    write_started_ = false;
  }
  // Answers with `status` and closes, without waiting on the client.
  void refuse(std::string_view status);

  bool is_readable() const override { return buffered() > 0 || (ssl_ != nullptr && SSL_pending(ssl_) > 0); }
  bool is_writable() const override { return !failed_; }
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return fd_; }

 private:
  void compact();
  // > 0 bytes; 0 the peer closed; -1 nothing now; -2 an error.
  ssize_t rawRead(char* to, std::size_t size);
  // Polls for `events` until `deadline`; at the deadline the connection is done, and counted.
  bool waitFor(short events, Clock::time_point deadline);

  int fd_;
  const HttpLimits& limits_;
  Counters& counters_;
  SSL* ssl_ = nullptr;
  bool handshaken_ = false;
  std::string buf_;
  std::size_t pos_ = 0;
  bool write_started_ = false, failed_ = false, close_after_ = false;
  Clock::time_point read_deadline_ = Clock::now(), write_deadline_ = Clock::now();
};

// A connection, owned by whichever holds it: the poller while it waits, a worker while it is
// served. Closing it (the destructor) ends TLS politely when the handshake was made.
struct Connection {
  Connection(int socket, const HttpLimits& limits, Counters& c, std::shared_ptr<const Security> s)
      : fd(socket), stream(socket, limits, c), security(std::move(s)), counters(c) {
    ++counters.open;
  }
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  int fd;
  ConnectionStream stream;
  std::shared_ptr<const Security> security;  // as it was when the connection came
  Counters& counters;
  Clock::time_point since = Clock::now();  // waiting since
  Clock::time_point deadline;              // closed then if still waiting
  std::size_t requests_left = 100;         // keep-alive: requests on one connection
  bool answered = false;                   // a request answered: waiting now is keep-alive idle time
};

}  // namespace headroom::net_detail
