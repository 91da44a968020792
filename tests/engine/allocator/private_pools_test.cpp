// Private pools (torch-allocator-spec §13): CUDA graph captures, MemPool options, use_count and
// freeable pools, deferred record_stream frees; is_valid() after every call (CheckedAllocator).
#include <gtest/gtest.h>

#include "engine/allocator/allocator_state.h"
#include "engine/allocator/private_pools.h"
#include "tests/engine/allocator/allocator_test_util.h"

namespace fragscope::alloc::test {
namespace {

constexpr MempoolId kGraphPool{1, 0};
constexpr MempoolId kOtherGraphPool{2, 0};
constexpr MempoolId kMemPool{0, 1};
constexpr StreamId kCapture{7};
constexpr StreamId kSide{9};

MempoolId pool_of(CheckedAllocator& a, std::uint64_t address) {
  for (const SegmentInfo& segment : a.allocator().snapshot())
    for (const BlockInfo& block : segment.blocks)
      if (block.address == address)
        return segment.pool_id;
  ADD_FAILURE() << "no block at " << address;
  return {};
}

TEST(PrivatePools, ACaptureRoutesOnlyItsStreamToThePool) {
  CheckedAllocator a;
  a.allocator().begin_allocate_to_pool(kGraphPool, kCapture);
  EXPECT_TRUE(a.allocator().capture_underway());
  const std::uint64_t in_graph = a.alloc(1 << 20, kCapture);
  const std::uint64_t outside = a.alloc(1 << 20, StreamId{0});
  EXPECT_EQ(pool_of(a, in_graph), kGraphPool);
  EXPECT_EQ(pool_of(a, outside), MempoolId{});
  a.free(in_graph);
  a.allocator().end_allocate_to_pool(kGraphPool);
  a.check();
  // Same stream, capture over: the pool's cached block is not the default pool's.
  const std::uint64_t after = a.alloc(1 << 20, kCapture);
  EXPECT_NE(after, in_graph);
  EXPECT_EQ(pool_of(a, after), MempoolId{});
  // Private segments count in the small/large statistics like any other.
  EXPECT_EQ(a.stats().segment[StatType::small_pool].current, 3);
}

TEST(PrivatePools, EveryStreamFilterCatchesAllStreams) {
  CheckedAllocator a;
  a.allocator().create_pool(kMemPool);
  a.allocator().begin_allocate_to_pool(kMemPool, std::nullopt);  // use_mem_pool
  EXPECT_EQ(pool_of(a, a.alloc(4096, StreamId{0})), kMemPool);
  EXPECT_EQ(pool_of(a, a.alloc(4096, kSide)), kMemPool);
  a.allocator().end_allocate_to_pool(kMemPool);
  a.allocator().release_pool(kMemPool);
  EXPECT_EQ(a.allocator().pool_use_count(kMemPool), 1);
}

TEST(PrivatePools, MemoryStaysUntilTheLastUserReleasesThePool) {
  CheckedAllocator a;
  a.allocator().create_pool(kMemPool);                           // the MemPool object
  a.allocator().begin_allocate_to_pool(kMemPool, std::nullopt);  // use_mem_pool
  const std::uint64_t block = a.alloc(30 << 20);
  a.allocator().end_allocate_to_pool(kMemPool);
  a.allocator().release_pool(kMemPool);
  a.free(block);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[StatType::aggregate].current, 30 << 20);
  EXPECT_EQ(a.stats().num_sync_all_streams, 1);
  a.allocator().release_pool(kMemPool);  // del pool
  EXPECT_EQ(a.allocator().pool_use_count(kMemPool), 0);
  a.check();
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[StatType::aggregate].current, 0);
  // A pool that gave all its memory back is deleted.
  EXPECT_FALSE(a.allocator().pool_use_count(kMemPool).has_value());
}

