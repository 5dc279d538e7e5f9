// Sizes for people: "1.5 GiB" in tables, and "512MiB" / "2GiB" / "1073741824" on the command line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "headroom/util/result.h"

namespace headroom {

// Binary units, three significant digits: "0 B", "812 KiB", "1.50 GiB", "-3.2 MiB".
std::string formatBytes(std::uint64_t bytes);
std::string formatSignedBytes(std::int64_t bytes);

// Accepts a plain byte count or a number with B, K/KiB/KB, M/MiB/MB, G/GiB/GB, T/TiB/TB
// (all binary; the SI spellings are read as binary, as memory sizes are), fractions allowed.
Result<std::uint64_t> parseSize(std::string_view text);

}  // namespace headroom
