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
  if (t.empty()) return badInput(fmt::format("empty {}", kListenAddressHint));
  ListenAddress out;
  std::string_view port;
  if (t.front() == '[') {
    auto close = t.find(']');
    if (close == std::string_view::npos) return badInput(fmt::format("no closing ] {}", kListenAddressHint));
    std::string host(t.substr(1, close - 1));
    in6_addr a6{};
    if (::inet_pton(AF_INET6, host.c_str(), &a6) != 1)
      return badInput(fmt::format("\"{}\" is not an IPv6 address {}", host, kListenAddressHint));
    std::string_view rest = t.substr(close + 1);
    if (rest.empty() || rest.front() != ':') return badInput(fmt::format("no port {}", kListenAddressHint));
    out.host = std::move(host);
    port = rest.substr(1);
  } else {
    auto colon = t.rfind(':');
    if (colon == std::string_view::npos) return badInput(fmt::format("no port {}", kListenAddressHint));
    std::string host(t.substr(0, colon));
    if (host.find(':') != std::string::npos)
      return badInput(fmt::format("an IPv6 address must be in brackets {}", kListenAddressHint));
    if (host.empty()) return badInput(R"(no address (use ADDR:PORT; "0.0.0.0:9464" listens on every address))");
    bool numeric = std::all_of(host.begin(), host.end(),
                               [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0 || c == '.'; });
    in_addr a4{};
    if (numeric ? ::inet_pton(AF_INET, host.c_str(), &a4) != 1 : !validHostName(host))
      return badInput(fmt::format("\"{}\" is not an IP address or host name {}", host, kListenAddressHint));
    out.host = std::move(host);
    port = t.substr(colon + 1);
  }
  if (port.empty()) return badInput(fmt::format("no port {}", kListenAddressHint));
  auto p = parseU64(port);
  if (!p ||
      !std::all_of(port.begin(), port.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }) ||
      *p > 65535)
    return badInput(fmt::format("port \"{}\" is not a number from 0 to 65535", port));
  out.port = static_cast<std::uint16_t>(*p);
  return out;
}

std::string ListenAddress::text() const {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

bool ListenAddress::loopback() const { return host == "localhost" || host == "::1" || host.starts_with("127."); }

Result<ListenAddress> parseListenAddress(std::string_view text) {
  return listenAddressFromText(text).wrap(fmt::format("listen address {}", quotedText(text)));
}

Result<HttpResponse> httpGet(const std::string& url, std::chrono::milliseconds timeout, const HttpClientAuth& auth) {
  std::string_view scheme = url.rfind("https://", 0) == 0 ? "https://" : "http://";
  if (url.rfind(scheme, 0) != 0)
    return badInput(fmt::format("{}: not an http:// or https:// URL (e.g. http://127.0.0.1:9464/v1/budget)", url));
  auto slash = url.find('/', scheme.size());
  std::string base = url.substr(0, slash);
  std::string path = slash == std::string::npos ? "/" : url.substr(slash);
  if (base.size() == scheme.size()) return badInput(fmt::format("{}: no host", url));
  httplib::Client c(base, auth.cert_file, auth.key_file);
  if (!c.is_valid()) return badInput(fmt::format("{}: not a valid URL", url));
  auto secs = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  auto usecs = std::chrono::duration_cast<std::chrono::microseconds>(timeout - secs);
  c.set_connection_timeout(secs.count(), usecs.count());
  c.set_read_timeout(secs.count(), usecs.count());
  c.set_write_timeout(secs.count(), usecs.count());
  if (scheme == "https://") {
    c.enable_server_certificate_verification(true);
    if (!auth.ca_file.empty()) c.set_ca_cert_path(auth.ca_file);
  }
  if (!auth.user.empty()) c.set_basic_auth(auth.user, auth.password);
  auto r = c.Get(path);
  if (!r) return ioError(fmt::format("GET {}: {}", url, httplib::to_string(r.error())));
  HttpResponse out;
  out.status = r->status;
  out.content_type = r->get_header_value("Content-Type");
  out.body = r->body;
  return out;
}

}  // namespace headroom
