// The golden vectors of torch-allocator-spec §15, measured on PyTorch 2.11 / H200, as unit tests.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/allocator/sizes.h"
#include "tests/engine/allocator/allocator_test_util.h"

namespace fragscope::alloc::test {
namespace {

using namespace fragscope::literals;
using Seg = std::pair<TraceAction, Bytes>;
constexpr auto kSegAlloc = TraceAction::segment_alloc;
constexpr auto kSegFree = TraceAction::segment_free;
constexpr auto kMap = TraceAction::segment_map;
constexpr auto kUnmap = TraceAction::segment_unmap;

// memory_summary prints KiB with floor division; the spec's G2 summary is given that way.
std::int64_t kib(std::int64_t bytes) {
  return bytes / 1024;
}

TEST(GoldenG1, SmallPoolPlacementSplitMergeAndRelease) {
  CheckedAllocator a;
  const auto p1 = a.alloc(1);
  const auto s0 = a.segment_of(p1);
  EXPECT_EQ(p1, s0);
  EXPECT_EQ(a.block_at(p1).size, 512_B);
  const auto p512 = a.alloc(512);
  EXPECT_EQ(p512, s0 + 512);
  const auto p513 = a.alloc(513);
  EXPECT_EQ(p513, s0 + 1024);
  EXPECT_EQ(a.block_at(p513).size, 1024_B);
  const auto p1000 = a.alloc(1000);
  EXPECT_EQ(p1000, s0 + 2048);
  EXPECT_EQ(a.block_at(p1000).size, 1024_B);
  const auto p1m = a.alloc(1_MiB);
  EXPECT_EQ(p1m, s0 + 3072);
  EXPECT_EQ(a.block_at(p1m).size, 1_MiB);
  const auto q1m = a.alloc(1_MiB);
  const auto s1 = a.segment_of(q1m);
  EXPECT_NE(s1, s0);
  EXPECT_EQ(q1m, s1);
  EXPECT_EQ(a.segment_events(), (std::vector<Seg>{{kSegAlloc, 2_MiB}, {kSegAlloc, 2_MiB}}));

  // The S0 remainder after the 1 MiB block.
  const auto free_small = a.allocator().free_blocks(PoolKind::small);
  ASSERT_EQ(free_small.size(), 2u);

  a.free(p512);
  a.free(p513);
  EXPECT_EQ(a.current(a.stats().inactive_split), 3);
  EXPECT_EQ(a.current(a.stats().inactive_split_bytes), 2'095'616);
  EXPECT_EQ(a.current(a.stats().inactive_split, StatType::small_pool), 3);

  const auto p600 = a.alloc(600);
  EXPECT_EQ(p600, s0 + 512);  // best fit is the merged 1536-byte block, not the big remainder
  EXPECT_EQ(a.block_at(p600).size, 1024_B);
  EXPECT_EQ(a.block_at(s0 + 1536).size, 512_B);
  EXPECT_EQ(a.block_at(s0 + 1536).state, BlockState::inactive);

  for (auto p : {p1, p600, p1000, p1m, q1m})
    a.free(p);
  a.empty_cache();
  std::vector<TraceEvent> frees;
  for (const auto& e : a.trace())
    if (e.action == kSegFree)
      frees.push_back(e);
  ASSERT_EQ(frees.size(), 2u);
  // released in address order (the simulated device, like cudaMalloc, gave s1 the lower one)
  EXPECT_EQ(frees[0].addr, std::min(s0, s1));
  EXPECT_EQ(frees[1].addr, std::max(s0, s1));
  EXPECT_EQ(a.current(a.stats().reserved_bytes), 0);
}

TEST(GoldenG2, LargePoolSegmentsSplitsAndReleaseOrder) {
  CheckedAllocator a;
  const auto b1 = a.alloc(1_MiB + 1);
  const auto s0 = a.segment_of(b1);
  EXPECT_EQ(a.block_at(b1).size, 1'049'088_B);
  const auto b5 = a.alloc(5_MiB);
  EXPECT_EQ(b5, s0 + 1'049'088);
  const auto b95 = a.alloc(9_MiB + 512_KiB);
  EXPECT_EQ(b95, s0 + 6'291'968);
  const auto b4 = a.alloc(4_MiB);
  EXPECT_EQ(b4, s0 + 16'253'440);
  EXPECT_EQ(a.block_at(b4).size, 4'718'080_B);  // remainder 523,776 <= 1 MiB: not split
  const auto b10 = a.alloc(10_MiB);
  const auto s1 = a.segment_of(b10);
  const auto b10p = a.alloc(10_MiB + 1);
  EXPECT_EQ(a.block_at(b10p).size, 10'486'272_B);
  const auto b25 = a.alloc(25_MiB + 1000);
  EXPECT_EQ(a.block_at(b25).size, 26_MiB);  // remainder 1,047,552: not split
  a.free(b10);
  const auto b8 = a.alloc(8_MiB);
  EXPECT_EQ(b8, s1);
  EXPECT_EQ(
      a.segment_events(),
      (std::vector<Seg>{
          {kSegAlloc, 20_MiB}, {kSegAlloc, 10_MiB}, {kSegAlloc, 12_MiB}, {kSegAlloc, 26_MiB}}));

  const DeviceStats& st = a.stats();
  EXPECT_EQ(a.current(st.allocated_bytes), 67'109'376);
  EXPECT_EQ(a.current(st.reserved_bytes), 71'303'168);
  EXPECT_EQ(a.current(st.inactive_split), 2);
  EXPECT_EQ(a.current(st.inactive_split_bytes), 4'193'792);

  // The real memory_summary() of this state (spec §9.4), column by column.
  const auto& alloc_all = st.allocated_bytes[StatType::aggregate];
  EXPECT_EQ(kib(alloc_all.current), 65536);
  EXPECT_EQ(kib(alloc_all.peak), 67584);
  EXPECT_EQ(kib(alloc_all.allocated), 75776);
  EXPECT_EQ(kib(alloc_all.freed), 10240);
  const auto& requested = st.requested_bytes[StatType::aggregate];
  EXPECT_EQ(kib(requested.current), 64000);
  EXPECT_EQ(kib(requested.peak), 66048);
  EXPECT_EQ(kib(requested.allocated), 74240);
  EXPECT_EQ(kib(requested.freed), 10240);
  const auto& reserved = st.reserved_bytes[StatType::aggregate];
  EXPECT_EQ(kib(reserved.peak), 69632);
  EXPECT_EQ(reserved.freed, 0);
  const auto& split_bytes = st.inactive_split_bytes[StatType::aggregate];
  EXPECT_EQ(kib(split_bytes.current), 4095);
  EXPECT_EQ(kib(split_bytes.peak), 19455);
  EXPECT_EQ(kib(split_bytes.allocated), 23551);
  EXPECT_EQ(kib(split_bytes.freed), 19455);
  const auto& allocations = st.allocation[StatType::aggregate];
  EXPECT_EQ(allocations.current, 7);
  EXPECT_EQ(allocations.peak, 7);
  EXPECT_EQ(allocations.allocated, 8);
  EXPECT_EQ(allocations.freed, 1);
  const auto& splits = st.inactive_split[StatType::aggregate];
  EXPECT_EQ(splits.current, 2);
  EXPECT_EQ(splits.peak, 2);
  EXPECT_EQ(splits.allocated, 3);
  EXPECT_EQ(splits.freed, 1);
  EXPECT_EQ(st.segment[StatType::small_pool].allocated, 0);

  for (auto p : {b1, b5, b95, b4, b8, b10p, b25})
    a.free(p);
  a.empty_cache();
  const auto events = a.segment_events();
  EXPECT_EQ(std::vector<Seg>(events.begin() + 4, events.end()),
            (std::vector<Seg>{
                {kSegFree, 10_MiB}, {kSegFree, 12_MiB}, {kSegFree, 20_MiB}, {kSegFree, 26_MiB}}));
}

AllocatorConfig max_split_100() {
  AllocatorConfig config;
  config.max_split_size = 100_MiB;
  return config;
}

TEST(GoldenG3, OversizeBlocksReuseRules) {
  CheckedAllocator a(max_split_100());
  const auto b150 = a.alloc(150_MiB);
  a.free(b150);
  const auto b120 = a.alloc(120_MiB);  // 150 >= 120 + 20: a new segment
  EXPECT_NE(a.segment_of(b120), a.segment_of(b150));
  const auto b135 = a.alloc(135_MiB);  // 150 < 135 + 20: reuses the 150 MiB block unsplit
  EXPECT_EQ(b135, b150);
  EXPECT_EQ(a.current(a.stats().allocated_bytes), static_cast<std::int64_t>(270_MiB));
  EXPECT_EQ(a.current(a.stats().requested_bytes), static_cast<std::int64_t>(255_MiB));
  EXPECT_EQ(a.stats().oversize_allocations.current, 2);
  a.free(b120);
  a.free(b135);
  const auto b50 = a.alloc(50_MiB);  // a normal request never takes an oversize block
  a.free(b50);
  const auto b40 = a.alloc(40_MiB);  // 40 < 100 and remainder 10 MiB > 1 MiB: split
  EXPECT_EQ(b40, b50);
  EXPECT_EQ(a.segment_events(),
            (std::vector<Seg>{{kSegAlloc, 150_MiB}, {kSegAlloc, 120_MiB}, {kSegAlloc, 50_MiB}}));
  const auto free_large = a.allocator().free_blocks(PoolKind::large);
  ASSERT_EQ(free_large.size(), 3u);
  EXPECT_EQ(free_large[0].size, 10_MiB);
  EXPECT_EQ(free_large[1].size, 120_MiB);
  EXPECT_EQ(free_large[2].size, 150_MiB);
  EXPECT_EQ(free_large[2].requested_size, 141'557'760_B);  // stale: the 135 MiB request
  EXPECT_EQ(a.stats().oversize_segments.current, 2);
  EXPECT_EQ(a.stats().max_split_size, static_cast<std::int64_t>(100_MiB));
}

TEST(GoldenG3, MaxNonSplitRounding) {
  AllocatorConfig config = max_split_100();
  config.max_non_split_rounding_size = 60_MiB;
  CheckedAllocator a(config);
  const auto b200 = a.alloc(200_MiB);
  a.free(b200);
  const auto b120 = a.alloc(120_MiB);  // 200 >= 120 + 60: new segment
  EXPECT_NE(b120, b200);
  const auto b150 = a.alloc(150_MiB);  // 200 < 150 + 60: reuse
  EXPECT_EQ(b150, b200);
}

TEST(GoldenG4, ReleaseAvailableCachedBlocksThenOom) {
  CheckedAllocator a(max_split_100());
  a.allocator().set_allowed_memory(500_MiB);
  a.device().set_process_memory_in_use(788_MiB);
  const auto b150 = a.alloc(150_MiB);
  const auto b160 = a.alloc(160_MiB);
  const auto b120 = a.alloc(120_MiB);
  for (auto p : {b150, b160, b120})
    a.free(p);
  const auto b200 = a.alloc(200_MiB);  // frees 160, then 150 (largest first), then allocates
  (void)b200;
  const OutOfMemory oom = a.alloc_fails(400_MiB);  // frees 120, falls through, retries, fails
  EXPECT_EQ(a.segment_events(), (std::vector<Seg>{{kSegAlloc, 150_MiB},
                                                  {kSegAlloc, 160_MiB},
                                                  {kSegAlloc, 120_MiB},
                                                  {kSegFree, 160_MiB},
                                                  {kSegFree, 150_MiB},
                                                  {kSegAlloc, 200_MiB},
                                                  {kSegFree, 120_MiB}}));
  const DeviceStats& st = a.stats();
  EXPECT_EQ(st.num_device_free, 3);
  EXPECT_EQ(st.num_alloc_retries, 1);
  EXPECT_EQ(st.num_ooms, 1);
  EXPECT_EQ(st.num_sync_all_streams, 1);
  EXPECT_EQ(oom.segment_size, 400_MiB);
  EXPECT_EQ(oom.rounded_size, 400_MiB);
  EXPECT_EQ(oom.allocated, 200_MiB);
  EXPECT_EQ(oom.reserved, 200_MiB);
  EXPECT_EQ(oom.allowed, 500_MiB);
  // Device free is the simulated device's (capacity = H200 total, 200 MiB in use).
  EXPECT_EQ(oom.message,
            "CUDA out of memory. Tried to allocate 400.00 MiB. GPU 0 has a total capacity of "
            "139.80 GiB of which 139.61 GiB is free. Including non-PyTorch memory, this process "
            "has 788.00 MiB memory in use. 500.00 MiB allowed; Of the allocated memory 200.00 MiB "
            "is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. If "
            "reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
            "documentation for Memory Management  "
            "(https://docs.pytorch.org/docs/stable/notes/cuda.html"
            "#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)");
  const TraceEvent& last = a.trace().back();
  EXPECT_EQ(last.action, TraceAction::oom);
  EXPECT_EQ(last.size, 400_MiB);
  EXPECT_EQ(last.addr, oom.device_free);
}

TEST(GoldenG5, GarbageCollectionFreesBlocksOlderThanTheMeanAge) {
  AllocatorConfig config;
  config.garbage_collection_threshold = 0.9;
  CheckedAllocator a(config);
  a.allocator().set_allowed_memory(1000_MiB);
  std::vector<std::uint64_t> blocks;
  for (int i = 0; i < 8; ++i)
    blocks.push_back(a.alloc(100_MiB));
  for (int i = 0; i < 4; ++i)
    a.free(blocks[static_cast<std::size_t>(i)]);  // age 4 when GC runs
  const StreamId other{7};
  const auto m1 = a.alloc(50_MiB, other);  // misses: the pool's age clock ticks
  const auto m2 = a.alloc(50_MiB, other);
  a.free(blocks[4]);  // age 2 when GC runs
  a.free(blocks[5]);
  const auto m3 = a.alloc(50_MiB, other);  // 950 MiB reserved now, above 0.9 x 1000
  const auto trace_before = a.segment_events().size();
  const auto b150 = a.alloc(150_MiB);  // mean age 20/6 = 3.33: the four older blocks go
  (void)m1, (void)m2, (void)m3, (void)b150;
  const auto events = a.segment_events();
  EXPECT_EQ(
      std::vector<Seg>(events.begin() + static_cast<std::ptrdiff_t>(trace_before), events.end()),
      (std::vector<Seg>{{kSegFree, 100_MiB},
                        {kSegFree, 100_MiB},
                        {kSegFree, 100_MiB},
                        {kSegFree, 100_MiB},
                        {kSegAlloc, 150_MiB}}));
  std::vector<std::uint64_t> freed;
  for (const auto& e : a.trace())
    if (e.action == kSegFree)
      freed.push_back(e.addr);
  // the four older blocks, released in address order
  std::vector<std::uint64_t> older{blocks[0], blocks[1], blocks[2], blocks[3]};
  std::sort(older.begin(), older.end());
  EXPECT_EQ(freed, older);
  EXPECT_EQ(a.allocator().free_blocks(PoolKind::large).size(), 2u);  // the younger two stay
}

TEST(GoldenG6, ExpandableSegmentsMapAndUnmapPages) {
  AllocatorConfig config;
  config.expandable_segments = true;
  CheckedAllocator a(config);
  const StreamId other{0x1234};
  const auto b1 = a.alloc(1_MiB + 1);
  const auto va = b1;
  const auto b30 = a.alloc(30_MiB);
  EXPECT_EQ(b30, va + 1'049'088);
  const auto b100 = a.alloc(100);
  const auto b45 = a.alloc(45_MiB, other);
  EXPECT_EQ(a.segment_events(),
            (std::vector<Seg>{{kMap, 20_MiB}, {kMap, 20_MiB}, {kMap, 2_MiB}, {kMap, 60_MiB}}));
  a.free(b1);
  a.empty_cache();  // only a partial page is free: nothing to unmap
  EXPECT_EQ(a.segment_events().size(), 4u);
  a.free(b30);
  a.empty_cache();
  auto events = a.segment_events();
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[4], (Seg{kUnmap, 40_MiB}));
  EXPECT_EQ(a.trace().back().addr, va);
  EXPECT_EQ(a.device().calls().releases, 1u);  // the whole reservation went back

