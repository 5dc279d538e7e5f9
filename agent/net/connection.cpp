// A connection's bytes for the server: what the poller reads without waiting, what a worker
// reads and writes within the request's deadlines, over a plain socket or TLS.
#include "connection.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace headroom::net_detail {
namespace {

void describePeer(int fd, bool local, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  int rc = local ? ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len)
                 : ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len);
  if (rc != 0) return;
  std::array<char, INET6_ADDRSTRLEN> buf{};
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    if (::inet_ntop(AF_INET, &v4->sin_addr, buf.data(), buf.size()) != nullptr) ip = buf.data();
    port = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    if (::inet_ntop(AF_INET6, &v6->sin6_addr, buf.data(), buf.size()) != nullptr) ip = buf.data();
    port = ntohs(v6->sin6_port);
  }
}

// The value of header `name` (lower case) in a request's header block, "" when absent.
std::string_view headerValue(std::string_view block, std::string_view name) {
  for (std::size_t at = block.find("\r\n"); at != std::string_view::npos; at = block.find("\r\n", at + 2)) {
    std::string_view line = block.substr(at + 2);
    line = line.substr(0, line.find("\r\n"));
    if (line.size() <= name.size() || line[name.size()] != ':') continue;
    if (!std::equal(name.begin(), name.end(), line.begin(),
                    [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); }))
      continue;
    std::string_view v = line.substr(name.size() + 1);
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    return v;
  }
  return {};
}

}  // namespace

ConnectionStream::~ConnectionStream() {
  if (ssl_ != nullptr) SSL_free(ssl_);
}

Step ConnectionStream::handshakeStep(SSL_CTX* ctx) {
  if (ssl_ == nullptr) {
    ssl_ = SSL_new(ctx);
    if (ssl_ == nullptr || SSL_set_fd(ssl_, fd_) != 1) return Step::kFailed;
  }
  ERR_clear_error();
  int r = SSL_accept(ssl_);
  if (r == 1) {
    handshaken_ = true;
    return Step::kDone;
  }
  int e = SSL_get_error(ssl_, r);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return Step::kAgain;
  failed_ = true;
  return Step::kFailed;
}

Step ConnectionStream::readAvailable() {
  const std::size_t enough = limits_.max_header_bytes + limits_.max_body_bytes + 4;
  compact();
  for (;;) {
    if (buffered() > enough) return Step::kDone;
    std::array<char, 4096> tmp;
    ssize_t n = rawRead(tmp.data(), tmp.size());
    if (n > 0) {
      buf_.append(tmp.data(), static_cast<std::size_t>(n));
      continue;
    }
    if (n == -1) return Step::kAgain;
    return Step::kFailed;
  }
}

ConnectionStream::Request ConnectionStream::request() const {
  std::string_view b(buf_.data() + pos_, buffered());
  auto end = b.find("\r\n\r\n");
  // The head (all of it buffered so far while it has no end): each LF follows a CR.
  const std::string_view head = b.substr(0, end == std::string_view::npos ? b.size() : end);
  for (std::size_t lf = head.find('\n'); lf != std::string_view::npos; lf = head.find('\n', lf + 1)) {
    if (lf == 0 || head[lf - 1] != '\r') return Request::kMalformed;
  }
  if (end == std::string_view::npos)
    return b.size() > limits_.max_header_bytes ? Request::kTooLarge : Request::kPartial;
  if (end + 4 > limits_.max_header_bytes) return Request::kTooLarge;
  std::string_view headers = b.substr(0, end + 2);
  if (!headerValue(headers, "expect").empty()) return Request::kWhole;  // the worker says 100 Continue
  std::string_view length = headerValue(headers, "content-length");
  std::uint64_t n = 0;
  auto [p, ec] = std::from_chars(length.data(), length.data() + length.size(), n);
  if (!length.empty() && ec == std::errc() && p == length.data() + length.size() && n <= limits_.max_body_bytes &&
      b.size() - end - 4 < n)
    return Request::kPartial;
  return Request::kWhole;
}

void ConnectionStream::refuse(std::string_view status) {
  std::string r = fmt::format("HTTP/1.1 {}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", status);
  if (ssl_ != nullptr)
    (void)SSL_write(ssl_, r.data(), static_cast<int>(r.size()));
  else
    (void)::send(fd_, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  failed_ = true;
}

ssize_t ConnectionStream::read(char* ptr, size_t size) {
  if (failed_) return -1;
  while (buffered() == 0) {
    compact();
    std::array<char, 4096> tmp;
    ssize_t n = rawRead(tmp.data(), tmp.size());
    if (n > 0) {
      buf_.append(tmp.data(), static_cast<std::size_t>(n));
    } else if (n == -1) {
      if (!waitFor(POLLIN, read_deadline_)) return -1;
    } else {
      return n == 0 ? 0 : -1;
    }
  }
  std::size_t take = std::min(size, buffered());
  std::memcpy(ptr, buf_.data() + pos_, take);
  pos_ += take;
  return static_cast<ssize_t>(take);
}

ssize_t ConnectionStream::write(const char* ptr, size_t size) {
  if (failed_) return -1;
  if (!write_started_) {
    write_started_ = true;
    write_deadline_ = Clock::now() + limits_.write_timeout;
  }
  for (;;) {
    if (ssl_ != nullptr) {
      ERR_clear_error();
      int r = SSL_write(ssl_, ptr, static_cast<int>(std::min<std::size_t>(size, 1 << 30)));
      if (r > 0) return r;
      int e = SSL_get_error(ssl_, r);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        if (!waitFor(e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, write_deadline_)) return -1;
        continue;
      }
    } else {
      ssize_t n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!waitFor(POLLOUT, write_deadline_)) return -1;
        continue;
      }
    }
    failed_ = true;
    return -1;
  }
}

void ConnectionStream::get_remote_ip_and_port(std::string& ip, int& port) const { describePeer(fd_, false, ip, port); }
void ConnectionStream::get_local_ip_and_port(std::string& ip, int& port) const { describePeer(fd_, true, ip, port); }

void ConnectionStream::compact() {
  if (pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  }
}

ssize_t ConnectionStream::rawRead(char* to, std::size_t size) {
  for (;;) {
    if (ssl_ != nullptr) {
      ERR_clear_error();
      int r = SSL_read(ssl_, to, static_cast<int>(size));
      if (r > 0) return r;
      int e = SSL_get_error(ssl_, r);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return -1;
      if (e == SSL_ERROR_ZERO_RETURN) return 0;
      failed_ = true;
      return -2;
    }
    ssize_t n = ::recv(fd_, to, size, 0);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return -1;
    failed_ = true;
    return -2;
  }
}

bool ConnectionStream::waitFor(short events, Clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) break;
    pollfd p{fd_, events, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 60'000)));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) {
      failed_ = true;
      return false;
    }
  }
  ++counters_.timeouts;
  failed_ = true;
  return false;
}

Connection::~Connection() {
  if (stream.ssl() != nullptr && stream.handshaken() && !stream.failed()) SSL_shutdown(stream.ssl());
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
  --counters.open;
}

}  // namespace headroom::net_detail
