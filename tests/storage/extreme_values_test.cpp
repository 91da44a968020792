// Hostile traces store exactly: times of ±2^63 and sizes of 2^63 and more, whose differences
// overflow signed 64-bit arithmetic (undefined behaviour, caught by the asan preset's UBSan), wrap
// instead and decode to the same values.
#include <gtest/gtest.h>

#include <limits>

#include "storage/db/event_chunk.h"
#include "storage/db/run_store.h"
#include "storage/db/timeline.h"

namespace fragscope::storage {
namespace {

constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

std::vector<TraceEvent> extreme_trace() {
  std::vector<TraceEvent> events;
  const std::int64_t times[] = {kMin, kMax, 0, kMin, -1, kMax, kMax, kMin};
  const std::uint64_t sizes[] = {1ull << 63, ~0ull, 512, (1ull << 63) + 1, 1, ~0ull - 7, 0, 4096};
  for (std::size_t i = 0; i < std::size(times); ++i) {
    const auto action = i % 3 == 0   ? TraceAction::alloc
                        : i % 3 == 1 ? TraceAction::free_completed
                                     : TraceAction::segment_alloc;
    events.push_back({action, ~0ull - i, sizes[i], StreamId{0}, times[i], FrameStackId{}});
  }
  return events;
}

TEST(ExtremeValues, ChunkRoundTripsTimesAndSizesAtTheLimits) {
  EventChunk chunk;
  chunk.events = extreme_trace();
  chunk.start = {kMax, kMin, kMax, kMin};
  chunk.series = derive_series(chunk.events, chunk.start);
  const EventChunk back = decode_chunk(encode_chunk(chunk), "extreme");
  ASSERT_EQ(back.events.size(), chunk.events.size());
  for (std::size_t i = 0; i < chunk.events.size(); ++i) {
    EXPECT_EQ(back.events[i].time_us, chunk.events[i].time_us) << i;
    EXPECT_EQ(back.events[i].size, chunk.events[i].size) << i;
    EXPECT_EQ(back.series[i].allocated, chunk.series[i].allocated) << i;
    EXPECT_EQ(back.series[i].reserved, chunk.series[i].reserved) << i;
  }
}

TEST(ExtremeValues, TimelineBucketsRoundTripTimesAtTheLimits) {
  std::vector<TimelineBucket> buckets;
  const auto events = extreme_trace();
  for (std::size_t i = 0; i < events.size(); ++i)
    buckets.push_back(bucket_of(i, events[i], {kMax - static_cast<std::int64_t>(i), kMin, 0, 1}));
  const auto back = decode_buckets(encode_buckets(buckets), "extreme");
  ASSERT_EQ(back.size(), buckets.size());
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    EXPECT_EQ(back[i].t0_us, buckets[i].t0_us) << i;
    EXPECT_EQ(back[i].t1_us, buckets[i].t1_us) << i;
    EXPECT_EQ(back[i].max.allocated, buckets[i].max.allocated) << i;
  }
}

TEST(ExtremeValues, StoredRunWithExtremeTimesReadsBack) {
  RunStore store(":memory:");
  const RunId id = store.begin_run(RunRecord{});
  const auto events = extreme_trace();
  store.append_events(id, events);
  store.finish_run(id, RunStatus::ok);
  EXPECT_EQ(store.events(id, 0, events.size()), events);
  EXPECT_EQ(store.timeline(id, 4).size(), 4U);
}

}  // namespace
}  // namespace fragscope::storage
