// The pool inference's view of the trace's segments: the walk that finds them for every pass
// (find_trace_segments) and the router's lookup of the segment an allocation landed in.
#include <gtest/gtest.h>

#include "engine/replay/pool_inference.h"
#include "engine/replay/replay.h"

namespace fragscope::replay {
namespace {

using namespace fragscope::literals;

TraceEvent ev(TraceAction action, std::uint64_t addr, Bytes size, std::uint64_t stream = 0) {
  return TraceEvent{action, addr, size, StreamId{stream}, 0, FrameStackId{}};
}

TEST(FindTraceSegments, RecordsEverySegmentAllocAndThePoolsOfThoseAliveAtTheEnd) {
  const std::uint64_t a = 0x7f0000000000;
  const std::uint64_t b = 0x7f0000200000;
  const std::uint64_t c = 0x7f0000400000;
  const std::vector<TraceEvent> trace = {
      ev(TraceAction::segment_alloc, a, 2_MiB),  // returned, then reopened larger
      ev(TraceAction::segment_alloc, b, 2_MiB),  // alive at the end, but the end shows 4 MiB
      ev(TraceAction::segment_free, a, 2_MiB),  ev(TraceAction::segment_alloc, a, 4_MiB),
      ev(TraceAction::segment_alloc, c, 2_MiB),  // returned for good
      ev(TraceAction::segment_free, c, 2_MiB),
  };
  PoolInferenceSettings settings;
  settings.final_segments = {SegmentPool{a, 4_MiB, MempoolId{1, 0}},
                             SegmentPool{b, 4_MiB, MempoolId{2, 0}},
                             SegmentPool{c, 2_MiB, MempoolId{3, 0}}};
  find_trace_segments(snapshot::TraceWindow(trace), settings);

  ASSERT_EQ(settings.recorded_segments.size(), 4u);
  EXPECT_EQ(settings.recorded_segments[0].address, a);
  EXPECT_EQ(settings.recorded_segments[0].size, 2_MiB);
  EXPECT_EQ(settings.recorded_segments[1].address, b);
  EXPECT_EQ(settings.recorded_segments[2].address, a);
  EXPECT_EQ(settings.recorded_segments[2].size, 4_MiB);
  EXPECT_EQ(settings.recorded_segments[3].address, c);
  ASSERT_TRUE(settings.final_pools.has_value());
  const std::map<std::size_t, MempoolId> expected = {{3, MempoolId{1, 0}}};
  EXPECT_EQ(*settings.final_pools, expected);
}

// Segments opened out of address order, the middle one a private pool's (the final snapshot
// says so): each allocation is routed by the segment that holds it.
TEST(PoolRouter, RoutesEachAllocationByTheSegmentHoldingIt) {
  const std::uint64_t low = 0x7f0000000000;  // the private pool's
  const std::uint64_t mid = 0x7f0000200000;
  const std::uint64_t high = 0x7f0000400000;
  const std::vector<TraceEvent> trace = {
      ev(TraceAction::segment_alloc, high, 2_MiB),   ev(TraceAction::alloc, high, 512),
      ev(TraceAction::segment_alloc, low, 2_MiB),    ev(TraceAction::alloc, low, 512),
      ev(TraceAction::segment_alloc, mid, 2_MiB, 1), ev(TraceAction::alloc, mid, 512, 1),
      ev(TraceAction::alloc, low + 512, 512),        ev(TraceAction::alloc, high + 512, 512),
      ev(TraceAction::alloc, mid + 512, 512, 1),     ev(TraceAction::alloc, low + 1024, 512),
  };
  PoolInferenceSettings settings;
  settings.total_memory = 80_GiB;
  settings.final_segments = {SegmentPool{low, 2_MiB, MempoolId{1, 0}},
                             SegmentPool{mid, 2_MiB, MempoolId{}},
                             SegmentPool{high, 2_MiB, MempoolId{}}};
  find_trace_segments(snapshot::TraceWindow(trace), settings);
  PoolRouter router(settings);
  const TraceRequests requests = requests_from_trace(trace, nullptr, &router);

  EXPECT_EQ(router.summary().private_allocations, 3u);  // the three in `low`
  EXPECT_FALSE(router.revised_hints().has_value());     // the lockstep model agreed throughout
  std::size_t pool_creates = 0;
  for (const Request& r : requests.requests.requests)
    pool_creates += r.op == RequestOp::pool_create ? 1 : 0;
  EXPECT_EQ(pool_creates, 1u);
}

}  // namespace
}  // namespace fragscope::replay
