#include <gtest/gtest.h>

#include "headroom/model/snapshot.h"

namespace headroom {
namespace {

constexpr std::uint64_t kMiB = 1ULL << 20;

std::int64_t sumParts(const Attribution& a) {
  std::int64_t s = 0;
  for (const auto& p : a.parts) s += static_cast<std::int64_t>(p.bytes);
  return s;
}

const Part& part(const Attribution& a, PartKind k) {
  for (const auto& p : a.parts) {
    if (p.kind == k) return p;
  }
  throw std::runtime_error(std::string("no part ") + toString(k));
}

ProcessSample proc(std::uint64_t pss_shmem, std::uint64_t rss_shmem, std::uint64_t pte, std::uint32_t threads,
                   bool smaps = true) {
  ProcessSample p;
  p.status.rss_shmem = rss_shmem;
  p.status.vm_pte = pte;
  p.status.threads = threads;
  if (smaps) {
    p.smaps = SmapsRollup{};
    p.smaps->pss_shmem = pss_shmem;
  }
  return p;
}

CgroupMemory v1(std::uint64_t rss, std::uint64_t cache, std::uint64_t shmem, std::optional<std::uint64_t> kmem,
                std::uint64_t usage) {
  CgroupMemory cg;
  cg.version = 1;
  cg.path = "/x";
  cg.usage = usage;
  cg.kmem_usage = kmem;
  cg.stat.set("rss", 1);  // local keys are ignored when total_* exist
  cg.stat.set("total_rss", rss);
  cg.stat.set("total_cache", cache);
  cg.stat.set("total_shmem", shmem);
  return cg;
}

TEST(AttributionV1, KernelTotalExactSplitEstimated) {
  CgroupMemory cg = v1(400 * kMiB, 150 * kMiB, 50 * kMiB, 40 * kMiB, 590 * kMiB);
  ProcessSample a = proc(10 * kMiB, 50 * kMiB, 2 * kMiB, 8);
  ProcessSample b = proc(10 * kMiB, 50 * kMiB, 1 * kMiB, 2);
  Attribution at = attributeCgroup(cg, {&a, &b});
  EXPECT_EQ(part(at, PartKind::kAnon).bytes, 400 * kMiB);
  EXPECT_EQ(part(at, PartKind::kFile).bytes, 100 * kMiB);
  EXPECT_EQ(part(at, PartKind::kShmemMapped).bytes, 20 * kMiB) << "PSS: 50 MiB shared counts once";
  EXPECT_EQ(part(at, PartKind::kShmemUnmapped).bytes, 30 * kMiB);
  EXPECT_EQ(part(at, PartKind::kPageTables).bytes, 3 * kMiB);
  EXPECT_EQ(part(at, PartKind::kPageTables).accuracy, Accuracy::kExact);
  EXPECT_EQ(part(at, PartKind::kKernelStack).bytes, 10 * kKernelStackBytes);
  EXPECT_EQ(part(at, PartKind::kKernelStack).accuracy, Accuracy::kEstimated);
  EXPECT_EQ(part(at, PartKind::kKernelOther).bytes, 40 * kMiB - 3 * kMiB - 10 * kKernelStackBytes);
  EXPECT_EQ(part(at, PartKind::kKernelOther).accuracy, Accuracy::kEstimated);
  EXPECT_EQ(at.unattributed, 0);
  EXPECT_EQ(sumParts(at) + at.unattributed, static_cast<std::int64_t>(cg.usage));
  EXPECT_EQ(at.visibleBytes(), 520 * kMiB);
  EXPECT_EQ(at.invisibleBytes(), 70 * kMiB);
  EXPECT_FALSE(at.notes.empty());
}

TEST(AttributionV1, NoKmemFileLeavesKernelUnattributedAndSaysSo) {
  CgroupMemory cg = v1(100 * kMiB, 0, 0, std::nullopt, 110 * kMiB);
  Attribution at = attributeCgroup(cg, ProcessTotals{});
  EXPECT_EQ(at.unattributed, static_cast<std::int64_t>(10 * kMiB));
  EXPECT_FALSE(at.bytesOf(PartKind::kPageTables).has_value());
  ASSERT_FALSE(at.notes.empty());
  EXPECT_NE(at.notes[0].find("kmem"), std::string::npos);
}

TEST(AttributionV1, PageTablesNeverExceedKmemAndCountersCanDisagree) {
  CgroupMemory cg = v1(10 * kMiB, 0, 0, 1 * kMiB, 10 * kMiB);
  ProcessSample a = proc(0, 0, 4 * kMiB, 1);
  Attribution at = attributeCgroup(cg, {&a});
  EXPECT_EQ(part(at, PartKind::kPageTables).bytes, 1 * kMiB);
  EXPECT_EQ(part(at, PartKind::kKernelStack).bytes, 0u);
  EXPECT_EQ(at.unattributed, -static_cast<std::int64_t>(1 * kMiB)) << "shown negative, not hidden";
}

constexpr std::uint64_t kV2Usage = 700 * kMiB;
CgroupMemory v2(bool with_kernel_key) {
  CgroupMemory cg;
  cg.version = 2;
  cg.path = "/p";
  cg.usage = kV2Usage;
  cg.stat.set("anon", 400 * kMiB);
  cg.stat.set("file", 200 * kMiB);
  if (with_kernel_key) cg.stat.set("kernel", 60 * kMiB);
  cg.stat.set("kernel_stack", 1 * kMiB);
  cg.stat.set("pagetables", 20 * kMiB);
  cg.stat.set("percpu", kMiB / 2);
  cg.stat.set("sock", 2 * kMiB);
  cg.stat.set("shmem", 50 * kMiB);
  cg.stat.set("slab_reclaimable", 20 * kMiB);
  cg.stat.set("slab_unreclaimable", 10 * kMiB);
  cg.stat.set("slab", 30 * kMiB);
  cg.stat.set("some_new_key", 12345);
  return cg;
}

TEST(AttributionV2, EveryKernelKeyExact) {
  CgroupMemory cg = v2(true);
  ProcessSample a = proc(50 * kMiB, 50 * kMiB, 20 * kMiB, 4);
  Attribution at = attributeCgroup(cg, {&a});
  EXPECT_EQ(part(at, PartKind::kFile).bytes, 150 * kMiB) << "v2 file includes shmem";
  EXPECT_EQ(part(at, PartKind::kShmemMapped).bytes, 50 * kMiB);
  EXPECT_EQ(part(at, PartKind::kShmemUnmapped).bytes, 0u);
  EXPECT_EQ(part(at, PartKind::kPageTables).accuracy, Accuracy::kExact);
  EXPECT_EQ(part(at, PartKind::kSock).bytes, 2 * kMiB);
  // kernel minus stack, pagetables, percpu and slab; sock is charged apart from `kernel`.
  EXPECT_EQ(part(at, PartKind::kKernelOther).bytes, 60 * kMiB - (1 * kMiB + 20 * kMiB + kMiB / 2 + 30 * kMiB));
  EXPECT_EQ(part(at, PartKind::kKernelOther).accuracy, Accuracy::kExact);
  EXPECT_EQ(sumParts(at) + at.unattributed, static_cast<std::int64_t>(kV2Usage));
  EXPECT_EQ(at.unattributed, static_cast<std::int64_t>(kV2Usage - (400 + 150 + 50 + 2 + 60) * kMiB));
  EXPECT_TRUE(at.notes.empty());
}

TEST(AttributionV2, OldKernelWithoutKernelKey) {
  CgroupMemory cg = v2(false);
  Attribution at = attributeCgroup(cg, ProcessTotals{});
  EXPECT_FALSE(at.bytesOf(PartKind::kKernelOther).has_value());
  EXPECT_EQ(part(at, PartKind::kShmemUnmapped).bytes, 50 * kMiB) << "no process maps it";
  EXPECT_EQ(sumParts(at) + at.unattributed, static_cast<std::int64_t>(kV2Usage));
  ASSERT_FALSE(at.notes.empty());
}

// 5.10's memory.stat: no pagetables (and no kernel): the page tables are in what is unattributed,
// and the attribution says so.
TEST(AttributionV2, NoPageTablesKeyIsNoted) {
  CgroupMemory cg;
  cg.version = 2;
  cg.path = "/p";
  cg.usage = kV2Usage;
  cg.stat.set("anon", 400 * kMiB);
  cg.stat.set("file", 200 * kMiB);
  cg.stat.set("kernel_stack", 1 * kMiB);
  cg.stat.set("percpu", kMiB / 2);
  cg.stat.set("sock", 2 * kMiB);
  cg.stat.set("shmem", 50 * kMiB);
  cg.stat.set("slab_reclaimable", 20 * kMiB);
  cg.stat.set("slab_unreclaimable", 10 * kMiB);
  Attribution at = attributeCgroup(cg, ProcessTotals{});
  EXPECT_FALSE(at.bytesOf(PartKind::kPageTables).has_value());
  EXPECT_EQ(sumParts(at) + at.unattributed, static_cast<std::int64_t>(kV2Usage));
  bool said = false;
  for (const auto& n : at.notes)
    said = said || n.find("no \"pagetables\" key (kernel before 5.11)") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(AttributionV2, WithoutPssRssShmemIsUsedAndNoted) {
  CgroupMemory cg = v2(true);
  ProcessSample a = proc(0, 30 * kMiB, 0, 1, false);
  Attribution at = attributeCgroup(cg, {&a});
  EXPECT_EQ(part(at, PartKind::kShmemMapped).bytes, 30 * kMiB);
  ASSERT_FALSE(at.notes.empty());
  EXPECT_NE(at.notes[0].find("smaps_rollup"), std::string::npos);
}

}  // namespace
}  // namespace headroom

namespace headroom {
namespace {

TEST(AttributionV1, RootUsageHasNoKernelPart) {
  CgroupMemory cg = v1(100 * kMiB, 50 * kMiB, 0, 80 * kMiB, 150 * kMiB);
  cg.path.assign(1, '/');
  Attribution at = attributeCgroup(cg, ProcessTotals{});
  EXPECT_FALSE(at.bytesOf(PartKind::kKernelOther).has_value());
  EXPECT_EQ(at.unattributed, 0);
  ASSERT_FALSE(at.notes.empty());
  EXPECT_NE(at.notes.back().find("root"), std::string::npos);
}

}  // namespace
}  // namespace headroom
