// ListenAddress: the server's "ADDR:PORT", checked before anything binds.
#include "headroom/net/listen_address.h"

#include <fmt/format.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>

#include "headroom/util/numbers.h"
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

}  // namespace headroom
