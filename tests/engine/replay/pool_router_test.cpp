// The pool inference's view of the trace's segments (the walk that finds them for every pass,
// find_trace_segments; the router's lookup of the segment an allocation landed in) and its
// lockstep model's run, which a replay takes as its own (PoolRouter::run_result).
#include <gtest/gtest.h>

#include <string>

#include "engine/allocator/stats.h"
#include "engine/replay/pool_inference.h"
#include "engine/replay/replay.h"
#include "engine/snapshot/snapshot.h"

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

// The routed requests run again by alloc::run_requests as the replay ran them before it took the
// lockstep model's run instead: every count, stat, device call and final block must agree.
void expect_lockstep_run_is_the_run(const std::vector<TraceEvent>& trace,
                                    PoolInferenceSettings settings) {
  find_trace_segments(snapshot::TraceWindow(trace), settings);
  PoolRouter router(settings);
  const TraceRequests requests = requests_from_trace(trace, nullptr, &router);
  const std::optional<alloc::RunResult> lockstep = router.run_result(true);
  ASSERT_TRUE(lockstep.has_value());

  alloc::ReplayDevice gpu(requests.segments, alloc::kUnlimited, settings.total_memory);
  alloc::RunOptions options;
  options.stop_on_oom = false;
  options.profile = settings.profile;
  options.keep_final_segments = true;
  const alloc::RunResult run =
      alloc::run_requests(requests.requests, settings.config, gpu.device(), nullptr, options);
  EXPECT_EQ(lockstep->requests_run, run.requests_run);
  EXPECT_EQ(lockstep->allocs, run.allocs);
  EXPECT_EQ(lockstep->skipped_requests, run.skipped_requests);
  EXPECT_EQ(alloc::to_memory_stats(lockstep->stats), alloc::to_memory_stats(run.stats));
  EXPECT_EQ(lockstep->peak_allocated, run.peak_allocated);
  EXPECT_EQ(lockstep->peak_reserved, run.peak_reserved);
  EXPECT_EQ(lockstep->device_calls, run.device_calls);
  EXPECT_EQ(lockstep->gc_check_peak, run.gc_check_peak);
  EXPECT_EQ(lockstep->allowed_memory, run.allowed_memory);
  ASSERT_EQ(lockstep->final_segments.size(), run.final_segments.size());
  for (std::size_t k = 0; k < run.final_segments.size(); ++k) {
    EXPECT_EQ(lockstep->final_segments[k].address, run.final_segments[k].address);
    EXPECT_EQ(lockstep->final_segments[k].total_size, run.final_segments[k].total_size);
    EXPECT_EQ(lockstep->final_segments[k].blocks.size(), run.final_segments[k].blocks.size());
  }
}

TEST(PoolRouter, ItsLockstepRunIsTheRunOfARecordingWithGraphs) {
  const snapshot::Snapshot snap =
      snapshot::read_snapshot(std::string(FRAGSCOPE_FIXTURES) +
                              "/../torch-2.11-h200-graphs/gpt_compile_reduce_overhead.pickle.gz");
  PoolInferenceSettings settings;
  settings.config = config_from_settings(snap.allocator_settings);
  settings.total_memory = kH200TotalMemory;
  for (const snapshot::Segment& segment : snap.segments)
    if (segment.device == 0 && !segment.is_expandable)
      settings.final_segments.push_back(
          SegmentPool{segment.address, segment.total_size,
                      MempoolId{static_cast<std::uint64_t>(segment.pool_id.first),
                                static_cast<std::uint64_t>(segment.pool_id.second)}});
  expect_lockstep_run_is_the_run(snap.device_traces.at(0), settings);
}

// A malloc of 0 bytes gets no block: the free and the stream use that follow are skipped, and
// counted as run_requests counts them.
TEST(PoolRouter, ItsLockstepRunCountsTheRequestsOfTensorsWithoutABlock) {
  const std::uint64_t seg = 0x7f0000000000;
  const std::vector<TraceEvent> trace = {
      ev(TraceAction::segment_alloc, seg, 2_MiB), ev(TraceAction::alloc, seg, 512),
      ev(TraceAction::alloc, seg + 512, 0),       ev(TraceAction::free_requested, seg + 512, 0),
      ev(TraceAction::free_requested, seg, 512),  ev(TraceAction::free_completed, seg, 512),
      ev(TraceAction::alloc, seg, 1024),
  };
  PoolInferenceSettings settings;
  settings.total_memory = 80_GiB;
  expect_lockstep_run_is_the_run(trace, settings);
}

