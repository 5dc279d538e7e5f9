// The moment of an OOM kill as the kernel saw it: the OOM domain's charge split into the parts
// of a cgroup's attribution (visible and invisible, each exact or derived) from the kernel's own
// report, else from the files read the moment the kill was seen; at a global OOM, the machine's.
// Pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "headroom/model/snapshot.h"
#include "headroom/sensors/oom_event.h"

namespace headroom {

struct KillBreakdown {
  enum class Source {
    kKernelReport,  // the kernel's report (/dev/kmsg): the figures at the kill
    kFilesRead,     // the domain's memory files, read read_after_ns after the kill
    kMachine,       // a global OOM: the machine's Mem-Info
  };
  Source source = Source::kKernelReport;
  std::string cgroup;            // the OOM domain (normalised); empty for the machine
  bool domain_inferred = false;  // no kernel report named it: the nearest limit above the victim
  std::uint64_t usage = 0;       // what was charged (the machine: the memory in use)
  std::optional<std::uint64_t> limit, failcnt, peak;
  std::optional<std::int64_t> read_after_ns;  // kFilesRead: how long after the kill
  Attribution attribution;                    // the parts; unattributed: usage minus their sum
  // The parts add up to the charge within 1% (the kernel's figures agree with each other). Not
  // checked for the machine, whose kernel_other is the rest by definition.
  bool adds_up = false;
  // A global OOM: what the machine had free, its RAM, its largest unreclaimable slab caches.
  std::optional<std::uint64_t> free_bytes, ram_bytes, hugetlb_bytes;
  std::vector<OomSlabCache> slab;
};
const char* toString(KillBreakdown::Source s);

// The breakdown at the kill, from the best evidence the event holds; nullopt when it holds none
// (an OOM kill known from a counter alone).
std::optional<KillBreakdown> breakdownAtKill(const OomEvent& e);

// What the kill's own numbers say of a prover's overhead, for the budget controller: the
// domain's charge, its page tables, and the rest of what no process shows (slab, kernel stacks,
// shmem nobody maps, ...). Only when the domain is the prover's cgroup or inside it (a wider
// domain's overhead is its neighbours' too), and not from a global OOM.
struct KillOverhead {
  bool exact = false;  // from the kernel's report (else files read after the kill: a lower bound)
  std::uint64_t charge = 0;
  std::uint64_t page_tables = 0;
  // The page tables are in the report (memory.stat breaks them out since 5.11; before, they are
  // in no key and page_tables is 0, not their size).
  bool page_tables_known = false;
  std::uint64_t kernel = 0;
  std::string source;  // "the kernel's OOM report", "the domain's files read 2.1 ms after the kill"
};
std::optional<KillOverhead> overheadAtKill(const KillBreakdown& b, std::string_view prover_cgroup);

}  // namespace headroom