TEST(PrivatePools, PoolEmptyCacheReleasesOnlyThatFreeablePool) {
  CheckedAllocator a;
  const std::uint64_t outside = a.alloc(20 << 20);
  a.allocator().create_pool(kMemPool);
  a.allocator().begin_allocate_to_pool(kMemPool, std::nullopt);
  const std::uint64_t small = a.alloc(4096);
  const std::uint64_t large = a.alloc(8 << 20);
  a.allocator().end_allocate_to_pool(kMemPool);
  a.allocator().release_pool(kMemPool);
  a.free(outside);
  a.free(small);
  a.free(large);
  a.allocator().empty_cache(kMemPool);  // still used by its owner: nothing
  EXPECT_EQ(a.stats().num_device_free, 0);
  a.allocator().release_pool(kMemPool);
  a.allocator().empty_cache(kMemPool);  // MemPool's destructor
  a.check();
  // Small pool first, then large; the default pool keeps its cached segment.
  const auto events = a.segment_events();
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[3], std::make_pair(TraceAction::segment_free, Bytes{2 << 20}));
  EXPECT_EQ(events[4], std::make_pair(TraceAction::segment_free, Bytes{20 << 20}));
  EXPECT_EQ(a.stats().reserved_bytes[StatType::aggregate].current, 20 << 20);
  EXPECT_EQ(a.stats().num_sync_all_streams, 1);
}

TEST(PrivatePools, EmptyCacheAndOomRetryLeaveTheDefaultPoolAloneDuringACapture) {
  CheckedAllocator a;
  a.free(a.alloc(20 << 20));
  a.allocator().begin_allocate_to_pool(kGraphPool, kCapture);
  a.empty_cache();
  EXPECT_EQ(a.stats().num_sync_all_streams, 0);
  EXPECT_EQ(a.stats().reserved_bytes[StatType::aggregate].current, 20 << 20);
  a.allocator().end_allocate_to_pool(kGraphPool);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[StatType::aggregate].current, 0);
}

TEST(PrivatePools, RecordStreamFreesWaitForTheCaptureToEnd) {
  CheckedAllocator a;
  a.allocator().begin_allocate_to_pool(kGraphPool, kCapture);
  const std::uint64_t used = a.alloc(1 << 20, kCapture);
  a.allocator().record_stream(used, kSide);  // a stream used inside the capture
  a.free(used);
  EXPECT_EQ(a.allocator().block_state(used), BlockState::active_pending_free);
  EXPECT_NE(a.alloc(1 << 20, kCapture), used);  // no event processing while capturing
  a.allocator().end_allocate_to_pool(kGraphPool);
  EXPECT_EQ(a.allocator().block_state(used), BlockState::active_pending_free);
  // The first malloc after the capture frees it: the capture's uses ended with the graph.
  a.alloc(4096, StreamId{0});
  EXPECT_FALSE(a.allocator().block_state(used).has_value());
}

TEST(PrivatePools, DeferredFreeWithAStreamUsedBeforeTheCaptureWaitsForItsEvent) {
  CheckedAllocator a;
  a.allocator().create_pool(kMemPool);
  a.allocator().begin_allocate_to_pool(kMemPool, std::nullopt);
  const std::uint64_t used = a.alloc(1 << 20);
  a.allocator().end_allocate_to_pool(kMemPool);
  a.allocator().record_stream(used, kSide);  // outside any capture
  a.allocator().begin_allocate_to_pool(kGraphPool, kCapture);
  a.free(used);  // during a capture: deferred
  a.allocator().end_allocate_to_pool(kGraphPool);
  a.allocator().mark_events_ready(used);
  a.alloc(4096, StreamId{0});  // events inserted, then the ready one completes
  EXPECT_FALSE(a.allocator().block_state(used).has_value());
}

TEST(PrivatePools, NoSplitPoolsHandOutWholeBlocks) {
  CheckedAllocator a;
  a.allocator().create_pool(kMemPool, PoolOptions{false, true, false});
  a.allocator().begin_allocate_to_pool(kMemPool, std::nullopt);
  const std::uint64_t big = a.alloc(30 << 20);
  a.free(big);
  const std::uint64_t small_request = a.alloc(8 << 20);
  EXPECT_EQ(small_request, big);
  EXPECT_EQ(a.block_at(small_request).size, Bytes{30 << 20});
  EXPECT_EQ(a.stats().inactive_split[StatType::aggregate].current, 0);
}

