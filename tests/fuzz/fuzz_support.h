// What the fuzz targets share: the input as text, and an invariant check that stops the run (the
// input that broke it is what libFuzzer keeps, as for a crash).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string_view>
#include <vector>

namespace headroom::fuzz {

inline std::string_view text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

inline std::span<const std::byte> bytes(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const std::byte*>(data), size};
}

// A broken invariant: said, then abort(), which libFuzzer reports as a crash with the input.
inline void require(bool holds, const char* what) {
  if (holds) return;
  std::fprintf(stderr, "invariant broken: %s\n", what);
  std::abort();
}

// The input cut at each NUL: the parts of an input that holds several texts (files, fields).
inline std::vector<std::string_view> parts(std::string_view s) {
  std::vector<std::string_view> out;
  for (;;) {
    auto nul = s.find('\0');
    out.push_back(s.substr(0, nul));
    if (nul == std::string_view::npos) return out;
    s.remove_prefix(nul + 1);
  }
}

}  // namespace headroom::fuzz
