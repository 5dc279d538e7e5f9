// The agent's one HTTP server (cpp-httplib) on a thread of its own. Routes are callbacks, so
// the server knows nothing of the model; each answer is built by the agent under its own locks.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "headroom/util/result.h"

namespace httplib {
class Server;
}

namespace headroom {

inline constexpr std::string_view kListenAddressHint =
    R"((use ADDR:PORT, e.g. "127.0.0.1:9464", "0.0.0.0:9464", "[::1]:9464"))";

struct ListenAddress {
  std::string host = "127.0.0.1";  // IPv4 address, host name, or IPv6 address (kept without [])
  std::uint16_t port = 9464;       // 0: any free port (tests)
  std::string text() const;        // "127.0.0.1:9464", "[::1]:9464"
  bool operator==(const ListenAddress&) const = default;
};
// "ADDR:PORT" ("127.0.0.1:9464", "0.0.0.0:9464", "[::1]:9464", "localhost:9464"). The error is
// the reason alone, with kListenAddressHint, for the caller to say where the text came from.
Result<ListenAddress> listenAddressFromText(std::string_view text);
// The same, the error naming the text: listen address "x": ...
Result<ListenAddress> parseListenAddress(std::string_view text);

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};
// The query string's parameters ("?limit=5" -> {"limit": "5"}).
using HttpQuery = std::map<std::string, std::string>;
using HttpHandler = std::function<HttpResponse(const HttpQuery&)>;

class HttpServer {
 public:
  // Binds (an error names the address when it cannot) and starts serving GET `routes` and
  // POST `post_routes`; anything else is 404 (unknown path) or 405 (other methods).
  static Result<std::unique_ptr<HttpServer>> start(const ListenAddress& addr,
                                                   const std::map<std::string, HttpHandler>& routes,
                                                   const std::map<std::string, HttpHandler>& post_routes = {});
  ~HttpServer();  // stops serving and joins the thread
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  std::uint16_t port() const { return port_; }  // the bound port (useful with port 0)
  std::string address() const;                  // "127.0.0.1:9464"

 private:
  HttpServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::string address_;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

// GET `url` ("http://HOST:PORT/PATH"; http only) with `timeout` for connecting and again for
// reading. Any HTTP status is a response; an error is a URL that is not one, or no answer
// (refused, unreachable, timed out), naming the URL.
Result<HttpResponse> httpGet(const std::string& url, std::chrono::milliseconds timeout);

}  // namespace headroom
