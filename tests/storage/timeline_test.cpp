#include "storage/db/timeline.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "storage/db/run_store.h"
#include "storage_test_util.h"

namespace fragscope::storage {
namespace {

using test::synthetic_trace;

// Checks every bucket against the events it claims to cover, so the pyramid can never drop or
// invent an extreme.
void expect_exact_buckets(const std::vector<TimelineBucket>& buckets,
                          const std::vector<TraceEvent>& events,
                          const std::vector<SeriesPoint>& series) {
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    const TimelineBucket& bucket = buckets[b];
    ASSERT_LT(bucket.first_event, bucket.end_event);
    ASSERT_LE(bucket.end_event, events.size());
    if (b > 0) {
      ASSERT_EQ(bucket.first_event, buckets[b - 1].end_event) << "buckets must be adjacent";
    }
    TimelineBucket expected =
        bucket_of(bucket.first_event, events[bucket.first_event], series[bucket.first_event]);
    for (std::uint64_t i = bucket.first_event + 1; i < bucket.end_event; ++i)
      expected = merge_buckets(expected, bucket_of(i, events[i], series[i]));
    ASSERT_EQ(bucket, expected) << "bucket " << b;
  }
}

class TimelineQuery : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    events_ = new std::vector<TraceEvent>(synthetic_trace(300'000, 11));
    series_ = new std::vector<SeriesPoint>(derive_series(*events_));
    store_ = new RunStore(":memory:");
    RunRecord record;
    record.name = "timeline";
    run_ = store_->begin_run(record);
    store_->append_events(run_, *events_);
    store_->finish_run(run_, RunStatus::ok);
  }
  static void TearDownTestSuite() {
    delete store_;
    delete series_;
    delete events_;
  }
  static std::vector<TraceEvent>* events_;
  static std::vector<SeriesPoint>* series_;
  static RunStore* store_;
  static RunId run_;
};
std::vector<TraceEvent>* TimelineQuery::events_ = nullptr;
std::vector<SeriesPoint>* TimelineQuery::series_ = nullptr;
RunStore* TimelineQuery::store_ = nullptr;
RunId TimelineQuery::run_{};

TEST_F(TimelineQuery, WholeRunPartitionsEveryEventAndKeepsPeaks) {
  for (const std::size_t count :
       {std::size_t{1}, std::size_t{7}, std::size_t{200}, std::size_t{2000}}) {
    const auto buckets = store_->timeline(run_, count);
    ASSERT_FALSE(buckets.empty());
    EXPECT_LE(buckets.size(), count);
    EXPECT_GE(buckets.size(), count / 2) << "too coarse for " << count;
    EXPECT_EQ(buckets.front().first_event, 0u);
    EXPECT_EQ(buckets.back().end_event, events_->size());
    expect_exact_buckets(buckets, *events_, *series_);
    const auto peak = std::max_element(
        series_->begin(), series_->end(),
        [](const SeriesPoint& a, const SeriesPoint& b) { return a.reserved < b.reserved; });
    std::int64_t bucket_peak = 0;
    for (const auto& bucket : buckets)
      bucket_peak = std::max(bucket_peak, bucket.max.reserved);
    EXPECT_EQ(bucket_peak, peak->reserved);
  }
}

TEST_F(TimelineQuery, NarrowWindowsComeFromTheEvents) {
  // 1000 events in 100 buckets: finer than level 0.
  const auto buckets = store_->timeline(run_, 65'000, 66'000, 100);
  ASSERT_EQ(buckets.size(), 100u);
  EXPECT_EQ(buckets.front().first_event, 65'000u);
  EXPECT_EQ(buckets.back().end_event, 66'000u);
  expect_exact_buckets(buckets, *events_, *series_);
  // More buckets than events: one per event.
  const auto singles = store_->timeline(run_, 10, 20, 50);
  ASSERT_EQ(singles.size(), 10u);
  EXPECT_EQ(singles[3].max, (*series_)[13]);
}

TEST_F(TimelineQuery, MiddleWindowsSnapToLevelBuckets) {
  const std::uint64_t first = 100'003;
  const std::uint64_t end = 250'017;
  const auto buckets = store_->timeline(run_, first, end, 300);
  ASSERT_FALSE(buckets.empty());
  EXPECT_LE(buckets.size(), 300u);
  // The edges may reach into the level bucket that straddles them, never further.
  EXPECT_LE(buckets.front().first_event, first);
  EXPECT_GT(buckets.front().end_event, first);
  EXPECT_GE(buckets.back().end_event, end);
  EXPECT_LT(buckets.back().first_event, end);
  expect_exact_buckets(buckets, *events_, *series_);
}

TEST_F(TimelineQuery, EmptyRangesGiveNoBuckets) {
  EXPECT_TRUE(store_->timeline(run_, 5, 5, 10).empty());
  EXPECT_TRUE(store_->timeline(run_, 0, 100, 0).empty());
  EXPECT_TRUE(store_->timeline(run_, events_->size(), events_->size() + 10, 10).empty());
}

TEST(TimelineBuilder, LevelsCoverEveryEventOnce) {
  const auto events = synthetic_trace(70'000, 2);
  const auto series = derive_series(events);
  TimelineBuilder builder;
  for (std::size_t i = 0; i < events.size(); ++i)
    builder.add(i, events[i], series[i]);
  auto rows = builder.take_full_rows();
  auto rest = builder.finish();
  rows.insert(rows.end(), rest.begin(), rest.end());
  std::map<int, std::vector<TimelineBucket>> levels;
  for (auto& row : rows) {
    auto& level = levels[row.level];
    EXPECT_EQ(row.first_bucket, level.size());
    level.insert(level.end(), row.buckets.begin(), row.buckets.end());
  }
  ASSERT_GE(levels.size(), 4u);
  for (const auto& [level, buckets] : levels) {
    EXPECT_EQ(buckets.front().first_event, 0u) << "level " << level;
    EXPECT_EQ(buckets.back().end_event, events.size()) << "level " << level;
    expect_exact_buckets(buckets, events, series);
  }
  EXPECT_EQ(levels.rbegin()->second.size(), 1u) << "the top level is one bucket";
}

// The builder extends an open level-0 bucket in place: the same rows, level for level, as a
// bucket per event merged into the levels, including the partial buckets the run ends with.
TEST(TimelineBuilder, TheOpenBucketGivesTheRowsOfABucketPerEvent) {
  const auto events = synthetic_trace(70'001, 5);
  const auto series = derive_series(events);
  TimelineBuilder builder;
  LevelBuilder<TimelineBucket> per_event;
  std::vector<TimelineBuilder::Row> rows;
  std::vector<TimelineBuilder::Row> expected;
  const auto take = [](std::vector<TimelineBuilder::Row>& to,
                       std::vector<TimelineBuilder::Row> more) {
    to.insert(to.end(), more.begin(), more.end());
  };
  for (std::size_t i = 0; i < events.size(); ++i) {
    builder.add(i, events[i], series[i]);
    per_event.add(bucket_of(i, events[i], series[i]));
    if (i % 10'000 == 0) {
      take(rows, builder.take_full_rows());
      take(expected, per_event.take_full_rows());
    }
  }
  take(rows, builder.finish());
  take(expected, per_event.finish());
  ASSERT_EQ(rows.size(), expected.size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    EXPECT_EQ(rows[r].level, expected[r].level) << "row " << r;
    EXPECT_EQ(rows[r].first_bucket, expected[r].first_bucket) << "row " << r;
    EXPECT_EQ(rows[r].buckets, expected[r].buckets) << "row " << r;
  }
}

TEST(TimelineBuckets, EncodeDecodeRoundTripAndRejectCorruption) {
  const auto events = synthetic_trace(5000, 4);
  const auto series = derive_series(events);
  std::vector<TimelineBucket> buckets;
  for (std::size_t i = 0; i < events.size(); i += 10) {
    TimelineBucket bucket = bucket_of(i, events[i], series[i]);
    for (std::size_t j = i + 1; j < std::min(i + 10, events.size()); ++j)
      bucket = merge_buckets(bucket, bucket_of(j, events[j], series[j]));
    buckets.push_back(bucket);
  }
  auto blob = encode_buckets(buckets);
  EXPECT_EQ(decode_buckets(blob, "test"), buckets);
  blob.resize(blob.size() / 2);
  EXPECT_THROW(decode_buckets(blob, "test"), DatabaseError);
}

}  // namespace
}  // namespace fragscope::storage
