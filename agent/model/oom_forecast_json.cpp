// The forecast's documents. See model/oom_forecast.h.
#include <cmath>

#include "headroom/model/oom_forecast.h"

namespace headroom {
namespace {

template <typename T>
nlohmann::json orNull(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

double rounded(double v, double unit) { return std::round(v / unit) * unit; }

}  // namespace

nlohmann::json toJson(const OomEta& e) {
  nlohmann::json growers = nlohmann::json::array();
  for (const Grower& g : e.growers)
    growers.push_back({{"pid", g.pid},
                       {"comm", g.comm},
                       {"cgroup", g.cgroup},
                       {"rss_bytes", g.rss},
                       {"growth_bytes_per_second", std::llround(g.growth_bytes_per_second)}});
  return {{"bound", e.bound},
          {"limit_bytes", e.limit},
          {"usage_bytes", e.usage},
          {"reclaimable_bytes", e.reclaimable},
          {"held_bytes", e.held},
          {"room_bytes", e.room},
          {"growth_bytes_per_second", std::llround(e.growth_bytes_per_second)},
          {"eta_seconds", e.eta_seconds ? nlohmann::json(rounded(*e.eta_seconds, 0.01)) : nlohmann::json(nullptr)},
          {"confidence", toString(e.confidence)},
          {"agreement", rounded(e.agreement, 0.001)},
          {"points", e.points},
          {"span_seconds", rounded(e.span_seconds, 0.001)},
          {"near", e.near},
          {"signals", e.signals},
          {"why", e.why.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.why)},
          {"growers", std::move(growers)}};
}

nlohmann::json toJson(const WarningEpisode& w) {
  return {{"id", w.id},
          {"bound", w.bound},
          {"since", static_cast<double>(w.started_wall_ns) / 1e9},
          {"eta_at_start_seconds",
           w.at_start.eta_seconds ? nlohmann::json(rounded(*w.at_start.eta_seconds, 0.01)) : nlohmann::json(nullptr)},
          {"confidence_at_start", toString(w.at_start.confidence)},
          {"ended", w.ended_ns.has_value()},
          {"end_reason", w.end_reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(w.end_reason)},
          {"latest", toJson(w.latest)}};
}

nlohmann::json toJson(const WarningVerdict& v) {
  std::optional<double> at;
  if (v.warned_wall_ns) at = static_cast<double>(*v.warned_wall_ns) / 1e9;
  return {{"verdict", toString(v.kind)},
          {"text", v.text},
          {"bound", v.bound},
          {"lead_seconds", orNull(v.lead_seconds)},
          {"eta_seconds", orNull(v.eta_seconds)},
          {"warned_at", orNull(at)},
          {"calm_seconds", orNull(v.calm_seconds)},
          {"episode", orNull(v.episode)}};
}

}  // namespace headroom
