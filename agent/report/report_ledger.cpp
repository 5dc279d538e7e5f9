// LEDGER AT THE KILL: each victim's memory of every kind side by side (the record's "ledger",
// model/kill_ledger.h): RAM and page tables as the kernel charged them, locked and DMA-pinned
// pages, CUDA pinned host and device memory, and the driver's device memory (NVML).
#include <fmt/format.h>

#include "report_parts.h"

namespace headroom::report_detail {

std::optional<Section> ledgerSection(const json& rec) {
  const json* ledger = field(rec, "ledger");
  if (ledger == nullptr || !ledger->is_array() || ledger->empty()) return std::nullopt;
  Section s{"LEDGER AT THE KILL",
            "each victim's memory by kind: host RAM and page tables (the kernel's), pinned host and device memory "
            "(the CUDA probes at the kill, the driver at the last sample)",
            {}};
  Table t{{"PID", "COMM", "ANON", "FILE", "SHMEM", "PAGE TABLES", "LOCKED", "CUDA PINNED", "CUDA DEVICE", "GPU (NVML)",
           "HOST TOTAL"},
          "rlrrrrrrrrr",
          {},
          {}};
  std::vector<std::string> notes;
  for (const json& l : *ledger) {
    if (!l.is_object()) continue;
    const json& ram = objectAt(l, "ram");
    const json& cuda = objectAt(l, "cuda");
    const json& gpu = objectAt(l, "gpu_memory");
    auto pid = intAt(l, "pid");
    std::string comm = textAt(l, "comm");
    t.rows.push_back({pid ? std::to_string(*pid) : "?", comm.empty() ? "?" : comm,
                      bytesText(bytesAt(ram, "anon_bytes")), bytesText(bytesAt(ram, "file_bytes")),
                      bytesText(bytesAt(ram, "shmem_bytes")), bytesText(bytesAt(l, "page_tables_bytes")),
                      bytesText(bytesAt(l, "locked_bytes")), bytesText(bytesAt(cuda, "pinned_bytes")),
                      bytesText(bytesAt(cuda, "device_bytes")), bytesText(bytesAt(gpu, "bytes")),
                      bytesText(bytesAt(l, "host_bytes"))});
    const std::string whom = fmt::format("pid {}", pid ? std::to_string(*pid) : "?");
    if (cuda.is_object() && !cuda.empty()) {
      const std::string where = textAt(cuda, "pinned_residency");
      if (where == "outside_rss")
        notes.push_back(
            fmt::format("{}: its CUDA pinned memory lives outside RSS (the driver's pages): added to the "
                        "host total",
                        whom));
      else if (where == "inside_rss")
        notes.push_back(fmt::format("{}: its CUDA pinned memory is inside its RSS above, not added again", whom));
    }
    if (auto age = numberAt(gpu, "age_seconds"))
      notes.push_back(
          fmt::format("{}: the driver's figure is of the last sample, {} before the kill", whom, secondsText(*age)));
    if (const json* n = field(l, "notes"); n != nullptr && n->is_array()) {
      for (const json& line : *n)
        if (line.is_string()) notes.push_back(fmt::format("{}: {}", whom, line.get<std::string>()));
    }
  }
  if (t.rows.empty()) return std::nullopt;
  s.blocks.emplace_back(std::move(t));
  for (auto& n : notes) s.blocks.emplace_back(std::move(n));
  return s;
}

}  // namespace headroom::report_detail
