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

RawServer::RawServer(Answer answer) : answer_(std::move(answer)) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd_, 16) != 0 ||
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return;  // port() 0: nothing listens, and a client is refused
  port_ = ntohs(a.sin_port);
  thread_ = std::thread([this] { serve(); });
}

RawServer::~RawServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) ::close(fd_);
}

std::string RawServer::url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }

void RawServer::serve() {
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    ++connections_;
    std::string head;
    std::array<char, 4096> buf{};
    while (!stop_ && head.find("\r\n\r\n") == std::string::npos) {
      pollfd q{c, POLLIN, 0};
      if (::poll(&q, 1, 20) <= 0) continue;
      auto n = ::recv(c, buf.data(), buf.size(), 0);
      if (n <= 0) break;
      head.append(buf.data(), static_cast<std::size_t>(n));
    }
    if (head.find("\r\n\r\n") != std::string::npos) answer_(c, *this);
    ::close(c);
  }
}

}  // namespace headroom::testing
