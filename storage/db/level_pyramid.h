#pragma once
// The level pyramid behind every stored "over events" view (the memory timeline, memory by
// category): level 0 holds one bucket per kLevel0Events events, level l+1 merges kLevelFanout
// buckets of level l, and rows of kBucketsPerRow buckets are written as they fill. A Bucket has
// first_event / end_event and a free function merge_buckets(a, b) for adjacent ranges.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

namespace fragscope::storage {

inline constexpr std::uint64_t kLevel0Events = 32;
inline constexpr std::uint64_t kLevelFanout = 4;
inline constexpr std::size_t kBucketsPerRow = 4096;

// Events per bucket at `level`.
std::uint64_t level_bucket_events(int level);

// Builds every level of a pyramid while a run's events stream in: add() the bucket of each event
// in order.
template <typename Bucket>
class LevelBuilder {
 public:
  struct Row {
    int level = 0;
    std::uint64_t first_bucket = 0;  // index of buckets[0] within its level
    std::vector<Bucket> buckets;
  };

  void add(const Bucket& single) {
    Level& level0 = levels_[0];
    level0.pending = level0.pending_parts == 0 ? single : merge_buckets(level0.pending, single);
    if (++level0.pending_parts == kLevel0Events)
      complete(0, true);
  }
  // The buckets of `events` events, already merged (the same as add()ing each of them), where
  // they fit in the level-0 bucket being filled: pending events + `events` <= kLevel0Events.
  void add_merged(const Bucket& merged, std::uint64_t events) {
    Level& level0 = levels_[0];
    level0.pending = level0.pending_parts == 0 ? merged : merge_buckets(level0.pending, merged);
    level0.pending_parts += events;
    if (level0.pending_parts == kLevel0Events)
      complete(0, true);
  }
  // Rows that are full and can be written now.
  std::vector<Row> take_full_rows() { return std::exchange(ready_, {}); }
  // Closes the partial buckets at the end of the run and returns every row not yet taken.
  std::vector<Row> finish() {
    // A partial bucket only feeds a parent level that already exists: the top level ends with the
    // bucket that spans the whole run.
    for (std::size_t level = 0; level < levels_.size(); ++level) {
      if (levels_[level].pending_parts > 0)
        complete(level, level + 1 < levels_.size());
    }
    for (std::size_t level = 0; level < levels_.size(); ++level) {
      Level& current = levels_[level];
      if (!current.row.empty()) {
        ready_.push_back(Row{static_cast<int>(level), current.row_first, std::move(current.row)});
        current.row.clear();
      }
    }
    return take_full_rows();
  }

 private:
  struct Level {
    Bucket pending;
    std::uint64_t pending_parts = 0;  // events (level 0) or child buckets merged into `pending`
    std::uint64_t row_first = 0;
    std::vector<Bucket> row;
  };

  void complete(std::size_t level, bool propagate) {
    const Bucket bucket = levels_[level].pending;
    levels_[level].pending_parts = 0;
    {
      Level& current = levels_[level];
      current.row.push_back(bucket);
      if (current.row.size() == kBucketsPerRow) {
        ready_.push_back(Row{static_cast<int>(level), current.row_first, std::move(current.row)});
        current.row_first += kBucketsPerRow;
        current.row.clear();
      }
    }
    if (!propagate)
      return;
    if (levels_.size() == level + 1)
      levels_.emplace_back();
    Level& parent = levels_[level + 1];
    parent.pending = parent.pending_parts == 0 ? bucket : merge_buckets(parent.pending, bucket);
    if (++parent.pending_parts == kLevelFanout)
      complete(level + 1, true);
  }

  std::vector<Level> levels_ = std::vector<Level>(1);
  std::vector<Row> ready_;
};

// A LevelBuilder fed an event at a time through the level-0 bucket being filled, which the
// derived builder keeps open and extends in place (open_bucket()): the same buckets as add()ing
// a bucket per event, without building and merging a bucket for every event.
template <typename Bucket>
class OpenBucketLevels {
 public:
  using Row = typename LevelBuilder<Bucket>::Row;

  // Rows that are full and can be written now.
  std::vector<Row> take_full_rows() { return levels_.take_full_rows(); }
  // Closes the partial buckets at the end of the run and returns every row not yet taken.
  std::vector<Row> finish() {
    if (open_events_ != 0)
      levels_.add_merged(open_, open_events_);
    open_events_ = 0;
    return levels_.finish();
  }

 protected:
  // Whether the next event starts a level-0 bucket (open_bucket() still holds the last one's).
  bool opens_bucket() const { return open_events_ == 0; }
  Bucket& open_bucket() { return open_; }
  // The event just written into open_bucket() counts; a full bucket goes to the levels.
  void event_added() {
    if (++open_events_ == kLevel0Events) {
      levels_.add_merged(open_, open_events_);
      open_events_ = 0;
    }
  }

 private:
  Bucket open_;
  std::uint64_t open_events_ = 0;
  LevelBuilder<Bucket> levels_;
};

// Merges `source` (ordered, adjacent buckets) into at most `count` buckets over the event range
// [first, end): a source bucket goes to the output bucket its first event falls in (a bucket
// straddling `first` goes to the first). Empty output buckets are dropped.
template <typename Bucket>
std::vector<Bucket> regroup_level_buckets(std::span<const Bucket> source, std::uint64_t first,
                                          std::uint64_t end, std::size_t count) {
  std::vector<Bucket> out;
  if (end <= first || count == 0)
    return out;
  const std::uint64_t span = end - first;
  std::size_t current = 0;
  bool open = false;
  for (const auto& bucket : source) {
    if (bucket.end_event <= first || bucket.first_event >= end)
      continue;
    const std::uint64_t offset = bucket.first_event > first ? bucket.first_event - first : 0;
    const std::uint64_t scaled =
        offset <= std::numeric_limits<std::uint64_t>::max() / count
            ? offset * count / span
            : static_cast<std::uint64_t>(static_cast<long double>(offset) * count / span);
    const auto target = static_cast<std::size_t>(std::min<std::uint64_t>(scaled, count - 1));
    if (open && target == current) {
      out.back() = merge_buckets(out.back(), bucket);
    } else {
      out.push_back(bucket);
      current = target;
      open = true;
    }
  }
  return out;
}

}  // namespace fragscope::storage
