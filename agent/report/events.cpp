// OOM records off the machine: the envelope, the journald fields, and the reader of what log
// stores give back (docs/events.md). Pure.
#include "headroom/report/events.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "headroom/report/report.h"
#include "headroom/util/json.h"
#include "headroom/util/text.h"
#include "report_parts.h"

namespace headroom {
namespace {

using nlohmann::json;
using namespace report_detail;  // reading a record defensively

// Wrappers seen around a line: Loki's logcli (line), Docker's json-file and CRI shippers (log),
// Vector and Filebeat (message). A wrapper inside a wrapper is looked into this deep at most.
constexpr std::array<const char*, 3> kLineKeys = {"line", "log", "message"};
constexpr int kMaxDepth = 4;

bool mentionsUs(std::string_view s) {
  return s.find(kEventSchemaPrefix) != std::string_view::npos || s.find("HEADROOM_RECORD") != std::string_view::npos;
}

json parseQuiet(std::string_view s) { return json::parse(s.begin(), s.end(), nullptr, false); }

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())) != 0) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())) != 0) s.remove_suffix(1);
  return s;
}

Error broken(std::string what) { return makeError(ErrorKind::kBadData, std::move(what)); }

// "headroom.event.v1" -> 1; nullopt when what follows the prefix is not a whole number.
std::optional<int> schemaMajor(std::string_view schema) {
  std::string_view rest = schema.substr(kEventSchemaPrefix.size());
  int major = 0;
  auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), major);
  if (ec != std::errc() || end == rest.data() || end != rest.data() + rest.size() || rest.front() == '+') return {};
  return major;
}

Result<std::optional<json>> fromEnvelope(const json& doc, const std::string& schema) {
  auto major = schemaMajor(schema);
  if (!major) return broken(fmt::format("schema {}: not a schema headroom knows", quotedExcerpt(schema)));
  if (*major != kEventSchemaMajor)
    return broken(fmt::format("schema {}: this headroom reads {}{} ({})", quotedExcerpt(schema), kEventSchema,
                              *major > kEventSchemaMajor ? "; a newer headroom reads this one" : "",
                              "docs/events.md: versions"));
  const json* kind = field(doc, "kind");
  if (kind == nullptr || !kind->is_string()) return broken("an event without a \"kind\"");
  if (kind->get_ref<const std::string&>() != kOomKillKind)
    return std::optional<json>();  // another kind: not ours to render
  const json* rec = field(doc, "record");
  if (rec == nullptr || !rec->is_object())
    return broken(fmt::format("\"record\" is {}, not the journal record (an object)",
                              rec == nullptr ? "missing" : jsonExcerpt(*rec)));
  const json* id = field(doc, "id");
  const json* rid = field(*rec, "id");
  if (id != nullptr && rid != nullptr && id->is_number() && rid->is_number() && *id != *rid)
    return broken(fmt::format("the envelope's id {} is not its record's id {}", dumpJson(*id), dumpJson(*rid)));
  return std::optional<json>(*rec);
}

Result<std::optional<json>> fromJournalField(const json& v) {
  if (v.is_null())
    return broken(
        "HEADROOM_RECORD is null: journalctl leaves out fields over 4096 bytes unless given --all "
        "(journalctl -o json --all)");
  std::string text;
  if (v.is_string()) {
    text = v.get<std::string>();
  } else if (v.is_array() && std::all_of(v.begin(), v.end(), [](const json& b) {
               return b.is_number_unsigned() && b.get<std::uint64_t>() < 256;
             })) {
    // journalctl writes a value that is not valid UTF-8 as an array of its bytes.
    for (const json& b : v) text.push_back(static_cast<char>(b.get<std::uint64_t>()));
  } else {
    return broken(fmt::format("HEADROOM_RECORD is {}, not the record's JSON text", jsonExcerpt(v)));
  }
  json rec = parseQuiet(text);
  if (rec.is_discarded() || !rec.is_object())
    return broken(fmt::format("HEADROOM_RECORD is not a JSON object ({} bytes: cut short or damaged)", text.size()));
  return std::optional<json>(std::move(rec));
}

Result<std::optional<json>> recordOf(const json& doc, int depth) {
  if (!doc.is_object() || depth > kMaxDepth) return std::optional<json>();
  if (const json* s = field(doc, "schema"); s != nullptr && s->is_string()) {
    const std::string& schema = s->get_ref<const std::string&>();
    if (schema.starts_with(kEventSchemaPrefix)) return fromEnvelope(doc, schema);
  }
  if (auto r = doc.find("HEADROOM_RECORD"); r != doc.end()) return fromJournalField(*r);  // null included
  if (const json* src = field(doc, "_source"); src != nullptr && src->is_object()) return recordOf(*src, depth + 1);
  for (const char* key : kLineKeys) {
    const json* line = field(doc, key);
    if (line == nullptr || !line->is_string()) continue;
    std::string_view text = trimmed(line->get_ref<const std::string&>());
    if (text.empty() || text.front() != '{') continue;
    json inner = parseQuiet(text);
    if (inner.is_discarded()) {
      if (mentionsUs(text))
        return broken(
            fmt::format("the event in \"{}\" is not whole JSON ({} bytes: cut short, or split by a log "
                        "driver and not joined again)",
                        key, text.size()));
      continue;
    }
    auto r = recordOf(inner, depth + 1);
    if (!r || r->has_value()) return r;
  }
  // A record as `headroom report --json` prints it.
  if (const json* v = field(doc, "version"); v != nullptr && v->is_number_integer()) {
    if (const json* e = field(doc, "event"); e != nullptr && e->is_object() && doc.contains("at_kill"))
      return std::optional<json>(doc);
  }
  return std::optional<json>();
}

}  // namespace

