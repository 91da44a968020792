// Allocator-state keyframes: memory_stats() replayed from the keyframe before an event equals the
// replay from event 0, at keyframes, right after them and anywhere between, on every real
// recording the keyframe chain can follow; runs it cannot follow say why and replay from 0.
#include "storage/db/stats_keyframes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <random>
#include <thread>

#include "engine/allocator/summary.h"
#include "engine/snapshot/snapshot.h"
#include "storage/db/snapshot_import.h"
#include "storage/db/stats_at.h"
#include "storage_test_util.h"

namespace fragscope::storage {
namespace {

using test::fixture;

RunId import_fixture(RunStore& store, const std::string& name) {
  const std::string path = fixture(name, ".pickle.gz");
  ImportOptions options = test::import_options(name);
  options.recorded_stats = read_companion_stats(path);
  return import_snapshot(store, snapshot::read_snapshot(path), options).run;
}

std::vector<std::uint64_t> keyframe_events(RunStore& store, RunId run) {
  std::vector<std::uint64_t> out;
  auto query = store.database().prepare(
      "SELECT event_index FROM stats_keyframes WHERE run_id = ? ORDER BY event_index");
  query.bind_int(1, run.value);
  while (query.step())
    out.push_back(static_cast<std::uint64_t>(query.column_int(0)));
  return out;
}

class StatsKeyframes : public ::testing::TestWithParam<const char*> {};

TEST_P(StatsKeyframes, StatsFromTheKeyframeBeforeAnyEventEqualAReplayFromEventZero) {
  RunStore store(":memory:");
  const RunId run = import_fixture(store, GetParam());
  const std::uint64_t count = store.run(run).event_count;
  // Many keyframes (a chain of ~40 replays) so that every kind of cut is crossed.
  constexpr std::uint64_t kInterval = 2048;
  const std::size_t stored = store_stats_keyframes(store, run, kInterval);
  const nlohmann::json outcome = store.run(run).summary.at("stats_keyframes");
  if (stored == 0) {
    ASSERT_TRUE(outcome.contains("none"));
    GTEST_SKIP() << GetParam() << " has no keyframes: " << outcome["none"].get<std::string>();
  }
  EXPECT_EQ(outcome.at("count"), stored);
  const std::vector<std::uint64_t> keyframes = keyframe_events(store, run);
  ASSERT_EQ(keyframes.size(), stored);
  for (std::size_t i = 0; i < keyframes.size(); ++i) {
    EXPECT_GE(keyframes[i], (i + 1) * kInterval);
    EXPECT_LT(keyframes[i], count);
  }
  // At keyframes, one event after, the last event before the next one, and random events.
  std::vector<std::uint64_t> at;
  for (const std::size_t i : {std::size_t{0}, keyframes.size() / 2, keyframes.size() - 1}) {
    at.push_back(keyframes[i]);
    at.push_back(keyframes[i] + 1);
    at.push_back(i + 1 < keyframes.size() ? keyframes[i + 1] - 1 : count);
  }
  std::mt19937_64 random(7);
  for (int n = 0; n < 4; ++n)
    at.push_back(random() % (count + 1));
  for (const std::uint64_t event : at) {
    SCOPED_TRACE("after " + std::to_string(event) + " events");
    const MemoryStatsAt fast = memory_stats_at(store, run, event);
    const MemoryStatsAt full = memory_stats_at(store, run, event, StatsStart::first_event);
    // From the last keyframe at or before the event: never more than an interval of replay.
    const auto after = std::upper_bound(keyframes.begin(), keyframes.end(), event);
    EXPECT_EQ(fast.replayed_from, after == keyframes.begin() ? 0 : *std::prev(after));
    EXPECT_LE(fast.event_index - fast.replayed_from, kInterval + 64);
    EXPECT_EQ(full.replayed_from, 0u);
    EXPECT_EQ(fast.event_index, full.event_index);
    EXPECT_TRUE(fast.stats == full.stats) << alloc::memory_summary(fast.stats, 0, false) << "\nvs\n"
                                          << alloc::memory_summary(full.stats, 0, false);
    EXPECT_EQ(fast.caveats, full.caveats);
    EXPECT_EQ(fast.diverged, full.diverged);
  }
}

INSTANTIATE_TEST_SUITE_P(TorchRecordings, StatsKeyframes,
                         ::testing::ValuesIn(test::kTorchRecordings));

TEST(StatsKeyframesStored, ImportStoresThemAndRunsTheChainCannotFollowSayWhy) {
  RunStore store(":memory:");
  const RunId plain = import_fixture(store, "gpt_fixedlen_default");
  const nlohmann::json stored = store.run(plain).summary.at("stats_keyframes");
  EXPECT_EQ(stored.at("interval"), kStatsKeyframeInterval);
  EXPECT_EQ(stored.at("count"), keyframe_events(store, plain).size());
  EXPECT_GT(stored.at("count").get<std::size_t>(), 0u);
  const RunId expandable = import_fixture(store, "gpt_varlen_expandable");
  EXPECT_EQ(store.run(expandable).summary.at("stats_keyframes").at("none"), "expandable segments");
  EXPECT_TRUE(keyframe_events(store, expandable).empty());
  const MemoryStatsAt state = memory_stats_at(store, expandable, 30000);
  EXPECT_EQ(state.replayed_from, 0u);
}

std::vector<std::vector<std::uint8_t>> keyframe_blobs(RunStore& store, RunId run) {
  std::vector<std::vector<std::uint8_t>> out;
  auto query = store.database().prepare(
      "SELECT data FROM stats_keyframes WHERE run_id = ? ORDER BY event_index");
  query.bind_int(1, run.value);
  while (query.step()) {
    const auto blob = query.column_blob(0);
    out.emplace_back(blob.begin(), blob.end());
  }
  return out;
}

TEST(StatsKeyframesStored, ImportMakesThemFromItsTraceAsTheStoredRunWouldGiveThem) {
  // Import reads the keyframes' events from the snapshot it stores (in memory, or spooled as the
  // CLI reads it), not back from the store: the chain must be the one the stored run gives.
  const std::string path = fixture("gpt_fixedlen_default", ".pickle.gz");
  for (const bool spooled : {false, true}) {
    SCOPED_TRACE(spooled ? "spooled" : "in memory");
    RunStore store(":memory:");
    const snapshot::Snapshot snap =
        spooled ? snapshot::read_snapshot_spooled(path) : snapshot::read_snapshot(path);
    const ImportResult imported = import_snapshot(store, snap, test::import_options("gpt"));
    const RunId run = imported.run;
    // Built while the events were stored, from the inputs the stored run then gave.
    EXPECT_TRUE(imported.keyframes_built_in_advance);
    const auto from_import = keyframe_blobs(store, run);
    ASSERT_GT(from_import.size(), 2u);
    const nlohmann::json outcome = store.run(run).summary.at("stats_keyframes");
    EXPECT_EQ(store_stats_keyframes(store, run), from_import.size());
    EXPECT_EQ(keyframe_blobs(store, run), from_import);
    EXPECT_EQ(store.run(run).summary.at("stats_keyframes"), outcome);
  }
}

// A trace read forward from memory, as the import reads its snapshot's (a chain built in advance
// reads on its own thread, where the store must not be used). Each read is counted in `reads`
// and waits `delay` first, when given.
RunEventReader reader_of(std::shared_ptr<const std::vector<TraceEvent>> trace,
                         std::shared_ptr<std::atomic<int>> reads = nullptr,
                         std::chrono::milliseconds delay = {}) {
  auto next = std::make_shared<std::size_t>(0);
  return [trace, next, reads, delay](std::size_t count, std::vector<TraceEvent>& out) {
    if (reads)
      ++*reads;
    std::this_thread::sleep_for(delay);
    const std::size_t take = std::min(count, trace->size() - *next);
    const auto first = trace->begin() + static_cast<std::ptrdiff_t>(*next);
    out.insert(out.end(), first, first + static_cast<std::ptrdiff_t>(take));
    *next += take;
    return take;
  };
}

struct ImportedFixture {
  RunStore store{":memory:"};
  snapshot::Snapshot snap = snapshot::read_snapshot(fixture("gpt_fixedlen_default", ".pickle.gz"));
  RunId run = import_snapshot(store, snap, test::import_options("gpt")).run;
  std::shared_ptr<const std::vector<TraceEvent>> trace =
      std::make_shared<const std::vector<TraceEvent>>(snap.device_traces.at(0));
  SegmentMap final_state = segment_map_of(snap, 0);
};

// A chain built in advance from inputs the stored run does not give is dropped: the keyframes
// are the stored run's, built again. Each input the chain reads is changed in turn.
TEST(StatsKeyframesStored, AChainBuiltInAdvanceFromOtherInputsIsBuiltAgain) {
  ImportedFixture imported;
  RunStore& store = imported.store;
  const RunId run = imported.run;
  const auto stored_chain = keyframe_blobs(store, run);
  ASSERT_GT(stored_chain.size(), 2u);
  // A lambda captures no structured binding in clang 14.
  const std::uint64_t first_segment = imported.final_state.segments().begin()->first;
  const Bytes first_size = imported.final_state.segments().begin()->second.size;
  const std::vector<std::pair<std::string, std::function<void(RunRecord&)>>> records = {
      {"as stored", [](RunRecord&) {}},
      {"a cap", [](RunRecord& r) { r.summary["allowed_bytes"] = Bytes{1} << 30; }},
      {"a max_split_size",
       [](RunRecord& r) { r.summary["allocator_settings"]["max_split_size"] = Bytes{256} << 20; }},
      {"another release", [](RunRecord& r) { r.summary["torch_version"]["profile"] = "2.8"; }},
      {"a private pool",
       [&](RunRecord& r) {
         r.summary["segment_pools"] = {{first_segment, first_size, 1, 2}};
       }},
      {"a device size", [](RunRecord& r) { r.environment.gpu_memory = Bytes{40} << 30; }},
      {"fewer events", [](RunRecord& r) { r.event_count -= 1; }},
  };
  for (const auto& [name, change] : records) {
    SCOPED_TRACE(name);
    RunRecord record = store.run(run);
    change(record);
    KeyframeChainInAdvance chain(record, imported.final_state, reader_of(imported.trace));
    EXPECT_EQ(chain.store(store, run, reader_of(imported.trace)), stored_chain.size());
    EXPECT_EQ(chain.taken(), name == "as stored");
    EXPECT_EQ(keyframe_blobs(store, run), stored_chain);
  }
}

// A chain built in advance stops when its owner goes away unused, and when the import is
// cancelled while store() waits for it (store() then gives up with Cancelled): it reads less of
// the trace than a whole chain does. Each read waits 100 ms, so the stops are seen in time.
TEST(StatsKeyframesStored, AChainBuiltInAdvanceStopsUnusedOrCancelled) {
  ImportedFixture imported;
  RunStore& store = imported.store;
  const RunId run = imported.run;
  const RunRecord record = store.run(run);
  auto reads = std::make_shared<std::atomic<int>>(0);
  {
    KeyframeChainInAdvance whole(record, imported.final_state, reader_of(imported.trace, reads));
    ASSERT_GT(whole.store(store, run, reader_of(imported.trace)), 2u);
    ASSERT_TRUE(whole.taken());
  }
  const int whole_chain_reads = reads->exchange(0);
  ASSERT_GT(whole_chain_reads, 2);
  constexpr std::chrono::milliseconds kSlowRead{100};
  {
    KeyframeChainInAdvance unused(record, imported.final_state,
                                  reader_of(imported.trace, reads, kSlowRead));
  }
  EXPECT_LT(reads->exchange(0), whole_chain_reads);
  KeyframeChainInAdvance chain(record, imported.final_state,
                               reader_of(imported.trace, reads, kSlowRead));
  const CancelToken cancel = CancelToken::make();
  cancel.cancel();
  EXPECT_THROW(chain.store(store, run, reader_of(imported.trace), cancel), Cancelled);
  EXPECT_LT(reads->load(), whole_chain_reads);
}

// The device imported is not device 0 (--device, or the busiest of several): the
// chain reads that device's trace, not another's.
TEST(StatsKeyframesStored, ImportOfASecondDeviceMakesThemFromThatDevicesTrace) {
  snapshot::Snapshot snap = snapshot::read_snapshot(fixture("gpt_fixedlen_default", ".pickle.gz"));
  ASSERT_EQ(snap.device_traces.size(), 1u);
  const std::vector<TraceEvent> trace = snap.device_traces[0];
  ASSERT_GT(trace.size(), 2 * kStatsKeyframeInterval);
  // Device 0: the first 9000 entries alone; device 1: the whole trace and every segment.
  snap.device_traces = {std::vector<TraceEvent>(trace.begin(), trace.begin() + 9000), trace};
  if (!snap.device_entry_texts.empty())
    snap.device_entry_texts.insert(snap.device_entry_texts.begin(),
                                   std::vector<snapshot::TraceEntryText>(9000));
  for (snapshot::Segment& segment : snap.segments)
    segment.device = 1;
  RunStore store(":memory:");
  ImportOptions options = test::import_options("gpt");
  options.device = 1;
  const RunId run = import_snapshot(store, snap, options).run;
  const auto from_import = keyframe_blobs(store, run);
  ASSERT_GT(from_import.size(), 2u);
  EXPECT_EQ(store_stats_keyframes(store, run), from_import.size());
  EXPECT_EQ(keyframe_blobs(store, run), from_import);
}

// The run's record says how many events the chain reads: a reader that runs dry before stores
// no keyframes, and the outcome says why (as a replay that fails does).
TEST(StatsKeyframesStored, AReaderOfFewerEventsThanTheRunHoldsStoresNone) {
  RunStore store(":memory:");
  const RunId run = import_fixture(store, "gpt_fixedlen_default");
  RunReader::EventStream stream = store.event_stream(run, 0);
  std::size_t left = 4000;  // within the first window
  const RunEventReader short_reader = [&](std::size_t count, std::vector<TraceEvent>& out) {
    const std::size_t read = stream.read(std::min(count, left), out);
    left -= read;
    return read;
  };
  EXPECT_EQ(store_stats_keyframes(store, run, short_reader), 0u);
  EXPECT_TRUE(keyframe_blobs(store, run).empty());
  EXPECT_NE(store.run(run)
                .summary.at("stats_keyframes")
                .at("none")
                .get<std::string>()
                .find("end before the"),
            std::string::npos);
}

TEST(StatsKeyframesStored, ARunStoredBeforeThemGetsThemOnItsFirstSummary) {
  test::TempDir dir;
  const std::string path = dir.file("old.db");
  RunId run;
  {
    RunStore store(path);
    run = import_fixture(store, "gpt_fixedlen_default");
    // As a database written before schema 10 left it: no keyframes, no outcome.
    auto erase = store.database().prepare("DELETE FROM stats_keyframes WHERE run_id = ?");
    erase.bind_int(1, run.value);
    erase.run();
    nlohmann::json summary = store.run(run).summary;
    summary.erase("stats_keyframes");
    store.update_summary(run, summary);
  }
  RunStore reader(path, OpenMode::read_only);
  ASSERT_TRUE(stats_keyframes_missing(reader.run(run)));
  EXPECT_EQ(memory_stats_at(reader, run, 40000).replayed_from, 0u);
  EXPECT_TRUE(backfill_stats_keyframes(path, run));
  EXPECT_FALSE(stats_keyframes_missing(reader.run(run)));
  EXPECT_FALSE(keyframe_events(reader, run).empty());
  const MemoryStatsAt fast = memory_stats_at(reader, run, 40000);
  EXPECT_GT(fast.replayed_from, 0u);
  EXPECT_EQ(fast.stats, memory_stats_at(reader, run, 40000, StatsStart::first_event).stats);
  // Once: the outcome is recorded, a second request does nothing.
  EXPECT_FALSE(backfill_stats_keyframes(path, run));
}

// A run replayed under its config (no recording to compare with) whose trace the model does not
// make, as a synthetic trace's 20 MiB segments of small blocks: a keyframe would hold the
// model's blocks where the trace has others, the next window would miss their frees, and the
// Summary from it would drift from the replay from event 0. It stores none and says why.
TEST(StatsKeyframesStored, ARunWhoseTraceTheModelDoesNotMakeStoresNone) {
  RunStore store(":memory:");
  RunRecord record;
  record.name = "synthetic";
  record.source = RunSource::simulated;
  const RunId run = store.begin_run(record);
  std::vector<TraceEvent> events = test::synthetic_trace(6000, 3);
  while (events.back().action == TraceAction::free_requested)
    events.pop_back();
  store.append_events(run, events);
  store.finish_run(run, RunStatus::ok, nlohmann::json::object());
  EXPECT_EQ(store_stats_keyframes(store, run, 1024), 0u);
  EXPECT_EQ(store.run(run).summary.at("stats_keyframes").at("none"),
            "the model does not make the trace's allocations");
  EXPECT_EQ(memory_stats_at(store, run, 5000).replayed_from, 0u);
}

TEST(StatsKeyframesStored, ABlobRoundTripsAndADamagedOneIsNamed) {
  RunStore store(":memory:");
  const RunId run = import_fixture(store, "gpt_oom_cap");
  const MemoryStatsAt state = memory_stats_at(store, run, 9000);
  const auto rules = snapshot::LayoutRules{};
  const std::optional<StatsKeyframe> keyframe = stats_keyframe_before(store, run, 9000, rules);
  ASSERT_TRUE(keyframe.has_value());
  EXPECT_EQ(state.replayed_from, keyframe->event_index);
  const StatsKeyframe back =
      decode_stats_keyframe(encode_stats_keyframe(*keyframe), rules, "keyframe");
  EXPECT_EQ(back.stats, keyframe->stats);
  EXPECT_TRUE(back.state == keyframe->state);
  std::vector<std::uint8_t> damaged = encode_stats_keyframe(*keyframe);
  damaged.resize(damaged.size() / 2);
  try {
    (void)decode_stats_keyframe(damaged, rules, "run 1, allocator-state keyframe at event 8192");
    FAIL() << "a truncated blob decoded";
  } catch (const DatabaseError& error) {
    EXPECT_NE(std::string(error.what()).find("allocator-state keyframe at event 8192"),
              std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace fragscope::storage
