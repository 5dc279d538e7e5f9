// The server's poller and workers: connections admitted, watched with epoll, closed at their
// deadlines or to make room, and handed whole to a worker that answers them.
#include "poller.h"

#include <fmt/format.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <string_view>

namespace headroom::net_detail {
namespace {

std::string busyAnswer() {
  constexpr std::string_view kBody = R"({"error":"too many connections now"})";
  return fmt::format(
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
      "Connection: close\r\nContent-Length: {}\r\n\r\n{}",
      kBody.size(), kBody);
}

}  // namespace

Poller::Poller(const HttpLimits& limits, Counters& counters, Serve serve)
    : limits_(limits), counters_(counters), serve_(std::move(serve)) {
  epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;
  ::epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_, &ev);
  poller_ = std::thread([this] { loop(); });
  for (std::size_t i = 0; i < limits_.workers; ++i) workers_.emplace_back([this] { work(); });
}

void Poller::watch(std::unique_ptr<Connection> c) {
  {
    std::lock_guard lk(m_);
    if (stopping_) return;
    incoming_.push_back(std::move(c));
  }
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_, &one, sizeof(one));
}

void Poller::stop() {
  {
    std::lock_guard lk(m_);
    if (stopping_) return;
    stopping_ = true;
  }
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_, &one, sizeof(one));
  poller_.join();
  {
    // A worker waiting on a slow client is woken at once rather than at its deadline.
    std::lock_guard lk(ready_m_);
    ready_stop_ = true;
    for (Connection* c : serving_) ::shutdown(c->fd, SHUT_RDWR);
  }
  ready_cv_.notify_all();
  for (auto& t : workers_) t.join();
  ready_.clear();
  incoming_.clear();
  ::close(epoll_);
  ::close(wake_);
}

void Poller::loop() {
  std::array<epoll_event, 64> events{};
  for (;;) {
    // Awake for events, or at the next deadline of a connection waiting: none, no wakeups.
    int timeout = -1;
    if (!waiting_.empty()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next_deadline_ - Clock::now()).count();
      timeout = static_cast<int>(std::clamp<long long>(left + 1, 0, 60'000));
    }
    int n = ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), timeout);
    for (int i = 0; i < n; ++i) {
      if (events[static_cast<std::size_t>(i)].data.ptr == nullptr) {
        std::uint64_t v = 0;
        [[maybe_unused]] auto r = ::read(wake_, &v, sizeof(v));
        continue;
      }
      auto* c = static_cast<Connection*>(events[static_cast<std::size_t>(i)].data.ptr);
      if (waiting_.contains(c)) progress(*c);
    }
    std::vector<std::unique_ptr<Connection>> arrived;
    {
      std::lock_guard lk(m_);
      if (stopping_) break;
      arrived.swap(incoming_);
    }
    for (auto& c : arrived) admit(std::move(c));
    if (auto now = Clock::now(); now >= next_deadline_) expire(now);
  }
  for (auto& [c, owned] : waiting_) ::epoll_ctl(epoll_, EPOLL_CTL_DEL, c->fd, nullptr);
  waiting_.clear();
}

void Poller::admit(std::unique_ptr<Connection> c) {
  if (waiting_.size() >= limits_.max_connections) {
    // Room for the newcomer: the connection that has waited longest goes.
    Connection* oldest = nullptr;
    for (const auto& [waiting, owned] : waiting_)
      if (oldest == nullptr || waiting->since < oldest->since) oldest = waiting;
    if (oldest != nullptr) {
      ++counters_.evicted;
      close(*oldest);
    }
  }
  c->since = Clock::now();
  c->deadline = c->since + (c->answered ? limits_.idle_timeout : limits_.request_timeout);
  if (waiting_.empty() || c->deadline < next_deadline_) next_deadline_ = c->deadline;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.ptr = c.get();
  if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, c->fd, &ev) != 0) return;  // closed with it
  Connection& ref = *c;
  waiting_.emplace(c.get(), std::move(c));
  progress(ref);
}

void Poller::progress(Connection& c) {
  ConnectionStream& s = c.stream;
  if (c.security->tls && !s.handshaken()) {
    Step h = s.handshakeStep(c.security->tls->current().get());
    if (h == Step::kAgain) return;
    if (h == Step::kFailed || !certificateAllowed(s.ssl(), c.security->tls->config().client_allowed_sans)) {
      ++counters_.tls_failures;
      close(c);
      return;
    }
  }
  Step r = s.readAvailable();
  switch (s.request()) {
    case ConnectionStream::Request::kWhole: dispatch(c); return;
    case ConnectionStream::Request::kTooLarge:
      ++counters_.too_large;
      s.refuse("431 Request Header Fields Too Large");
      close(c);
      return;
    case ConnectionStream::Request::kMalformed:
      ++counters_.malformed;
      s.refuse("400 Bad Request");
      close(c);
      return;
    case ConnectionStream::Request::kPartial:
      if (r == Step::kFailed) close(c);
      return;
  }
}

void Poller::expire(Clock::time_point now) {
  std::vector<Connection*> late;
  next_deadline_ = Clock::time_point::max();
  for (const auto& [c, owned] : waiting_) {
    if (now >= c->deadline)
      late.push_back(c);
    else
      next_deadline_ = std::min(next_deadline_, c->deadline);
  }
  for (Connection* c : late) {
    // A kept-alive connection's idle time running out is no fault; a request that never came
    // whole (or a handshake that never ended) is.
    if (!c->answered || c->stream.buffered() > 0) ++counters_.timeouts;
    close(*c);
  }
}

void Poller::close(Connection& c) {
  ::epoll_ctl(epoll_, EPOLL_CTL_DEL, c.fd, nullptr);
  waiting_.erase(&c);
}

void Poller::dispatch(Connection& c) {
  ::epoll_ctl(epoll_, EPOLL_CTL_DEL, c.fd, nullptr);
  auto node = waiting_.extract(&c);
  if (node.empty()) return;
  std::unique_ptr<Connection> owned = std::move(node.mapped());
  {
    std::lock_guard lk(ready_m_);
    if (ready_.size() < limits_.max_pending) {
      ready_.push_back(std::move(owned));
      ready_cv_.notify_one();
      return;
    }
  }
  ++counters_.busy;
  if (!owned->security->tls) {
    static const std::string kBusy = busyAnswer();
    [[maybe_unused]] auto n = ::send(owned->fd, kBusy.data(), kBusy.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  }
}

void Poller::work() {
  for (;;) {
    std::unique_ptr<Connection> c;
    {
      std::unique_lock lk(ready_m_);
      ready_cv_.wait(lk, [&] { return ready_stop_ || !ready_.empty(); });
      if (ready_stop_) return;
      c = std::move(ready_.front());
      ready_.pop_front();
      serving_.push_back(c.get());
    }
    bool keep = serve_(*c);
    {
      std::lock_guard lk(ready_m_);
      serving_.erase(std::find(serving_.begin(), serving_.end(), c.get()));
    }
    if (keep) {
      c->answered = true;
      watch(std::move(c));
    }
  }
}

}  // namespace headroom::net_detail
