// The prover's self-report at a URL, fetched on a thread of its own (net's HTTP client), so that
// an endpoint that is slow, stuck or drips its answer holds that thread and never a sample.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "headroom/sources/self_report.h"
#include "headroom/util/result.h"

namespace headroom {

// Fetches `src` (a URL) every `period`; the sampler takes the latest answer while it is fresh.
// Stopping (the destructor) does not wait for a fetch in flight: the thread ends after it, on
// its own, with the state it shares.
class SelfReportFetcher {
 public:
  SelfReportFetcher(SelfReportSource src, std::chrono::milliseconds period);
  ~SelfReportFetcher();
  SelfReportFetcher(const SelfReportFetcher&) = delete;
  SelfReportFetcher& operator=(const SelfReportFetcher&) = delete;

  std::chrono::milliseconds period() const { return period_; }

  // The latest answer if it is at most `max_age` old, or why there is none; nothing before the
  // first answer while that is not overdue.
  std::optional<Result<std::uint64_t>> latest(const SelfReportSource& src, std::chrono::milliseconds max_age) const;

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool stop = false;
    std::optional<Result<std::uint64_t>> last;
    std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now();
  };
  std::chrono::milliseconds period_;
  std::shared_ptr<State> state_;
};

// GET `url` for a self-report: a short timeout (500 ms for the whole answer) and a cap on its
// size; any status but 200 is an error.
Result<std::string> fetchSelfReport(const std::string& url);

}  // namespace headroom
