// The state beside the OOM journal: its text (one JSON object) and its file. See
// journal/journal_state.h.
#include "headroom/journal/journal_state.h"

#include <fmt/format.h>

#include "headroom/util/files.h"
#include "headroom/util/json.h"

namespace headroom {
namespace {

using nlohmann::json;

constexpr int kStateVersion = 1;

Error bad(std::string_view display, std::string_view what) {
  return badData(fmt::format("journal state {}: {}", display, what));
}

}  // namespace

std::string journalStateFileOf(const std::string& journal_file) { return journal_file + ".state"; }

std::string serialiseJournalState(const JournalState& s) {
  json in_flight = json::object();
  for (const auto& [key, record] : s.in_flight) in_flight[key] = record;
  json counts = json::object();
  for (const auto& [cgroup, n] : s.oom_kill_counts) counts[cgroup] = n;
  const json j = {{"version", kStateVersion},
                  {"boot_id", s.boot_id},
                  {"kernel_log_seq", s.kernel_log_seq ? json(*s.kernel_log_seq) : json(nullptr)},
                  {"in_flight", std::move(in_flight)},
                  {"oom_kill_counts", std::move(counts)}};
  return dumpJson(j) + "\n";
}

Result<JournalState> parseJournalState(std::string_view text, std::string_view display) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return unexpected(bad(display, "not a JSON object"));
  auto version = j.find("version");
  if (version == j.end() || !version->is_number_unsigned() || version->get<std::uint64_t>() != kStateVersion)
    return unexpected(bad(display, fmt::format("version {} (this agent writes {})",
                                               version == j.end() ? "missing" : jsonExcerpt(*version), kStateVersion)));
  JournalState s;
  auto boot = j.find("boot_id");
  if (boot == j.end() || !boot->is_string()) return unexpected(bad(display, "boot_id is not a string"));
  s.boot_id = boot->get<std::string>();
  if (auto seq = j.find("kernel_log_seq"); seq != j.end() && !seq->is_null()) {
    if (!seq->is_number_unsigned()) return unexpected(bad(display, "kernel_log_seq is not a sequence number"));
    s.kernel_log_seq = seq->get<std::uint64_t>();
  }
  if (auto f = j.find("in_flight"); f != j.end()) {
    if (!f->is_object()) return unexpected(bad(display, "in_flight is not an object"));
    for (auto it = f->begin(); it != f->end(); ++it) {
      if (!it.value().is_object()) return unexpected(bad(display, fmt::format("in_flight {}: not a record", it.key())));
      s.in_flight[it.key()] = it.value();
    }
  }
  if (auto c = j.find("oom_kill_counts"); c != j.end()) {
    if (!c->is_object()) return unexpected(bad(display, "oom_kill_counts is not an object"));
    for (auto it = c->begin(); it != c->end(); ++it) {
      if (!it.value().is_number_unsigned())
        return unexpected(bad(display, fmt::format("oom_kill_counts {}: not a count", it.key())));
      s.oom_kill_counts[it.key()] = it.value().get<std::uint64_t>();
    }
  }
  return s;
}

Result<std::optional<JournalState>> readJournalState(const std::string& path) {
  auto text = readSmallFile(path, kMaxJournalStateBytes, "journal state");
  if (!text) return unexpected(text.error());
  if (!*text) return std::optional<JournalState>{};
  auto s = parseJournalState(**text, path);
  if (!s) return unexpected(s.error());
  return std::optional<JournalState>(std::move(*s));
}

Status writeJournalState(const std::string& path, const JournalState& s) {
  return writeFileAtomic(path, serialiseJournalState(s));
}

}  // namespace headroom
