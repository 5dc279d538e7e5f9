#include "headroom/daemon/http_api.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <optional>

#include "headroom/daemon/subprocess.h"
#include "headroom/model/snapshot_json.h"
#include "headroom/sources/cgroup.h"
#include "headroom/util/clock.h"
#include "headroom/util/exit_codes.h"
#include "headroom/util/json.h"
#include "headroom/util/numbers.h"
#include "headroom/util/units.h"
#include "headroom/version.h"

namespace headroom {
namespace {

// A probe that takes longer than this is killed.
constexpr auto kProbeTimeout = std::chrono::minutes(15);

}  // namespace

HttpResponse jsonResponse(int status, const nlohmann::json& j) {
  return HttpResponse{status, "application/json", dumpJson(j) + "\n"};
}

HttpApi::HttpApi(Exporter& exporter, const KillBoard& kills, std::vector<std::string> probe_command,
                 std::string probe_unavailable)
    : exporter_(exporter),
      kills_(kills),
      probe_command_(std::move(probe_command)),
      probe_unavailable_(std::move(probe_unavailable)),
      started_mono_ns_(monotonicNs()) {}

namespace {

// "?lmit=5" is a mistake to say, not a parameter to ignore.
std::optional<std::string> unknownParameter(const HttpQuery& q, std::initializer_list<std::string_view> known) {
  for (const auto& [k, v] : q) {
    if (std::find(known.begin(), known.end(), k) == known.end())
      return known.size() == 0 ? fmt::format("unknown parameter {} (it takes none)", k)
                               : fmt::format("unknown parameter {} (known: {})", k, fmt::join(known, ", "));
  }
  return std::nullopt;
}

}  // namespace

std::map<std::string, HttpHandler> HttpApi::getRoutes() {
  std::map<std::string, HttpHandler> r;
  r["/metrics"] = [this](const HttpQuery&) { return metrics(); };
  r["/healthz"] = [this](const HttpQuery&) { return healthz(); };
  r["/v1/snapshot"] = [this](const HttpQuery&) { return snapshot(); };
  r["/v1/ooms"] = [this](const HttpQuery& q) { return ooms(q); };
  r["/v1/budget"] = [this](const HttpQuery&) { return budget(); };
  r["/v1/warnings"] = [this](const HttpQuery& q) {
    if (auto bad = unknownParameter(q, {})) return jsonResponse(400, {{"error", *bad}});
    std::lock_guard lock(mu_);
    return jsonResponse(200, warnings_);
  };
  r["/v1/probe"] = [](const HttpQuery&) {
    return jsonResponse(405, {{"error", "POST /v1/probe runs a probe (when probe.enabled)"}});
  };
  return r;
}

std::map<std::string, HttpHandler> HttpApi::postRoutes() {
  std::map<std::string, HttpHandler> r;
  r["/v1/probe"] = [this](const HttpQuery& q) { return probe(q); };
  return r;
}

void HttpApi::configure(const ApiSettings& s) {
  std::lock_guard lock(mu_);
  settings_ = s;
}

void HttpApi::publish(SamplePublication p) {
  std::lock_guard lock(mu_);
  snapshot_ = std::move(p.snapshot);
  sensors_ = std::move(p.sensors);
  if (p.budget) {
    budget_ = std::move(p.budget->response);
    budget_cgroup_ = std::move(p.budget->cgroup);
    prover_usage_ = p.budget->prover_usage;
  }
  last_sample_mono_ns_ = monotonicNs();
  interval_ns_ = p.interval_ns;
  samples_total_ = p.samples_total;
  last_error_.clear();
}

void HttpApi::publishSampleFailure(std::uint64_t failures_total, const std::string& error) {
  std::lock_guard lock(mu_);
  sample_failures_total_ = failures_total;
  last_error_ = error;
}

void HttpApi::publishSensors(std::vector<SensorStatus> sensors) {
  std::lock_guard lock(mu_);
  sensors_ = std::move(sensors);
}

std::optional<ProbeFinding> HttpApi::probeFinding(const std::string& cgroup) const {
  std::lock_guard lock(mu_);
  auto it = probe_findings_.find(cgroup);
  if (it == probe_findings_.end()) return std::nullopt;
  return it->second;
}

HttpResponse HttpApi::metrics() {
  auto t0 = Clock::now();
  double previous = 0;
  {
    std::lock_guard lock(mu_);
    previous = last_scrape_s_;
  }
  HttpResponse r{200, "text/plain; version=0.0.4; charset=utf-8", exporter_.render(previous)};
  std::lock_guard lock(mu_);
  last_scrape_s_ = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

HttpResponse HttpApi::healthz() const {
  const nlohmann::json journal = kills_.journal();
  const nlohmann::json events = kills_.events();
  std::lock_guard lock(mu_);
  std::int64_t now = monotonicNs();
  // Stalled: no sample for three intervals (and a second of slack for a slow one).
  std::int64_t stall_ns = 3 * interval_ns_ + 1'000'000'000;
  nlohmann::json j;
  int status = 200;
  if (last_sample_mono_ns_ == 0) {
    j["status"] = "starting";
    status = 503;
    j["last_sample_age_seconds"] = nullptr;
  } else {
    j["last_sample_age_seconds"] = static_cast<double>(now - last_sample_mono_ns_) / 1e9;
    if (now - last_sample_mono_ns_ > stall_ns) {
      j["status"] = "stalled";
      status = 503;
    } else {
      j["status"] = "ok";
    }
  }
  // Something that works but loses what it is for (OOM records waiting in memory): "degraded",
  // said with why, and still 200. A liveness probe that restarted the agent for it would lose
  // those records and mend nothing: a full or read-only disk is the operator's to fix.
  j["degraded"] = nlohmann::json::array();
  if (journal.is_object() && journal.value("state", "") == "degraded")
    j["degraded"].push_back(fmt::format("journal: {}", journal.value("reason", "")));
  // A sink off the machine that fails: the journal has every record, the fleet view lacks them.
  if (events.is_object() && events.contains("failing") && events["failing"].is_array())
    for (const auto& f : events["failing"]) j["degraded"].push_back(fmt::format("events: {}", f.get<std::string>()));
  if (status == 200 && !j["degraded"].empty()) j["status"] = "degraded";
  j["interval_seconds"] = static_cast<double>(interval_ns_) / 1e9;
  j["uptime_seconds"] = static_cast<double>(now - started_mono_ns_) / 1e9;
  j["samples_total"] = samples_total_;
  j["sample_failures_total"] = sample_failures_total_;
  j["last_error"] = last_error_.empty() ? nlohmann::json(nullptr) : nlohmann::json(last_error_);
  j["version"] = std::string(kVersion);
  j["journal"] = journal;
  j["events"] = events;
  j["sensors"] = nlohmann::json::array();
  for (const SensorStatus& s : sensors_) j["sensors"].push_back(toJson(s));
  return jsonResponse(status, j);
}

void HttpApi::publishWarnings(nlohmann::json document) {
  std::lock_guard lock(mu_);
  warnings_ = std::move(document);
}

HttpResponse HttpApi::budget() const {
  std::lock_guard lock(mu_);
  return budget_;
}

HttpResponse HttpApi::snapshot() const {
  std::shared_ptr<const Snapshot> snap;
  {
    std::lock_guard lock(mu_);
    snap = snapshot_;
  }
  if (!snap) return jsonResponse(503, {{"error", "no sample yet"}});
  return jsonResponse(200, toJson(*snap));
}

HttpResponse HttpApi::ooms(const HttpQuery& q) const {
  if (auto bad = unknownParameter(q, {"limit"})) return jsonResponse(400, {{"error", *bad}});
  std::size_t limit = SIZE_MAX;
  if (auto it = q.find("limit"); it != q.end()) {
    auto n = parseU64(it->second);
    if (!n) return jsonResponse(400, {{"error", fmt::format("limit={}: not a count", it->second)}});
    limit = *n;
  }
  return HttpResponse{200, "application/json", kills_.oomsPage(limit)};
}

HttpResponse HttpApi::probe(const HttpQuery& q) {
  auto refuse = [&](int status, const nlohmann::json& why) {
    exporter_.countProbe("refused");
    return jsonResponse(status, why);
  };
  std::string cgroup;
  std::chrono::milliseconds min_interval{};
  {
    std::lock_guard lock(mu_);
    if (!settings_.probe_enabled)
      return refuse(403, {{"error", "the probe is off: set probe.enabled = true (--probe.enabled)"}});
    cgroup = settings_.probe_cgroup;
    min_interval = settings_.probe_min_interval;
  }
  if (auto bad = unknownParameter(q, {"cgroup", "stop_margin", "chunk", "max", "touch"}))
    return refuse(400, {{"error", *bad}});
  if (auto it = q.find("cgroup"); it != q.end()) cgroup = it->second;
  if (cgroup.empty()) return refuse(400, {{"error", "which cgroup? ?cgroup=PATH, or config key probe.cgroup"}});
  std::unique_lock running(probe_running_, std::try_to_lock);
  if (!running.owns_lock()) return refuse(409, {{"error", "a probe is running"}});
  std::optional<Clock::time_point> previous_probe;
  {
    std::lock_guard lock(mu_);
    auto now = Clock::now();
    if (last_probe_ && now - *last_probe_ < min_interval) {
      double wait = std::chrono::duration<double>(*last_probe_ + min_interval - now).count();
      exporter_.countProbe("refused");
      return jsonResponse(
          429, {{"error", "probed too recently (config key probe.min_interval)"}, {"retry_after_seconds", wait}});
    }
    previous_probe = last_probe_;
    last_probe_ = now;
  }
  if (probe_command_.empty()) {
    exporter_.countProbe("failed");
    return jsonResponse(500, {{"error", probe_unavailable_}});
  }
  // The probe forks a child that allocates: it runs as its own process, never from this
  // threaded one.
  std::vector<std::string> argv = probe_command_;
  argv.insert(argv.end(), {"probe", "--json", "--cgroup", cgroup});
  for (const char* opt : {"stop_margin", "chunk", "max", "touch"}) {
    if (auto it = q.find(opt); it != q.end()) {
      std::string flag = std::string("--") + opt;
      std::replace(flag.begin(), flag.end(), '_', '-');
      argv.push_back(flag + "=" + it->second);  // one argument: a value can never be read as a flag
    }
  }
  spdlog::info("probe of {} requested", cgroup);
  // A probe of the prover's cgroup caps its budget (allocatable plus what the prover held when
  // it started); while it allocates, the budget holds still rather than follow the probe.
  bool for_budget = false;
  std::uint64_t prover_usage = 0;
  {
    std::lock_guard lock(mu_);
    for_budget = !budget_cgroup_.empty() && normaliseCgroupPath(cgroup) == budget_cgroup_;
    prover_usage = prover_usage_;
  }
  std::int64_t probe_start_ns = monotonicNs();
  if (for_budget) probe_active_ = true;
  Captured c = runCaptured(argv, kProbeTimeout);
  probe_active_ = false;
  int code = c.status >= 0 && WIFEXITED(c.status) ? WEXITSTATUS(c.status) : -1;
  if (code == kExitBadInput) {
    // Nothing was allocated: a request with a mistake does not hold the next one off.
    {
      std::lock_guard lock(mu_);
      last_probe_ = previous_probe;
    }
    std::string msg = c.err;
    while (!msg.empty() && msg.back() == '\n') msg.pop_back();
    return refuse(400, {{"error", msg}});
  }
  auto j = nlohmann::json::parse(c.out, nullptr, false);
  if ((code != kExitOk && code != kExitAborted) || j.is_discarded()) {
    exporter_.countProbe("failed");
    std::string why = c.start_error.empty() ? c.err : c.start_error;
    spdlog::error("probe of {} failed (exit {}): {}", cgroup, code, why);
    return jsonResponse(500, {{"error", fmt::format("the probe failed (exit {}): {}", code, why)}});
  }
  Exporter::ProbeFigures f;
  f.allocatable_bytes = j.value("allocatable_bytes", 0.0);
  f.allocated_bytes = j.value("allocated_bytes", 0.0);
  f.others_growth_bytes = j.value("others_growth_bytes", 0.0);
  f.kernel_overhead_bytes = j.value("kernel_overhead_bytes", 0.0);
  f.bytes_per_second = j.value("bytes_per_second", 0.0);
  f.duration_seconds = j.value("duration_seconds", 0.0);
  f.timestamp_s = j.value("started_at", unixSeconds());
  f.aborted = j.value("aborted", false);
  exporter_.recordProbe(j.value("cgroup", cgroup), f);
  exporter_.countProbe(f.aborted ? "aborted" : "done");
  if (for_budget) {
    // An aborted probe stopped where pressure rose: that is a fair cap too. One finding, for
    // the prover's cgroup as it was then.
    std::lock_guard lock(mu_);
    probe_findings_.clear();
    probe_findings_.emplace(
        normaliseCgroupPath(j.value("cgroup", cgroup)),
        ProbeFinding{static_cast<std::uint64_t>(f.allocatable_bytes), prover_usage, probe_start_ns});
  }
  spdlog::info("probe of {}: {} allocatable{}", cgroup, formatBytes(static_cast<std::uint64_t>(f.allocatable_bytes)),
               f.aborted ? " (aborted: pressure rose)" : "");
  sample_soon_ = true;
  if (const int fd = wake_fd_; fd >= 0) {
    const std::uint64_t one = 1;
    (void)!::write(fd, &one, sizeof one);
  }
  return jsonResponse(200, j);
}

}  // namespace headroom
