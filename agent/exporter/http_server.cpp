#include "headroom/http_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <cerrno>

namespace headroom {

Result<std::unique_ptr<HttpServer>> HttpServer::start(const ListenAddress& addr,
                                                      const std::map<std::string, HttpHandler>& routes,
                                                      const std::map<std::string, HttpHandler>& post_routes) {
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->server_ = std::make_unique<httplib::Server>();
  httplib::Server& srv = *s->server_;
  // Scrapes are small and quick; a slow or stuck client must not hold a worker for long.
  srv.set_read_timeout(5, 0);
  srv.set_write_timeout(5, 0);
  srv.set_keep_alive_max_count(100);
  srv.set_payload_max_length(64 * 1024);
  // A few workers whatever the core count (httplib's default grows with it): scrapes are
  // short, and a GPU host's 192 cores must not mean 192 idle threads in the agent.
  srv.new_task_queue = [] { return new httplib::ThreadPool(4); };
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
    return makeError(errno == 0 ? EADDRNOTAVAIL : errno,
                     fmt::format("cannot listen on {} (address in use, or not an address of this machine)", addr.text()));
  }
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
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

std::string HttpServer::address() const { return address_; }

Result<HttpResponse> httpGet(const std::string& url, std::chrono::milliseconds timeout) {
  constexpr std::string_view kScheme = "http://";
  if (url.rfind(kScheme, 0) != 0)
    return makeError(EINVAL, fmt::format("{}: not an http:// URL (e.g. http://127.0.0.1:9464/v1/budget)", url));
  auto slash = url.find('/', kScheme.size());
  std::string base = url.substr(0, slash);
  std::string path = slash == std::string::npos ? "/" : url.substr(slash);
  if (base.size() == kScheme.size()) return makeError(EINVAL, fmt::format("{}: no host", url));
  httplib::Client c(base);
  if (!c.is_valid()) return makeError(EINVAL, fmt::format("{}: not a valid URL", url));
  auto secs = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  auto usecs = std::chrono::duration_cast<std::chrono::microseconds>(timeout - secs);
  c.set_connection_timeout(secs.count(), usecs.count());
  c.set_read_timeout(secs.count(), usecs.count());
  c.set_write_timeout(secs.count(), usecs.count());
  auto r = c.Get(path);
  if (!r) return makeError(0, fmt::format("GET {}: {}", url, httplib::to_string(r.error())));
  HttpResponse out;
  out.status = r->status;
  out.content_type = r->get_header_value("Content-Type");
  out.body = r->body;
  return out;
}

}  // namespace headroom