json makeEventEnvelope(const json& record) {
  json env = json::object();
  env["schema"] = kEventSchema;
  env["kind"] = kOomKillKind;
  auto t = recordTime(record);
  env["time"] = t ? json(formatUtc(*t, UtcFormat::kIsoMillis)) : json(nullptr);
  const std::string host = textAt(objectAt(record, "host"), "hostname");
  env["host"] = host.empty() ? json(nullptr) : json(host);
  const json* id = field(record, "id");
  env["id"] = id != nullptr ? *id : json(nullptr);
  env["message"] = reportSummary(record);
  env["record"] = record;
  return env;
}

WarningEvent makeWarningEvent(const json& warning, const std::string& hostname, double unix_time,
                              const std::string& message) {
  const std::string time = formatUtc(unix_time, UtcFormat::kIsoMillis);
  std::string line = "{";
  line += fmt::format("\"schema\":{},\"kind\":{},\"time\":{},\"host\":{},\"message\":{},", dumpJson(kEventSchema),
                      dumpJson(kOomWarningKind), dumpJson(time), hostname.empty() ? "null" : dumpJson(hostname),
                      dumpJson(message));
  line += "\"warning\":" + dumpJson(warning) + "}\n";
  WarningEvent ev;
  ev.line = std::move(line);
  auto add = [&ev](std::string_view name, std::string_view value) {
    ev.fields.push_back(fmt::format("{}={}", name, value));
  };
  add("MESSAGE", message);
  add("MESSAGE_ID", kOomWarningMessageId);
  add("PRIORITY", "4");  // warning
  add("SYSLOG_IDENTIFIER", "headroom");
  add("HEADROOM_EVENT_SCHEMA", kEventSchema);
  add("HEADROOM_EVENT_KIND", kOomWarningKind);
  add("HEADROOM_CGROUP", textAt(warning, "bound"));
  add("HEADROOM_WARNING_STATE", textAt(warning, "state"));
  if (const json* latest = field(warning, "latest"); latest != nullptr) {
    if (const json* eta = field(*latest, "eta_seconds"); eta != nullptr && eta->is_number())
      add("HEADROOM_ETA_SECONDS", fmt::format("{:.1f}", eta->get<double>()));
  }
  add("HEADROOM_WARNING", dumpJson(warning));
  return ev;
}

std::string eventLine(const json& record) {
  // The envelope's fields first, schema leading (a line cut short still says whose it is), and
  // the record last, dumped as the journal frames it.
  const json env = makeEventEnvelope(record);
  std::string line = "{";
  for (const char* key : {"schema", "kind", "time", "host", "id", "message"})
    line += fmt::format("{}:{},", dumpJson(key), dumpJson(env[key]));
  return line + "\"record\":" + dumpJson(record) + "}\n";
}

