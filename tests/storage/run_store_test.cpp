#include "storage/db/run_store.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "fragscope/version.h"
#include "storage/db/level_pyramid.h"
#include "storage/db/schema.h"
#include "storage_test_util.h"

namespace fragscope::storage {
namespace {

using test::synthetic_trace;

RunRecord simulated_run(std::string name) {
  RunRecord record;
  record.name = std::move(name);
  record.source = RunSource::simulated;
  record.alloc_conf = "expandable_segments:True";
  record.capacity = 80ull << 30;
  record.device_name = "simulated H200";
  record.environment = Environment::current();
  return record;
}

RunId store_run(RunStore& store, std::span<const TraceEvent> events, std::string name = "run",
                std::size_t batch = 10000) {
  const RunId id = store.begin_run(simulated_run(std::move(name)));
  for (std::size_t i = 0; i < events.size(); i += batch)
    store.append_events(id, events.subspan(i, std::min(batch, events.size() - i)));
  store.finish_run(id, RunStatus::ok);
  return id;
}

// The brute-force segment map after `count` events.
SegmentMap replay(std::span<const TraceEvent> events, std::size_t count) {
  SegmentMap map;
  for (std::size_t i = 0; i < count; ++i)
    map.apply(events[i]);
  return map;
}

TEST(RunStore, RoundTripsEventsAcrossChunks) {
  RunStore store(":memory:");
  const auto events = synthetic_trace(3 * kEventsPerChunk + 123);
  const RunId id = store_run(store, events);
  EXPECT_EQ(store.run(id).event_count, events.size());
  EXPECT_EQ(store.events(id, 0, events.size()), events);
  // A window straddling a chunk boundary.
  const auto window = store.events(id, kEventsPerChunk - 5, kEventsPerChunk + 5);
  ASSERT_EQ(window.size(), 10u);
  EXPECT_EQ(window.front(), events[kEventsPerChunk - 5]);
  EXPECT_EQ(window.back(), events[kEventsPerChunk + 4]);
  EXPECT_TRUE(store.events(id, events.size(), events.size() + 10).empty());
}

TEST(RunStore, RunRecordRoundTrips) {
  RunStore store(":memory:");
  const ExperimentId experiment = store.create_experiment("sweep", {{"variants", 2}});
  RunRecord record = simulated_run("bs16");
  record.experiment = experiment;
  record.source = RunSource::torch;
  record.environment.torch_version = "2.11.0+cu130";
  record.environment.cuda_version = "13.0";
  record.environment.driver_version = "580.159";
  record.environment.gpu_name = "NVIDIA H200";
  record.environment.gpu_memory = 150109880320;
  const RunId id = store.begin_run(record);
  const auto events = synthetic_trace(100);
  store.append_events(id, events);
  const RunRecord stored =
      store.finish_run(id, RunStatus::oom, {{"memory_stats", {{"num_ooms", 1}}}}, 1.5);
  EXPECT_EQ(stored.id, id);
  EXPECT_EQ(stored.experiment, experiment);
  EXPECT_EQ(stored.name, "bs16");
  EXPECT_EQ(stored.source, RunSource::torch);
  EXPECT_EQ(stored.status, RunStatus::oom);
  EXPECT_EQ(stored.alloc_conf, "expandable_segments:True");
  EXPECT_EQ(stored.capacity, 80ull << 30);
  EXPECT_EQ(stored.environment, record.environment);
  EXPECT_EQ(stored.environment.fragscope_version, std::string(kVersion));
  EXPECT_DOUBLE_EQ(stored.wall_seconds, 1.5);
  EXPECT_EQ(stored.summary["memory_stats"]["num_ooms"], 1);
  EXPECT_EQ(stored.summary["events"], 100);
  EXPECT_FALSE(stored.created_at.empty());
  ASSERT_EQ(store.runs_of(experiment).size(), 1u);
  EXPECT_EQ(store.list_runs(), std::vector<RunRecord>{stored});
}

TEST(RunStore, PeaksAreTheMaximaOfTheSeries) {
  RunStore store(":memory:");
  const auto events = synthetic_trace(20000);
  const RunId id = store_run(store, events);
  const auto series = derive_series(events);
  SeriesPoint peak;
  for (const auto& point : series) {
    peak.allocated = std::max(peak.allocated, point.allocated);
    peak.reserved = std::max(peak.reserved, point.reserved);
    peak.active = std::max(peak.active, point.active);
    peak.requested = std::max(peak.requested, point.requested);
  }
  const auto summary = store.run(id).summary;
  EXPECT_EQ(summary["peaks"]["allocated"], peak.allocated);
  EXPECT_EQ(summary["peaks"]["reserved"], peak.reserved);
  EXPECT_EQ(summary["peaks"]["active"], peak.active);
  EXPECT_EQ(summary["peaks"]["requested"], peak.requested);
  EXPECT_EQ(store.series(id, 0, events.size()), series);
}

TEST(RunStore, StoresExactSeriesAndLabelsFromTheProducer) {
  RunStore store(":memory:");
  const auto events = synthetic_trace(kEventsPerChunk + 10);
  // The model knows rounded block sizes: allocated runs ahead of the request sizes.
  auto series = derive_series(events);
  std::vector<LabelId> labels(events.size());
  for (std::size_t i = 0; i < series.size(); ++i) {
    series[i].allocated += static_cast<std::int64_t>(i % 512);
    series[i].requested -= static_cast<std::int64_t>(i % 7);
    labels[i] = LabelId{static_cast<std::uint32_t>(i % 5)};
  }
  const RunId id = store.begin_run(simulated_run("labelled"));
  store.set_labels(
      id, std::vector<RequestLabel>{
              {}, {Category::parameter, "w", 0}, {Category::activation, "attn.softmax", 3}});
  // Half the events come without labels: those read back as 0.
  const std::size_t half = events.size() / 2;
  store.append_events(id, std::span(events).first(half),
                      {std::span(series).first(half), std::span(labels).first(half)});
  store.append_events(id, std::span(events).subspan(half), {std::span(series).subspan(half), {}});
  store.finish_run(id, RunStatus::ok);
  EXPECT_EQ(store.series(id, 0, events.size()), series);
  const auto stored_labels = store.labels_of_events(id, 0, events.size());
  ASSERT_EQ(stored_labels.size(), events.size());
  for (std::size_t i = 0; i < events.size(); ++i)
    ASSERT_EQ(stored_labels[i], i < half ? labels[i] : LabelId{}) << "event " << i;
  const auto table = store.labels(id);
  ASSERT_EQ(table.size(), 3u);
  EXPECT_EQ(table[2].label.category, Category::activation);
  EXPECT_EQ(table[2].label.op, "attn.softmax");
  EXPECT_EQ(table[2].label.layer, 3);
}

// Every row a run stores (event chunks, keyframes, timeline and category levels and chunks) as
// (table, key, blob) lines, in order.
std::vector<std::string> stored_rows(RunStore& store, RunId id) {
  std::vector<std::string> rows;
  for (const char* query :
       {"SELECT 'chunk', first_event, data FROM event_chunks WHERE run_id = ? ORDER BY 2",
        "SELECT 'keyframe', event_index, data FROM segment_keyframes WHERE run_id = ? ORDER BY 2",
        "SELECT 'timeline', level * 1000000 + first_bucket, data FROM timeline_levels "
        "WHERE run_id = ? ORDER BY 2",
        "SELECT 'categories', level * 1000000 + first_bucket, data FROM category_levels "
        "WHERE run_id = ? ORDER BY 2",
        "SELECT 'category chunk', first_event, data FROM category_chunks WHERE run_id = ? "
        "ORDER BY 2"}) {
    auto select = store.database().prepare(query);
    select.bind_int(1, id.value);
    while (select.step()) {
      const auto blob = select.column_blob(2);
      rows.push_back(select.column_text(0) + " " + std::to_string(select.column_int(1)) + " " +
                     std::string(blob.begin(), blob.end()));
    }
  }
  return rows;
}

// Ingest copies a batch into the part being filled a part's worth at a time: batches of any
// length, ending anywhere in a part or a chunk, store the same rows as one batch of the whole run,
// with series and labels from the producer and with series derived from the trace.
TEST(RunStore, BatchesOfAnyLengthStoreTheSameRows) {
  const auto events = synthetic_trace(2 * kEventsPerChunk + 4321, 31);
  auto series = derive_series(events);
  std::vector<LabelId> labels(events.size());
  for (std::size_t i = 0; i < events.size(); ++i) {
    series[i].active += static_cast<std::int64_t>(i % 97);
    labels[i] = LabelId{static_cast<std::uint32_t>(i % 3)};
  }
  const std::vector<RequestLabel> table = {
      {}, {Category::parameter, "w", 0}, {Category::activation, "a", 1}};
  for (const bool exact : {true, false}) {
    RunStore store(":memory:");
    std::vector<std::vector<std::string>> runs;
    for (const std::size_t batch :
         {events.size(), std::size_t{1} + kEventsPerChunk / 4, std::size_t{4999}, std::size_t{7}}) {
      const RunId id = store.begin_run(simulated_run("batches"));
      store.set_labels(id, table);
      for (std::size_t first = 0; first < events.size(); first += batch) {
        const std::size_t count = std::min(batch, events.size() - first);
        store.append_events(id, std::span(events).subspan(first, count),
                            exact ? EventColumns{std::span(series).subspan(first, count),
                                                 std::span(labels).subspan(first, count)}
                                  : EventColumns{});
      }
      store.finish_run(id, RunStatus::ok);
      runs.push_back(stored_rows(store, id));
      ASSERT_TRUE(runs.back() == runs.front())
          << "batches of " << batch << (exact ? "" : ", derived");
    }
    EXPECT_GT(runs.front().size(), 10u);
  }
}

// Level rows that fill go to the worker with the next part, which encodes them. A run whose rows
// fill in its last batch, which ends a part, leaves no part to take them: the commit writes them.
// (The run has a label table, so that it stores memory by category.)
TEST(RunStore, LevelRowsThatFillAtTheLastPartAreStored) {
  constexpr std::size_t kRowEvents = kBucketsPerRow * kLevel0Events;  // level 0's first row
  static_assert(kRowEvents % (kEventsPerChunk / 4) == 0, "the row ends where a part does");
  const auto events = synthetic_trace(kRowEvents, 32);
  for (const std::size_t batch : {kRowEvents, std::size_t{4999}}) {
    RunStore store(":memory:");
    const RunId id = store.begin_run(simulated_run("rows"));
    store.set_labels(id, std::vector<RequestLabel>{{}, {Category::parameter, "w", 0}});
    for (std::size_t first = 0; first < events.size(); first += batch)
      store.append_events(id,
                          std::span(events).subspan(first, std::min(batch, events.size() - first)));
    store.finish_run(id, RunStatus::ok);
    for (const char* table : {"timeline_levels", "category_levels"}) {
      EXPECT_EQ(store.database().query_int(std::string("SELECT sum(bucket_count) FROM ") + table +
                                           " WHERE level = 0"),
                static_cast<std::int64_t>(kBucketsPerRow))
          << table << ", batches of " << batch;
    }
  }
}

TEST(RunStore, MismatchedColumnsAreRefused) {
  RunStore store(":memory:");
  const auto events = synthetic_trace(10);
  const RunId id = store.begin_run(simulated_run("x"));
  std::vector<SeriesPoint> series(3);
  EXPECT_THROW(store.append_events(id, events, {series, {}}), DatabaseError);
}

TEST(RunStore, FrameStacksAreInterned) {
  RunStore store(":memory:");
  const RunId id = store.begin_run(simulated_run("stacks"));
  const std::vector<std::vector<Frame>> stacks = {
      {{"model.py", 10, "forward"}, {"train.py", 3, "main"}},
      {{"model.py", 10, "forward"}, {"model.py", 20, "attention"}, {"train.py", 3, "main"}}};
  store.set_frame_stacks(id, stacks);
  store.finish_run(id, RunStatus::ok);
  EXPECT_EQ(store.frame_stack(id, FrameStackId{1}), stacks[0]);
  EXPECT_EQ(store.frame_stack(id, FrameStackId{2}), stacks[1]);
  EXPECT_TRUE(store.frame_stack(id, FrameStackId{0}).empty());
  EXPECT_EQ(store.database().query_int("SELECT count(*) FROM frames"), 3);
  EXPECT_EQ(store.database().query_int("SELECT count(*) FROM strings"), 5);
}

TEST(RunStore, SegmentStateMatchesReplayAtAnyEvent) {
  RunStore store(":memory:");
  const auto events = synthetic_trace(2 * kEventsPerChunk + 777, 5);
  const RunId id = store_run(store, events);
  for (const std::size_t at : {std::size_t{0}, std::size_t{1}, std::size_t{4321}, kEventsPerChunk,
                               kEventsPerChunk + 1, 2 * kEventsPerChunk + 500, events.size()}) {
    const SegmentStateAt state = store.segment_state(id, at);
    EXPECT_EQ(state.event_index, at);
    EXPECT_EQ(state.state, replay(events, at)) << "at event " << at;
  }
  EXPECT_EQ(store.segment_state(id, events.size() + 100).event_index, events.size());
}

TEST(RunStore, InitialSegmentStateIsKept) {
  RunStore store(":memory:");
  SegmentMap initial;
  initial.add_segment({0x1000, 2 << 20, StreamId{}, false});
  initial.add_block({0x1000, 4096, StreamId{}, BlockState::active_allocated, FrameStackId{}});
  const RunId id =
      store.begin_run(simulated_run("truncated"), initial, {4096, 2 << 20, 4096, 4096});
  const std::vector<TraceEvent> events = {
      {TraceAction::free_requested, 0x1000, 4096, StreamId{}, 5, FrameStackId{}},
      {TraceAction::free_completed, 0x1000, 4096, StreamId{}, 6, FrameStackId{}}};
  store.append_events(id, events);
  store.finish_run(id, RunStatus::ok);
  EXPECT_EQ(store.segment_state(id, 0).state, initial);
  const auto end = store.segment_state(id, 2).state;
  EXPECT_TRUE(end.blocks().empty());
  EXPECT_EQ(end.segments().size(), 1u);
  EXPECT_EQ(store.series(id, 0, 2).back(), (SeriesPoint{0, 2 << 20, 0}));
}

TEST(RunStore, EventAtTimeFindsTheFirstEventAtOrAfter) {
  RunStore store(":memory:");
  const auto events = synthetic_trace(kEventsPerChunk + 5000, 3);
  const RunId id = store_run(store, events);
  for (const std::size_t probe : {std::size_t{0}, std::size_t{100}, kEventsPerChunk + 17}) {
    const std::int64_t time = events[probe].time_us;
    const auto expected = static_cast<std::uint64_t>(
        std::find_if(events.begin(), events.end(),
                     [&](const TraceEvent& e) { return e.time_us >= time; }) -
        events.begin());
    EXPECT_EQ(store.event_at_time(id, time), expected);
  }
  EXPECT_EQ(store.event_at_time(id, events.back().time_us + 1), events.size());
}

TEST(RunStore, CancelledIngestLeavesNothing) {
  RunStore store(":memory:");
  const RunId kept = store_run(store, synthetic_trace(500), "kept");
  const RunId id = store.begin_run(simulated_run("cancelled"));
  store.append_events(id, synthetic_trace(kEventsPerChunk * 2));
  store.cancel_run(id);
  EXPECT_EQ(store.run_count(), 1);
  EXPECT_EQ(store.list_runs().front().id, kept);
  EXPECT_EQ(store.database().query_int("SELECT count(*) FROM event_chunks WHERE run_id != " +
                                       std::to_string(kept.value)),
            0);
  EXPECT_THROW(store.append_events(id, synthetic_trace(1)), DatabaseError);
}

TEST(RunStore, OneIngestAtATime) {
  RunStore store(":memory:");
  store.begin_run(simulated_run("a"));
  EXPECT_THROW(store.begin_run(simulated_run("b")), DatabaseError);
}

TEST(RunStore, DeletingARunRemovesEveryRowOfIt) {
  RunStore store(":memory:");
  const RunId keep = store_run(store, synthetic_trace(1000), "keep");
  const RunId id = store.begin_run(simulated_run("doomed"));
  store.set_labels(id, std::vector<RequestLabel>{{}, {Category::gradient, "g", 1}});
  store.append_events(id, synthetic_trace(kEventsPerChunk + 99));
  store.set_frame_stacks(id, std::vector<std::vector<Frame>>{{{"a.py", 1, "f"}}});
  store.add_oom_report(id, 5, {{"requested", 1024}});
  store.finish_run(id, RunStatus::oom);
  store.set_twin(keep, id);
  const RunId pair[] = {keep, id};
  store.save_comparison("a vs b", pair, {{"delta", 1}});

  store.delete_run(id);
  Database& db = store.database();
  for (const char* table :
       {"event_chunks", "strings", "frames", "frame_stacks", "timeline_levels", "segment_keyframes",
        "oom_reports", "run_labels", "comparison_runs", "category_chunks", "category_levels"}) {
    EXPECT_EQ(db.query_int(std::string("SELECT count(*) FROM ") + table +
                           " WHERE run_id = " + std::to_string(id.value)),
              0)
        << table;
  }
  EXPECT_FALSE(store.run(keep).twin_run.has_value());  // the link is cleared, the run stays
  EXPECT_EQ(store.events(keep, 0, 1000).size(), 1000u);
  EXPECT_THROW(store.delete_run(id), DatabaseError);
  EXPECT_THROW(store.run(id), DatabaseError);
}

TEST(RunStore, DeletingAnExperimentDeletesItsRuns) {
  RunStore store(":memory:");
  const ExperimentId experiment = store.create_experiment("e", {});
  RunRecord record = simulated_run("member");
  record.experiment = experiment;
  const RunId id = store.begin_run(record);
  store.append_events(id, synthetic_trace(10));
  store.finish_run(id, RunStatus::ok);
  store.delete_experiment(experiment);
  EXPECT_EQ(store.run_count(), 0);
  EXPECT_EQ(store.database().query_int("SELECT count(*) FROM event_chunks"), 0);
}

TEST(RunStore, RenameTwinSummaryAndUnknownIds) {
  RunStore store(":memory:");
  const RunId real = store_run(store, synthetic_trace(10), "real");
  const RunId twin = store_run(store, synthetic_trace(10), "twin");
  store.rename_run(real, "real (H200)");
  store.set_twin(real, twin);
  store.update_summary(twin, {{"note", "hi"}});
  EXPECT_EQ(store.run(real).name, "real (H200)");
  EXPECT_EQ(store.run(real).twin_run, twin);
  EXPECT_EQ(store.run(twin).summary["note"], "hi");
  EXPECT_THROW(store.rename_run(RunId{99}, "x"), DatabaseError);
  EXPECT_THROW(store.set_twin(real, RunId{99}), DatabaseError);
  RunRecord bad = simulated_run("orphan");
  bad.experiment = ExperimentId{42};
  EXPECT_THROW(store.begin_run(bad), DatabaseError);
  EXPECT_FALSE(store.ingesting());
}

TEST(RunStore, OomReportsComparisonsAndReports) {
  RunStore store(":memory:");
  const RunId a = store_run(store, synthetic_trace(10), "a");
  const RunId b = store_run(store, synthetic_trace(10), "b");
  store.add_oom_report(a, 7, {{"message", "CUDA out of memory"}});
  const auto ooms = store.oom_reports(a);
  ASSERT_EQ(ooms.size(), 1u);
  EXPECT_EQ(ooms[0].event_index, 7u);
  EXPECT_EQ(ooms[0].report["message"], "CUDA out of memory");

  const RunId pair[] = {b, a};
  const ComparisonId comparison = store.save_comparison("b vs a", pair, {{"peak_delta", -5}});
  const auto comparisons = store.list_comparisons();
  ASSERT_EQ(comparisons.size(), 1u);
  EXPECT_EQ(comparisons[0].runs, (std::vector<RunId>{b, a}));
  EXPECT_EQ(comparisons[0].result["peak_delta"], -5);

  const ReportId report = store.save_report(comparison, "Report", "html", "<h1>x</h1>");
  EXPECT_EQ(store.report(report).content, "<h1>x</h1>");
  EXPECT_EQ(store.report(report).comparison, comparison);
  EXPECT_THROW(store.report(ReportId{99}), DatabaseError);
  const RunId missing[] = {RunId{99}};
  EXPECT_THROW(store.save_comparison("bad", missing, {}), DatabaseError);
  EXPECT_EQ(store.list_comparisons().size(), 1u);
}

TEST(RunStore, ExperimentsRoundTrip) {
  RunStore store(":memory:");
  const ExperimentId id = store.create_experiment("case study", {{"model", "1.2b"}});
  const auto record = store.experiment(id);
  EXPECT_EQ(record.name, "case study");
  EXPECT_EQ(record.definition["model"], "1.2b");
  EXPECT_EQ(store.list_experiments().size(), 1u);
  EXPECT_THROW(store.experiment(ExperimentId{5}), DatabaseError);
}

}  // namespace
}  // namespace fragscope::storage

