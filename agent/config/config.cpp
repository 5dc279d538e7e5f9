#include "headroom/config/config.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>

#include <toml++/toml.h>
#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>
#include <tuple>
#include <utility>

#include "headroom/sources/cgroup.h"
#include "headroom/sources/fs_root.h"
#include "headroom/sources/parse.h"
#include "headroom/sources/self_report.h"
#include "headroom/util/text.h"
#include "headroom/util/units.h"

#include "config_parts.h"

namespace headroom {
namespace {

using namespace config_detail;  // the configuration's own parts

// "sensors.oom_ring_bytes" -> "sensors"; "interval" -> "".
std::string_view tableOf(std::string_view name) {
  auto dot = name.find('.');
  return dot == std::string_view::npos ? std::string_view() : name.substr(0, dot);
}

std::string_view leafOf(std::string_view name) {
  auto dot = name.rfind('.');
  return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

std::vector<std::string> knownTables() {
  std::vector<std::string> out;
  for (const KeySpec& s : specs()) {
    std::string t(tableOf(s.key.name));
    if (!t.empty() && std::find(out.begin(), out.end(), t) == out.end()) out.push_back(std::move(t));
  }
  return out;
}

// "[roles], [sensors]"
std::string bracketed(const std::vector<std::string>& tables) {
  std::string out;
  for (const std::string& t : tables) out += fmt::format("{}[{}]", out.empty() ? "" : ", ", t);
  return out;
}

std::size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The known key an unknown one was probably meant to be: a typo, or the right key in the
// wrong table ("bpf" at the top level for "sensors.bpf").
std::string suggestion(std::string_view unknown) {
  std::string best;
  std::size_t best_d = 3;
  for (const KeySpec& s : specs()) {
    std::size_t d = leafOf(s.key.name) == leafOf(unknown) ? 1 : editDistance(unknown, s.key.name);
    if (d < best_d) {
      best_d = d;
      best = s.key.name;
    }
  }
  return best;
}

std::string unknownKeyMessage(std::string_view name) {
  std::string_view table = tableOf(name);
  std::vector<std::string> known;
  for (const KeySpec& s : specs())
    if (tableOf(s.key.name) == table) known.emplace_back(table.empty() ? s.key.name : leafOf(s.key.name));
  std::string where;
  if (table.empty()) {
    where = fmt::format("known at the top level: {}; tables {}", joined(known), bracketed(knownTables()));
  } else {
    where = fmt::format("known in [{}]: {}", table, joined(known));
  }
  std::string hint = suggestion(name);
  if (!hint.empty() && hint != name) where += fmt::format("; did you mean \"{}\"?", hint);
  return fmt::format("unknown key \"{}\" ({})", name, where);
}

// One entry of the document, flattened: a key of ours with its value, or what is wrong.
struct Entry {
  std::string name;
  const toml::node* node = nullptr;
  std::string problem;  // set: an error about this entry
};

std::vector<Entry> flatten(const toml::table& root) {
  std::vector<std::string> tables = knownTables();
  std::vector<Entry> out;
  for (const auto& [k, v] : root) {
    std::string name(k.str());
    bool is_table_name = std::find(tables.begin(), tables.end(), name) != tables.end();
    if (is_table_name) {
      const toml::table* t = v.as_table();
      if (t == nullptr) {
        out.push_back(Entry{name, &v, fmt::format("{} = {}: must be a table ([{}])", name, render(v), name)});
        continue;
      }
      for (const auto& [kk, vv] : *t) {
        std::string full = fmt::format("{}.{}", name, kk.str());
        std::string problem = findSpec(full) == nullptr ? unknownKeyMessage(full) : std::string();
        out.push_back(Entry{std::move(full), &vv, std::move(problem)});
      }
    } else if (findSpec(name) != nullptr) {
      out.push_back(Entry{std::move(name), &v, {}});
    } else if (v.is_table()) {
      std::string problem = fmt::format("unknown table [{}] (known tables: {})", name, bracketed(tables));
      out.push_back(Entry{std::move(name), &v, std::move(problem)});
    } else {
      std::string problem = unknownKeyMessage(name);
      out.push_back(Entry{std::move(name), &v, std::move(problem)});
    }
  }
  // toml++ keeps keys sorted by name; errors should come in the order of the file.
  std::stable_sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) {
    const auto& sa = a.node->source().begin;
    const auto& sb = b.node->source().begin;
    return std::tie(sa.line, sa.column) < std::tie(sb.line, sb.column);
  });
  return out;
}

Status applyNode(AgentConfig& cfg, const KeySpec& spec, const toml::node& node, std::string_view source) {
  const std::string& name = spec.key.name;
  std::vector<Given> values;
  if (spec.key.repeatable) {
    const toml::array* arr = node.as_array();
    if (arr == nullptr)
      return badInput(fmt::format("{}: {} = {}: must be an array (e.g. {})", source, name, render(node), spec.example));
    for (std::size_t i = 0; i < arr->size(); ++i) {
      const toml::node& el = (*arr)[i];
      values.push_back(Given{&el, {}, fmt::format("{}: {}[{}] = {}", source, name, i, render(el))});
    }
  } else {
    values.push_back(Given{&node, {}, fmt::format("{}: {} = {}", source, name, render(node))});
  }
  return spec.set(cfg, values);
}

}  // namespace

