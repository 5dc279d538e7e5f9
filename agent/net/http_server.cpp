// The agent's HTTP server: cpp-httplib parses requests and routes them; the connections are
// headroom's own, so that no client can take the server from the scrapes:
// - a connection waiting (for its TLS handshake, for its request's bytes, for its next request
//   when kept alive) is watched by one thread with epoll and holds no thread: idle clients and
//   clients sending a byte at a time cost a socket each, no more (poller.cpp);
// - a request arrived whole goes to one of a few workers, which parse, route and answer it;
// - deadlines on each request as a whole (not per read), on the handshake and on each response;
//   a cap on header bytes, on body bytes (refused unread), on waiting connections (the one
//   waiting longest is closed for a newcomer) and on whole requests queued (503 beyond);
// - TLS (OpenSSL, tls.cpp) and basic auth (bcrypt through crypt(3), basic_auth.cpp) from the web
//   configuration file.
// httplib's own socket loop is replaced by overriding Server::process_and_close_socket: httplib
// hands each accepted socket over, and a worker drives Server::process_request over a Stream of
// headroom's (connection.cpp).
#include "headroom/net/http_server.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <httplib.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <mutex>

#include "poller.h"

namespace headroom {
namespace net_detail {
namespace {

// What the web config makes of the connections from now on; an error names the file.
Result<std::shared_ptr<const Security>> securityOf(const std::optional<WebConfig>& web) {
  auto s = std::make_shared<Security>();
  if (web) {
    if (web->tls) {
      auto tls = TlsContext::create(*web->tls);
      if (!tls) return tls.error().wrap(fmt::format("web config {}", web->path)).as(ErrorKind::kBadInput);
      s->tls = std::move(*tls);
    }
    if (!web->basic_auth_users.empty()) s->auth = std::make_shared<BasicAuth>(web->basic_auth_users);
    s->headers = web->headers;
  }
  return std::shared_ptr<const Security>(std::move(s));
}

// httplib hands each accepted socket over at once (on the listen thread), never to a pool.
class HandOver final : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

// The connection a worker serves (httplib's handlers do not say).
thread_local ConnectionStream* t_stream = nullptr;

}  // namespace

// httplib's server with headroom's connections.
class HttpCore final : public httplib::Server {
 public:
  HttpCore(HttpLimits limits, std::shared_ptr<const Security> initial)
      : limits_(limits),
        security_(std::move(initial)),
        poller_(limits_, counters_, [this](Connection& c) { return serve(c); }) {
    new_task_queue = [] { return new HandOver(); };
    set_payload_max_length(limits_.max_body_bytes);
    set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      auto sec = security();
      // Where the body ends must be beyond doubt, or a request can ride inside another past a
      // proxy that reads the other header: no Transfer-Encoding (never decoded here), one
      // Content-Length at most. Refused, and the connection closed after the answer.
      if (req.has_header("Transfer-Encoding") || req.get_header_value_count("Content-Length") > 1) {
        ++counters_.malformed;
        if (t_stream != nullptr) t_stream->closeAfter();
        res.status = 400;
        res.set_header("Connection", "close");
        res.set_content(req.has_header("Transfer-Encoding")
                            ? "{\"error\":\"Transfer-Encoding is not accepted: send a Content-Length\"}\n"
                            : "{\"error\":\"more than one Content-Length\"}\n",
                        "application/json");
        return HandlerResponse::Handled;
      }
      // A body over the limit is refused before it is read (httplib would read it all first).
      if (auto length = req.get_header_value("Content-Length"); !length.empty()) {
        std::uint64_t n = 0;
        auto [end, ec] = std::from_chars(length.data(), length.data() + length.size(), n);
        bool number = ec == std::errc() && end == length.data() + length.size();
        if (!number || n > limits_.max_body_bytes) {
          if (t_stream != nullptr) t_stream->closeAfter();
          res.status = number ? 413 : 400;
          res.set_header("Connection", "close");
          return HandlerResponse::Handled;
        }
      }
      if (sec->auth && !sec->auth->allows(req.get_header_value("Authorization"))) {
        ++counters_.unauthorized;
        res.status = 401;
        res.set_header("WWW-Authenticate", R"(Basic realm="headroom", charset="UTF-8")");
        res.set_content("{\"error\":\"unauthorized\"}\n", "application/json");
        for (const auto& [k, v] : sec->headers) res.set_header(k, v);
        return HandlerResponse::Handled;
      }
      return HandlerResponse::Unhandled;
    });
    set_post_routing_handler([this](const httplib::Request&, httplib::Response& res) {
      for (const auto& [k, v] : security()->headers) res.set_header(k, v);
    });
    set_logger([this](const httplib::Request&, const httplib::Response& res) {
      ++counters_.requests;
      if (t_stream != nullptr && (res.status == 400 || res.status == 413 || res.status == 414)) t_stream->closeAfter();
    });
  }
  ~HttpCore() override { poller_.stop(); }
  HttpCore(const HttpCore&) = delete;
  HttpCore& operator=(const HttpCore&) = delete;

  // httplib's listen backlog is 5: a burst of scrapes would wait on SYN retransmits.
  void widenBacklog() { ::listen(svr_sock_, 1024); }

  std::shared_ptr<const Security> security() const {
    std::lock_guard lk(security_m_);
    return security_;
  }
  void setSecurity(std::shared_ptr<const Security> s) {
    std::lock_guard lk(security_m_);
    security_ = std::move(s);
  }