namespace fragscope::storage {
namespace {

TEST(RunStore, CategoryTimelineStacksLabelledMemory) {
  RunStore store(":memory:");
  const RunId id = store.begin_run(RunRecord{});
  store.set_labels(id, std::vector<RequestLabel>{
                           {}, {Category::parameter, "w", 0}, {Category::activation, "act", 0}});
  const StreamId s{};
  const std::vector<TraceEvent> events = {
      {TraceAction::segment_alloc, 0x1000, 1 << 20, s, 1, FrameStackId{}},
      {TraceAction::alloc, 0x1000, 100, s, 2, FrameStackId{}},  // parameter
      {TraceAction::alloc, 0x2000, 300, s, 3, FrameStackId{}},  // activation
      {TraceAction::alloc, 0x3000, 50, s, 4, FrameStackId{}},   // unlabelled
      {TraceAction::free_requested, 0x2000, 300, s, 5, FrameStackId{}},
      {TraceAction::free_completed, 0x2000, 300, s, 5, FrameStackId{}},
      {TraceAction::alloc, 0x4000, 20, s, 6, FrameStackId{}},  // activation
  };
  const std::vector<LabelId> labels = {LabelId{}, LabelId{1}, LabelId{2}, LabelId{},
                                       LabelId{}, LabelId{},  LabelId{2}};
  store.append_events(id, events, {{}, labels});
  store.finish_run(id, RunStatus::ok);

  const auto whole = store.category_timeline(id, 0, events.size(), 1);
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].peak_event, 3u);  // 100 + 300 + 50 live
  EXPECT_EQ(whole[0].bytes[static_cast<std::size_t>(Category::parameter)], 100);
  EXPECT_EQ(whole[0].bytes[static_cast<std::size_t>(Category::activation)], 300);
  EXPECT_EQ(whole[0].bytes[static_cast<std::size_t>(Category::unknown)], 50);
  EXPECT_EQ(whole[0].total(), 450);

