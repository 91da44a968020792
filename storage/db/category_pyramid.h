#pragma once
// Memory by category, stored at ingest so that zooming the stacked category plot of a long run is
// a query, not a replay from event 0. Two blob kinds:
// - category chunks: per kEventsPerChunk events (aligned like event chunks), the bytes of each
//   category before the first event, then each event's time and what it did to one category;
//   the finest zoom and the edges of any query read these;
// - category levels: the level pyramid (level_pyramid.h) of CategoryBuckets, each holding the
//   categories at the event where the bucket's total is highest.
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/allocator/flat_map.h"
#include "engine/core/request.h"
#include "engine/core/trace.h"
#include "storage/db/level_pyramid.h"
#include "storage/db/packing.h"

namespace fragscope::storage {

// Number of fragscope::Category values (unknown .. input).
inline constexpr std::size_t kCategoryCount = 7;
using CategoryBytes = std::array<std::int64_t, kCategoryCount>;  // index = Category

// Memory by category over events [first_event, end_event): the live bytes of each category at
// the event where the bucket's total was highest, so the stacked categories reach the bucket's
// peak. Bytes are request sizes (the trace's).
struct CategoryBucket {
  std::uint64_t first_event = 0;
  std::uint64_t end_event = 0;
  std::int64_t t0_us = 0;
  std::int64_t t1_us = 0;
  std::uint64_t peak_event = 0;  // the event after which `bytes` was taken
  CategoryBytes bytes{};

  std::int64_t total() const {
    std::int64_t sum = 0;
    for (const auto value : bytes)
      sum += value;
    return sum;
  }
  friend bool operator==(const CategoryBucket&, const CategoryBucket&) = default;
};

// `a` followed by `b` (adjacent event ranges): the categories of whichever holds the higher total
// (the earlier one on a tie).
// Inline: ingest merges every event's bucket into level 0.
inline CategoryBucket merge_buckets(const CategoryBucket& a, const CategoryBucket& b) {
  CategoryBucket merged = b.total() > a.total() ? b : a;
  merged.first_event = a.first_event;
  merged.end_event = b.end_event;
  merged.t0_us = a.t0_us;
  merged.t1_us = b.t1_us;
  return merged;
}

std::vector<std::uint8_t> encode_category_buckets(std::span<const CategoryBucket> buckets);
// `what` names the blob in errors: a corrupt blob is a DatabaseError.
std::vector<CategoryBucket> decode_category_buckets(std::span<const std::uint8_t> blob,
                                                    const std::string& what);

// What each event of a chunk did to memory by category.
struct CategoryChunk {
  static constexpr std::uint8_t kNoChange = 0xff;
  CategoryBytes start{};  // before the first event
  std::vector<std::int64_t> times_us;
  std::vector<std::uint8_t> categories;  // the category the event moved, or kNoChange
  std::vector<std::int64_t> deltas;      // its change in bytes (0 with kNoChange)

  std::size_t size() const { return times_us.size(); }
  void clear(const CategoryBytes& bytes_before);
  // The one-event buckets of events [first, end) of this chunk, whose first event is `chunk_first`.
  std::vector<CategoryBucket> singles(std::uint64_t chunk_first, std::uint64_t first,
                                      std::uint64_t end) const;
};

std::vector<std::uint8_t> encode_category_chunk(const CategoryChunk& chunk);

// A chunk's categories as ingest builds them: packed into encode_category_chunk's columns as
// events come (about 3 bytes an event where CategoryChunk holds 17, 1.1 MB for 64k events).
class PackedCategoryChunk {
 public:
  void clear(const CategoryBytes& bytes_before);
  // Inline, with room made once per column and value (ByteColumn): ingest calls it per event.
  void push_back(std::int64_t time_us, std::uint8_t category, std::int64_t delta) {
    std::uint8_t* at = categories_.room(1);
    *at = category;
    categories_.commit(at + 1);
    if (category != CategoryChunk::kNoChange)
      deltas_.commit(put_signed(deltas_.room(kMaxVarintBytes), delta));
    times_.commit(put_signed(times_.room(kMaxVarintBytes), wrapping_sub(time_us, previous_time_)));
    previous_time_ = time_us;
  }
  std::size_t size() const { return categories_.size(); }
  // encode_category_chunk of the chunk these events make.
  std::vector<std::uint8_t> encode() const;

 private:
  CategoryBytes start_{};
  ByteColumn categories_;
  ByteColumn deltas_;  // signed varints, of the events that changed memory
  ByteColumn times_;   // signed varints, each from the previous event's time
  std::int64_t previous_time_ = 0;
};
CategoryChunk decode_category_chunk(std::span<const std::uint8_t> blob, const std::string& what);

// Follows live allocations through a trace: an allocation counts in its label's category from
// its alloc until its free_completed.
class CategoryTracker {
 public:
  struct Change {
    std::uint8_t category = CategoryChunk::kNoChange;
    std::int64_t delta = 0;
  };

  // Blocks live before the first event (an imported trace that starts mid-run) are unknown.
  void add_initial(std::uint64_t addr, std::int64_t size);
  Change apply(const TraceEvent& event, Category category);
  const CategoryBytes& bytes() const { return bytes_; }
  // The sum of bytes() (CategoryBucket::total() of them), kept as they change.
  std::int64_t total() const { return total_; }

 private:
  struct Live {
    std::uint8_t category;
    std::int64_t size;
  };
  alloc::FlatAddressMap<Live> live_;
  CategoryBytes bytes_{};
  std::int64_t total_ = 0;
};

// Builds the category pyramid while a run's events stream in: add() after each event. The
// level-0 bucket being filled is kept as its range, times and peak (the first event of its
// highest total), its categories copied only when the total rises past the peak. A bucket per
// event merged into level 0 built and merged 96 bytes per event: ~40 % of the ingest thread.
class CategoryPyramidBuilder : public OpenBucketLevels<CategoryBucket> {
 public:
  // Event `index` at `time_us`, with `tracker` already past it.
  void add(std::uint64_t index, std::int64_t time_us, const CategoryTracker& tracker) {
    const std::int64_t total = tracker.total();
    CategoryBucket& open = open_bucket();
    const bool opens = opens_bucket();
    if (opens) {
      open.first_event = index;
      open.t0_us = time_us;
    }
    if (opens || total > open_total_) {
      open.peak_event = index;
      open.bytes = tracker.bytes();
      open_total_ = total;
    }
    open.end_event = index + 1;
    open.t1_us = time_us;
    event_added();
  }

 private:
  std::int64_t open_total_ = 0;  // the open bucket's peak total
};

}  // namespace fragscope::storage
