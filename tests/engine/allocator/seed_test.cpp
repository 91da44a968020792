// CachingAllocator::seed: the state before a mid-run trace is built by the allocator's own
// split and free paths, so it obeys every invariant and later decisions treat it like a grown one.
#include <gtest/gtest.h>

#include "engine/allocator/caching_allocator.h"
#include "engine/allocator/event_sink.h"
#include "engine/core/devices.h"

namespace fragscope::alloc {
namespace {

// the first 20 MiB segment a SimulatedDevice hands out (top down from kSegmentBase)
constexpr std::uint64_t kBase = (std::uint64_t{1} << 40) - 20 * kMiB;

SeedSegment large_segment() {
  // 20 MiB: 4 MiB allocated, 6 MiB cached, 2 MiB pending free, 8 MiB allocated.
  SeedSegment s{kBase, 20 * kMiB, StreamId{0}, PoolKind::large, false, {}};
  s.blocks = {{kBase, 4 * kMiB, 4 * kMiB - 100, BlockState::active_allocated, TensorId{1}},
              {kBase + 4 * kMiB, 6 * kMiB, 0, BlockState::inactive, TensorId{}},
              {kBase + 10 * kMiB, 2 * kMiB, 2 * kMiB, BlockState::active_pending_free, TensorId{2}},
              {kBase + 12 * kMiB, 8 * kMiB, 8 * kMiB, BlockState::active_allocated, TensorId{3}}};
  return s;
}

TEST(Seed, BuildsTheLayoutWithExactStatsAndNoEvents) {
  SimulatedDevice device(kUnlimited, kH200TotalMemory);
  TraceRecorder trace;
  CachingAllocator allocator(AllocatorConfig{}, device, &trace);
  const std::vector<std::uint64_t> addresses = allocator.seed({large_segment()});
  std::string why;
  ASSERT_TRUE(allocator.is_valid(&why)) << why;
  EXPECT_TRUE(trace.events().empty());
  EXPECT_EQ(addresses, (std::vector<std::uint64_t>{kBase, kBase + 4 * kMiB, kBase + 10 * kMiB,
                                                   kBase + 12 * kMiB}));
  const DeviceStats& stats = allocator.stats();
  EXPECT_EQ(stats.reserved_bytes[StatType::aggregate].current, 20 * kMiB);
  EXPECT_EQ(stats.allocated_bytes[StatType::aggregate].current, 12 * kMiB);
  EXPECT_EQ(stats.active_bytes[StatType::aggregate].current, 14 * kMiB);
  EXPECT_EQ(stats.inactive_split_bytes[StatType::aggregate].current, 6 * kMiB);
  EXPECT_EQ(stats.allocation[StatType::aggregate].current, 2);
  EXPECT_EQ(stats.segment[StatType::aggregate].current, 1);
  // Peaks and counters start at the seeded state.
  EXPECT_EQ(stats.allocated_bytes[StatType::aggregate].peak, 12 * kMiB);
  EXPECT_EQ(stats.num_device_alloc, 0u);
  EXPECT_EQ(allocator.block_state(kBase + 10 * kMiB), BlockState::active_pending_free);
}

TEST(Seed, SeededBlocksAreReusedAndFreedLikeGrownOnes) {
  SimulatedDevice device(kUnlimited, kH200TotalMemory);
  TraceRecorder trace;
  CachingAllocator allocator(AllocatorConfig{}, device, &trace);
  allocator.seed({large_segment()});
  // The 6 MiB gap serves a 5 MiB request (remainder 1 MiB: not split, like PyTorch).
  const MallocResult got = allocator.malloc(5 * kMiB, StreamId{0});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got.address, kBase + 4 * kMiB);
  // Completing the pending free and freeing everything leaves one free segment that
  // empty_cache returns.
  allocator.mark_events_ready(kBase + 10 * kMiB);
  allocator.free(kBase);
  allocator.free(kBase + 12 * kMiB);
  allocator.free(got.address);
  std::string why;
  ASSERT_TRUE(allocator.is_valid(&why)) << why;
  allocator.empty_cache();
  EXPECT_EQ(allocator.stats().reserved_bytes[StatType::aggregate].current, 0);
  ASSERT_FALSE(trace.events().empty());
  EXPECT_EQ(trace.events().back().action, TraceAction::segment_free);
  EXPECT_EQ(trace.events().back().size, 20 * kMiB);
  EXPECT_TRUE(allocator.is_valid(&why)) << why;
}

TEST(Seed, RefusesBlocksThatDoNotTileTheSegment) {
  SimulatedDevice device(kUnlimited, kH200TotalMemory);
  CachingAllocator allocator(AllocatorConfig{}, device);
  SeedSegment s = large_segment();
  s.blocks[1].size = 5 * kMiB;  // leaves a hole
  EXPECT_THROW(allocator.seed({s}), InputError);
  SeedSegment expandable = large_segment();
  expandable.expandable = true;  // with expandable_segments off
  CachingAllocator other(AllocatorConfig{}, device);
  EXPECT_THROW(other.seed({expandable}), InputError);
}

TEST(Seed, ExpandableRangeIsMappedAndSplit) {
  SimulatedDevice device(kUnlimited, kH200TotalMemory);
  CachingAllocator allocator(AllocatorConfig::parse("expandable_segments:True"), device);
  SeedSegment s = large_segment();
  s.expandable = true;
  const std::vector<std::uint64_t> addresses = allocator.seed({s});
  std::string why;
  ASSERT_TRUE(allocator.is_valid(&why)) << why;
  ASSERT_EQ(addresses.size(), 4u);
  EXPECT_EQ(addresses[3] - addresses[0], 12 * kMiB);
  EXPECT_EQ(allocator.stats().reserved_bytes[StatType::aggregate].current, 20 * kMiB);
  EXPECT_EQ(allocator.stats().allocated_bytes[StatType::aggregate].current, 12 * kMiB);
}

}  // namespace
}  // namespace fragscope::alloc
