#include "engine/analysis/metrics.h"

#include <gtest/gtest.h>

#include "engine/analysis/analysis_test_util.h"
#include "engine/analysis/trace_requests.h"
#include "engine/core/error.h"
#include "engine/snapshot/timeline.h"

namespace fragscope::analysis {
namespace {

using namespace fragscope::literals;
using test::ev;
using test::free_now;

constexpr std::uint64_t kBase = 1ull << 40;

// One 20 MiB segment: two 4 MiB blocks, then the first is freed.
std::vector<TraceEvent> two_blocks_one_freed() {
  std::vector<TraceEvent> t;
  t.push_back(ev(TraceAction::segment_alloc, kBase, 20_MiB));
  t.push_back(ev(TraceAction::alloc, kBase, 4_MiB));
  t.push_back(ev(TraceAction::alloc, kBase + 4_MiB, 4_MiB - 100));
  free_now(t, kBase, 4_MiB);
  return t;
}

TEST(Metrics, SplitSegmentSeries) {
  const auto trace = two_blocks_one_freed();
  const RunMetrics m = measure_trace(trace, snapshot::SegmentState{});
  ASSERT_EQ(m.events, trace.size());
  const MemorySample& last = m.final;
  EXPECT_EQ(last.allocated, 4_MiB);
  EXPECT_EQ(last.reserved, 20_MiB);
  EXPECT_EQ(last.requested, 4_MiB - 100);
  EXPECT_EQ(last.rounding_waste(), 100u);
  EXPECT_EQ(last.cached_free(), 16_MiB);
  EXPECT_EQ(last.cached_unused(), 16_MiB);
  EXPECT_EQ(last.inactive_split, 16_MiB);  // both free blocks sit in a split segment
  EXPECT_EQ(last.largest_free, 12_MiB);
  EXPECT_DOUBLE_EQ(last.external_fragmentation(), 0.25);
  EXPECT_EQ(m.peak.active, 8_MiB);
  EXPECT_DOUBLE_EQ(m.gmlake_fragmentation(), 1.0 - 8.0 / 20.0);
  EXPECT_EQ(m.ideal_lower_bound(), 8_MiB - 100);
  EXPECT_EQ(m.device_calls.segment_allocs, 1u);
  EXPECT_EQ(m.allocs, 2u);
  EXPECT_DOUBLE_EQ(m.max_external_fragmentation, 0.25);
  EXPECT_EQ(m.max_external_fragmentation_event, trace.size() - 1);  // at free_completed

  const auto free = free_space(snapshot::SegmentState{});
  EXPECT_TRUE(free.empty());
}

TEST(Metrics, FreeSpaceByStreamAndPool) {
  std::vector<TraceEvent> t = two_blocks_one_freed();
  t.push_back(ev(TraceAction::segment_alloc, kBase + 64_MiB, 2_MiB, 7));
  t.push_back(ev(TraceAction::alloc, kBase + 64_MiB, 1000, 7));
  snapshot::SegmentState state;
  for (const auto& e : t)
    state.apply(e);
  const auto spaces = free_space(state);
  ASSERT_EQ(spaces.size(), 2u);
  EXPECT_EQ(spaces[0].stream, StreamId{0});
  EXPECT_EQ(spaces[0].pool, alloc::PoolKind::large);
  EXPECT_EQ(spaces[0].free_bytes, 16_MiB);
  EXPECT_EQ(spaces[0].largest_block, 12_MiB);
  EXPECT_EQ(spaces[0].blocks, 2u);
  EXPECT_EQ(spaces[0].in_split_segments, 16_MiB);
  EXPECT_EQ(spaces[1].stream, StreamId{7});
  EXPECT_EQ(spaces[1].pool, alloc::PoolKind::small);
  EXPECT_EQ(spaces[1].free_bytes, 2_MiB - 1024);
}

TEST(Metrics, StepsSplitTheRun) {
  const auto trace = two_blocks_one_freed();
  const std::vector<StepStart> steps = {{0, 0}, {1, 3}};
  const RunMetrics m = measure_trace(trace, snapshot::SegmentState{}, {}, steps);
  ASSERT_EQ(m.steps.size(), 2u);
  EXPECT_EQ(m.steps[0].first_event, 0u);
  EXPECT_EQ(m.steps[0].end_event, 3u);
  EXPECT_EQ(m.steps[0].allocs, 2u);
  EXPECT_EQ(m.steps[0].bytes_allocated, 8_MiB - 100);
  EXPECT_EQ(m.steps[0].device_calls.segment_allocs, 1u);
  EXPECT_EQ(m.steps[0].peak.allocated, 8_MiB);
  EXPECT_EQ(m.steps[1].allocs, 0u);
  EXPECT_EQ(m.steps[1].frees, 1u);
  EXPECT_EQ(m.steps[1].peak.allocated, 8_MiB);  // the step starts with both blocks live
}

TEST(Metrics, BucketsKeepEveryPeak) {
  const auto trace = two_blocks_one_freed();
  const RunMetrics m =
      measure_trace(trace, snapshot::SegmentState{}, {.keep_samples = true, .buckets = 2});
  ASSERT_EQ(m.buckets.size(), 2u);
  EXPECT_EQ(m.buckets[0].first, 0u);
  EXPECT_EQ(m.buckets[1].last, trace.size() - 1);
  Bytes peak = 0;
  for (const auto& b : m.buckets)
    peak = std::max(peak, b.max.allocated);
  EXPECT_EQ(peak, m.peak.allocated);
}

TEST(Metrics, ContradictingEventNamesItsIndex) {
  std::vector<TraceEvent> t = two_blocks_one_freed();
  t.push_back(ev(TraceAction::free_requested, kBase + 999, 4_MiB));
  try {
    measure_trace(t, snapshot::SegmentState{});
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("event 5"), std::string::npos) << e.what();
  }
}

// Peak reserved and device calls from the real recordings (README table, memory_stats()).
TEST(MetricsFixtures, VarlenPeaksMatchPyTorch) {
  for (const auto& [name, peak_reserved, device_allocs] :
       {std::tuple{"gpt_varlen_default", 26174554112ull, 144u},
        std::tuple{"gpt_varlen_expandable", 21172846592ull, 136u}}) {
    const auto& snap = test::fixture(name);
    const auto rules = snapshot::LayoutRules::from_allocator_settings(snap.allocator_settings);
    const RunMetrics m = measure_trace(snap.device_traces[0], snapshot::SegmentState{rules},
                                       {.keep_samples = false});
    EXPECT_EQ(m.peak.reserved, peak_reserved) << name;
    EXPECT_EQ(m.device_calls.segment_allocs + m.device_calls.maps, device_allocs) << name;
    const auto stats = test::fixture_stats(name)["memory_stats"];
    EXPECT_EQ(m.peak.allocated, stats["allocated_bytes.all.peak"].get<Bytes>()) << name;
    EXPECT_EQ(m.peak.active, stats["active_bytes.all.peak"].get<Bytes>()) << name;
    EXPECT_EQ(m.peak.requested, stats["requested_bytes.all.peak"].get<Bytes>()) << name;
    EXPECT_EQ(m.peak.inactive_split, stats["inactive_split_bytes.all.peak"].get<Bytes>()) << name;
    EXPECT_GT(m.gmlake_fragmentation(), 0.0);
    EXPECT_LT(m.gmlake_fragmentation(), 1.0);
    EXPECT_LE(m.ideal_lower_bound(), m.peak.active);
  }
}

}  // namespace
}  // namespace fragscope::analysis
