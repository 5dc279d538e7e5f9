// Numbers from text, through std::from_chars only: whole values, no locale, no exceptions, and
// an error that quotes (a bounded part of) the text. Empty, signed and out-of-range text included.
#pragma once

#include <cstdint>
#include <string_view>

#include "headroom/util/result.h"

namespace headroom {

// The white space of the kernel's text formats (C locale, whatever the process's locale).
inline bool isAsciiSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Strips ASCII white space (spaces, tabs, newlines) on both ends.
std::string_view trim(std::string_view s);

// A whole file (or field) holding one unsigned decimal number. Errors name the text.
Result<std::uint64_t> parseU64(std::string_view text);
Result<std::int64_t> parseI64(std::string_view text);
Result<double> parseDouble(std::string_view text);

}  // namespace headroom
