// Text for people: what comes from elsewhere (comms, command lines, cgroup paths, the kernel's
// messages, a journal copied from another machine) made safe to print, log, embed in HTML or use
// as a label; values quoted in messages; times, always in UTC.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace headroom {

// Valid UTF-8 without control characters: each control character (C0, DEL and C1, so that no
// terminal escape gets through) and each byte outside a valid UTF-8 sequence becomes '?'. A comm
// is 15 bytes cut anywhere, possibly inside a character; a scraper rejects a whole page for one
// invalid byte, and XML forbids control characters.
std::string printableText(std::string_view s);
// Whether printableText would return `s` unchanged because it is printable ASCII throughout (the
// common case, told without a copy). False says nothing: printableText decides.
bool isPrintableAscii(std::string_view s);

// A string quoted and escaped as TOML (and JSON) write one, for messages that repeat what a user
// gave: "a \"b\"\n"; control characters as \uXXXX.
std::string quotedText(std::string_view s);

// A value quoted for an error message, cut after `max` bytes ("\"abc...\"") so that a garbage
// file cannot flood a log.
std::string quotedExcerpt(std::string_view s, std::size_t max = 40);

enum class UtcFormat {
  kDateTime,   // "2026-12-02 14:03:11 UTC"
  kClock,      // "14:03:11 UTC"
  kIsoMillis,  // "2026-12-02T14:03:11.123Z"
};

// `unix_ms`: milliseconds since the epoch. A time the C library cannot break down is "?".
std::string formatUtcMs(std::int64_t unix_ms, UtcFormat format = UtcFormat::kDateTime);
// The same from seconds (a fraction is truncated to the millisecond).
std::string formatUtc(double unix_seconds, UtcFormat format = UtcFormat::kDateTime);

}  // namespace headroom