  HttpServerStats stats() const {
    return {.connections = counters_.connections,
            .open = counters_.open,
            .requests = counters_.requests,
            .timeouts = counters_.timeouts,
            .evicted = counters_.evicted,
            .busy = counters_.busy,
            .too_large = counters_.too_large,
            .malformed = counters_.malformed,
            .tls_failures = counters_.tls_failures,
            .unauthorized = counters_.unauthorized};
  }

 private:
  bool process_and_close_socket(socket_t sock) override {
    ++counters_.connections;
    ::fcntl(sock, F_SETFL, ::fcntl(sock, F_GETFL) | O_NONBLOCK);
    poller_.watch(std::make_unique<Connection>(sock, limits_, counters_, security()));
    return true;
  }

  // A worker: the requests the buffer holds. True: the connection waits for its next one.
  bool serve(Connection& c) {
    ConnectionStream& s = c.stream;
    t_stream = &s;
    bool keep = true;
    do {
      s.beginRequest();
      bool closed = false, last = c.requests_left <= 1;
      bool ok = process_request(s, last, closed, [&](httplib::Request& req) { req.ssl = s.ssl(); });
      --c.requests_left;
      keep = ok && !closed && !last && !s.done();
    } while (keep && s.buffered() > 0);
    t_stream = nullptr;
    return keep;
  }

  HttpLimits limits_;
  Counters counters_;
  mutable std::mutex security_m_;
  std::shared_ptr<const Security> security_;
  Poller poller_;  // last: stopped first
};

}  // namespace net_detail

using net_detail::HttpCore;

Result<std::unique_ptr<HttpServer>> HttpServer::start(const ListenAddress& addr,
                                                      const std::map<std::string, HttpHandler>& routes,
                                                      const std::map<std::string, HttpHandler>& post_routes,
                                                      const std::optional<WebConfig>& web, HttpLimits limits) {
  auto security = net_detail::securityOf(web);
  if (!security) return security.error();
  // Each connection is a descriptor: those waiting, and those queued, a quarter of the limit each.
  if (rlimit rl{}; ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    limits.max_connections = std::max<std::size_t>(1, std::min<std::size_t>(limits.max_connections, rl.rlim_cur / 4));
    limits.max_pending = std::max<std::size_t>(1, std::min<std::size_t>(limits.max_pending, rl.rlim_cur / 4));
  }
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->core_ = std::make_unique<HttpCore>(limits, std::move(*security));
  HttpCore& srv = *s->core_;
  auto wrap = [](const HttpHandler& h) {
    return [h](const httplib::Request& req, httplib::Response& res) {
      HttpQuery q;
      for (const auto& [k, v] : req.params) q[k] = v;
      HttpResponse r = h(q);
      res.status = r.status;
      res.set_content(r.body, r.content_type);
    };
  };
  for (const auto& [path, handler] : routes) srv.Get(path, wrap(handler));
  for (const auto& [path, handler] : post_routes) srv.Post(path, wrap(handler));
  auto notAllowed = [](const httplib::Request&, httplib::Response& res) {
    res.status = 405;
    res.set_header("Allow", "GET");
    res.set_content("{\"error\":\"only GET is served\"}\n", "application/json");
  };
  srv.Post(".*", notAllowed);
  srv.Put(".*", notAllowed);
  srv.Delete(".*", notAllowed);
  srv.Patch(".*", notAllowed);
  srv.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 404)
      res.set_content(fmt::format("{{\"error\":\"no such path: {}\",\"paths\":[\"/metrics\",\"/healthz\","
                                  "\"/v1/snapshot\",\"/v1/budget\",\"/v1/ooms\"]}}\n",
                                  req.path.size() > 200 ? req.path.substr(0, 200) : req.path),
                      "application/json");
  });

  // httplib takes "::1" for IPv6, not "[::1]".
  std::string host = addr.host;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = addr.port;
  if (port == 0) {
    port = srv.bind_to_any_port(host);
    if (port < 0) port = 0;
  } else if (!srv.bind_to_port(host, port)) {
    port = 0;
  }
  if (port == 0) {
    return sysError(
        errno == 0 ? EADDRNOTAVAIL : errno,
        fmt::format("cannot listen on {} (address in use, or not an address of this machine)", addr.text()));
  }
  srv.widenBacklog();
  ListenAddress bound = addr;
  bound.port = static_cast<std::uint16_t>(port);
  s->address_ = bound.text();
  s->port_ = bound.port;
  s->thread_ = std::thread([&srv] { srv.listen_after_bind(); });
  // stop() before the loop runs would be lost (and the join would wait forever).
  for (int i = 0; i < 5000 && !srv.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return s;
}

HttpServer::~HttpServer() {
  if (core_) core_->stop();
  if (thread_.joinable()) thread_.join();
}

std::string HttpServer::address() const { return address_; }

bool HttpServer::tls() const { return core_ && core_->security()->tls != nullptr; }

HttpServerStats HttpServer::stats() const { return core_ ? core_->stats() : HttpServerStats{}; }

Status HttpServer::setWebConfig(const std::optional<WebConfig>& web) {
  auto security = net_detail::securityOf(web);
  if (!security) return security.error();
  core_->setSecurity(std::move(*security));
  return ok();
}

}  // namespace headroom