  // The last event alone: a window late in the run still counts what was allocated before it.
  const auto tail = store.category_timeline(id, 6, 7, 10);
  ASSERT_EQ(tail.size(), 1u);
  EXPECT_EQ(tail[0].first_event, 6u);
  EXPECT_EQ(tail[0].bytes[static_cast<std::size_t>(Category::activation)], 20);
  EXPECT_EQ(tail[0].total(), 170);
}

// A finished run of unlabelled events a little over one event chunk long; with a label table,
// its categories are stored at ingest, else replayed.
RunId store_synthetic_run(RunStore& store, const std::vector<TraceEvent>& events, bool table) {
  const RunId id = store.begin_run(RunRecord{});
  if (table)
    store.set_labels(id, std::vector<RequestLabel>{{}, {Category::gradient, "g", 1}});
  store.append_events(id, events);
  store.finish_run(id, RunStatus::ok);
  return id;
}

TEST(RunStore, CategoryTimelineTotalsMatchTheActiveSeries) {
  RunStore store(":memory:");
  const auto events = test::synthetic_trace(kEventsPerChunk + 3000, 23);
  const auto series = derive_series(events);
  for (const bool table : {true, false}) {
    SCOPED_TRACE(table ? "stored" : "replayed");
    const RunId id = store_synthetic_run(store, events, table);
    const auto buckets = store.category_timeline(id, 1000, events.size(), 50);
    ASSERT_EQ(buckets.size(), 50u);
    for (const auto& bucket : buckets) {
      std::int64_t peak = 0;
      for (std::uint64_t i = bucket.first_event; i < bucket.end_event; ++i)
        peak = std::max(peak, series[i].active);
      EXPECT_EQ(bucket.total(), peak);
      EXPECT_EQ(bucket.bytes[0], bucket.total()) << "unlabelled events are all 'unknown'";
    }
    EXPECT_EQ(buckets.front().first_event, 1000u);
    EXPECT_EQ(buckets.back().end_event, events.size());
  }
}

// A superseded GUI query stops at the next event chunk instead of reading the run to its end.
TEST(RunStore, CategoryTimelineStopsWhenCancelled) {
  RunStore store(":memory:");
  const auto events = test::synthetic_trace(kEventsPerChunk + 3000, 23);
  const RunId id = store_synthetic_run(store, events, false);
  const CancelToken cancel = CancelToken::make();
  EXPECT_EQ(store.category_timeline(id, 0, events.size(), 10, cancel).size(), 10u);
  cancel.cancel();
  EXPECT_THROW(store.category_timeline(id, 0, events.size(), 10, cancel), Cancelled);
}

}  // namespace
}  // namespace fragscope::storage
