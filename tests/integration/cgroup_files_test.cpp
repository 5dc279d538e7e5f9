// The cgroups' memory files held open between samples (CgroupFileCache), on a real cgroup: a
// held file read again shows the kernel's figures now, a removed cgroup reads as missing, one
// made again under the same path reads as the new one, and the descriptor budget holds.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <optional>

#include "headroom/sources/cgroup.h"
#include "headroom/sources/cgroup_files.h"
#include "headroom/sources/fs_root.h"
#include "testing/cgroup_sandbox.h"

namespace headroom {
namespace {

using testing::CgroupSandbox;

constexpr std::uint64_t kMiB = 1ULL << 20;

class CgroupFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = CgroupSandbox::unavailableReason()) GTEST_SKIP() << *why;
    auto fs = FsRoot::open("/");
    ASSERT_TRUE(fs) << fs.error().describe();
    fs_.emplace(std::move(*fs));
    auto mounts = discoverCgroupMounts(*fs_);
    ASSERT_TRUE(mounts) << mounts.error().describe();
    const CgroupMount* m = mounts->memoryMount();
    ASSERT_NE(m, nullptr);
    hierarchy_.emplace(CgroupHierarchy::create(*fs_, mounts->memoryVersion(), *m));
  }

  std::optional<FsRoot> fs_;
  std::optional<CgroupHierarchy> hierarchy_;
};

TEST_F(CgroupFiles, HeldFilesShowTheCgroupNowAndFollowItsRemovalAndRebirth) {
  auto sb = CgroupSandbox::create("cgroup-files");
  ASSERT_TRUE(sb) << sb.error().describe();
  std::optional<CgroupSandbox> box(std::move(*sb));
  const std::string path = box->path();
  ASSERT_TRUE(box->setLimit(64 * kMiB));

  CgroupFileCache cache;
  auto first = cache.read(*hierarchy_, path);
  ASSERT_TRUE(first) << first.error().describe();
  EXPECT_EQ(first->limit, 64 * kMiB);
  const std::size_t held = cache.heldFds();
  EXPECT_GE(held, 4U) << "the directory and at least the three required files";
  EXPECT_EQ(cache.cgroups(), 1U);

  // The same descriptors, read again: the kernel's figures now, equal to a plain read.
  ASSERT_TRUE(box->setLimit(32 * kMiB));
  auto again = cache.read(*hierarchy_, path);
  ASSERT_TRUE(again) << again.error().describe();
  EXPECT_EQ(again->limit, 32 * kMiB);
  EXPECT_EQ(cache.heldFds(), held) << "nothing opened again";
  auto plain = hierarchy_->read(path);
  ASSERT_TRUE(plain) << plain.error().describe();
  EXPECT_EQ(again->limit, plain->limit);
  EXPECT_EQ(again->stat.size(), plain->stat.size());
  EXPECT_EQ(again->warnings, plain->warnings);

  // Removed: missing, and nothing of it held.
  box.reset();
  auto gone = cache.read(*hierarchy_, path);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().kind, ErrorKind::kNotFound) << gone.error().describe();
  EXPECT_EQ(cache.cgroups(), 0U);
  EXPECT_EQ(cache.heldFds(), 0U);

  // Made again under the same path: the new cgroup, not the old one's last figures.
  auto sb2 = CgroupSandbox::create("cgroup-files");
  ASSERT_TRUE(sb2) << sb2.error().describe();
  ASSERT_EQ(sb2->path(), path);
  ASSERT_TRUE(sb2->setLimit(16 * kMiB));
  auto reborn = cache.read(*hierarchy_, path);
  ASSERT_TRUE(reborn) << reborn.error().describe();
  EXPECT_EQ(reborn->limit, 16 * kMiB);

  // Removed and made again between two reads of held files.
  {
    std::optional<CgroupSandbox> b2(std::move(*sb2));
    b2.reset();
  }
  auto sb3 = CgroupSandbox::create("cgroup-files");
  ASSERT_TRUE(sb3) << sb3.error().describe();
  ASSERT_TRUE(sb3->setLimit(8 * kMiB));
  auto third = cache.read(*hierarchy_, path);
  ASSERT_TRUE(third) << third.error().describe();
  EXPECT_EQ(third->limit, 8 * kMiB);
}

