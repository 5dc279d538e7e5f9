// HTTP at the socket level, for tests that must send what no client library would: half a
// request, a byte at a time, garbage, or a thousand connections at once.
#pragma once

#include <chrono>
#include <string>

namespace headroom::testing {

// A blocking TCP connection to 127.0.0.1:port; -1 when refused.
int connectLoopback(int port);
// Sends `raw` on a new connection and reads until the server closes it or `limit` passes.
std::string rawRequest(int port, const std::string& raw,
                       std::chrono::milliseconds limit = std::chrono::milliseconds(5000));
// "HTTP/1.1 200 OK" of a response.
std::string statusLine(const std::string& response);

}  // namespace headroom::testing
