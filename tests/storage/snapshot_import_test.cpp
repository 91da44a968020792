// Importing the real PyTorch 2.11 recordings: the stored run must agree with what PyTorch itself
// reported for the same process (memory_stats() in NAME.stats.json, the final segments in the
// snapshot).
#include "storage/db/snapshot_import.h"
#include "storage/db/stats_at.h"
#include "storage/db/stats_keyframes.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <fstream>

#include "engine/snapshot/timeline.h"
#include "storage_test_util.h"

namespace fragscope::storage {
namespace {

using test::fixture;
using test::import_options;

nlohmann::json memory_stats(const std::string& name) {
  std::ifstream in(fixture(name, ".stats.json"));
  return nlohmann::json::parse(in)["memory_stats"];
}

class ImportFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(ImportFixture, AgreesWithPyTorchsOwnNumbers) {
  const std::string name = GetParam();
  const auto snapshot = snapshot::read_snapshot(fixture(name, ".pickle.gz"));
  const auto stats = memory_stats(name);
  RunStore store(":memory:");
  const ImportResult result = import_snapshot(store, snapshot, import_options(name));
  const RunRecord run = store.run(result.run);

  EXPECT_EQ(result.events, snapshot.device_traces[0].size());
  EXPECT_EQ(run.event_count, result.events);
  EXPECT_FALSE(result.truncated) << "recording started with the allocator";
  EXPECT_EQ(result.ooms, static_cast<std::size_t>(stats["num_ooms"].get<std::int64_t>()));
  EXPECT_EQ(run.status, result.ooms > 0 ? RunStatus::oom : RunStatus::ok);
  EXPECT_EQ(run.source, RunSource::imported);

  // Every series is PyTorch's own counter, peak and final value.
  EXPECT_EQ(run.summary["series"]["source"], "layout") << run.summary["series"].dump();
  EXPECT_EQ(run.summary["series"]["matches_final_segments"], true);
  EXPECT_EQ(run.summary["peaks"]["reserved"], stats["reserved_bytes.all.peak"]);
  EXPECT_EQ(run.summary["final"]["reserved"], stats["reserved_bytes.all.current"]);
  EXPECT_EQ(run.summary["peaks"]["allocated"], stats["allocated_bytes.all.peak"]);
  EXPECT_EQ(run.summary["final"]["allocated"], stats["allocated_bytes.all.current"]);
  EXPECT_EQ(run.summary["peaks"]["active"], stats["active_bytes.all.peak"]);
  EXPECT_EQ(run.summary["final"]["active"], stats["active_bytes.all.current"]);
  EXPECT_EQ(run.summary["peaks"]["requested"], stats["requested_bytes.all.peak"]);
  EXPECT_EQ(run.summary["final"]["requested"], stats["requested_bytes.all.current"]);

  // The timeline keeps the peak at any resolution.
  for (const std::size_t buckets : {std::size_t{1}, std::size_t{37}, std::size_t{2000}}) {
    std::int64_t peak = 0;
    for (const auto& bucket : store.timeline(result.run, buckets))
      peak = std::max(peak, bucket.max.reserved);
    EXPECT_EQ(peak, stats["reserved_bytes.all.peak"].get<std::int64_t>()) << buckets;
  }

  // Replaying the stored events ends in the segments PyTorch dumped.
  const SegmentMap expected = segment_map_of(snapshot, 0);
  const SegmentStateAt end = store.segment_state(result.run, run.event_count);
  EXPECT_EQ(end.state.segments(), expected.segments());
  EXPECT_EQ(end.state.blocks(), expected.blocks());
  EXPECT_EQ(end.state.unmatched_events(), 0u);

