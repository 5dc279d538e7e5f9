// The budget controller's state machine (pure): the budget from the tightest bound, the margin
// policy, generations, and the state file's text.
#include "headroom/controller/controller.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "headroom/model/oom_forecast.h"
#include "headroom/util/json.h"
#include "headroom/util/units.h"

namespace headroom {
namespace {

std::uint64_t sub(std::uint64_t a, std::uint64_t b) { return a > b ? a - b : 0; }

std::uint64_t scaled(std::uint64_t v, double factor) {
  long double r = static_cast<long double>(v) * factor;
  if (r >= static_cast<long double>(std::numeric_limits<std::uint64_t>::max()))
    return std::numeric_limits<std::uint64_t>::max();
  return static_cast<std::uint64_t>(r);
}

std::uint64_t add(std::uint64_t a, std::uint64_t b) {
  return a > std::numeric_limits<std::uint64_t>::max() - b ? std::numeric_limits<std::uint64_t>::max() : a + b;
}

// Ticks kept for the growth window, whatever its length says: bounded memory.
constexpr std::size_t kMaxTicks = 4096;
constexpr std::size_t kMaxBoundsTracked = 32;
constexpr std::size_t kForecastPoints = 4;  // ticks a neighbours' trend needs

}  // namespace

std::uint64_t BudgetBound::room() const { return sub(add(limit, reclaimable), usage); }

Status validate(const BudgetPolicy& p) {
  auto bad = [](const std::string& what) { return unexpected(badInput(what)); };
  if (!std::isfinite(p.margin_growth) || p.margin_growth < 1.0 || p.margin_growth > 100.0)
    return bad(fmt::format("margin_growth = {}: must be between 1 and 100", p.margin_growth));
  if (!std::isfinite(p.overhead_factor) || p.overhead_factor < 1.0 || p.overhead_factor > 100.0)
    return bad(fmt::format("overhead_factor = {}: must be between 1 and 100", p.overhead_factor));
  if (p.margin_step == 0) return bad("margin_step = 0: must be positive (an OOM kill must grow the margin)");
  if (p.max_retries > 100) return bad(fmt::format("max_retries = {}: at most 100", p.max_retries));
  if (p.give_back_after < 1) return bad("give_back_after = 0: at least 1 (clean runs before margin is given back)");
  if (p.clean_period.count() <= 0)
    return bad(fmt::format("clean_period = {} ms: must be positive", p.clean_period.count()));
  if (p.forecast_horizon.count() < 0 || p.forecast_horizon > std::chrono::hours(1))
    return bad(fmt::format("forecast_horizon = {} ms: must be between 0 and 1h", p.forecast_horizon.count()));
  if (p.growth_window.count() < 0)
    return bad(fmt::format("growth_window = {} ms: must not be negative", p.growth_window.count()));
  if (p.probe_max_age.count() <= 0)
    return bad(fmt::format("probe_max_age = {} ms: must be positive", p.probe_max_age.count()));
  if (!std::isfinite(p.hysteresis_fraction) || p.hysteresis_fraction < 0 || p.hysteresis_fraction > 0.5)
    return bad(fmt::format("hysteresis_fraction = {}: must be between 0 and 0.5", p.hysteresis_fraction));
  return ok();
}

BudgetController::BudgetController(BudgetPolicy policy, ControllerState state)
    : policy_(policy), state_(std::move(state)) {}

std::uint64_t BudgetController::marginFor(std::uint64_t overhead, std::string* source) const {
  std::uint64_t m = policy_.margin_floor;
  std::string src = "the floor";
  if (overhead > m) {
    m = overhead;
    src = "the invisible overhead now";
  }
  if (state_.learned_margin > m) {
    m = state_.learned_margin;
    src = state_.history.empty() ? std::string("learned from earlier OOM kills")
                                 : fmt::format("learned: {}", state_.history.back().reason);
  }
  if (source != nullptr) *source = std::move(src);
  return m;
}

BudgetDecision BudgetController::decide(const BudgetInputs& in) {
  BudgetDecision d;
  d.time_ns = in.time_ns;
  d.inputs = in;

  // The window: neighbours per bound and the overhead, over growth_window.
  Tick tick{in.time_ns, {}, in.overhead};
  for (const BudgetBound& b : in.bounds) {
    if (tick.neighbours.size() < kMaxBoundsTracked) tick.neighbours[b.name] = b.neighbours;
  }
  window_.push_back(std::move(tick));
  std::int64_t horizon = std::chrono::duration_cast<std::chrono::nanoseconds>(policy_.growth_window).count();
  while (window_.size() > kMaxTicks || (window_.size() > 1 && in.time_ns - window_.front().time_ns > horizon))
    window_.pop_front();

  std::string margin_source;
  std::uint64_t margin = marginFor(in.overhead, &margin_source);
  d.margin = margin;
  d.margin_source = margin_source;

  std::uint64_t overhead_peak = in.overhead;
  for (const Tick& t : window_) overhead_peak = std::max(overhead_peak, t.overhead);
  d.overhead_growth = overhead_peak - in.overhead;

  // The tightest bound, once each bound's room is less what its neighbours may grow by again.
  // Ahead of the kill: what the neighbours' (and the kernel's) steady growth will take over the
  // forecast horizon, when their trend can be trusted (model/oom_forecast.h's rule).
  const std::int64_t ahead_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(policy_.forecast_horizon).count();
  const BudgetBound* tightest = nullptr;
  std::uint64_t tightest_growth = 0, tightest_forecast = 0, tightest_trend = 0;
  for (const BudgetBound& b : in.bounds) {
    std::uint64_t low = b.neighbours;
    std::vector<std::pair<std::int64_t, double>> trend_points;
    for (const Tick& t : window_) {
      auto it = t.neighbours.find(b.name);
      if (it == t.neighbours.end()) continue;
      low = std::min(low, it->second);
      if (in.time_ns - t.time_ns <= 2 * ahead_ns) trend_points.emplace_back(t.time_ns, static_cast<double>(it->second));
    }
    // Over the whole of twice the horizon, and over its last third (a climb that began lately,
    // after a calm that would outvote it); the steeper of those that can be trusted, which takes
    // samples over at least min_span_ns, as the time to OOM does (a fill sampled a few times
    // within a second is no trend).
    double slope = 0;
    for (const std::int64_t span : {2 * ahead_ns, 2 * ahead_ns / 3}) {
      std::vector<std::pair<std::int64_t, double>> pts;
      for (const auto& p : trend_points)
        if (in.time_ns - p.first <= span) pts.push_back(p);
      if (ahead_ns <= 0 || pts.size() < kForecastPoints) continue;
      if (pts.back().first - pts.front().first < ForecastPolicy{}.min_span_ns) continue;
      const Trend tr = robustTrend(pts);
      if (tr.slope > slope && tr.agreement >= ForecastPolicy{}.min_agreement) slope = tr.slope;
    }
    const double taken = slope * static_cast<double>(ahead_ns) / 1e9;
    const std::uint64_t trend = taken >= static_cast<double>(std::numeric_limits<std::uint64_t>::max())
                                    ? std::numeric_limits<std::uint64_t>::max()
                                    : static_cast<std::uint64_t>(taken);
    // The neighbours cannot be charged past the bound: neither what they may grow by again nor
    // what their trend would take is more than its room (a short climb, sampled a few times on a
    // slow machine, can read as a slope that would fill the bound several times over).
    const std::uint64_t forecast = std::min(trend, b.room());
    std::uint64_t growth = std::min(std::max(b.neighbours - low, forecast), b.room());
    std::uint64_t room = sub(b.room(), growth);
    if (tightest == nullptr || room < d.room) {
      tightest = &b;
      tightest_growth = growth;
      tightest_forecast = forecast;
      tightest_trend = trend;
      d.room = room;
    }
  }

  std::string computed_reason;
  std::uint64_t computed = 0;
  bool valid = false;
  if (tightest == nullptr) {
    computed_reason = "no bound on the prover could be read";
  } else {
    d.tightest = tightest->name;
    d.neighbour_growth = tightest_growth;
    d.forecast_growth = tightest_forecast;
    std::uint64_t gross = add(in.prover_usage, d.room);
    std::uint64_t keep = add(d.overhead_growth, margin);
    computed = sub(gross, keep);
    computed_reason = fmt::format(
        "{} = prover usage {} + room {} under {} ({} {} - usage {} + reclaimable {} - neighbours' growth {}{}) - "
        "overhead growth {} - margin {} ({})",
        formatBytes(computed), formatBytes(in.prover_usage), formatBytes(d.room), tightest->name, tightest->kind,
        formatBytes(tightest->limit), formatBytes(tightest->usage), formatBytes(tightest->reclaimable),
        formatBytes(tightest_growth),
        tightest_forecast > 0 && tightest_forecast >= tightest_growth
            ? fmt::format(
                  ", the growth coming in the next {:.0f} s at their steady trend{}",
                  static_cast<double>(ahead_ns) / 1e9,
                  tightest_trend > tightest_forecast
                      ? fmt::format(" ({} at that trend, at most the room they can take)", formatBytes(tightest_trend))
                      : std::string())
            : std::string(),
        formatBytes(d.overhead_growth), formatBytes(margin), margin_source);
    if (in.probe) {
      std::int64_t age = in.time_ns - in.probe->time_ns;
      std::int64_t max_age = std::chrono::duration_cast<std::chrono::nanoseconds>(policy_.probe_max_age).count();
      if (age <= max_age) {
        d.probe_cap = add(in.probe->allocatable, in.probe->prover_usage);
        std::string found = fmt::format("the probe {:.0f} s ago found {} allocatable with the prover holding {}",
                                        static_cast<double>(age) / 1e9, formatBytes(in.probe->allocatable),
                                        formatBytes(in.probe->prover_usage));
        if (computed > *d.probe_cap) {
          computed = *d.probe_cap;
          d.capped_by_probe = true;
          computed_reason += fmt::format("; capped at {}: {}", formatBytes(*d.probe_cap), found);
        } else {
          computed_reason += fmt::format("; under the probe's cap of {} ({})", formatBytes(*d.probe_cap), found);
        }
      } else {
        computed_reason += fmt::format("; the probe of {:.0f} s ago is older than probe_max_age and caps nothing",
                                       static_cast<double>(age) / 1e9);
      }
    }
    valid = computed > 0;
    if (!valid) {
      computed_reason = fmt::format(
          "no room: prover usage {} + room {} under {} is not more than overhead growth {} + margin {} ({})",
          formatBytes(in.prover_usage), formatBytes(d.room), tightest->name, formatBytes(d.overhead_growth),
          formatBytes(margin), margin_source);
    }
  }

  // Publish: a new generation when a kill or a give-back changed the learned margin, validity
  // flipped, or the budget moved beyond the hysteresis; otherwise the published budget and
  // margin stay, so a prover that re-reads on a generation change is not woken by page-cache
  // noise or by an overhead (and so a margin) that moves by a few pages each tick.
  bool fresh = !last_ || margin_changed_ || last_->valid != valid;
  if (!fresh) {
    std::uint64_t band = std::max(policy_.hysteresis_bytes, scaled(last_->budget, policy_.hysteresis_fraction));
    // Keeping a budget above what is safe now eats into the margin: downwards, the band is at
    // most a quarter of the margin.
    if (computed < last_->budget) band = std::min(band, last_->margin / 4);
    std::uint64_t delta = computed > last_->budget ? computed - last_->budget : last_->budget - computed;
    fresh = delta > band;
  }
  if (fresh) {
    d.generation = ++state_.generation;
    d.budget = valid ? computed : 0;
    d.reason = valid ? "budget " + computed_reason : computed_reason;
  } else {
    d.generation = last_->generation;
    d.budget = last_->budget;
    d.margin = last_->margin;
    d.reason = valid ? fmt::format("budget {} kept (generation {}): now {}, within the hysteresis",
                                   formatBytes(last_->budget), last_->generation, computed_reason)
                     : computed_reason;
  }
  d.valid = valid;
  margin_changed_ = false;
  last_ = d;
  if (valid) last_valid_ = d;
  return d;
}

MarginChange BudgetController::onOomKill(const KillEvidence& k) {
  // The margin in force: the last decision's (it may include the overhead then), or what was
  // learned since, when a kill comes before the next decision (two kills in one tick, or a
  // retry killed before its first tick): kills compound.
  std::uint64_t m = std::max(last_ ? last_->margin : 0, marginFor(0));
  std::uint64_t grown = scaled(m, policy_.margin_growth);
  std::uint64_t stepped = add(m, policy_.margin_step);

  // The overhead beyond the budget, by the best evidence the kill left.
  std::uint64_t beyond = 0;
  std::string beyond_what = "none measured";
  auto consider = [&](std::uint64_t v, std::string what) {
    if (v > beyond) {
      beyond = v;
      beyond_what = std::move(what);
    }
  };
  std::uint64_t outside = add(add(k.pinned, k.page_tables), k.kernel);
  consider(outside, fmt::format("pinned/locked {} + page tables {} + kernel {}", formatBytes(k.pinned),
                                formatBytes(k.page_tables), formatBytes(k.kernel)));
  if (k.self_reported)
    consider(sub(k.charge, *k.self_reported), fmt::format("the kernel charged {} while the prover believed it used {}",
                                                          formatBytes(k.charge), formatBytes(*k.self_reported)));
  if (k.budget > 0)
    consider(sub(k.charge, k.budget),
             fmt::format("the kernel charged {} for a budget of {}", formatBytes(k.charge), formatBytes(k.budget)));
  std::uint64_t from_overhead = scaled(beyond, policy_.overhead_factor);

  std::uint64_t after = std::max({grown, stepped, from_overhead});
  std::string evidence = beyond > 0
                             ? fmt::format("the overhead beyond the budget, {}: {}", formatBytes(beyond), beyond_what)
                             : "no overhead beyond the budget was measured";
  std::string rule;
  if (after == from_overhead && from_overhead > std::max(grown, stepped)) {
    rule = fmt::format("{} x {}", policy_.overhead_factor, evidence);
  } else if (after == grown && grown >= stepped) {
    rule = fmt::format("{} x {} (larger than {} x {})", policy_.margin_growth, formatBytes(m), policy_.overhead_factor,
                       evidence);
  } else {
    rule = fmt::format("{} + the step {} (larger than {} x {})", formatBytes(m), formatBytes(policy_.margin_step),
                       policy_.overhead_factor, evidence);
  }
  MarginChange c{
      m, after,
      fmt::format("OOM kill #{}{}: margin {} -> {} = {}", state_.oom_kills + 1,
                  k.prover_victim ? "" : " (a process beside the prover)", formatBytes(m), formatBytes(after), rule)};
  state_.learned_margin = after;
  ++state_.oom_kills;
  ++state_.retries;
  state_.clean_runs = 0;
  state_.last_kill = k;
  state_.history.push_back(c);
  while (state_.history.size() > ControllerState::kHistory) state_.history.erase(state_.history.begin());
  margin_changed_ = true;
  return c;
}

std::optional<MarginChange> BudgetController::onCleanRun() {
  state_.retries = 0;
  ++state_.clean_runs;
  if (state_.clean_runs < policy_.give_back_after || state_.learned_margin <= policy_.margin_floor) return std::nullopt;
  std::uint64_t before = state_.learned_margin;
  std::uint64_t after = std::max(sub(before, policy_.margin_step), policy_.margin_floor);
  MarginChange c{before, after,
                 fmt::format("{} clean runs: margin {} -> {} (one step of {} given back, never below the floor {})",
                             state_.clean_runs, formatBytes(before), formatBytes(after),
                             formatBytes(policy_.margin_step), formatBytes(policy_.margin_floor))};
  state_.learned_margin = after;
  state_.clean_runs = 0;
  state_.history.push_back(c);
  while (state_.history.size() > ControllerState::kHistory) state_.history.erase(state_.history.begin());
  margin_changed_ = true;
  return c;
}

// ---- the state file's text ----

namespace {

constexpr int kStateVersion = 1;

nlohmann::json toJson(const KillEvidence& k) {
  return {{"time_ns", k.time_ns},
          {"what", k.what},
          {"prover_victim", k.prover_victim},
          {"budget_bytes", k.budget},
          {"charge_bytes", k.charge},
          {"self_reported_bytes", k.self_reported ? nlohmann::json(*k.self_reported) : nlohmann::json(nullptr)},
          {"pinned_bytes", k.pinned},
          {"page_tables_bytes", k.page_tables},
          {"kernel_bytes", k.kernel}};
}

// Typed field access with errors that name the field.
struct Reader {
  std::string source;
  Error err;
  bool failed = false;