TEST_F(CgroupFiles, TheDescriptorBudgetHoldsAndUnreadCgroupsAreClosed) {
  auto a = CgroupSandbox::create("cgroup-files-a");
  ASSERT_TRUE(a) << a.error().describe();
  auto b = CgroupSandbox::create("cgroup-files-b");
  ASSERT_TRUE(b) << b.error().describe();
  ASSERT_TRUE(a->setLimit(64 * kMiB));
  ASSERT_TRUE(b->setLimit(48 * kMiB));

  CgroupFileCache small(3);  // the first cgroup's directory and two files: the rest the plain way
  for (int round = 0; round < 2; ++round) {
    auto ra = small.read(*hierarchy_, a->path());
    auto rb = small.read(*hierarchy_, b->path());
    ASSERT_TRUE(ra) << ra.error().describe();
    ASSERT_TRUE(rb) << rb.error().describe();
    EXPECT_EQ(ra->limit, 64 * kMiB);
    EXPECT_EQ(rb->limit, 48 * kMiB);
    EXPECT_LE(small.heldFds(), 3U);
  }

  // The descriptor limit as it is when files are held, not when the cache was made: the agent
  // raises its own after it starts.
  rlimit was{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &was), 0);
  ASSERT_GE(was.rlim_cur, 64U);
  rlimit low = was;
  low.rlim_cur = 24;  // a quarter: 6, less than one v1 cgroup's eight (v2: ten)
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::optional<CgroupFileCache> later(std::in_place);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &was), 0);
  ASSERT_TRUE(later->read(*hierarchy_, a->path()));
  ASSERT_TRUE(later->read(*hierarchy_, b->path()));
  EXPECT_GE(later->heldFds(), 16U) << "both cgroups' directories and files held";
  later.reset();

  CgroupFileCache cache;
  ASSERT_TRUE(cache.read(*hierarchy_, a->path()));
  ASSERT_TRUE(cache.read(*hierarchy_, b->path()));
  cache.sweep();  // both read since the last sweep: kept
  EXPECT_EQ(cache.cgroups(), 2U);
  ASSERT_TRUE(cache.read(*hierarchy_, b->path()));
  cache.sweep();  // a not read since: closed
  EXPECT_EQ(cache.cgroups(), 1U);
  cache.sweep();
  EXPECT_EQ(cache.cgroups(), 0U);
  EXPECT_EQ(cache.heldFds(), 0U);
}

// A light read of a held cgroup: its usage, limit and OOM counters as the kernel has them now,
// the rest the last whole read's; the first read of a cgroup, light or not, is whole.
TEST_F(CgroupFiles, ALightReadOfAHeldCgroupShowsItsUsageAndLimitNowAndTheRestAsTheWholeReadFoundThem) {
  auto sb = CgroupSandbox::create("cgroup-files-light");
  ASSERT_TRUE(sb) << sb.error().describe();
  ASSERT_TRUE(sb->setLimit(64 * kMiB));
  CgroupFileCache cache;
  auto first = cache.read(*hierarchy_, sb->path(), true);
  ASSERT_TRUE(first) << first.error().describe();
  EXPECT_FALSE(first->light) << "nothing to carry yet: read whole";
  ASSERT_TRUE(sb->setLimit(32 * kMiB));
  auto light = cache.read(*hierarchy_, sb->path(), true);
  ASSERT_TRUE(light) << light.error().describe();
  EXPECT_TRUE(light->light);
  EXPECT_EQ(light->limit, 32 * kMiB);
  EXPECT_EQ(light->usage, hierarchy_->read(sb->path())->usage);
  EXPECT_EQ(light->stat.size(), first->stat.size());
  EXPECT_EQ(light->oom_kills, first->oom_kills);
  auto whole = cache.read(*hierarchy_, sb->path());
  ASSERT_TRUE(whole) << whole.error().describe();
  EXPECT_FALSE(whole->light);
  EXPECT_EQ(whole->limit, 32 * kMiB);
}

}  // namespace
}  // namespace headroom
