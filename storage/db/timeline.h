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

namespace fragscope::storage {

inline constexpr std::uint64_t kLevel0Events = 32;
inline constexpr std::uint64_t kLevelFanout = 4;
inline constexpr std::size_t kBucketsPerRow = 4096;

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

// Events per bucket at `level`.
std::uint64_t level_bucket_events(int level);

// The bucket of one event.
TimelineBucket bucket_of(std::uint64_t index, const TraceEvent& event, const SeriesPoint& after);
// `a` followed by `b` (adjacent event ranges).
TimelineBucket merge_buckets(const TimelineBucket& a, const TimelineBucket& b);

std::vector<std::uint8_t> encode_buckets(std::span<const TimelineBucket> buckets);
std::vector<TimelineBucket> decode_buckets(std::span<const std::uint8_t> blob,
                                           const std::string& what);

// Merges `source` (ordered, adjacent buckets) into at most `count` buckets over the event range
// [first, end): a source bucket goes to the output bucket its first event falls in (a bucket
// straddling `first` goes to the first). Empty output buckets are dropped.
std::vector<TimelineBucket> regroup_buckets(std::span<const TimelineBucket> source,
                                            std::uint64_t first, std::uint64_t end,
                                            std::size_t count);

// Builds every level of the pyramid while a run's events stream in.
class TimelineBuilder {
 public:
  struct Row {
    int level = 0;
    std::uint64_t first_bucket = 0;  // index of buckets[0] within its level
    std::vector<TimelineBucket> buckets;
  };

  void add(std::uint64_t index, const TraceEvent& event, const SeriesPoint& after);
  // Rows that are full and can be written now.
  std::vector<Row> take_full_rows();
  // Closes the partial buckets at the end of the run and returns every row not yet taken.
  std::vector<Row> finish();

 private:
  struct Level {
    TimelineBucket pending;
    std::uint64_t pending_parts = 0;  // events (level 0) or child buckets merged into `pending`
    std::uint64_t row_first = 0;
    std::vector<TimelineBucket> row;
  };
  void complete(std::size_t level, bool propagate);

  std::vector<Level> levels_ = std::vector<Level>(1);
  std::vector<Row> ready_;
};

}  // namespace fragscope::storage
