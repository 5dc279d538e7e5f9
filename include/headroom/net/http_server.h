// The agent's one HTTP server on a thread of its own: cpp-httplib parses and routes, while the
// connections are headroom's own (agent/net/: connection.cpp, poller.cpp, tls.cpp,
// basic_auth.cpp): a bounded number served at once, deadlines on each request as a whole, TLS
// and basic auth from a web configuration file. Routes are callbacks, so the server knows
// nothing of the model; each answer is built by the agent under its own locks.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "headroom/net/http_response.h"
#include "headroom/net/listen_address.h"
#include "headroom/net/web_config.h"
#include "headroom/util/result.h"

namespace headroom {

// The query string's parameters ("?limit=5" -> {"limit": "5"}).
using HttpQuery = std::map<std::string, std::string>;
using HttpHandler = std::function<HttpResponse(const HttpQuery&)>;

// What a client may take of the server (docs/operations.md, "The HTTP endpoint").
struct HttpLimits {
  std::size_t workers = 4;  // threads that parse, route and answer whole requests
  // Connections waiting (for a handshake, a request's bytes, a kept-alive connection's next
  // request), watched by one thread; beyond, the one waiting longest is closed. This and
  // max_pending are each held to a quarter of the descriptor limit.
  std::size_t max_connections = 4096;
  std::size_t max_pending = 1024;  // whole requests waiting for a worker; beyond, 503 at once
  // From a connection's start or a request's first byte to its last header and body byte;
  // the TLS handshake too.
  std::chrono::milliseconds request_timeout{10000};
  std::chrono::milliseconds idle_timeout{5000};    // a kept-alive connection between requests
  std::chrono::milliseconds write_timeout{10000};  // a response, all of it
  std::size_t max_header_bytes = 16 * 1024;        // the request line and headers; beyond, 431
  std::size_t max_body_bytes = 64 * 1024;          // beyond, 413 (unread)
};

// Counted since the server started.
struct HttpServerStats {
  std::uint64_t connections = 0;  // accepted
  std::uint64_t open = 0;         // open now (waiting or being answered)
  std::uint64_t requests = 0;     // answered (any status)
  std::uint64_t timeouts = 0;     // closed at a deadline (request, handshake, response)
  std::uint64_t evicted = 0;      // closed while waiting, to make room for a newcomer
  std::uint64_t busy = 0;         // refused at once: too many waiting (503)
  std::uint64_t too_large = 0;    // headers over max_header_bytes (431)
  // Requests whose framing is ambiguous (400, the connection closed): a line of the head ending in
  // a bare LF, a Transfer-Encoding (never decoded), more than one Content-Length.
  std::uint64_t malformed = 0;
  std::uint64_t tls_failures = 0;  // handshakes that failed (bad client, no or wrong certificate)
  std::uint64_t unauthorized = 0;  // requests without the right basic auth (401)
};

namespace net_detail {
class HttpCore;
}

class HttpServer {
 public:
  // Binds (an error names the address when it cannot) and starts serving GET `routes` and
  // POST `post_routes`; anything else is 404 (unknown path) or 405 (other methods). `web`
  // (a --web.config.file) adds TLS and basic auth; its certificates are loaded here, so an
  // error names the file.
  static Result<std::unique_ptr<HttpServer>> start(const ListenAddress& addr,
                                                   const std::map<std::string, HttpHandler>& routes,
                                                   const std::map<std::string, HttpHandler>& post_routes = {},
                                                   const std::optional<WebConfig>& web = std::nullopt,
                                                   HttpLimits limits = {});
  ~HttpServer();  // stops serving and joins the thread
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  std::uint16_t port() const { return port_; }  // the bound port (useful with port 0)
  std::string address() const;                  // "127.0.0.1:9464"
  bool tls() const;                             // served over TLS now
  HttpServerStats stats() const;
  // A reload's web configuration for the connections from now on; on error the one before stays.
  Status setWebConfig(const std::optional<WebConfig>& web);

 private:
  HttpServer() = default;
  std::unique_ptr<net_detail::HttpCore> core_;
  std::string address_;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

}  // namespace headroom