  const auto b10 = a.alloc(10_MiB);  // a fresh reservation
  EXPECT_EQ(a.device().calls().reserves, 4u);
  EXPECT_NE(b10, va);
  for (auto p : {b10, b45, b100})
    a.free(p);
  a.empty_cache();
  events = a.segment_events();
  EXPECT_EQ(
      std::vector<Seg>(events.begin() + 5, events.end()),
      (std::vector<Seg>{{kMap, 20_MiB}, {kUnmap, 20_MiB}, {kUnmap, 60_MiB}, {kUnmap, 2_MiB}}));
  const DeviceStats& st = a.stats();
  EXPECT_EQ(st.num_device_alloc, 5);
  EXPECT_EQ(st.num_device_free, 4);
  EXPECT_EQ(st.segment[StatType::aggregate].allocated, 0);
  EXPECT_EQ(st.segment[StatType::aggregate].peak, 0);
  EXPECT_EQ(st.inactive_split[StatType::aggregate].allocated, 0);
  EXPECT_EQ(a.current(st.reserved_bytes), 0);
}

TEST(GoldenG7, LimitedMemoryOomMessage) {
  CheckedAllocator a;
  a.allocator().set_allowed_memory(30_MiB);
  const auto b25 = a.alloc(25_MiB);
  EXPECT_EQ(a.block_at(b25).size, 27'262'976_B);  // whole 26 MiB segment, not split
  a.alloc(1000);
  const OutOfMemory oom = a.alloc_fails(3_MiB);
  EXPECT_EQ(oom.segment_size, 20_MiB);
  EXPECT_NE(oom.message.find("Tried to allocate 20.00 MiB."), std::string::npos) << oom.message;
  EXPECT_NE(oom.message.find("30.00 MiB allowed; Of the allocated memory 26.00 MiB is allocated "
                             "by PyTorch, and 2.00 MiB is reserved by PyTorch but unallocated."),
            std::string::npos)
      << oom.message;
  EXPECT_EQ(oom.message.find("Including non-PyTorch memory"), std::string::npos);
  EXPECT_EQ(a.trace().back().action, TraceAction::oom);
  EXPECT_EQ(a.trace().back().size, 3'145'728_B);
  EXPECT_EQ(a.segment_events(), (std::vector<Seg>{{kSegAlloc, 26_MiB}, {kSegAlloc, 2_MiB}}));
}

TEST(GoldenG8, RoundingWithFourDivisions) {
  AllocatorConfig config;
  config.roundup_power2_divisions.fill(4);
  EXPECT_EQ(round_size(1200, config), 1536_B);
  EXPECT_EQ(round_size(9000, config), 10240_B);
  EXPECT_EQ(round_size(716'801, config), 786'432_B);
  EXPECT_EQ(round_size(3_MiB + 1, config), 3_MiB + 512_KiB);
  EXPECT_EQ(round_size(100_MiB + 1, config), 112_MiB);
  EXPECT_EQ(round_size(1_GiB + 1, config), 1_GiB + 256_MiB);
}

TEST(GoldenG8, RoundingWithIntervalTable) {
  // [256:1,512:2,1024:4,>:8]: indices 0..8 -> 1, 9 -> 2, 10 -> 4, 11..15 -> 8.
  AllocatorConfig config;
  for (std::size_t i = 0; i <= 8; ++i)
    config.roundup_power2_divisions[i] = 1;
  config.roundup_power2_divisions[9] = 2;
  config.roundup_power2_divisions[10] = 4;
  for (std::size_t i = 11; i < kRoundupIntervals; ++i)
    config.roundup_power2_divisions[i] = 8;
  EXPECT_EQ(round_size(300_MiB + 1, config), 300_MiB + 512);
  EXPECT_EQ(round_size(600_MiB + 1, config), 768_MiB);
  EXPECT_EQ(round_size(1536_MiB + 1, config), 1792_MiB);
  EXPECT_EQ(round_size(3_GiB + 1, config), 3328_MiB);
}

TEST(GoldenG8, DefaultRoundingAndSegmentSizes) {
  const AllocatorConfig config;
  EXPECT_EQ(round_size(1, config), 512_B);
  EXPECT_EQ(round_size(513, config), 1024_B);
  EXPECT_EQ(allocation_size(round_size(1_MiB + 1, config), config), 20_MiB);
  EXPECT_EQ(allocation_size(round_size(10_MiB, config), config), 10_MiB);
  EXPECT_EQ(round_size(10_MiB + 1, config), 10'486'272_B);
  EXPECT_EQ(allocation_size(10'486'272, config), 12_MiB);
  EXPECT_EQ(round_size(25_MiB + 1000, config), 26'215'424_B);
  EXPECT_EQ(allocation_size(26'215'424, config), 26_MiB);
  EXPECT_EQ(allocation_size(300_MiB + 512, config), 302_MiB);
  EXPECT_EQ(allocation_size(1_MiB, config), 2_MiB);
  EXPECT_EQ(pool_for(1_MiB), PoolKind::small);
  EXPECT_EQ(pool_for(1_MiB + 512), PoolKind::large);
}

TEST(GoldenG8, LargeSegmentSize32) {
  AllocatorConfig config;
  config.large_segment_size = 32_MiB;
  config.max_non_split_rounding_size = 32_MiB;
  CheckedAllocator a(config);
  const auto b5 = a.alloc(5_MiB);
  const auto b12 = a.alloc(12_MiB);  // reuses the 27 MiB remainder
  EXPECT_EQ(b12, b5 + 5_MiB);
  EXPECT_EQ(a.segment_events(), (std::vector<Seg>{{kSegAlloc, 32_MiB}}));
}

TEST(GoldenG8, HugeRequestsFailBeforeAnything) {
  CheckedAllocator a;
  const OutOfMemory oom = a.alloc_fails(Bytes{1} << 60);
  EXPECT_EQ(oom.message, "CUDA out of memory. Tried to allocate more than 1EB memory.");
  EXPECT_TRUE(a.trace().empty());
  EXPECT_EQ(a.stats().num_ooms, 0);
  EXPECT_EQ(a.allocator().malloc(0, StreamId{0}).address, 0u);
}

TEST(GoldenG8, TerabyteRequestOomPrintsGiB) {
  CheckedAllocator a;
  const OutOfMemory oom = a.alloc_fails(1024_GiB);
  EXPECT_NE(oom.message.find("Tried to allocate 1024.00 GiB."), std::string::npos);
  EXPECT_EQ(a.stats().num_alloc_retries, 1);
  EXPECT_EQ(a.stats().num_ooms, 1);
}

}  // namespace
}  // namespace fragscope::alloc::test
