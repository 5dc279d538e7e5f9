#include "testing/raw_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>

namespace headroom::testing {

int connectLoopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::string rawRequest(int port, const std::string& raw, std::chrono::milliseconds limit) {
  int fd = connectLoopback(port);
  if (fd < 0) return "";
  [[maybe_unused]] auto sent = ::send(fd, raw.data(), raw.size(), MSG_NOSIGNAL);
  std::string got;
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    std::array<char, 4096> buf{};
    auto n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n <= 0) break;
    got.append(buf.data(), static_cast<std::size_t>(n));
  }
  ::close(fd);
  return got;
}

std::string statusLine(const std::string& response) { return response.substr(0, response.find("\r\n")); }

}  // namespace headroom::testing
