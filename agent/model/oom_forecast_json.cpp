// The forecast's documents. See model/oom_forecast.h.
#include <algorithm>
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

std::optional<OomEta> nearestEta(const OomForecaster& f, const std::vector<Bound>& bounds) {
  std::optional<OomEta> best;
  for (const Bound& b : bounds) {
    auto e = f.eta(b.name);
    if (!e) continue;
    const bool better = !best || (e->eta_seconds && (!best->eta_seconds || *e->eta_seconds < *best->eta_seconds)) ||
                        (!e->eta_seconds && !best->eta_seconds && e->room < best->room);
    if (better) best = std::move(e);
  }
  return best;
}

const WarningEpisode* warningFor(const OomForecaster& f, const std::vector<Bound>& bounds) {
  const WarningEpisode* found = nullptr;
  for (const WarningEpisode* w : f.active()) {
    const bool ours = std::any_of(bounds.begin(), bounds.end(), [&](const Bound& b) { return b.name == w->bound; });
    if (ours && (found == nullptr || w->latest.eta_seconds.value_or(1e18) < found->latest.eta_seconds.value_or(1e18)))
      found = w;
  }
  return found;
}

nlohmann::json warningsDocument(const OomForecaster& f, const Snapshot* snap) {
  nlohmann::json warnings = nlohmann::json::array();
  for (const WarningEpisode* w : f.active()) {
    nlohmann::json j = toJson(*w);
    nlohmann::json cgroups = nlohmann::json::array();
    if (snap != nullptr)
      for (const CgroupSnapshot& c : snap->cgroups)
        if (std::any_of(c.bounds.begin(), c.bounds.end(), [&](const Bound& b) { return b.name == w->bound; }))
          cgroups.push_back(c.memory.path);
    j["cgroups"] = std::move(cgroups);
    warnings.push_back(std::move(j));
  }
  nlohmann::json cgroups = nlohmann::json::array();
  if (snap != nullptr) {
    for (const CgroupSnapshot& c : snap->cgroups) {
      auto e = nearestEta(f, c.bounds);
      if (!e) continue;
      const bool trusted = e->confidence >= Confidence::kMedium && e->eta_seconds;
      cgroups.push_back(
          {{"cgroup", c.memory.path},
           {"bound", e->bound},
           {"eta_seconds", trusted ? nlohmann::json(rounded(*e->eta_seconds, 0.01)) : nlohmann::json(nullptr)},
           {"growth_bytes_per_second", std::llround(e->growth_bytes_per_second)},
           {"confidence", toString(e->confidence)},
           {"warning", warningFor(f, c.bounds) != nullptr}});
    }
  }
  return {{"warnings", std::move(warnings)}, {"cgroups", std::move(cgroups)}};
}

}  // namespace headroom
