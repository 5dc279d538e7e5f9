// A saved kernel log read whole for `headroom explain`: a file or standard input, plain or
// gzip-compressed (a rotated kern.log.2.gz, several members one after the other). The text
// goes to sources/log_text.h.
#pragma once

#include <cstddef>
#include <istream>
#include <string>
#include <string_view>

#include "headroom/util/result.h"

namespace headroom {

// More than this (decompressed) is refused: a log that size is no one report's.
inline constexpr std::size_t kMaxLogBytes = std::size_t{1} << 30;

// `path` ("-": `in`): errors name the file; a missing or unreadable file and a damaged
// compressed one are bad input.
Result<std::string> readLogFile(const std::string& path, std::istream& in);
// `bytes` themselves when they are not gzip's; else what they decompress to. `what` names
// them in errors.
Result<std::string> gunzipIfCompressed(std::string bytes, std::string_view what);

}  // namespace headroom
