// Memory by category stored at ingest: category_timeline() answered from the pyramid must give,
// for every bucket, the categories at the event of the bucket's highest total, exactly as a
// replay of the events finds them; runs stored before the pyramid are replayed.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <unordered_map>

#include "storage/db/category_pyramid.h"
#include "storage/db/run_store.h"
#include "tests/progress_test_util.h"
#include "tests/storage/storage_test_util.h"

namespace fragscope::storage {
namespace {

using test::synthetic_trace;

constexpr Category kCycle[] = {Category::parameter, Category::gradient, Category::optimizer_state,
                               Category::activation, Category::temporary};

struct LabelledRun {
  std::vector<TraceEvent> events;
  std::vector<LabelId> labels;       // per event
  std::vector<RequestLabel> table;   // LabelId -> label
  std::vector<CategoryBytes> after;  // categories after each event, replayed here
};

// The reference categories after each event of `run`, computed here by following each
// allocation from its alloc to its free_completed.
std::vector<CategoryBytes> categories_after(const LabelledRun& run) {
  std::vector<CategoryBytes> after;
  std::unordered_map<std::uint64_t, std::pair<Category, std::int64_t>> live;
  CategoryBytes bytes{};
  for (std::size_t i = 0; i < run.events.size(); ++i) {
    const TraceEvent& event = run.events[i];
    if (event.action == TraceAction::alloc) {
      const Category category = run.table[run.labels[i].value].category;
      live[event.addr] = {category, static_cast<std::int64_t>(event.size)};
      bytes[static_cast<std::size_t>(category)] += static_cast<std::int64_t>(event.size);
    } else if (event.action == TraceAction::free_completed) {
      if (const auto it = live.find(event.addr); it != live.end()) {
        bytes[static_cast<std::size_t>(it->second.first)] -= it->second.second;
        live.erase(it);
      }
    }
    after.push_back(bytes);
  }
  return after;
}

// Labels allocations in turn over kCycle, every seventh unlabelled.
LabelledRun labelled_run(std::size_t count, std::uint32_t seed) {
  LabelledRun run;
  run.events = synthetic_trace(count, seed);
  run.table.push_back(RequestLabel{});
  for (const Category category : kCycle)
    run.table.push_back({category, std::string(to_string(category)), -1});
  std::uint32_t allocations = 0;
  for (const auto& event : run.events) {
    LabelId label{};
    if (event.action == TraceAction::alloc && ++allocations % 7 != 0)
      label = LabelId{1 + allocations % 5};
    run.labels.push_back(label);
  }
  run.after = categories_after(run);
  return run;
}

RunId store_labelled(RunStore& store, const LabelledRun& run, std::size_t batch = 10'000) {
  const RunId id = store.begin_run(RunRecord{});
  store.set_labels(id, run.table);
  for (std::size_t first = 0; first < run.events.size(); first += batch) {
    const std::size_t count = std::min(batch, run.events.size() - first);
    store.append_events(id, std::span(run.events).subspan(first, count),
                        {{}, std::span(run.labels).subspan(first, count)});
  }
  store.finish_run(id, RunStatus::ok);
  return id;
}

std::int64_t total(const CategoryBytes& bytes) {
  std::int64_t sum = 0;
  for (const auto value : bytes)
    sum += value;
  return sum;
}

// Buckets tile [first, end) in order, and each holds the categories after the first event of its
// range with the highest total.
void expect_exact(const std::vector<CategoryBucket>& buckets, const LabelledRun& run,
                  std::uint64_t first, std::uint64_t end, std::size_t count) {
  ASSERT_FALSE(buckets.empty());
  ASSERT_LE(buckets.size(), count);
  EXPECT_EQ(buckets.front().first_event, first);
  EXPECT_EQ(buckets.back().end_event, end);
  std::uint64_t expected_first = first;
  for (const auto& bucket : buckets) {
    ASSERT_EQ(bucket.first_event, expected_first);
    ASSERT_LT(bucket.first_event, bucket.end_event);
    expected_first = bucket.end_event;
    std::uint64_t peak = bucket.first_event;
    for (std::uint64_t i = bucket.first_event; i < bucket.end_event; ++i) {
      if (total(run.after[i]) > total(run.after[peak]))
        peak = i;
    }
    ASSERT_EQ(bucket.peak_event, peak) << "bucket from " << bucket.first_event;
    ASSERT_EQ(bucket.bytes, run.after[peak]) << "bucket from " << bucket.first_event;
    ASSERT_EQ(bucket.t0_us, run.events[bucket.first_event].time_us);
    ASSERT_EQ(bucket.t1_us, run.events[bucket.end_event - 1].time_us);
  }
}

class CategoryPyramid : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    run_ = new LabelledRun(labelled_run(3 * kEventsPerChunk + 12'345, 31));
  }
  static void TearDownTestSuite() {
    delete run_;
    run_ = nullptr;
  }
  static LabelledRun* run_;
};
LabelledRun* CategoryPyramid::run_ = nullptr;

TEST_F(CategoryPyramid, EveryZoomMatchesAReplay) {
  RunStore store(":memory:");
  const RunId id = store_labelled(store, *run_);
  const std::uint64_t n = run_->events.size();
  std::mt19937_64 random(5);
  struct Query {
    std::uint64_t first, end;
    std::size_t buckets;
  };
  std::vector<Query> queries = {{0, n, 1},       {0, n, 800},         {0, n, n},
                                {1, n - 1, 977}, {70'001, 70'002, 5}, {12'345, 150'000, 64},
                                {n - 40, n, 1},  {65'530, 65'542, 3}};
  for (int i = 0; i < 40; ++i) {
    const std::uint64_t a = random() % n;
    const std::uint64_t b = a + 1 + random() % (n - a);
    queries.push_back({a, b, static_cast<std::size_t>(1 + random() % 2000)});
  }
  for (const auto& q : queries) {
    SCOPED_TRACE(testing::Message() << "[" << q.first << ", " << q.end << ") in " << q.buckets);
    expect_exact(store.category_timeline(id, q.first, q.end, q.buckets), *run_, q.first, q.end,
                 q.buckets);
  }
}

TEST_F(CategoryPyramid, RunsStoredBeforeThePyramidAreReplayed) {
  RunStore store(":memory:");
  const RunId id = store_labelled(store, *run_);
  const auto from_pyramid = store.category_timeline(id, 100'000, 100'001, 1);
  for (const char* table : {"category_levels", "category_chunks"})
    store.database().exec(std::string("DELETE FROM ") + table);
  const auto replayed = store.category_timeline(id, 5000, run_->events.size(), 300);
  expect_exact(replayed, *run_, 5000, run_->events.size(), 300);
  EXPECT_EQ(store.category_timeline(id, 100'000, 100'001, 1), from_pyramid);
}

TEST_F(CategoryPyramid, AChunksFirstEventKeepsItsLabel) {
  RunStore store(":memory:");
  // Batches that start exactly at a chunk boundary once lost that event's label.
  const RunId id = store_labelled(store, *run_, kEventsPerChunk);
  const auto stored = store.labels_of_events(id, 0, run_->events.size());
  ASSERT_EQ(stored.size(), run_->labels.size());
  for (std::size_t i = 0; i < stored.size(); ++i)
    ASSERT_EQ(stored[i], run_->labels[i]) << "event " << i;
}

TEST_F(CategoryPyramid, CancelledQueriesStop) {
  RunStore store(":memory:");
  const RunId id = store_labelled(store, *run_);
  const CancelToken cancel = CancelToken::make();
  cancel.cancel();
  EXPECT_THROW(store.category_timeline(id, 0, run_->events.size(), 10, cancel), Cancelled);
  EXPECT_THROW(store.category_timeline(id, 3, 40, 10, cancel), Cancelled);
}

// A query reports the events it has read, growing to 1 once its buckets are complete, from the
// pyramid and by replay alike; a cancel midway stops it (fragscope::Cancelled, no buckets), and the
// next query is answered as before.
TEST_F(CategoryPyramid, ProgressGrowsToOneAndACancelMidwayStops) {
  RunStore store(":memory:");
  const RunId id = store_labelled(store, *run_);
  const std::uint64_t n = run_->events.size();
  const auto query = [&](const CancelToken& cancel, const Progress& progress) {
    return store.category_timeline(id, 1, n - 1, 977, cancel, progress);
  };
  for (const bool pyramid : {true, false}) {
    SCOPED_TRACE(pyramid ? "from the pyramid" : "by replay");
    if (!pyramid)
      store.database().exec("DELETE FROM category_levels");
    const auto expected = query({}, {});
    fragscope::test::ProgressRecorder whole(kCategoryTimelineStages);
    EXPECT_EQ(query({}, whole.progress()), expected);
    EXPECT_TRUE(fragscope::test::grows_to_one(whole, 3));

    fragscope::test::ProgressRecorder halfway(kCategoryTimelineStages);
    halfway.cancel_at = 0.5;
    EXPECT_THROW(query(halfway.token, halfway.progress()), Cancelled);
    EXPECT_TRUE(fragscope::test::stopped_before(halfway, 0.99));
    EXPECT_EQ(query({}, {}), expected);
  }
}

// A table after events, labelled or not, could not stack them: it is refused.
TEST(CategoryPyramidIngest, LabelsComeBeforeTheEvents) {
  RunStore store(":memory:");
  const LabelledRun run = labelled_run(100, 3);
  for (const bool labelled : {true, false}) {
    const RunId id = store.begin_run(RunRecord{});
    store.append_events(id, run.events,
                        {{}, labelled ? std::span(run.labels) : std::span<const LabelId>()});
    EXPECT_THROW(store.set_labels(id, run.table), DatabaseError);
    store.cancel_run(id);
  }
}

// Only a run with a label table stores memory by category: a run without labels has nothing to
// read it. Its category timeline, replayed, is as exact as the stored one of a labelled run.
TEST(CategoryPyramidIngest, OnlyARunWithLabelsStoresCategories) {
  RunStore store(":memory:");
  const LabelledRun run = labelled_run(kEventsPerChunk + 5'000, 7);
  LabelledRun unlabelled = run;
  std::fill(unlabelled.labels.begin(), unlabelled.labels.end(), LabelId{});
  unlabelled.after = categories_after(unlabelled);
  const auto rows = [&](RunId id) {
    const std::string where = " WHERE run_id = " + std::to_string(id.value);
    return store.database().query_int("SELECT count(*) FROM category_chunks" + where) +
           store.database().query_int("SELECT count(*) FROM category_levels" + where);
  };
  // `table` given before the events; the labels go with them only when it has any.
  const auto store_run = [&](const std::vector<RequestLabel>& table) {
    const RunId id = store.begin_run(RunRecord{});
    if (!table.empty())
      store.set_labels(id, table);
    store.append_events(
        id, run.events,
        {{}, table.size() > 1 ? std::span(run.labels) : std::span<const LabelId>()});
    store.finish_run(id, RunStatus::ok);
    return id;
  };
  const RunId labelled = store_run(run.table);
  const RunId without = store_run({});
  const RunId unknown_only = store_run({RequestLabel{}});
  EXPECT_GT(rows(labelled), 0);
  EXPECT_EQ(rows(without), 0);
  EXPECT_GT(rows(unknown_only), 0);
  const RunId emptied = store.begin_run(RunRecord{});
  store.set_labels(emptied, run.table);
  store.set_labels(emptied, {});  // the last table before the events counts
  store.append_events(emptied, run.events);
  store.finish_run(emptied, RunStatus::ok);
  EXPECT_EQ(rows(emptied), 0);

  const std::uint64_t n = run.events.size();
  for (const std::size_t buckets : {std::size_t{1}, std::size_t{300}, std::size_t{n}}) {
    SCOPED_TRACE(std::to_string(buckets) + " buckets");
    expect_exact(store.category_timeline(labelled, 0, n, buckets), run, 0, n, buckets);
    for (const RunId id : {without, unknown_only, emptied})
      expect_exact(store.category_timeline(id, 0, n, buckets), unlabelled, 0, n, buckets);
  }
}

TEST(CategoryPyramidIngest, BlocksLiveBeforeTheTraceAreUnknown) {
  RunStore store(":memory:");
  SegmentMap initial;
  initial.apply({TraceAction::segment_alloc, 0x1000, 4096, StreamId{}, 1, FrameStackId{}});
  initial.apply({TraceAction::alloc, 0x1000, 1000, StreamId{}, 2, FrameStackId{}});
  const std::vector<TraceEvent> events = {
      {TraceAction::alloc, 0x1400, 24, StreamId{}, 3, FrameStackId{}},
      {TraceAction::free_requested, 0x1000, 1000, StreamId{}, 4, FrameStackId{}},
      {TraceAction::free_completed, 0x1000, 1000, StreamId{}, 4, FrameStackId{}}};
  // From the rows ingest stores (a run with labels) and by replay (a run without).
  for (const bool labelled : {true, false}) {
    SCOPED_TRACE(labelled ? "stored" : "replayed");
    const RunId id = store.begin_run(RunRecord{}, initial);
    if (labelled)
      store.set_labels(id, std::vector<RequestLabel>{{}, {Category::parameter, "w", 0}});
    store.append_events(id, events);
    store.finish_run(id, RunStatus::ok);
    const auto buckets = store.category_timeline(id, 0, 3, 3);
    ASSERT_EQ(buckets.size(), 3u);
    EXPECT_EQ(buckets[0].bytes[0], 1024);
    EXPECT_EQ(buckets[2].bytes[0], 24);
  }
}

// The builder keeps a filling bucket as its peak and merges it once full: the same rows, level
// for level, as a bucket per event merged into level 0 (the earliest event of the highest total
// on a tie: free_requested events leave the total as it was).
TEST(CategoryPyramidIngest, TheBuilderGivesTheRowsOfABucketPerEvent) {
  const LabelledRun run = labelled_run(kBucketsPerRow * kLevel0Events + 4321, 17);
  CategoryTracker tracker;
  CategoryPyramidBuilder builder;
  LevelBuilder<CategoryBucket> per_event;
  std::vector<CategoryPyramidBuilder::Row> rows;
  std::vector<CategoryPyramidBuilder::Row> expected;
  const auto take = [](auto& from, auto& into) {
    for (auto& row : from)
      into.push_back(std::move(row));
  };
  for (std::uint64_t i = 0; i < run.events.size(); ++i) {
    const TraceEvent& event = run.events[i];
    tracker.apply(event, run.table[run.labels[i].value].category);
    ASSERT_EQ(tracker.bytes(), run.after[i]);
    ASSERT_EQ(tracker.total(), total(run.after[i]));
    builder.add(i, event.time_us, tracker);
    per_event.add(CategoryBucket{i, i + 1, event.time_us, event.time_us, i, tracker.bytes()});
    if (i % 5000 == 0) {
      auto full = builder.take_full_rows();
      take(full, rows);
      auto full_expected = per_event.take_full_rows();
      take(full_expected, expected);
    }
  }
  auto last = builder.finish();
  take(last, rows);
  auto last_expected = per_event.finish();
  take(last_expected, expected);
  ASSERT_EQ(rows.size(), expected.size());
  ASSERT_GT(rows.size(), 2u);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    EXPECT_EQ(rows[r].level, expected[r].level) << "row " << r;
    EXPECT_EQ(rows[r].first_bucket, expected[r].first_bucket) << "row " << r;
    EXPECT_EQ(rows[r].buckets, expected[r].buckets) << "row " << r;
  }
}

TEST(CategoryBlobs, RoundTripAndRejectCorruption) {
  const LabelledRun run = labelled_run(5000, 9);
  CategoryChunk chunk;
  chunk.clear(CategoryBytes{1, 2, 3, 4, 5, 6, 7});
  std::vector<CategoryBucket> buckets;
  for (std::size_t i = 0; i < run.events.size(); ++i) {
    chunk.times_us.push_back(run.events[i].time_us);
    chunk.categories.push_back(i % 3 == 0 ? CategoryChunk::kNoChange
                                          : static_cast<std::uint8_t>(i % kCategoryCount));
    chunk.deltas.push_back(i % 3 == 0 ? 0 : static_cast<std::int64_t>(i) - 2500);
    buckets.push_back({i, i + 1, run.events[i].time_us, run.events[i].time_us, i, run.after[i]});
  }
  auto blob = encode_category_chunk(chunk);
  const CategoryChunk decoded = decode_category_chunk(blob, "test");
  EXPECT_EQ(decoded.start, chunk.start);
  EXPECT_EQ(decoded.categories, chunk.categories);
  EXPECT_EQ(decoded.deltas, chunk.deltas);
  EXPECT_EQ(decoded.times_us, chunk.times_us);
  blob.resize(blob.size() / 2);
  EXPECT_THROW(decode_category_chunk(blob, "test"), DatabaseError);

  auto rows = encode_category_buckets(std::span(buckets).first(kBucketsPerRow));
  EXPECT_EQ(decode_category_buckets(rows, "test"),
            std::vector(buckets.begin(), buckets.begin() + kBucketsPerRow));
  rows[0] = 9;  // an unknown format
  EXPECT_THROW(decode_category_buckets(rows, "test"), DatabaseError);
}

}  // namespace
}  // namespace fragscope::storage
