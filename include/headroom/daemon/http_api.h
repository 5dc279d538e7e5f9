// The agent's HTTP API: GET /metrics, /healthz, /v1/snapshot, /v1/budget, /v1/ooms, /v1/warnings and POST
// /v1/probe (docs/api.md). The handlers run on the server's threads and answer from one state
// that the main thread publishes under one mutex after each sample; /metrics renders under the
// exporter's own lock, /v1/ooms and the journal's health come from the kill path's board.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "headroom/controller/controller.h"
#include "headroom/exporter/exporter.h"
#include "headroom/incidents/kill_board.h"
#include "headroom/model/snapshot.h"
#include "headroom/net/http_server.h"
#include "headroom/sensors/oom_event.h"

namespace headroom {

// What the config says of the API (a reload changes it).
struct ApiSettings {
  bool probe_enabled = false;
  std::chrono::milliseconds probe_min_interval{600000};
  std::string probe_cgroup;
};

// One sample's publication: /v1/budget never shows a generation /metrics does not have yet, so it
// is handed over with the snapshot, after the exporter's update.
struct SamplePublication {
  std::shared_ptr<const Snapshot> snapshot;
  std::vector<SensorStatus> sensors;
  std::int64_t interval_ns = 0;
  std::uint64_t samples_total = 0;
  struct Budget {
    HttpResponse response;
    std::string cgroup;              // the prover's cgroup ("" none): a probe of it caps its budget
    std::uint64_t prover_usage = 0;  // what the prover held, for that cap
  };
  std::optional<Budget> budget;  // absent: the last answer stands (a probe held the budget still)
};

class HttpApi {
 public:
  // `probe_command`: the command line that runs `headroom probe` (its binary, --root); empty with
  // `probe_unavailable` saying why when the agent's own binary could not be found.
  HttpApi(Exporter& exporter, const KillBoard& kills, std::vector<std::string> probe_command,
          std::string probe_unavailable = "");
  HttpApi(const HttpApi&) = delete;
  HttpApi& operator=(const HttpApi&) = delete;

  std::map<std::string, HttpHandler> getRoutes();
  std::map<std::string, HttpHandler> postRoutes();

  // ---- the main thread ----
  void configure(const ApiSettings& s);
  void publish(SamplePublication p);
  void publishSampleFailure(std::uint64_t failures_total, const std::string& error);
  void publishSensors(std::vector<SensorStatus> sensors);
  // /v1/warnings: the early warning's document (daemon/early_warning.h), after each sample and
  // each change of a warning between samples.
  void publishWarnings(nlohmann::json document);
  // The last probe of `cgroup` requested through the API, for the budget's cap.
  std::optional<ProbeFinding> probeFinding(const std::string& cgroup) const;
  // A probe allocates in the prover's cgroup now: the budget holds still.
  bool probeActive() const { return probe_active_; }
  // A probe finished: its figures are to be shown at once.
  bool takeSampleSoon() { return sample_soon_.exchange(false); }
  // An eventfd the main thread waits on: written to when a sample is wanted soon.
  void setWakeFd(int fd) { wake_fd_ = fd; }

  // ---- the handlers (any thread) ----
  HttpResponse metrics();
  HttpResponse healthz() const;
  HttpResponse snapshot() const;
  HttpResponse budget() const;
  HttpResponse ooms(const HttpQuery& q) const;
  HttpResponse probe(const HttpQuery& q);

 private:
  using Clock = std::chrono::steady_clock;
  Exporter& exporter_;
  const KillBoard& kills_;
  const std::vector<std::string> probe_command_;
  const std::string probe_unavailable_;
  const std::int64_t started_mono_ns_;

  mutable std::mutex mu_;
  ApiSettings settings_;
  std::shared_ptr<const Snapshot> snapshot_;
  std::vector<SensorStatus> sensors_;
  std::int64_t last_sample_mono_ns_ = 0;  // 0: none yet
  std::int64_t interval_ns_ = 0;
  std::uint64_t samples_total_ = 0;
  std::uint64_t sample_failures_total_ = 0;
  std::string last_error_;
  double last_scrape_s_ = 0;
  HttpResponse budget_{503, "application/json",
                       "{\"error\":\"no sample yet: the first budget comes with the first sample\"}\n"};
  std::string budget_cgroup_;
  nlohmann::json warnings_ = {{"enabled", false}, {"warnings", nlohmann::json::array()}};
  std::uint64_t prover_usage_ = 0;
  std::optional<Clock::time_point> last_probe_;
  std::map<std::string, ProbeFinding> probe_findings_;  // by cgroup: the prover's only
  std::mutex probe_running_;                            // one probe at a time
  std::atomic<bool> sample_soon_{false};
  std::atomic<int> wake_fd_{-1};
  std::atomic<bool> probe_active_{false};
};

// A JSON answer: the document on one line and a newline.
HttpResponse jsonResponse(int status, const nlohmann::json& j);

}  // namespace headroom