std::vector<std::string> journaldFields(const json& rec) {
  std::vector<std::string> f;
  auto add = [&f](std::string_view name, std::string_view value) { f.push_back(fmt::format("{}={}", name, value)); };
  auto addBytes = [&](std::string_view name, std::optional<std::uint64_t> v) {
    if (v) add(name, std::to_string(*v));
  };
  add("MESSAGE", reportSummary(rec));
  add("MESSAGE_ID", kOomKillMessageId);
  add("PRIORITY", "3");  // err, as the kernel logs the kill itself
  add("SYSLOG_IDENTIFIER", "headroom");
  add("HEADROOM_EVENT_SCHEMA", kEventSchema);
  add("HEADROOM_EVENT_KIND", kOomKillKind);
  if (auto id = intAt(rec, "id")) add("HEADROOM_RECORD_ID", std::to_string(*id));
  if (auto t = recordTime(rec)) add("HEADROOM_KILL_TIME", formatUtc(*t, UtcFormat::kIsoMillis));
  // journald keeps a field given twice as two values: one per victim.
  for (const Task& v : victimsOf(rec)) {
    if (v.pid > 0) add("HEADROOM_VICTIM_PID", std::to_string(v.pid));
    if (!v.comm.empty()) add("HEADROOM_VICTIM_COMM", v.comm);
  }
  std::string cgroup = victimCgroup(rec);
  if (cgroup.empty()) cgroup = recordCgroup(rec);
  if (!cgroup.empty()) add("HEADROOM_CGROUP", cgroup);
  Domain d = domainOf(rec);
  if (d.global)
    add("HEADROOM_OOM_DOMAIN", "machine");
  else if (!d.cgroup.empty())
    add("HEADROOM_OOM_DOMAIN", d.cgroup);
  if (!d.constraint.empty()) add("HEADROOM_CONSTRAINT", d.constraint);
  addBytes("HEADROOM_LIMIT_BYTES", d.limit);
  addBytes("HEADROOM_USAGE_BYTES", d.usage);
  if (auto t = triggerOf(rec)) {
    if (t->pid > 0) add("HEADROOM_TRIGGER_PID", std::to_string(t->pid));
    if (!t->comm.empty()) add("HEADROOM_TRIGGER_COMM", t->comm);
  }
  const json workload = recordWorkloadObject(rec);
  for (const auto& [key, name] : {std::pair{"unit", "HEADROOM_UNIT"}, std::pair{"container", "HEADROOM_CONTAINER"},
                                  std::pair{"pod", "HEADROOM_POD"}, std::pair{"namespace", "HEADROOM_NAMESPACE"}}) {
    std::string v = textAt(workload, key);
    if (!v.empty()) add(name, v);
  }
  const json& at = objectAt(rec, "at_kill");
  if (std::string src = textAt(at, "source"); !src.empty()) add("HEADROOM_AT_KILL_SOURCE", src);
  addBytes("HEADROOM_AT_KILL_USAGE_BYTES", bytesAt(at, "usage_bytes"));
  addBytes("HEADROOM_AT_KILL_INVISIBLE_BYTES", bytesAt(at, "invisible_bytes"));
  for (const json& p : arrayAt(at, "parts")) {
    std::string kind = textAt(p, "kind");
    auto bytes = bytesAt(p, "bytes");
    if (kind.empty() || !bytes) continue;
    std::string name = "HEADROOM_AT_KILL_";
    for (char c : kind)
      name.push_back(std::isalnum(static_cast<unsigned char>(c)) != 0
                         ? static_cast<char>(std::toupper(static_cast<unsigned char>(c)))
                         : '_');
    name += "_BYTES";
    if (name.size() > 64) continue;  // journald's limit on a field name
    add(name, std::to_string(*bytes));
  }
  add("HEADROOM_RECORD", dumpJson(rec));
  return f;
}

Result<std::optional<json>> recordOfEventDocument(const json& doc) { return recordOf(doc, 0); }

Result<EventRead> readEvents(std::string_view text, std::string_view source) {
  EventRead out;
  auto take = [&](const json& doc, const std::string& where) -> Status {
    auto r = recordOf(doc, 0);
    if (!r) return r.error().wrap(fmt::format("{}{}", source, where));
    if (r->has_value())
      out.records.push_back(std::move(**r));
    else
      ++out.skipped;
    return ok();
  };
  std::string_view all = trimmed(text);
  // One document for the whole text: an array, or one object (pretty-printed, or an
  // Elasticsearch search response). Several objects, one per line, do not parse as one.
  if (!all.empty() && (all.front() == '[' || all.front() == '{')) {
    json doc = parseQuiet(all);
    if (doc.is_discarded() && all.front() == '[')
      return broken(fmt::format("{}: not a whole JSON array (cut short or damaged)", source));
    if (!doc.is_discarded()) {
      const json* elements = &doc;
      if (doc.is_object()) {
        const json& hits = arrayAt(objectAt(doc, "hits"), "hits");
        elements = hits.empty() && !objectAt(doc, "hits").contains("hits") ? nullptr : &hits;
      }
      if (elements == nullptr) {
        // On one line: that line's number (blank lines may come before it).
        const auto before = static_cast<std::size_t>(all.data() - text.data());
        const auto line = 1 + static_cast<std::size_t>(std::count(text.begin(), text.begin() + before, '\n'));
        const bool one_line = all.find('\n') == std::string_view::npos;
        if (auto st = take(doc, one_line ? fmt::format(": line {}", line) : std::string()); !st) return st.error();
        return out;
      }
      std::size_t i = 0;
      for (const json& d : *elements) {
        ++i;
        if (auto st = take(d, fmt::format(": element {}", i)); !st) return st.error();
      }
      return out;
    }
  }
  std::size_t line_no = 0;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t nl = text.find('\n', at);
    std::string_view line = text.substr(at, nl == std::string_view::npos ? std::string_view::npos : nl - at);
    at = nl == std::string_view::npos ? text.size() : nl + 1;
    ++line_no;
    std::string_view t = trimmed(line);
    if (t.empty()) {
      ++out.blank;
      continue;
    }
    json doc = t.front() == '{' || t.front() == '[' ? parseQuiet(t) : json(json::value_t::discarded);
    if (doc.is_discarded()) {
      if (mentionsUs(t))
        return broken(
            fmt::format("{}: line {}: a headroom event that is not whole JSON ({} bytes: cut short or damaged)", source,
                        line_no, t.size()));
      ++out.skipped;
      continue;
    }
    if (auto st = take(doc, fmt::format(": line {}", line_no)); !st) return st.error();
  }
  return out;
}

}  // namespace headroom
