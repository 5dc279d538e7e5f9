#include "headroom/sources/log_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <nlohmann/json.hpp>

#include "headroom/sources/kmsg.h"
#include "headroom/sources/parse.h"
#include "headroom/util/text.h"

namespace headroom {
namespace {

// A record this long may have been cut by printk (its text buffer is 1024 bytes less the prefix
// it may add: 992 with the level prefix, 975 with CONFIG_PRINTK_CALLER's caller id).
constexpr std::size_t kLogLineLimit = 1024 - 48 - 1;

bool isDigit(char c) { return c >= '0' && c <= '9'; }
bool isSpace(char c) { return c == ' ' || c == '\t'; }

std::string_view trimLeft(std::string_view s) {
  while (!s.empty() && isSpace(s.front())) s.remove_prefix(1);
  return s;
}

// "HH:MM:SS" at `at`, not inside a longer run of digits.
bool clockAt(std::string_view s, std::size_t at) {
  if (at + 8 > s.size()) return false;
  if (at > 0 && isDigit(s[at - 1])) return false;
  if (at + 8 < s.size() && isDigit(s[at + 8])) return false;
  return isDigit(s[at]) && isDigit(s[at + 1]) && s[at + 2] == ':' && isDigit(s[at + 3]) && isDigit(s[at + 4]) &&
         s[at + 5] == ':' && isDigit(s[at + 6]) && isDigit(s[at + 7]);
}

// The first "HH:MM:SS" within the first `within` bytes.
std::optional<std::size_t> findClock(std::string_view s, std::size_t within) {
  std::size_t end = std::min(s.size(), within);
  for (std::size_t i = 0; i + 8 <= s.size() && i < end; ++i) {
    if (clockAt(s, i)) return i;
  }
  return std::nullopt;
}

// "[  123.456789]": the kernel's clock in microseconds; `rest` is what follows (and a
// CONFIG_PRINTK_CALLER id, "[  T123]" or "[C1]", right after it is taken off too).
std::optional<std::uint64_t> dmesgClock(std::string_view s, std::string_view& rest) {
  if (s.empty() || s.front() != '[') return std::nullopt;
  auto close = s.find(']');
  if (close > 24) return std::nullopt;  // none, or too far for a clock
  std::string_view in = trim(s.substr(1, close - 1));
  auto dot = in.find('.');
  if (dot == std::string_view::npos || dot == 0) return std::nullopt;
  auto secs = parseU64(in.substr(0, dot));
  std::string_view frac = in.substr(dot + 1);
  if (!secs || frac.empty() || frac.size() > 9 || !parseU64(frac)) return std::nullopt;
  std::uint64_t us = 0;
  for (std::size_t i = 0; i < 6; ++i) us = us * 10 + (i < frac.size() ? static_cast<std::uint64_t>(frac[i] - '0') : 0);
  rest = s.substr(close + 1);
  // The caller id: "[  T123]" or "[ C1]".
  std::string_view r = rest;
  if (!r.empty() && r.front() == '[') {
    auto c2 = r.find(']');
    std::string_view id = c2 == std::string_view::npos ? std::string_view{} : trim(r.substr(1, c2 - 1));
    if (id.size() >= 2 && (id.front() == 'T' || id.front() == 'C') && parseU64(id.substr(1))) rest = r.substr(c2 + 1);
  }
  if (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  return *secs * 1'000'000 + us;
}

// "[Tue Mar  3 10:11:12 2020]" in any locale: a bracket that holds a clock and no ']' before it.
std::optional<std::string> dmesgWallClock(std::string_view s, std::string_view& rest) {
  if (s.empty() || s.front() != '[') return std::nullopt;
  auto close = s.find(']');
  if (close > 64) return std::nullopt;  // none, or too far for a date
  std::string_view in = s.substr(1, close - 1);
  if (!findClock(in, in.size())) return std::nullopt;
  rest = s.substr(close + 1);
  if (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  return std::string(trim(in));
}

// A syslog tag: "kernel:", "systemd[1]:", "containerd[812]:".
bool isTag(std::string_view tok, std::string_view& name) {
  if (tok.size() < 2 || tok.back() != ':') return false;
  tok.remove_suffix(1);
  if (tok.back() == ']') {
    auto open = tok.rfind('[');
    if (open == std::string_view::npos || open == 0 || !parseU64(tok.substr(open + 1, tok.size() - open - 2)))
      return false;
    tok = tok.substr(0, open);
  }
  for (char c : tok) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || isDigit(c) || c == '-' || c == '_' || c == '.' ||
              c == '/' || c == '@' || c == '(' || c == ')';
    if (!ok) return false;
  }
  name = tok;
  return true;
}

struct Syslog {
  std::string stamp, host;
  bool kernel = false;
  std::string_view rest;
};

// "Mar  3 10:11:12 host kernel: ...", "2020-03-03T10:11:12.123456+00:00 host kernel: ...",
// "Tue 2020-03-03 10:11:12 UTC host kernel: ...", with a date in any locale's words.
std::optional<Syslog> syslogLine(std::string_view s) {
  auto clock = findClock(s, 40);
  if (!clock) return std::nullopt;
  for (char c : s.substr(0, *clock)) {
    if (c == '[' || c == ']' || c == ':' || c == '(' || c == '<' || c == '=' || c == ';') return std::nullopt;
  }
  std::size_t at = *clock + 8;
  if (at < s.size() && (s[at] == '.' || s[at] == ',')) {
    ++at;
    while (at < s.size() && isDigit(s[at])) ++at;
  }
  // A zone glued to the time: "Z", "+00:00", "-0500".
  if (at < s.size() && s[at] == 'Z') ++at;
  if (at < s.size() && (s[at] == '+' || s[at] == '-')) {
    ++at;
    while (at < s.size() && (isDigit(s[at]) || s[at] == ':')) ++at;
  }
  if (at >= s.size() || !isSpace(s[at])) return std::nullopt;
  Syslog out;
  out.stamp = std::string(trim(s.substr(0, at)));
  std::string_view rest = trimLeft(s.substr(at));
  // Up to three words before the tag: a zone ("UTC"), a year, the host.
  std::vector<std::string_view> before;
  for (int i = 0; i < 4 && !rest.empty(); ++i) {
    auto sp = rest.find(' ');
    std::string_view tok = rest.substr(0, sp);
    std::string_view name;
    if (isTag(tok, name)) {
      out.kernel = name == "kernel";
      out.host = before.empty() ? std::string() : std::string(before.back());
      out.rest = sp == std::string_view::npos ? std::string_view{} : rest.substr(sp + 1);
      return out;
    }
    before.push_back(tok);
    if (sp == std::string_view::npos) break;
    rest = trimLeft(rest.substr(sp));
  }
  return std::nullopt;
}

// "<4>" of `dmesg -r`; "kern  :warn  : " of `dmesg -x` (kernel: whether the facility is kern).
bool levelPrefix(std::string_view& s, bool& kernel) {
  if (s.size() > 3 && s.front() == '<') {
    auto close = s.find('>');
    if (close <= 4 && parseU64(s.substr(1, close - 1))) {  // npos: no '>'
      kernel = *parseU64(s.substr(1, close - 1)) < 8;
      s.remove_prefix(close + 1);
      return true;
    }
  }
  static constexpr std::array<std::string_view, 12> kFacilities{"kern", "user", "mail", "daemon", "auth",     "syslog",
                                                                "lpr",  "news", "uucp", "cron",   "authpriv", "ftp"};
  auto colon = s.find(':');
  if (colon > 10) return false;  // none, or no facility's name before it
  std::string_view fac = trim(s.substr(0, colon));
  if (std::find(kFacilities.begin(), kFacilities.end(), fac) == kFacilities.end()) return false;
  auto colon2 = s.find(':', colon + 1);
  if (colon2 > colon + 10) return false;  // none, or no level's name
  kernel = fac == "kern";
  s.remove_prefix(colon2 + 1);
  if (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  return true;
}

// A line with its quoting taken off: "> > text", "\ttext", "    text". `indent` counts the
// white space after the quote marks.
std::string_view unquote(std::string_view s, bool& quoted, std::size_t& indent) {
  quoted = false;
  for (;;) {
    std::string_view t = trimLeft(s);
    if (!t.empty() && t.front() == '>') {
      quoted = true;
      s = t.substr(1);
      if (!s.empty() && s.front() == ' ') s.remove_prefix(1);
      continue;
    }
    break;
  }
  // A Markdown fence glued to the first line of a paste ("```[  302.364929] ...").
  std::string_view t = trimLeft(s);
  for (std::string_view fence : {"```", "~~~"}) {
    if (t.substr(0, fence.size()) == fence) {
      t.remove_prefix(fence.size());
      while (!t.empty() && t.front() >= 'a' && t.front() <= 'z') t.remove_prefix(1);  // its language ("```text")
      quoted = true;
      s = t;
    }
  }
  indent = 0;
  while (indent < s.size() && isSpace(s[indent])) ++indent;
  return s.substr(indent);
}

// "#011", rsyslog's escape of a tab, as a space.
std::string untabbed(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s.compare(i, 4, "#011") == 0) {
      out += ' ';
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

enum class Kind { kBlank, kPlain, kPrefixed, kKmsgDictionary };

// "anon 1234": a line of a cgroup's statistics block, never the rest of a wrapped line.
bool statLine(std::string_view s) {
  auto sp = s.find(' ');
  if (sp == std::string_view::npos || sp == 0 || !parseU64(s.substr(sp + 1))) return false;
  return std::all_of(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(sp),
                     [](char c) { return (c >= 'a' && c <= 'z') || c == '_' || (c >= '0' && c <= '9'); });
}

struct Parsed {
  Kind kind = Kind::kPlain;
  std::size_t indent = 0;
  std::size_t raw_len = 0;     // the input line's length, for telling a terminal's wrap from a mail's
  std::size_t trailing = 0;    // white space at its end (a terminal's wrap may cut right after it)
  std::vector<LogLine> lines;  // one, or several for a message with escaped newlines
};

// A journal entry as `journalctl -o json` writes it.
std::optional<LogLine> journalJson(std::string_view s) {
  auto j = nlohmann::json::parse(s, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  auto msg = j.find("MESSAGE");
  if (msg == j.end()) return std::nullopt;
  LogLine out;
  if (msg->is_string()) {
    out.text = msg->get<std::string>();
  } else if (msg->is_array()) {  // not valid UTF-8: the bytes
    for (const auto& b : *msg) {
      if (b.is_number_unsigned()) out.text.push_back(static_cast<char>(b.get<unsigned>()));
    }
  } else {
    return std::nullopt;
  }
  auto str = [&](const char* key) -> std::string {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  std::string transport = str("_TRANSPORT"), ident = str("SYSLOG_IDENTIFIER");
  out.kernel = transport == "kernel" || (transport.empty() && ident == "kernel");
  out.host = str("_HOSTNAME");
  if (auto mono = parseU64(str("_SOURCE_MONOTONIC_TIMESTAMP")); mono && *mono > 0) out.ts_us = *mono;
  if (auto real = parseU64(str("__REALTIME_TIMESTAMP")))
    out.stamp = formatUtcMs(static_cast<std::int64_t>(*real / 1000), UtcFormat::kIsoMillis);
  return out;
}

// One input line (or a json-pretty object gathered over several).
Parsed parseLine(std::string_view raw, std::size_t line_no, LogTextForm& form) {
  Parsed p;
  p.raw_len = raw.size();
  while (p.raw_len > 0 && raw[p.raw_len - 1] == '\r') --p.raw_len;
  bool quoted = false;
  std::string_view s = unquote(raw, quoted, p.indent);
  if (quoted || p.indent > 0) ++form.quoted;
  while (!s.empty() && s.back() == '\r') s.remove_suffix(1);
  while (!s.empty() && isSpace(s.back())) {
    s.remove_suffix(1);
    ++p.trailing;
  }
  if (s.empty()) {
    p.kind = Kind::kBlank;
    return p;
  }
  LogLine l;
  l.line = line_no;
  if (s.front() == '{') {
    if (auto j = journalJson(s)) {
      ++form.journal_json;
      j->line = line_no;
      p.kind = Kind::kPrefixed;
      for (auto part : splitLines(j->text)) {
        LogLine each = *j;
        each.text = std::string(part);
        p.lines.push_back(std::move(each));
      }
      return p;
    }
  }
  if (isDigit(s.front())) {
    if (auto rec = parseKmsgRecord(s); rec && s.find(';') < 40) {
      ++form.kmsg;
      l.seq = rec->seq;
      l.ts_us = rec->ts_us;
      l.kernel = rec->facility == 0;
      l.text = std::move(rec->message);
      p.kind = Kind::kPrefixed;
      p.lines = splitEscapedLines(std::move(l));
      return p;
    }
  }
  bool prefixed = false;
  bool kernel = true;
  if (levelPrefix(s, kernel)) {
    prefixed = true;
    l.kernel = kernel;
  }
  // A syslog line whose time and host the paste left out: "kernel: ...".
  if (s.substr(0, 8) == "kernel: ") {
    ++form.syslog;
    prefixed = true;
    s.remove_prefix(8);
  } else if (auto sys = syslogLine(s)) {
    ++form.syslog;
    prefixed = true;
    l.stamp = std::move(sys->stamp);
    l.host = std::move(sys->host);
    l.kernel = sys->kernel;
    s = sys->rest;
  }
  std::string_view rest;
  if (auto ts = dmesgClock(s, rest)) {
    if (!prefixed) ++form.dmesg;
    prefixed = true;
    l.ts_us = *ts;
    s = rest;
    // journalctl -o short-monotonic: "[  12.345678] host kernel: ..."
    auto sp = s.find(' ');
    std::string_view name;
    if (sp != std::string_view::npos && sp > 0) {
      std::string_view after = s.substr(sp + 1);
      auto sp2 = after.find(' ');
      if (sp2 != std::string_view::npos && isTag(after.substr(0, sp2), name) &&
          s.substr(0, sp).find(':') == std::string_view::npos) {
        l.host = std::string(s.substr(0, sp));
        l.kernel = name == "kernel";
        s = after.substr(sp2 + 1);
      }
    }
  } else if (auto wall = dmesgWallClock(s, rest)) {
    if (!prefixed) ++form.dmesg;
    prefixed = true;
    l.stamp = std::move(*wall);
    s = rest;
  }
  p.kind = prefixed ? Kind::kPrefixed : Kind::kPlain;
  // A /dev/kmsg record's dictionary (" SUBSYSTEM=...", " DEVICE=+..."): not the message.
  if (!prefixed && p.indent > 0 && s.find('=') != std::string_view::npos) {
    auto eq = s.find('=');
    bool upper = eq > 0 && std::all_of(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(eq),
                                       [](char c) { return (c >= 'A' && c <= 'Z') || c == '_'; });
    if (upper) p.kind = Kind::kKmsgDictionary;
  }
  l.text = std::string(s);
  p.lines = splitEscapedLines(std::move(l));
  return p;
}

}  // namespace

std::vector<LogLine> splitEscapedLines(LogLine first) {
  static constexpr std::size_t kEscape = 4;  // "\x0a" and "#012" alike
  std::vector<LogLine> out;
  const std::string text = std::move(first.text);
  auto next = [&](std::size_t from) { return std::min(text.find("\\x0a", from), text.find("#012", from)); };
  std::size_t escapes = 0;
  for (std::size_t at = next(0); at != std::string::npos; at = next(at + kEscape)) ++escapes;
  const bool at_limit = escapes > 0 && text.size() - 3 * escapes >= kLogLineLimit;
  for (std::size_t from = 0;;) {
    std::size_t at = next(from);
    LogLine part = first;
    part.text = untabbed(std::string_view(text).substr(from, at == std::string::npos ? std::string::npos : at - from));
    if (at == std::string::npos) {
      part.maybe_cut = at_limit;
      if (escapes == 0 || !part.text.empty() || part.maybe_cut) out.push_back(std::move(part));
      break;
    }
    out.push_back(std::move(part));
    from = at + kEscape;
  }
  return out;
}

std::string LogTextForm::describe() const {
  std::vector<std::string> parts;
  if (kmsg > 0) parts.emplace_back("/dev/kmsg records");
  if (journal_json > 0) parts.emplace_back("journal JSON");
  if (syslog > 0)
    parts.emplace_back(hosts.empty() ? "syslog lines" : fmt::format("syslog lines of {}", fmt::join(hosts, ", ")));
  if (dmesg > 0) parts.emplace_back("dmesg lines");
  if (parts.empty()) parts.emplace_back("plain kernel messages");
  std::string out = fmt::format("{}", fmt::join(parts, " + "));
  if (quoted > 0) out += ", quoted or indented";
  if (joined > 0) out += fmt::format(", {} wrapped line{} joined", joined, joined == 1 ? "" : "s");
  return out;
}

LogText readLogText(std::string_view text) {
  LogText out;
  std::vector<Parsed> parsed;
  auto raw = splitLines(text);
  out.form.lines = raw.size();
  for (std::size_t i = 0; i < raw.size(); ++i) {
    std::string_view r = raw[i];
    // journalctl -o json-pretty: an object over several lines.
    if (trim(r) == "{") {
      std::string obj;
      std::size_t j = i;
      for (; j < raw.size() && j < i + 200; ++j) {
        obj += raw[j];
        obj += '\n';
        if (trim(raw[j]) == "}") break;
      }
      if (j < raw.size() && trim(raw[j]) == "}") {
        if (auto entry = journalJson(obj)) {
          ++out.form.journal_json;
          Parsed p;
          p.kind = Kind::kPrefixed;
          for (auto part : splitLines(entry->text)) {
            LogLine each = *entry;
            each.line = i + 1;
            each.text = std::string(part);
            p.lines.push_back(std::move(each));
          }
          parsed.push_back(std::move(p));
          i = j;
          continue;
        }
      }
    }
    parsed.push_back(parseLine(r, i + 1, out.form));
  }
  // A terminal cuts every long line at its width, anywhere in a word; a mail breaks at a space
  // before its width, and the space is gone.
  std::size_t wrap_width = 0;
  for (const auto& p : parsed) wrap_width = std::max(wrap_width, p.raw_len);
  // The paste's own indentation: the most common one of the lines that carry a prefix.
  std::map<std::size_t, std::size_t> indents;
  for (const auto& p : parsed) {
    if (p.kind == Kind::kPrefixed) ++indents[p.indent];
  }
  std::size_t base_indent = 0, most = 0;
  for (auto [indent, n] : indents) {
    if (n > most) {
      most = n;
      base_indent = indent;
    }
  }
  // Wrapped lines are told apart only where most lines carry a prefix (a piece after a line cut
  // at the terminal's width counts as part of that line, and so does a line indented under one).
  std::size_t prefixed = 0, nonblank = 0;
  std::size_t before = 0;
  for (const auto& p : parsed) {
    if (p.kind == Kind::kBlank) continue;
    const bool piece = p.kind == Kind::kPlain && ((before == wrap_width && wrap_width >= 60) || p.indent > base_indent);
    before = p.raw_len;
    if (piece) continue;
    ++nonblank;
    if (p.kind == Kind::kPrefixed) ++prefixed;
  }
  const bool prefixed_text = nonblank > 0 && prefixed * 2 >= nonblank;
  std::size_t last_raw_len = 0, last_trailing = 0;
  for (auto& p : parsed) {
    if (p.kind == Kind::kBlank || p.kind == Kind::kKmsgDictionary) continue;
    if (p.kind == Kind::kPlain && prefixed_text && !out.lines.empty()) {
      LogLine& prev = out.lines.back();
      const bool cut_at_width = last_raw_len >= wrap_width && wrap_width >= 60;
      if (!cut_at_width && (p.indent > base_indent || statLine(p.lines.front().text))) {
        // A line of the same message (journalctl indents them; a statistics block's "key
        // value" lines): the record's own fields (copied: the vector grows under `prev`).
        const LogLine record = prev;
        for (auto& l : p.lines) {
          std::size_t line = l.line;
          std::string t = std::move(l.text);
          l = record;
          l.line = line;
          l.text = std::move(t);
          l.maybe_cut = false;
          out.lines.push_back(std::move(l));
        }
        last_raw_len = p.raw_len;
        last_trailing = p.trailing;
        continue;
      }
      // A wrap: the rest of the line before. A terminal's keeps every character (white space
      // at the cut included); a mail's broke at a space, which is gone.
      for (auto& l : p.lines) {
        // (The indentation every line of the paste has is the paste's, not the line's; a piece
        // indented less was cut from a line, its white space the line's own.)
        std::size_t lead = p.indent > base_indent ? p.indent - base_indent : p.indent < base_indent ? p.indent : 0;
        prev.text += cut_at_width ? std::string(last_trailing + lead, ' ') : std::string(" ");
        prev.text += l.text;
      }
      last_raw_len = p.raw_len;
      last_trailing = p.trailing;
      ++out.form.joined;
      continue;
    }
    last_raw_len = p.raw_len;
    last_trailing = p.trailing;
    for (auto& l : p.lines) {
      if (!l.host.empty() && std::find(out.form.hosts.begin(), out.form.hosts.end(), l.host) == out.form.hosts.end() &&
          out.form.hosts.size() < 8)
        out.form.hosts.push_back(l.host);
      out.lines.push_back(std::move(l));
    }
  }
  return out;
}

}  // namespace headroom
