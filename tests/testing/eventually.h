// Waiting in a test for what another thread does: a condition polled every 10 ms until it holds
// or a limit passes, so that a test neither sleeps longer than it must nor fails on a slow machine.
#pragma once

#include <chrono>
#include <thread>

namespace headroom::testing {

template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  for (auto end = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < end;
       std::this_thread::sleep_for(std::chrono::milliseconds(10)))
    if (pred()) return true;
  return pred();
}

}  // namespace headroom::testing