Result<std::chrono::milliseconds> parseDuration(std::string_view text) {
  return durationFromText(text).wrap(fmt::format("duration {}", quotedText(text)));
}

const std::vector<ConfigKey>& configKeys() {
  static const std::vector<ConfigKey> kKeys = [] {
    std::vector<ConfigKey> keys;
    for (const KeySpec& s : specs()) keys.push_back(s.key);
    return keys;
  }();
  return kKeys;
}

Result<std::string> configValue(const AgentConfig& cfg, std::string_view name) {
  using Get = std::function<std::string(const AgentConfig&)>;
  auto str = [](auto field) -> Get { return [field](const AgentConfig& c) { return quotedText(field(c)); }; };
  auto boolean = [](auto field) -> Get {
    return [field](const AgentConfig& c) { return std::string(field(c) ? "true" : "false"); };
  };
  auto plain = [](auto field) -> Get { return [field](const AgentConfig& c) { return fmt::format("{}", field(c)); }; };
  auto size = [](auto field) -> Get {
    return [field](const AgentConfig& c) { return quotedText(sizeText(field(c))); };
  };
  auto duration = [](auto field) -> Get {
    return [field](const AgentConfig& c) { return quotedText(durationText(field(c))); };
  };
  auto list = [](auto field) -> Get {
    return [field](const AgentConfig& c) {
      std::vector<std::string> items;
      for (const std::string& s : field(c)) items.push_back(quotedText(s));
      return fmt::format("[{}]", joined(items));
    };
  };
  // One entry per key of makeSpecs(); the docs test fails on a key that has none.
  static const std::map<std::string, Get, std::less<>> kGet = {
      {"listen", str([](const AgentConfig& c) { return c.listen.text(); })},
      {"web.config_file", str([](const AgentConfig& c) { return c.web_config_file; })},
      {"interval", duration([](const AgentConfig& c) { return c.interval; })},
      {"cgroups", list([](const AgentConfig& c) { return c.cgroups; })},
      {"smaps", boolean([](const AgentConfig& c) { return c.smaps; })},
      {"pss_max_age", duration([](const AgentConfig& c) { return c.pss_max_age; })},
      {"pss_step", size([](const AgentConfig& c) { return c.pss_step; })},
      {"pss_reads_per_second", plain([](const AgentConfig& c) { return c.pss_reads_per_second; })},
      {"max_processes", plain([](const AgentConfig& c) { return c.max_processes; })},
      {"process_walk_budget", duration([](const AgentConfig& c) { return c.process_walk_budget; })},
      {"process_walk_max_interval", duration([](const AgentConfig& c) { return c.process_walk_max_interval; })},
      {"log_format", str([](const AgentConfig& c) { return std::string(toString(c.log_format)); })},
      {"log_level", str([](const AgentConfig& c) { return c.log_level; })},
      {"roles.rules", list([](const AgentConfig& c) {
         std::vector<std::string> rules;
         for (const RoleRule& r : c.role_rules) rules.push_back(r.text());
         return rules;
       })},
      {"sensors.bpf", boolean([](const AgentConfig& c) { return c.sensors.bpf; })},
      {"sensors.kmsg", boolean([](const AgentConfig& c) { return c.sensors.kmsg; })},
      {"sensors.tasks", boolean([](const AgentConfig& c) { return c.sensors.tasks; })},
      {"sensors.faults", boolean([](const AgentConfig& c) { return c.sensors.faults; })},
      {"sensors.mmap", boolean([](const AgentConfig& c) { return c.sensors.mmap; })},
      {"sensors.rss", boolean([](const AgentConfig& c) { return c.sensors.rss; })},
      {"sensors.cuda", boolean([](const AgentConfig& c) { return c.sensors.cuda; })},
      {"sensors.cuda_libraries", list([](const AgentConfig& c) { return c.sensors.cuda_libraries; })},
      {"sensors.cuda_runtime_targets", list([](const AgentConfig& c) { return c.sensors.cuda_runtime_targets; })},
      {"sensors.nvml", boolean([](const AgentConfig& c) { return c.sensors.nvml; })},
      {"sensors.nvml_library", str([](const AgentConfig& c) { return c.sensors.nvml_library; })},
      {"sensors.oom_ring_bytes", size([](const AgentConfig& c) { return std::uint64_t{c.sensors.oom_ring_bytes}; })},
      {"sensors.exit_ring_bytes", size([](const AgentConfig& c) { return std::uint64_t{c.sensors.exit_ring_bytes}; })},
      {"sensors.max_processes", plain([](const AgentConfig& c) { return c.sensors.max_processes; })},
      {"sensors.max_cuda_allocations", plain([](const AgentConfig& c) { return c.sensors.max_cuda_allocations; })},
      {"sensors.max_tracked_cgroups", plain([](const AgentConfig& c) { return c.sensors.max_tracked_cgroups; })},
      {"metrics.top_processes", plain([](const AgentConfig& c) { return c.top_processes; })},
      {"metrics.max_cgroups", plain([](const AgentConfig& c) { return c.max_cgroups; })},
      {"metrics.max_series", plain([](const AgentConfig& c) { return c.max_series; })},
      {"metrics.recent_ooms", plain([](const AgentConfig& c) { return c.recent_ooms; })},
      {"probe.enabled", boolean([](const AgentConfig& c) { return c.probe_enabled; })},
      {"probe.min_interval", duration([](const AgentConfig& c) { return c.probe_min_interval; })},
      {"probe.cgroup", str([](const AgentConfig& c) { return c.probe_cgroup; })},
      {"warning.enabled", boolean([](const AgentConfig& c) { return c.warning.enabled; })},
      {"warning.eta", duration([](const AgentConfig& c) { return c.warning.eta; })},
      {"warning.window", duration([](const AgentConfig& c) { return c.warning.window; })},
      {"warning.fast_interval", duration([](const AgentConfig& c) { return c.warning.fast_interval; })},
      {"warning.on_warning", str([](const AgentConfig& c) { return c.warning.on_warning; })},
      {"budget.enabled", boolean([](const AgentConfig& c) { return c.budget.enabled; })},
      {"budget.cgroup", str([](const AgentConfig& c) { return c.budget.cgroup; })},
      {"budget.margin_floor", size([](const AgentConfig& c) { return c.budget.policy.margin_floor; })},
      {"budget.margin_growth", plain([](const AgentConfig& c) { return c.budget.policy.margin_growth; })},
      {"budget.margin_step", size([](const AgentConfig& c) { return c.budget.policy.margin_step; })},
      {"budget.overhead_factor", plain([](const AgentConfig& c) { return c.budget.policy.overhead_factor; })},
      {"budget.give_back_after", plain([](const AgentConfig& c) { return c.budget.policy.give_back_after; })},
      {"budget.clean_period", duration([](const AgentConfig& c) { return c.budget.policy.clean_period; })},
      {"budget.growth_window", duration([](const AgentConfig& c) { return c.budget.policy.growth_window; })},
      {"budget.forecast_horizon", duration([](const AgentConfig& c) { return c.budget.policy.forecast_horizon; })},
      {"budget.probe_max_age", duration([](const AgentConfig& c) { return c.budget.policy.probe_max_age; })},
      {"budget.hysteresis", size([](const AgentConfig& c) { return c.budget.policy.hysteresis_bytes; })},
      {"budget.state_file", str([](const AgentConfig& c) { return c.budget.state_file; })},
      {"budget.file", str([](const AgentConfig& c) { return c.budget.file; })},
      {"journal.enabled", boolean([](const AgentConfig& c) { return c.journal.enabled; })},
      {"journal.path", str([](const AgentConfig& c) { return c.journal.path; })},
      {"journal.max_bytes", size([](const AgentConfig& c) { return c.journal.max_bytes; })},
      {"journal.flight_window", duration([](const AgentConfig& c) { return c.journal.flight_window; })},
      {"journal.catch_up", str([](const AgentConfig& c) {
         constexpr std::array<const char*, 3> kModes = {"boot", "restarts", "off"};
         return std::string(kModes[static_cast<std::size_t>(c.journal.catch_up)]);
       })},
      {"workloads.docker_socket", str([](const AgentConfig& c) { return c.workloads.docker_socket; })},
      {"workloads.podman_socket", str([](const AgentConfig& c) { return c.workloads.podman_socket; })},
      {"workloads.kubernetes_logs", boolean([](const AgentConfig& c) { return c.workloads.kubernetes_logs; })},
      {"events.output", str([](const AgentConfig& c) { return c.events.output; })},
      {"events.max_bytes", size([](const AgentConfig& c) { return c.events.max_bytes; })},
      {"events.max_files", plain([](const AgentConfig& c) { return c.events.max_files; })},
      {"events.journald", str([](const AgentConfig& c) {
         constexpr std::array<const char*, 3> kModes = {"auto", "on", "off"};
         return std::string(kModes[static_cast<std::size_t>(c.events.journald)]);
       })},
      {"prover.self_report", str([](const AgentConfig& c) { return c.self_report; })},
  };
  auto it = kGet.find(name);
  if (it == kGet.end()) return badInput(fmt::format("configValue: no value for key \"{}\"", name));
  return it->second(cfg);
}

