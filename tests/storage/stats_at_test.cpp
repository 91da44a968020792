// memory_stats() at an event of a stored run, against what PyTorch itself reported: at the end of
// every real recording the replayed state prints PyTorch's memory_summary() byte for byte, and at
// any event its current bytes are the stored series (computed from the trace's layout, not from
// the model).
#include "storage/db/stats_at.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/allocator/summary.h"
#include "engine/snapshot/snapshot.h"
#include "engine/workload/experiment.h"
#include "storage/db/simulated_run.h"
#include "storage/db/snapshot_import.h"
#include "storage/db/stats_keyframes.h"
#include "storage_test_util.h"

namespace fragscope::storage {
namespace {

using test::fixture;
using test::read_file;

// Imports a fixture as `fragscope-cli import` and File > Open do: with its NAME.stats.json (the
// device's memory and the recording's per-process cap).
RunId import_fixture(RunStore& store, const std::string& name) {
  const std::string path = fixture(name, ".pickle.gz");
  ImportOptions options = test::import_options(name);
  options.recorded_stats = read_companion_stats(path);
  EXPECT_TRUE(options.recorded_stats.has_value());
  return import_snapshot(store, snapshot::read_snapshot(path), options).run;
}

SeriesPoint series_after(RunStore& store, RunId run, std::uint64_t events) {
  if (events == 0)
    return {};
  const auto buckets = store.timeline(run, events - 1, events, 1);
  EXPECT_EQ(buckets.size(), 1u);
  return buckets.empty() ? SeriesPoint{} : buckets.front().max;
}

class StatsAtFixture : public ::testing::TestWithParam<const char*> {};

// A stored range's pool, which a trace does not record: the small pool's plain segments are 2 MiB;
// its expandable ranges are whole 2 MiB pages, never a whole number of the large pool's pages.
// (A state-only 2.5-2.8 snapshot with a 2 MiB expandable small-pool segment failed to seed as
// a large-pool range: "does not fit the device".)
TEST(StoredRangePool, SmallPoolRangesAreToldApartFromLargeOnes) {
  constexpr Bytes kMiB = 1ULL << 20;
  EXPECT_TRUE(is_small_pool_range({0, 2 * kMiB, StreamId{}, false}));
  EXPECT_FALSE(is_small_pool_range({0, 20 * kMiB, StreamId{}, false}));
  EXPECT_FALSE(is_small_pool_range({0, 4 * kMiB, StreamId{}, false}));
  EXPECT_TRUE(is_small_pool_range({0, 2 * kMiB, StreamId{}, true}));
  EXPECT_TRUE(is_small_pool_range({0, 6 * kMiB, StreamId{}, true}));
  EXPECT_FALSE(is_small_pool_range({0, 40 * kMiB, StreamId{}, true}));
  // large_segment_size_mb:64 (2.11+): the large pool maps 64 MiB pages.
  EXPECT_FALSE(is_small_pool_range({0, 128 * kMiB, StreamId{}, true}, 64 * kMiB));
  EXPECT_TRUE(is_small_pool_range({0, 20 * kMiB, StreamId{}, true}, 64 * kMiB));
}

TEST_P(StatsAtFixture, EndOfRunPrintsPyTorchsOwnSummary) {
  RunStore store(":memory:");
  const RunId run = import_fixture(store, GetParam());
  const std::uint64_t count = store.run(run).event_count;
  const MemoryStatsAt state = memory_stats_at(store, run, count);
  EXPECT_EQ(state.event_index, count);
  EXPECT_TRUE(state.caveats.empty()) << state.caveats.front();
  EXPECT_EQ(alloc::memory_summary(state.stats, 0, false),
            read_file(fixture(GetParam(), ".summary.txt")));
}

TEST_P(StatsAtFixture, CurrentBytesAtAnyEventAreTheStoredSeries) {
  RunStore store(":memory:");
  const RunId run = import_fixture(store, GetParam());
  const std::uint64_t count = store.run(run).event_count;
  for (const std::uint64_t at :
       {std::uint64_t{0}, std::uint64_t{1}, count / 7, count / 3, count / 2, count - 1}) {
    SCOPED_TRACE("after " + std::to_string(at) + " events");
    const MemoryStatsAt state = memory_stats_at(store, run, at);
    EXPECT_GE(state.event_index, at);
    EXPECT_LE(state.event_index, at + 64) << "a cut moves only to the end of its allocator call";
    const SeriesPoint expected = series_after(store, run, state.event_index);
    using alloc::StatType;
    EXPECT_EQ(state.stats.allocated_bytes[StatType::aggregate].current, expected.allocated);
    EXPECT_EQ(state.stats.reserved_bytes[StatType::aggregate].current, expected.reserved);
    EXPECT_EQ(state.stats.active_bytes[StatType::aggregate].current, expected.active);
    EXPECT_EQ(state.stats.requested_bytes[StatType::aggregate].current, expected.requested);
  }
}

INSTANTIATE_TEST_SUITE_P(TorchRecordings, StatsAtFixture,
                         ::testing::ValuesIn(test::kTorchRecordings));

// A simulated run stores only the model's trace; replaying it gives back the memory_stats() the
// model ended with, OOM, retries and all: the summary of a designer or `run` run is its own.
TEST(StatsAt, SimulatedRunsReplayToTheirOwnStats) {
  const workload::Experiment experiment = workload::load_experiment(
      std::string(FRAGSCOPE_SOURCE_DIR) + "/experiments/case-study-1.2b-a100-40gb.json");
  RunStore store(":memory:");
  const ExperimentId id = store.create_experiment(experiment.name, experiment.definition);
  int checked = 0;
  int with_keyframes = 0;
  for (const workload::ExperimentPoint& point : experiment.points) {
    if (point.name != "baseline-bs16" && point.name != "mitigated")
      continue;
    SCOPED_TRACE(point.name);
    const workload::PointResult result = workload::run_point(point, true);
    const RunId run = store_simulated_run(store, id, point, result);
    const MemoryStatsAt state = memory_stats_at(store, run, store.run(run).event_count);
    EXPECT_TRUE(state.caveats.empty()) << state.caveats.front();
    EXPECT_EQ(alloc::memory_summary(state.stats, 0, false),
              alloc::memory_summary(result.stats, 0, false));
    EXPECT_EQ(state.stats, result.stats);
    ++checked;
    // The model makes a simulated run's trace, so its keyframes hold the trace's blocks and a
    // cursor's stats from the one before it are those of the replay from event 0.
    const std::uint64_t count = store.run(run).event_count;
    if (run_has_stats_keyframes(count)) {
      EXPECT_TRUE(store.run(run).summary.at("stats_keyframes").contains("count"))
          << store.run(run).summary.at("stats_keyframes").dump();
      const MemoryStatsAt fast = memory_stats_at(store, run, count * 2 / 3);
      EXPECT_GT(fast.replayed_from, 0u);
      EXPECT_EQ(fast.stats,
                memory_stats_at(store, run, count * 2 / 3, StatsStart::first_event).stats);
      ++with_keyframes;
    }
  }
  EXPECT_EQ(checked, 2);
  EXPECT_GT(with_keyframes, 0);
}

TEST(StatsAt, ACutInsideAnAllocatorCallMovesToItsEnd) {
  RunStore store(":memory:");
  const RunId run = import_fixture(store, "gpt_fixedlen_default");
  const auto events = store.events(run, 0, 2);
  ASSERT_EQ(events[0].action, TraceAction::segment_alloc);  // the first malloc's cudaMalloc
  ASSERT_EQ(events[1].action, TraceAction::alloc);
  EXPECT_EQ(memory_stats_at(store, run, 1).event_index, 2u);
  EXPECT_EQ(memory_stats_at(store, run, 2).event_index, 2u);
}

TEST(StatsAt, RecordedOomWithoutKnownLimitSaysSo) {
  RunStore store(":memory:");
  const RunId run =
      import_snapshot(store, snapshot::read_snapshot(fixture("gpt_oom_cap", ".pickle.gz")),
                      test::import_options("gpt_oom_cap"))
          .run;
  const MemoryStatsAt state = memory_stats_at(store, run, store.run(run).event_count);
  ASSERT_FALSE(state.caveats.empty());
  EXPECT_NE(state.caveats.front().find("device limit that was not recorded"), std::string::npos);
}

TEST(StatsAt, ClampsToTheRunAndStartsEmpty) {
  RunStore store(":memory:");
  const RunId run = import_fixture(store, "random_default");
  const MemoryStatsAt empty = memory_stats_at(store, run, 0);
  EXPECT_EQ(empty.stats.reserved_bytes[alloc::StatType::aggregate].current, 0);
  EXPECT_EQ(empty.stats.num_device_alloc, 0);
  const MemoryStatsAt past = memory_stats_at(store, run, 1u << 30);
  EXPECT_EQ(past.event_index, store.run(run).event_count);
}

// A front-end whose cursor or run changed stops the replay: a cancelled token throws Cancelled
// instead of replaying the run from event 0 to its end.
TEST(StatsAt, ACancelledReplayStops) {
  RunStore store(":memory:");
  const RunId run = import_fixture(store, "random_default");
  const CancelToken cancel = CancelToken::make();
  cancel.cancel();
  EXPECT_THROW(
      memory_stats_at(store, run, store.run(run).event_count, StatsStart::first_event, cancel),
      Cancelled);
  EXPECT_EQ(
      memory_stats_at(store, run, 100, StatsStart::first_event, CancelToken::make()).event_index,
      memory_stats_at(store, run, 100).event_index);
}

TEST(StatsAt, UnparsableConfigNamesTheRun) {
  RunStore store(":memory:");
  RunRecord record;
  record.name = "broken";
  record.alloc_conf = "max_split_size_mb:banana";
  const RunId run = store.begin_run(record);
  store.finish_run(run, RunStatus::ok, nlohmann::json::object());
  try {
    memory_stats_at(store, run, 0);
    FAIL() << "expected an InputError";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("run " + std::to_string(run.value)),
              std::string::npos);
    EXPECT_NE(std::string(error.what()).find("banana"), std::string::npos);
  }
}

}  // namespace
}  // namespace fragscope::storage
