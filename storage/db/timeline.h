#pragma once
// The peak-preserving timeline pyramid (heaptrack keeps the maximum per chart bucket so peaks
// never vanish when zoomed out; we keep the maximum and the minimum of every series). Level 0
// holds one bucket per kLevel0Events events, level l+1 merges kLevelFanout buckets of level l.
// A query picks the finest level whose buckets are no wider than the requested ones and merges
// them, so every event lands in exactly one output bucket and no extreme is lost.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "storage/db/event_chunk.h"
#include "storage/db/level_pyramid.h"

namespace fragscope::storage {

// Events [first_event, end_event) of a run; max and min are over the series after each event.
struct TimelineBucket {
  std::uint64_t first_event = 0;
  std::uint64_t end_event = 0;
  std::int64_t t0_us = 0;  // time of the first event
  std::int64_t t1_us = 0;  // time of the last event
  SeriesPoint max;
  SeriesPoint min;
  friend bool operator==(const TimelineBucket&, const TimelineBucket&) = default;
};

// The bucket of one event. Inline, like merge_buckets: ingest calls both for every event.
inline TimelineBucket bucket_of(std::uint64_t index, const TraceEvent& event,
                                const SeriesPoint& after) {
  return TimelineBucket{index, index + 1, event.time_us, event.time_us, after, after};
}
// `a` followed by `b` (adjacent event ranges).
inline TimelineBucket merge_buckets(const TimelineBucket& a, const TimelineBucket& b) {
  TimelineBucket merged;
  merged.first_event = a.first_event;
  merged.end_event = b.end_event;
  merged.t0_us = a.t0_us;
  merged.t1_us = b.t1_us;
  merged.max = series_max(a.max, b.max);
  merged.min = series_min(a.min, b.min);
  return merged;
}

std::vector<std::uint8_t> encode_buckets(std::span<const TimelineBucket> buckets);
std::vector<TimelineBucket> decode_buckets(std::span<const std::uint8_t> blob,
                                           const std::string& what);

// Merges `source` (ordered, adjacent buckets) into at most `count` buckets over the event range
// [first, end): a source bucket goes to the output bucket its first event falls in (a bucket
// straddling `first` goes to the first). Empty output buckets are dropped.
std::vector<TimelineBucket> regroup_buckets(std::span<const TimelineBucket> source,
                                            std::uint64_t first, std::uint64_t end,
                                            std::size_t count);

// Builds every level of the timeline pyramid while a run's events stream in.
class TimelineBuilder : public OpenBucketLevels<TimelineBucket> {
 public:
  // Event `index` with the series after it. The level-0 bucket being filled is extended in
  // place: a bucket per event merged into level 0 built and copied 96 bytes twice an event.
  void add(std::uint64_t index, const TraceEvent& event, const SeriesPoint& after) {
    TimelineBucket& open = open_bucket();
    if (opens_bucket()) {
      open = bucket_of(index, event, after);
    } else {
      open.end_event = index + 1;
      open.t1_us = event.time_us;
      open.max = series_max(open.max, after);
      open.min = series_min(open.min, after);
    }
    event_added();
  }
};

}  // namespace fragscope::storage