TEST(PrivatePools, UseOnOomPoolsServeWhatTheDefaultPoolCannot) {
  AllocatorConfig config;
  CheckedAllocator a(config);
  a.allocator().set_allowed_memory(Bytes{1} << 30);
  a.allocator().create_pool(kMemPool, PoolOptions{true, false, false});
  a.allocator().begin_allocate_to_pool(kMemPool, std::nullopt);
  a.free(a.alloc(400 << 20));
  a.allocator().end_allocate_to_pool(kMemPool);
  a.allocator().release_pool(kMemPool);
  a.alloc(500 << 20);
  const std::uint64_t fallback = a.alloc(300 << 20);
  EXPECT_EQ(pool_of(a, fallback), kMemPool);
  EXPECT_EQ(a.stats().num_alloc_retries, 0);
  EXPECT_EQ(a.allocator().pool_use_count(kMemPool), 1);
}

TEST(PrivatePools, TheOomMessageCountsCachedPrivatePoolMemory) {
  CheckedAllocator a;
  a.allocator().set_allowed_memory(Bytes{1} << 30);
  a.allocator().create_pool(kMemPool);
  a.allocator().begin_allocate_to_pool(kMemPool, std::nullopt);
  a.free(a.alloc(400 << 20));
  a.allocator().end_allocate_to_pool(kMemPool);
  a.allocator().release_pool(kMemPool);
  a.alloc(500 << 20);
  const OutOfMemory oom = a.alloc_fails(300 << 20);
  EXPECT_NE(oom.message.find("Of the allocated memory 900.00 MiB is allocated by PyTorch, with "
                             "400.00 MiB allocated in private pools (e.g., CUDA Graphs), and 0 "
                             "bytes is reserved by PyTorch but unallocated."),
            std::string::npos)
      << oom.message;
  EXPECT_EQ(a.stats().num_alloc_retries, 1);
}

TEST(PrivatePools, MisuseIsAPoolError) {
  CheckedAllocator a;
  a.allocator().begin_allocate_to_pool(kGraphPool, kCapture);
  EXPECT_THROW(a.allocator().begin_allocate_to_pool(kGraphPool, kSide), PoolError);
  EXPECT_THROW(a.allocator().end_allocate_to_pool(kOtherGraphPool), PoolError);
  EXPECT_THROW(a.allocator().release_pool(kOtherGraphPool), PoolError);
  EXPECT_THROW(a.allocator().create_pool(MempoolId{}), PoolError);
  a.allocator().end_allocate_to_pool(kGraphPool);
  a.allocator().release_pool(kGraphPool);
  EXPECT_THROW(a.allocator().release_pool(kGraphPool), PoolError);
  a.check();
}

// graph_manual (tests/fixtures/torch-2.11-h200-graphs) showed PyTorch 2.11 releasing graph pool
// (2,0) before (1,0): ska::flat_hash_map's Fibonacci-hash slot order.
TEST(FreeablePools, IterateInPyTorchsHashTableOrder) {
  detail::FreeablePools table;
  EXPECT_TRUE(table.insert(MempoolId{1, 0}, nullptr));
  EXPECT_TRUE(table.insert(MempoolId{2, 0}, nullptr));
  EXPECT_FALSE(table.insert(MempoolId{1, 0}, nullptr));
  auto order = table.in_order();
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0].first, (MempoolId{2, 0}));
  EXPECT_EQ(order[1].first, (MempoolId{1, 0}));
  // Growth keeps every entry; erase keeps the others.
  for (std::uint64_t n = 3; n <= 40; ++n)
    EXPECT_TRUE(table.insert(MempoolId{0, n}, nullptr));
  EXPECT_EQ(table.size(), 40u);
  EXPECT_TRUE(table.erase(MempoolId{2, 0}));
  EXPECT_FALSE(table.contains(MempoolId{2, 0}));
  EXPECT_TRUE(table.contains(MempoolId{0, 40}));
  EXPECT_EQ(table.in_order().size(), 39u);
}

}  // namespace
}  // namespace fragscope::alloc::test
