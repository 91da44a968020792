#include "engine/analysis/pool_usage.h"

#include <gtest/gtest.h>

namespace fragscope::analysis {
namespace {

TEST(PoolUsage, SegmentsGoToTheFinalSnapshotsPoolWhenAddressAndSizeMatch) {
  const std::vector<PoolSegment> segments{{0x1000000, 20 * kMiB, 4 * kMiB},
                                          {0x3000000, 2 * kMiB, 2 * kMiB},
                                          {0x5000000, 64 * kMiB, 0},
                                          {0x9000000, 2 * kMiB, 512}};
  const PrivateSegments pools{{0x3000000, {2 * kMiB, MempoolId{1, 0}}},
                              {0x5000000, {64 * kMiB, MempoolId{1, 0}}},
                              // another segment was at this address at the end
                              {0x9000000, {20 * kMiB, MempoolId{0, 1}}}};
  const auto usage = pool_usage(segments, pools);
  ASSERT_EQ(usage.size(), 2u);
  EXPECT_EQ(usage[0], (PoolUsage{MempoolId{}, 2, 22 * kMiB, 4 * kMiB + 512}));
  EXPECT_EQ(usage[1], (PoolUsage{MempoolId{1, 0}, 2, 66 * kMiB, 2 * kMiB}));
  EXPECT_EQ(usage[1].cached_free(), 64 * kMiB);

  EXPECT_EQ(describe_pools(usage),
            "default pools: 2 segments, 22.00 MiB reserved, 4.00 MiB live, 18.00 MiB cached "
            "free\n"
            "private pool (1, 0) (CUDA graph): 2 segments, 66.00 MiB reserved, 2.00 MiB live, "
            "64.00 MiB cached free (usable only by this pool's allocations)\n");
}

TEST(PoolUsage, NothingToTellApartWithoutPrivatePools) {
  const std::vector<PoolSegment> segments{{0x1000000, 20 * kMiB, 4 * kMiB}};
  const auto usage = pool_usage(segments, {});
  ASSERT_EQ(usage.size(), 1u);
  EXPECT_EQ(describe_pools(usage), "");
  EXPECT_EQ(pool_kind(MempoolId{0, 3}), "graph pool handle or MemPool");
  EXPECT_EQ(pool_kind(MempoolId{2, 0}), "CUDA graph");
}

}  // namespace
}  // namespace fragscope::analysis