Result<AgentConfig> parseAgentConfig(std::string_view toml_text, std::string_view source) {
  std::string src = source.empty() ? std::string("config") : std::string(source);
  toml::table root;
  try {
    root = toml::parse(toml_text, src);
  } catch (const toml::parse_error& e) {
    const auto& at = e.source().begin;
    return badInput(
        fmt::format("{}: invalid TOML at line {}, column {}: {}", src, at.line, at.column, e.description()));
  }
  AgentConfig cfg;
  for (const Entry& entry : flatten(root)) {
    if (!entry.problem.empty()) return badInput(fmt::format("{}: {}", src, entry.problem));
    Status st = applyNode(cfg, *findSpec(entry.name), *entry.node, src);
    if (!st) return st.error();
  }
  return cfg;
}

Result<AgentConfig> loadAgentConfig(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return errnoError(fmt::format("opening configuration {}", path));
  auto text = readAll(fd.get(), path);
  if (!text) return text.error();
  return parseAgentConfig(*text, path);
}

Status applyConfigFlag(AgentConfig& cfg, const ConfigKey& key, const std::vector<std::string>& values) {
  const KeySpec* spec = findSpec(key.name);
  if (spec == nullptr) return badInput(fmt::format("{}: not a configuration flag", key.flag));
  const std::string& flag = spec->key.flag;
  std::vector<Given> given;
  if (!spec->key.repeatable) {
    if (values.empty() && spec->key.kind == "bool") {
      given.push_back(Given{nullptr, "true", flag});
      return spec->set(cfg, given);
    }
    if (values.size() != 1) {
      std::string shown;
      // fmt, not operator+: g++ 12 -O2 warns falsely (-Wrestrict) on `" " + std::string&&`.
      for (const std::string& v : values) shown += fmt::format(" {}", flagText(v));
      return badInput(fmt::format("{}{}: takes one value, got {}", flag, shown, values.size()));
    }
  }
  for (const std::string& v : values) given.push_back(Given{nullptr, v, fmt::format("{} {}", flag, flagText(v))});
  return spec->set(cfg, given);
}
}  // namespace headroom
