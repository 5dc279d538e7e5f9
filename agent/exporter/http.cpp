#include "headroom/exporter/http.h"

#include <fmt/format.h>
#include <httplib.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <cerrno>

#include "headroom/sources/parse.h"
#include "headroom/util/text.h"

namespace headroom {
namespace {

bool validHostName(std::string_view h) {
  if (h.empty() || h.size() > 253 || h.front() == '-' || h.front() == '.' || h.back() == '-') return false;
  return std::all_of(h.begin(), h.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '.'; });
}

}  // namespace

Result<ListenAddress> listenAddressFromText(std::string_view text) {
  std::string_view t = trim(text);
  if (t.empty()) return makeError(0, fmt::format("empty {}", kListenAddressHint));
  ListenAddress out;
  std::string_view port;
  if (t.front() == '[') {
    auto close = t.find(']');
    if (close == std::string_view::npos) return makeError(0, fmt::format("no closing ] {}", kListenAddressHint));
    std::string host(t.substr(1, close - 1));
    in6_addr a6{};
    if (::inet_pton(AF_INET6, host.c_str(), &a6) != 1)
      return makeError(0, fmt::format("\"{}\" is not an IPv6 address {}", host, kListenAddressHint));
    std::string_view rest = t.substr(close + 1);
    if (rest.empty() || rest.front() != ':') return makeError(0, fmt::format("no port {}", kListenAddressHint));
    out.host = std::move(host);
    port = rest.substr(1);
  } else {
    auto colon = t.rfind(':');
    if (colon == std::string_view::npos) return makeError(0, fmt::format("no port {}", kListenAddressHint));
    std::string host(t.substr(0, colon));
    if (host.find(':') != std::string::npos)
      return makeError(0, fmt::format("an IPv6 address must be in brackets {}", kListenAddressHint));
    if (host.empty()) return makeError(0, R"(no address (use ADDR:PORT; "0.0.0.0:9464" listens on every address))");
    bool numeric = std::all_of(host.begin(), host.end(),
                               [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0 || c == '.'; });
    in_addr a4{};
    if (numeric ? ::inet_pton(AF_INET, host.c_str(), &a4) != 1 : !validHostName(host))
      return makeError(0, fmt::format("\"{}\" is not an IP address or host name {}", host, kListenAddressHint));
    out.host = std::move(host);
    port = t.substr(colon + 1);
  }
  if (port.empty()) return makeError(0, fmt::format("no port {}", kListenAddressHint));
  auto p = parseU64(port);
  if (!p ||
      !std::all_of(port.begin(), port.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }) ||
      *p > 65535)
    return makeError(0, fmt::format("port \"{}\" is not a number from 0 to 65535", port));
  out.port = static_cast<std::uint16_t>(*p);
  return out;
}

std::string ListenAddress::text() const {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

Result<ListenAddress> parseListenAddress(std::string_view text) {
  return listenAddressFromText(text).wrap(fmt::format("listen address {}", quotedText(text)));
}

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
    return makeError(
        errno == 0 ? EADDRNOTAVAIL : errno,
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
