// Where the agent's HTTP server listens: "ADDR:PORT" from a flag or a config key (IPv4, IPv6 in
// brackets, or a host name), and whether only this machine can reach it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "headroom/util/result.h"

namespace headroom {

inline constexpr std::string_view kListenAddressHint =
    R"((use ADDR:PORT, e.g. "127.0.0.1:9464", "0.0.0.0:9464", "[::1]:9464"))";

struct ListenAddress {
  std::string host = "127.0.0.1";  // IPv4 address, host name, or IPv6 address (kept without [])
  std::uint16_t port = 9464;       // 0: any free port (tests)
  std::string text() const;        // "127.0.0.1:9464", "[::1]:9464"
  bool loopback() const;           // 127.0.0.0/8, ::1 or localhost: only this machine reaches it
  bool operator==(const ListenAddress&) const = default;
};
// "ADDR:PORT" ("127.0.0.1:9464", "0.0.0.0:9464", "[::1]:9464", "localhost:9464"). The error is
// the reason alone, with kListenAddressHint, for the caller to say where the text came from.
Result<ListenAddress> listenAddressFromText(std::string_view text);
// The same, the error naming the text: listen address "x": ...
Result<ListenAddress> parseListenAddress(std::string_view text);

}  // namespace headroom
