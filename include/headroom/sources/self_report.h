// The prover's own idea of its memory use, when it exposes one: a file, a JSON field at a URL,
// or a Prometheus metric. Parsing the spec and extracting the number are pure; fetching is the
// caller's (a file read, an HTTP GET: a URL's answers come from self_report_fetcher.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "headroom/util/result.h"

namespace headroom {

struct SelfReportSource {
  enum class Kind { kFile, kUrl };
  Kind kind = Kind::kFile;
  std::string location;  // the file path, or the http:// URL
  // What to take from the body:
  //   ""               the whole body is a number or a size ("123", "512MiB"), or a JSON
  //                    object with "used_bytes"
  //   "json:a.b.c"     that field of a JSON document (a number of bytes)
  //   "metric:NAME"    a Prometheus text exposition's sample NAME (with "{label=\"v\",...}"
  //                    to pick a series: every given label must match)
  std::string field;
  std::string text() const;
};

// "file:/run/prover/used", "/run/prover/used" (a file), "http://127.0.0.1:9000/status#json:mem.used",
// "http://127.0.0.1:9000/metrics#metric:cuzk_memory_used_bytes{pool=\"all\"}".
Result<SelfReportSource> parseSelfReportSource(std::string_view spec);

// Reads a self-report file: a regular file only (never blocks on a FIFO), at most 1 MiB.
Result<std::string> readSelfReportFile(const std::string& path);

// The bytes the body says, per `field`. Errors say what was looked for and what was found.
Result<std::uint64_t> extractSelfReport(const SelfReportSource& src, std::string_view body);

// What the prover says now: the file read, or the URL fetched with `get` (the caller's HTTP
// client: a short timeout, so a slow endpoint cannot stall a sample), and the bytes taken from
// the body. Without `get` a URL is unsupported.
using SelfReportFetch = std::function<Result<std::string>(const std::string& url)>;
Result<std::uint64_t> readSelfReport(const SelfReportSource& src, const SelfReportFetch& get = {});

}  // namespace headroom