  template <typename T>
  T get(const nlohmann::json& j, const char* key, const std::string& where) {
    if (failed) return T{};
    auto it = j.find(key);
    if (it == j.end()) {
      fail(fmt::format("{}{}: missing", where, key));
      return T{};
    }
    if constexpr (std::is_same_v<T, std::string>) {
      if (!it->is_string()) fail(fmt::format("{}{}: not a string", where, key));
      return failed ? T{} : it->template get<std::string>();
    } else if constexpr (std::is_same_v<T, bool>) {
      if (!it->is_boolean()) fail(fmt::format("{}{}: not true or false", where, key));
      return failed ? T{} : it->template get<bool>();
    } else if constexpr (std::is_unsigned_v<T>) {
      if (!it->is_number_unsigned())
        fail(fmt::format("{}{} = {}: not a non-negative integer", where, key, jsonExcerpt(*it)));
      if (failed) return T{};
      auto v = it->template get<std::uint64_t>();
      if (v > std::numeric_limits<T>::max()) fail(fmt::format("{}{} = {}: too large", where, key, v));
      return failed ? T{} : static_cast<T>(v);
    } else {
      if (!it->is_number_integer()) fail(fmt::format("{}{} = {}: not an integer", where, key, jsonExcerpt(*it)));
      return failed ? T{} : it->template get<T>();
    }
  }
  void fail(const std::string& what) {
    if (failed) return;
    failed = true;
    err = badData(fmt::format("state file {}: {}", source, what));
  }
};

}  // namespace

std::string serialiseState(const ControllerState& s) {
  nlohmann::json history = nlohmann::json::array();
  for (const MarginChange& c : s.history)
    history.push_back({{"before_bytes", c.before}, {"after_bytes", c.after}, {"reason", c.reason}});
  nlohmann::json j = {{"version", kStateVersion},
                      {"learned_margin_bytes", s.learned_margin},
                      {"generation", s.generation},
                      {"oom_kills", s.oom_kills},
                      {"retries", s.retries},
                      {"clean_runs", s.clean_runs},
                      {"last_kill", s.last_kill ? toJson(*s.last_kill) : nlohmann::json(nullptr)},
                      {"history", history}};
  // Names in the record (comm, cgroup paths) are whatever bytes the kernel gave: replace what
  // is not UTF-8 rather than throw while saving.
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

Result<ControllerState> parseState(std::string_view text, std::string_view source) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  Reader r{std::string(source), {}, false};
  if (j.is_discarded() || !j.is_object()) {
    r.fail("not a JSON object (corrupt or truncated)");
    return unexpected(r.err);
  }
  auto version = r.get<int>(j, "version", "");
  if (!r.failed && version != kStateVersion)
    r.fail(fmt::format("version {}: this headroom reads version {}", version, kStateVersion));
  ControllerState s;
  s.learned_margin = r.get<std::uint64_t>(j, "learned_margin_bytes", "");
  s.generation = r.get<std::uint64_t>(j, "generation", "");
  s.oom_kills = r.get<std::uint64_t>(j, "oom_kills", "");
  s.retries = r.get<unsigned>(j, "retries", "");
  s.clean_runs = r.get<unsigned>(j, "clean_runs", "");
  if (!r.failed) {
    const auto& lk = j.find("last_kill");
    if (lk == j.end()) {
      r.fail("last_kill: missing");
    } else if (!lk->is_null()) {
      if (!lk->is_object()) {
        r.fail("last_kill: not an object");
      } else {
        KillEvidence k;
        k.time_ns = r.get<std::int64_t>(*lk, "time_ns", "last_kill.");
        k.what = r.get<std::string>(*lk, "what", "last_kill.");
        k.prover_victim = r.get<bool>(*lk, "prover_victim", "last_kill.");
        k.budget = r.get<std::uint64_t>(*lk, "budget_bytes", "last_kill.");
        k.charge = r.get<std::uint64_t>(*lk, "charge_bytes", "last_kill.");
        if (auto sr = lk->find("self_reported_bytes"); sr != lk->end() && !sr->is_null())
          k.self_reported = r.get<std::uint64_t>(*lk, "self_reported_bytes", "last_kill.");
        k.pinned = r.get<std::uint64_t>(*lk, "pinned_bytes", "last_kill.");
        k.page_tables = r.get<std::uint64_t>(*lk, "page_tables_bytes", "last_kill.");
        k.kernel = r.get<std::uint64_t>(*lk, "kernel_bytes", "last_kill.");
        s.last_kill = std::move(k);
      }
    }
  }
  if (!r.failed) {
    const auto& h = j.find("history");
    if (h == j.end() || !h->is_array()) {
      r.fail("history: missing or not a list");
    } else {
      for (std::size_t i = 0; i < h->size() && !r.failed; ++i) {
        const auto& e = (*h)[i];
        std::string where = fmt::format("history[{}].", i);
        if (!e.is_object()) {
          r.fail(fmt::format("history[{}]: not an object", i));
          break;
        }
        MarginChange c;
        c.before = r.get<std::uint64_t>(e, "before_bytes", where);
        c.after = r.get<std::uint64_t>(e, "after_bytes", where);
        c.reason = r.get<std::string>(e, "reason", where);
        s.history.push_back(std::move(c));
      }
      while (s.history.size() > ControllerState::kHistory) s.history.erase(s.history.begin());
    }
  }
  if (r.failed) return unexpected(r.err);
  return s;
}

Result<std::string> formatBudget(std::string_view tmpl, std::uint64_t budget) {
  std::string out;
  for (std::size_t i = 0; i < tmpl.size(); ++i) {
    if (tmpl[i] != '{') {
      out += tmpl[i];
      continue;
    }
    std::size_t close = tmpl.find('}', i);
    if (close == std::string_view::npos)
      return unexpected(badInput(fmt::format("budget template \"{}\": a '{{' without '}}'", tmpl)));
    std::string_view name = tmpl.substr(i + 1, close - i - 1);
    if (name == "bytes")
      out += std::to_string(budget);
    else if (name == "kib")
      out += std::to_string(budget >> 10);
    else if (name == "mib")
      out += std::to_string(budget >> 20);
    else if (name == "gib")
      out += std::to_string(budget >> 30);
    else if (name == "gib_float")
      out += fmt::format("{:.2f}", std::floor(static_cast<double>(budget) / (1ULL << 30) * 100) / 100);
    else
      return unexpected(
          badInput(fmt::format("budget template \"{}\": unknown placeholder {{{}}} (allowed: "
                               "{{bytes}} {{kib}} {{mib}} {{gib}} {{gib_float}})",
                               tmpl, name)));
    i = close;
  }
  return out;
}

}  // namespace headroom
