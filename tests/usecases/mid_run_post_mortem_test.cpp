// A stored run whose trace starts mid-run (recording started late, or the ring buffer dropped the
// oldest entries): its post-mortem, what-if table, mitigation runs and memory_stats() at any
// event start from the allocator state the recording had at its first entry, so the what-if
// baseline row is the recording itself. A real 2.11 recording with the head of its trace cut
// off (its final segments kept) has a known answer: the full recording.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "engine/replay/replay.h"
#include "engine/snapshot/recording_stats.h"
#include "engine/snapshot/snapshot.h"
#include "storage/db/snapshot_import.h"
#include "storage/db/stats_at.h"
#include "usecases/post_mortem.h"

namespace fragscope::usecases {
namespace {

const std::filesystem::path kFixtures = FRAGSCOPE_FIXTURES;

struct CutRun {
  snapshot::Snapshot snapshot;
  nlohmann::json stats;
  storage::RunId run;
};

// Imports `fixture` with the first (100 - keep_percent) % of its trace dropped.
CutRun import_cut(storage::RunStore& store, const std::string& fixture, int keep_percent) {
  CutRun out;
  out.snapshot = snapshot::read_snapshot(kFixtures / (fixture + ".pickle.gz"));
  out.stats = snapshot::read_recording_stats((kFixtures / (fixture + ".stats.json")).string());
  auto& trace = out.snapshot.device_traces.at(0);
  const std::size_t drop =
      trace.size() - trace.size() * static_cast<std::size_t>(keep_percent) / 100;
  trace.erase(trace.begin(), trace.begin() + static_cast<std::ptrdiff_t>(drop));
  storage::ImportOptions options;
  options.name = fixture + " (cut)";
  options.source_file = fixture + ".pickle.gz";
  options.recorded_stats = out.stats;
  out.run = storage::import_snapshot(store, out.snapshot, options).run;
  return out;
}

TEST(StoredMidRunTrace, WhatIfBaselineRowIsTheRecording) {
  storage::RunStore store(":memory:");
  const CutRun cut = import_cut(store, "gpt_oom_cap", 50);
  const storage::RunRecord record = store.run(cut.run);
  ASSERT_TRUE(record.summary.value("truncated", false));

  const StoredPostMortem pm = post_mortem_of(store, cut.run);
  ASSERT_TRUE(pm.what_if.has_value()) << pm.what_if_error;
  const analysis::WhatIfRow* base = pm.what_if->baseline();
  ASSERT_NE(base, nullptr);
  ASSERT_TRUE(base->error.empty()) << base->error;
  // The recorded peak (the stored series, from the start state on) and the OOM where it was.
  const Bytes recorded_peak = record.summary["peaks"]["reserved"].get<Bytes>();
  EXPECT_EQ(base->peak_reserved, recorded_peak);
  EXPECT_EQ(recorded_peak, cut.stats["memory_stats"]["reserved_bytes.all.peak"].get<Bytes>());
  EXPECT_FALSE(base->ok);
  ASSERT_EQ(pm.post_mortems.size(), 1u);
  ASSERT_TRUE(pm.metrics.has_value()) << pm.metrics_error;
  EXPECT_EQ(pm.metrics->peak.reserved, recorded_peak);
  for (const analysis::WhatIfRow& row : pm.what_if->rows)
    EXPECT_TRUE(row.error.empty()) << row.name << ": " << row.error;

  // Running the baseline as a new run stores it from the same start: the same peak.
  const storage::RunId again = run_mitigation(store, cut.run, base->name);
  const storage::RunRecord replayed = store.run(again);
  EXPECT_EQ(replayed.summary["peaks"]["reserved"].get<Bytes>(), recorded_peak);
  EXPECT_EQ(storage::profile_choice_of(replayed), storage::profile_choice_of(record));
}

TEST(StoredMidRunTrace, MemoryStatsAtTheEndAreTheSeededReplays) {
  storage::RunStore store(":memory:");
  const CutRun cut = import_cut(store, "gpt_varlen_default", 40);
  const storage::RunRecord record = store.run(cut.run);
  const storage::MemoryStatsAt stored =
      storage::memory_stats_at(store, cut.run, record.event_count);
  EXPECT_FALSE(stored.diverged) << (stored.caveats.empty() ? "" : stored.caveats.back());
  const replay::ReplayResult replayed = replay::replay_snapshot(cut.snapshot);
  ASSERT_TRUE(replayed.segment_events_match);
  // The .current values the recording's memory_stats() had at its end.
  const nlohmann::json& recorded = cut.stats["memory_stats"];
  EXPECT_EQ(stored.stats.reserved_bytes[alloc::StatType::aggregate].current,
            recorded["reserved_bytes.all.current"]);
  EXPECT_EQ(stored.stats.allocated_bytes[alloc::StatType::aggregate].current,
            recorded["allocated_bytes.all.current"]);
  EXPECT_EQ(stored.stats.active_bytes[alloc::StatType::aggregate].current,
            recorded["active_bytes.all.current"]);
  EXPECT_EQ(stored.stats.segment[alloc::StatType::aggregate].current,
            recorded["segment.all.current"]);
  EXPECT_EQ(stored.stats.reserved_bytes[alloc::StatType::aggregate].current,
            replayed.run.stats.reserved_bytes[alloc::StatType::aggregate].current);
  EXPECT_EQ(stored.stats.allocation[alloc::StatType::aggregate].current,
            replayed.run.stats.allocation[alloc::StatType::aggregate].current);
  EXPECT_EQ(stored.profile.version, kLatestTorch);
  EXPECT_EQ(stored.profile.source, alloc::ProfileSource::snapshot_format);
}

}  // namespace
}  // namespace fragscope::usecases
