// The prover's self-report URL asked on a thread of the fetcher's own, the answers kept for the
// sampler, which never waits for the endpoint.
#include "headroom/sources/self_report_fetcher.h"

#include <fmt/format.h>

#include <thread>
#include <utility>

#include "headroom/net/http_client.h"

namespace headroom {
namespace {

// Short: the answer is needed every sample, and a slow endpoint is said rather than waited for.
constexpr std::chrono::milliseconds kFetchTimeout{500};
// A Prometheus page of a busy prover fits; more is not a self-report.
constexpr std::size_t kMaxSelfReportBody = 4U << 20;

}  // namespace

Result<std::string> fetchSelfReport(const std::string& url) {
  HttpGetOptions get;
  get.timeout = kFetchTimeout;
  get.max_body_bytes = kMaxSelfReportBody;
  auto r = httpGet(url, get);
  if (!r) return r.error();
  if (r->status != 200) return ioError(fmt::format("GET {}: HTTP {}", url, r->status));
  return std::move(r->body);
}

SelfReportFetcher::SelfReportFetcher(SelfReportSource src, std::chrono::milliseconds period)
    : period_(period), state_(std::make_shared<State>()) {
  initHttpClient();  // before the thread that asks starts
  std::thread([state = state_, src = std::move(src), period] {
    std::unique_lock lock(state->mu);
    while (!state->stop) {
      lock.unlock();
      auto v = readSelfReport(src, fetchSelfReport);
      lock.lock();
      state->last = std::move(v);
      state->at = std::chrono::steady_clock::now();
      state->cv.wait_for(lock, period, [&] { return state->stop; });
    }
  }).detach();
}

SelfReportFetcher::~SelfReportFetcher() {
  std::lock_guard lock(state_->mu);
  state_->stop = true;
  state_->cv.notify_all();
}

std::optional<Result<std::uint64_t>> SelfReportFetcher::latest(const SelfReportSource& src,
                                                               std::chrono::milliseconds max_age) const {
  std::lock_guard lock(state_->mu);
  const auto age = std::chrono::steady_clock::now() - state_->at;  // since the last answer, or the start
  if (age > max_age)
    return makeError(ErrorKind::kUnavailable,
                     fmt::format("{}: no answer for {} ms (the endpoint is slow or stuck; samples go on without it)",
                                 src.text(), max_age.count()));
  return state_->last;  // nothing yet while the first fetch is not overdue
}

}  // namespace headroom