// RoutesEachAllocationByTheSegmentHoldingIt with more segments alive than the router keeps in
// sorted arrays (it moves them to a map): 1,100 full ones opened first at descending addresses
// above the three, so that every lookup after them is the map's.
TEST(PoolRouter, RoutesByTheHoldingSegmentWithThousandsAlive) {
  constexpr std::size_t kFull = 1100;
  const std::uint64_t low = 0x7f0000000000;  // the private pool's
  const std::uint64_t mid = 0x7f0000200000;
  const std::uint64_t high = 0x7f0000400000;
  PoolInferenceSettings settings;
  settings.total_memory = 80_GiB;
  std::vector<TraceEvent> trace;
  for (std::size_t k = kFull; k > 0; --k) {
    const std::uint64_t full = high + k * 20_MiB;
    trace.push_back(ev(TraceAction::segment_alloc, full, 20_MiB));
    trace.push_back(ev(TraceAction::alloc, full, 20_MiB));
    settings.final_segments.push_back(SegmentPool{full, 20_MiB, MempoolId{}});
  }
  trace.insert(trace.end(), {
                                ev(TraceAction::segment_alloc, high, 2_MiB),
                                ev(TraceAction::alloc, high, 512),
                                ev(TraceAction::segment_alloc, low, 2_MiB),
                                ev(TraceAction::alloc, low, 512),
                                ev(TraceAction::segment_alloc, mid, 2_MiB, 1),
                                ev(TraceAction::alloc, mid, 512, 1),
                                ev(TraceAction::alloc, low + 512, 512),
                                ev(TraceAction::alloc, high + 512, 512),
                                ev(TraceAction::alloc, mid + 512, 512, 1),
                                ev(TraceAction::alloc, low + 1024, 512),
                            });
  settings.final_segments.push_back(SegmentPool{low, 2_MiB, MempoolId{1, 0}});
  settings.final_segments.push_back(SegmentPool{mid, 2_MiB, MempoolId{}});
  settings.final_segments.push_back(SegmentPool{high, 2_MiB, MempoolId{}});
  expect_lockstep_run_is_the_run(trace, settings);

  find_trace_segments(snapshot::TraceWindow(trace), settings);
  PoolRouter router(settings);
  const TraceRequests requests = requests_from_trace(trace, nullptr, &router);
  EXPECT_EQ(router.summary().private_allocations, 3u);  // the three in `low`
  EXPECT_FALSE(router.revised_hints().has_value());
}

// A recording with CUDA graphs replayed as the CLI replays it (the lockstep model's run taken as
// the replay's) and with invariant checks (the replay runs the requests again itself).
TEST(PoolRouter, AReplayGivesTheSameWithItsOwnRun) {
  const snapshot::Snapshot snap = snapshot::read_snapshot(
      std::string(FRAGSCOPE_FIXTURES) + "/../torch-2.11-h200-graphs/graph_manual.pickle.gz");
  const ReplayResult taken = replay_snapshot(snap);
  ReplayOptions checked;
  checked.check_invariants_every = 1000;
  const ReplayResult own = replay_snapshot(snap, checked);
  ASSERT_TRUE(taken.pools.has_value());
  EXPECT_FALSE(taken.first_divergence.has_value());
  EXPECT_EQ(taken.emitted_events, own.emitted_events);
  EXPECT_EQ(taken.segment_events, own.segment_events);
  EXPECT_EQ(taken.segment_events_match, own.segment_events_match);
  EXPECT_EQ(alloc::to_memory_stats(taken.run.stats), alloc::to_memory_stats(own.run.stats));
  EXPECT_EQ(taken.run.requests_run, own.run.requests_run);
  EXPECT_EQ(taken.run.device_calls, own.run.device_calls);
}

}  // namespace
}  // namespace fragscope::replay