  // The events round-trip exactly, stacks included.
  EXPECT_EQ(store.events(result.run, 0, run.event_count), snapshot.device_traces[0]);
  for (const auto& event : snapshot.device_traces[0]) {
    if (event.frames.value != 0) {
      const auto stored = store.frame_stack(result.run, event.frames);
      const auto original = snapshot.frames.stack_frames(event.frames);
      ASSERT_EQ(stored.size(), original.size());
      for (std::size_t i = 0; i < stored.size(); ++i) {
        EXPECT_EQ(stored[i].filename, original[i].filename);
        EXPECT_EQ(stored[i].line, original[i].line);
        EXPECT_EQ(stored[i].name, original[i].name);
      }
      break;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Torch211H200, ImportFixture, ::testing::ValuesIn(test::kTorchRecordings));

TEST(Import, OomReportsRecordTheFailingRequest) {
  const auto snapshot = snapshot::read_snapshot(fixture("gpt_oom_cap", ".pickle.gz"));
  RunStore store(":memory:");
  const ImportResult result = import_snapshot(store, snapshot, import_options("gpt_oom_cap"));
  const auto reports = store.oom_reports(result.run);
  ASSERT_EQ(reports.size(), 1u);
  const TraceEvent& oom = snapshot.device_traces[0][reports[0].event_index];
  EXPECT_EQ(oom.action, TraceAction::oom);
  EXPECT_EQ(reports[0].report["requested"], oom.size);
  EXPECT_EQ(reports[0].report["device_free"], oom.addr);
}

TEST(Import, UnknownDeviceIsAnInputErrorAndWritesNothing) {
  const auto snapshot = snapshot::read_snapshot(fixture("streams_default", ".pickle.gz"));
  RunStore store(":memory:");
  EXPECT_THROW(import_snapshot(store, snapshot, import_options("streams_default", 3)), InputError);
  EXPECT_EQ(store.run_count(), 0);
  EXPECT_FALSE(store.ingesting());
}

TEST(Import, ATraceThatStartsLateIsMarkedTruncated) {
  auto snapshot = snapshot::read_snapshot(fixture("streams_default", ".pickle.gz"));
  auto& trace = snapshot.device_traces[0];
  const std::vector<TraceEvent> full = trace;
  trace.erase(trace.begin(), trace.begin() + 5000);  // as if the ring buffer had overflowed
  RunStore store(":memory:");
  const ImportResult result = import_snapshot(store, snapshot, import_options("late"));
  EXPECT_TRUE(result.truncated);
  // The reconstructed start is the real state after the 5000 dropped events.
  SegmentMap replayed;
  for (std::size_t i = 0; i < 5000; ++i)
    replayed.apply(full[i]);
  const SegmentMap start = store.segment_state(result.run, 0).state;
  EXPECT_EQ(start.segments(), replayed.segments());
  EXPECT_EQ(start.blocks().size(), replayed.blocks().size());
  // And the series continue from the right level: the final reserved equals PyTorch's.
  EXPECT_EQ(store.run(result.run).summary["final"]["reserved"],
            memory_stats("streams_default")["reserved_bytes.all.current"]);
}

// Issue #18: an inconsistent snapshot (here an alloc twice at one address) is stored with the
// trace's own series, and the import says why instead of passing silently.
TEST(Import, AnInconsistentSnapshotIsStoredWithAWarning) {
  auto snapshot = snapshot::read_snapshot(fixture("streams_default", ".pickle.gz"));
  auto& trace = snapshot.device_traces[0];
  const auto first_alloc = std::find_if(trace.begin(), trace.end(), [](const TraceEvent& e) {
    return e.action == TraceAction::alloc;
  });
  ASSERT_NE(first_alloc, trace.end());
  trace.insert(first_alloc + 1, *first_alloc);
  RunStore store(":memory:");
  const ImportResult result = import_snapshot(store, snapshot, import_options("twice"));
  ASSERT_FALSE(result.warnings.empty());
  EXPECT_NE(result.warnings[0].find("inconsistent"), std::string::npos) << result.warnings[0];
  const auto warnings = store.run(result.run).summary["warnings"];
  ASSERT_FALSE(warnings.empty());
  EXPECT_EQ(warnings.back(), result.warnings.back());
  // The run begun with the layout's series was rolled back and stored again: one run, whole.
  EXPECT_EQ(store.run_count(), 1);
  EXPECT_EQ(store.run(result.run).summary["series"]["source"], "trace");
  EXPECT_EQ(store.run(result.run).event_count, trace.size());
  EXPECT_EQ(store.series(result.run, 0, trace.size()), derive_series(trace));
}

// The same snapshot with its traces packed (read_snapshot_spooled's form).
snapshot::Snapshot spooled(snapshot::Snapshot plain) {
  plain.device_spools.resize(plain.device_traces.size());
  for (std::size_t d = 0; d < plain.device_traces.size(); ++d) {
    for (const TraceEvent& event : plain.device_traces[d])
      plain.device_spools[d].push_back(event);
    plain.device_traces[d].clear();
  }
  return plain;
}

// Everything a run holds that an import writes, but the time it was written.
nlohmann::json stored_run(RunStore& store, RunId run) {
  RunRecord record = store.run(run);
  const std::uint64_t count = record.event_count;
  nlohmann::json events = nlohmann::json::array();
  for (const TraceEvent& e : store.events(run, 0, count))
    events.push_back(
        {static_cast<int>(e.action), e.addr, e.size, e.stream.value, e.time_us, e.frames.value});
  nlohmann::json series = nlohmann::json::array();
  for (const SeriesPoint& p : store.series(run, 0, count))
    series.push_back({p.allocated, p.reserved, p.active, p.requested});
  nlohmann::json ooms = nlohmann::json::array();
  for (const OomReport& oom : store.oom_reports(run))
    ooms.push_back({oom.id, oom.event_index, oom.report});
  nlohmann::json keyframes = nlohmann::json::array();
  auto query = store.database().prepare(
      "SELECT event_index, data FROM stats_keyframes WHERE run_id = ? ORDER BY event_index");
  query.bind_int(1, run.value);
  while (query.step()) {
    const auto blob = query.column_blob(1);
    keyframes.push_back({query.column_int(0), std::vector<std::uint8_t>(blob.begin(), blob.end())});
  }
  nlohmann::json states = nlohmann::json::array();
  for (std::uint64_t at = 0; at <= count; at += std::max<std::uint64_t>(count / 7, 1))
    states.push_back(store.segment_state(run, at).state.serialize());
  record.created_at.clear();
  return {{"summary", record.summary},
          {"name", record.name},
          {"status", to_string(record.status)},
          {"events", events},
          {"series", series},
          {"ooms", ooms},
          {"keyframes", keyframes},
          {"states", states},
          {"stacks", store.frame_stacks(run).size()},
          {"timeline", store.timeline(run, 997).size()}};
}

// Issue #19: the import walks a spooled trace a slice at a time and stores exactly what it
// stored from the whole trace: a run with OOMs, one that starts late (its start state rebuilt
// backward over the spool) and an inconsistent one (its layout fails after the run was begun).
TEST(Import, ASpooledSnapshotStoresTheSameRun) {
  std::vector<std::pair<std::string, snapshot::Snapshot>> cases;
  cases.emplace_back("gpt_oom_cap", snapshot::read_snapshot(fixture("gpt_oom_cap", ".pickle.gz")));
  auto late = snapshot::read_snapshot(fixture("streams_default", ".pickle.gz"));
  late.device_traces[0].erase(late.device_traces[0].begin(), late.device_traces[0].begin() + 5000);
  cases.emplace_back("late", late);
  auto twice = late;
  auto& trace = twice.device_traces[0];
  trace.insert(
      trace.begin() + static_cast<std::ptrdiff_t>(trace.size() / 2),
      *std::find_if(trace.begin() + static_cast<std::ptrdiff_t>(trace.size() / 2), trace.end(),
                    [](const TraceEvent& e) { return e.action == TraceAction::alloc; }));
  cases.emplace_back("twice", twice);
  for (const auto& [name, plain] : cases) {
    SCOPED_TRACE(name);
    RunStore a(":memory:");
    RunStore b(":memory:");
    const ImportResult from_plain = import_snapshot(a, plain, import_options(name));
    const ImportResult from_spool = import_snapshot(b, spooled(plain), import_options(name));
    EXPECT_EQ(from_spool.events, from_plain.events);
    EXPECT_EQ(from_spool.truncated, from_plain.truncated);
    EXPECT_EQ(from_spool.warnings, from_plain.warnings);
    EXPECT_EQ(stored_run(b, from_spool.run), stored_run(a, from_plain.run));
  }
}

// A trace without segments before it is walked from an empty start and stored as it goes, without
// the walks back through every entry. One that contradicts that start half way (an alloc twice)
// begins again from the rebuilt start: the slices stored before are rolled back and the run is
// stored once, as the rebuilt start stores it (here with the trace's own series: its layout fails).
TEST(Import, AnEmptyStartContradictedHalfWayIsStoredOnce) {
  auto twice = snapshot::read_snapshot(fixture("gpt_oom_cap", ".pickle.gz"));
  auto& trace = twice.device_traces[0];
  const auto half = trace.begin() + static_cast<std::ptrdiff_t>(trace.size() / 2);
  ASSERT_GT(trace.size() / 2, 2 * snapshot::kTimelineSlice);  // slices were stored before
  trace.insert(half, *std::find_if(half, trace.end(), [](const TraceEvent& e) {
                 return e.action == TraceAction::alloc;
               }));
  for (const bool spool : {false, true}) {
    SCOPED_TRACE(spool ? "spooled" : "plain");
    RunStore store(":memory:");
    const ImportResult result =
        import_snapshot(store, spool ? spooled(twice) : twice, import_options("twice"));
    EXPECT_FALSE(result.truncated);
    EXPECT_EQ(store.run_count(), 1);
    const RunRecord record = store.run(result.run);
    EXPECT_EQ(record.summary["series"]["source"], "trace");
    EXPECT_EQ(record.event_count, trace.size());
    EXPECT_EQ(store.events(result.run, 0, trace.size()), trace);
    EXPECT_EQ(store.series(result.run, 0, trace.size()), derive_series(trace));
    EXPECT_TRUE(store.segment_state(result.run, 0).state.segments().empty());
    // The keyframe chain begun with the walk from the empty start was stopped with it: the one
    // stored was built after the commit, and says what a chain built now says.
    EXPECT_FALSE(result.keyframes_built_in_advance);
    const nlohmann::json outcome = record.summary.at("stats_keyframes");
    store_stats_keyframes(store, result.run);
    EXPECT_EQ(store.run(result.run).summary.at("stats_keyframes"), outcome);
  }
}

// The post-mortem's loader (gui/post_mortem_page) reads the recorded config of any release and
// lays the start state out with its rules: random_split64_round4's roundup table decides block
// sizes, so the default rules the page used before could not lay its trace out.
TEST(Import, RunTraceCarriesTheRecordedConfigAndItsRules) {
  const auto snapshot = snapshot::read_snapshot(fixture("random_split64_round4", ".pickle.gz"));
  RunStore store(":memory:");
  const ImportResult result = import_snapshot(store, snapshot, import_options("round4"));
  const RunTrace trace = load_run_trace(store, result.run);
  EXPECT_TRUE(trace.recorded_config);
  EXPECT_EQ(trace.config.max_split_size, 64 * kMiB);
  EXPECT_EQ(trace.config.roundup_power2_divisions[0], 4u);
  EXPECT_EQ(trace.initial.rules(), snapshot::LayoutRules::from_config(trace.config));
  EXPECT_EQ(trace.events.size(), snapshot.device_traces[0].size());
  snapshot::SegmentState state = trace.initial;
  for (const TraceEvent& e : trace.events)
    state.apply(e);  // throws on the first event the rules cannot lay out
  Bytes final_reserved = 0;
  for (const auto& segment : snapshot.segments)
    final_reserved += segment.total_size;
  EXPECT_EQ(state.sample().reserved, final_reserved);
}

}  // namespace
}  // namespace fragscope::storage

namespace fragscope::storage {
namespace {

// NAME.stats.json beside a snapshot goes in with the run, in the same transaction.
TEST(CompanionStats, AreStoredWithTheRun) {
  const std::string path = fixture("gpt_oom_cap", ".pickle.gz");
  EXPECT_EQ(run_name_for(path), "gpt_oom_cap");
  EXPECT_EQ(run_name_for("/x/A.PKL.GZ"), "A");
  const auto stats = read_companion_stats(path);
  ASSERT_TRUE(stats.has_value());
  RunStore store(":memory:");
  ImportOptions options = test::import_options("gpt_oom_cap");
  options.recorded_stats = stats;
  const RunRecord run =
      store.run(import_snapshot(store, snapshot::read_snapshot(path), options).run);
  EXPECT_EQ(run.summary.at("allowed_bytes").get<Bytes>(), (*stats)["params"]["cap_gib"].get<Bytes>()
                                                              << 30);
  EXPECT_EQ(run.summary.at("memory_stats"), (*stats)["memory_stats"]);
  EXPECT_EQ(run.summary.at("recorded_outcome"), (*stats)["outcome"]);
  EXPECT_EQ(run.environment.gpu_memory, (*stats)["total_memory"].get<Bytes>());
}

// Storage takes the cap under its one name: a recorder's own parameters are the edge's to read
// (engine/snapshot/recording_stats.h), not the store's.
TEST(CompanionStats, TheStoreReadsTheCapOnlyAsAllowedBytes) {
  nlohmann::json summary = nlohmann::json::object();
  add_recorded_stats(nlohmann::json::parse(R"({"params": {"cap_gib": 6}})"), summary);
  EXPECT_FALSE(summary.contains("allowed_bytes"));
  add_recorded_stats(nlohmann::json::parse(R"({"allowed_bytes": 1073741824})"), summary);
  EXPECT_EQ(summary.at("allowed_bytes"), 1073741824u);
}

TEST(CompanionStats, AbsentIsNoneAndBrokenNamesTheFile) {
  test::TempDir dir;
  const std::string snapshot = dir.file("lonely.pickle.gz");
  EXPECT_FALSE(read_companion_stats(snapshot).has_value());
  for (const std::string& content : {std::string("{ not json"), std::string("[1, 2]")}) {
    std::ofstream(dir.file("lonely.stats.json")) << content;
    try {
      read_companion_stats(snapshot);
      ADD_FAILURE() << "expected an InputError for " << content;
    } catch (const InputError& error) {
      EXPECT_NE(std::string(error.what()).find("lonely.stats.json"), std::string::npos)
          << error.what();
    }
  }
}

}  // namespace
}  // namespace fragscope::storage
