// Kernel log text in whatever form it was saved, made into the kernel's own lines: `/dev/kmsg`
// records, `dmesg` with or without `[ts]`, `dmesg -T` (any locale's dates), `dmesg -r` and `-x`,
// syslog, messages and kern.log (host and tag prefixes, rsyslog's `#012` escapes), `journalctl
// -k` (short forms and `-o json`), CRLF, pastes indented or quoted with `> `, and lines a mail
// or a terminal wrapped. Pure: text in, lines out (sources/log_file.h reads files and `.gz`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace headroom {

// One line of the kernel log with its prefixes taken off.
struct LogLine {
  std::string text;                    // the kernel's message line
  std::size_t line = 0;                // where it starts in the input (1-based)
  std::optional<std::uint64_t> seq;    // the kernel's sequence number (/dev/kmsg records)
  std::optional<std::uint64_t> ts_us;  // the kernel's clock, since boot ("[  12.345678]", a record)
  std::string stamp;                   // a wall time as the text printed it ("Mar  3 10:11:12")
  std::string host;                    // the host a syslog or journal line names
  // Another program's message (a syslog tag or journal identifier other than the kernel's, a
  // /dev/kmsg record of another facility): never part of a kernel report.
  bool kernel = true;
  // The last line of a record the kernel's line limit may have cut: its end is not to be trusted.
  bool maybe_cut = false;
};

// What the text was, for the explanation ("read as syslog lines of host node-3").
struct LogTextForm {
  std::size_t lines = 0;         // lines of input
  std::size_t kmsg = 0;          // /dev/kmsg records
  std::size_t syslog = 0;        // syslog/journal short lines (a time, a host, a tag)
  std::size_t journal_json = 0;  // journalctl -o json objects
  std::size_t dmesg = 0;         // "[  12.345678]" or "[Tue Mar  3 10:11:12 2020]" prefixes
  std::size_t quoted = 0;        // lines quoted with '>' or indented
  std::size_t joined = 0;        // wrapped lines joined back to the line they continue
  std::vector<std::string> hosts;
  // "kmsg records", "syslog", "journal JSON", "dmesg", "plain kernel messages", joined with '+'.
  std::string describe() const;
};

struct LogText {
  std::vector<LogLine> lines;
  LogTextForm form;
};

// Reads every line; nothing is dropped but blank lines. A line that is only a continuation of
// the one before (a wrap: no prefix in text whose lines carry one, not indented) is joined to it.
LogText readLogText(std::string_view text);

// The lines of one message that holds escaped newlines ("\x0a" in /dev/kmsg records, "#012" in
// rsyslog's files), each a LogLine like `first` (the message's own fields). A record as long as
// the kernel's line limit may have lost its end: its last line is marked maybe_cut.
std::vector<LogLine> splitEscapedLines(LogLine first);

}  // namespace headroom
