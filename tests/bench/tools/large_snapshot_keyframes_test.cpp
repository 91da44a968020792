// Imports of traces longer than one slice of kTimelineSlice entries, from the generator's
// repeated recordings. A run whose script empties the cache keeps its allocator-state keyframes:
// the generator's repetitions each end with torch.cuda.empty_cache()'s burst of segment_free
// entries, and memory_stats() from the keyframe before any event (before, inside and after the
// bursts) equals the replay from event 0. A contradiction past the first slice still stores the
// run with the trace's own series.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "engine/allocator/summary.h"
#include "engine/snapshot/timeline.h"
#include "large_snapshot.h"
#include "storage/db/event_chunk.h"
#include "storage/db/snapshot_import.h"
#include "storage/db/stats_at.h"
#include "storage/db/stats_keyframes.h"

namespace fragscope::storage {
namespace {

TEST(StatsKeyframesAcrossEmptyCache, TheSummaryFromAKeyframeEqualsAReplayFromEventZero) {
  const auto source = snapshot::read_snapshot(std::filesystem::path(FRAGSCOPE_FIXTURES) /
                                              "gpt_fixedlen_default.pickle.gz");
  const auto big = bench::repeat_recorded_trace(source, 3 * source.device_traces[0].size());
  RunStore store(":memory:");
  ImportOptions options;
  options.name = "gpt_fixedlen_default x3";
  const RunId run = import_snapshot(store, big, options).run;
  const std::uint64_t count = store.run(run).event_count;
  constexpr std::uint64_t kInterval = 2048;
  const std::size_t stored = store_stats_keyframes(store, run, kInterval);
  ASSERT_GT(stored, 0u) << store.run(run).summary.at("stats_keyframes").dump();
  EXPECT_EQ(stored, store.run(run).summary.at("stats_keyframes").at("count"));

  // Around every burst of segment_free entries that no malloc caused (the empty_cache calls),
  // and random events.
  const std::vector<TraceEvent> events = store.events(run, 0, count);
  std::vector<std::uint64_t> at;
  for (std::size_t i = 1; i < events.size(); ++i) {
    if (events[i].action != TraceAction::segment_free ||
        events[i - 1].action == TraceAction::segment_free)
      continue;
    std::size_t end = i;
    while (end < events.size() && events[end].action == TraceAction::segment_free)
      ++end;
    if (end < events.size() && events[end].action != TraceAction::alloc &&
        events[end].action != TraceAction::oom) {
      for (const std::uint64_t event : {i, i + 1, end, end + 1, end + 2 * kInterval})
        at.push_back(std::min<std::uint64_t>(event, count));
    }
  }
  ASSERT_GE(at.size(), 10u) << "the repetitions' empty_cache calls were not found";
  std::mt19937_64 random(5);
  for (int n = 0; n < 4; ++n)
    at.push_back(random() % (count + 1));
  std::size_t from_keyframes = 0;
  for (const std::uint64_t event : at) {
    SCOPED_TRACE("after " + std::to_string(event) + " events");
    const MemoryStatsAt fast = memory_stats_at(store, run, event);
    const MemoryStatsAt full = memory_stats_at(store, run, event, StatsStart::first_event);
    EXPECT_LE(fast.event_index - fast.replayed_from, kInterval + 4096);
    from_keyframes += fast.replayed_from > 0 ? 1 : 0;
    EXPECT_EQ(fast.event_index, full.event_index);
    EXPECT_TRUE(fast.stats == full.stats) << alloc::memory_summary(fast.stats, 0, false) << "\nvs\n"
                                          << alloc::memory_summary(full.stats, 0, false);
    EXPECT_EQ(fast.caveats, full.caveats);
    EXPECT_EQ(fast.diverged, full.diverged);
  }
  EXPECT_GE(from_keyframes, at.size() - 2);
}

// An inconsistent trace (an alloc twice at one address) whose contradiction shows only after the
// layout handed out its first slice: the run is stored with the series the trace alone gives, as
// a short one is. (The fallback's first batch once carried the layout's last slice of series
// too, and the store refused it: "append_events: N series points for M events".)
TEST(ImportOfALongTrace, AContradictionPastTheFirstSliceStoresTheTracesOwnSeries) {
  auto big = bench::repeat_recorded_trace(
      snapshot::read_snapshot(std::filesystem::path(FRAGSCOPE_FIXTURES) /
                              "gpt_fixedlen_default.pickle.gz"),
      2 * snapshot::kTimelineSlice);
  auto& trace = big.device_traces[0];
  const auto late_alloc =
      std::find_if(trace.begin() + snapshot::kTimelineSlice + 1, trace.end(),
                   [](const TraceEvent& e) { return e.action == TraceAction::alloc; });
  ASSERT_NE(late_alloc, trace.end());
  trace.insert(late_alloc + 1, *late_alloc);
  RunStore store(":memory:");
  ImportOptions options;
  options.name = "contradiction past the first slice";
  const ImportResult result = import_snapshot(store, big, options);
  const RunRecord record = store.run(result.run);
  EXPECT_EQ(record.summary["series"]["source"], "trace") << record.summary["series"].dump();
  EXPECT_EQ(record.event_count, trace.size());
  EXPECT_EQ(store.series(result.run, 0, trace.size()), derive_series(trace));
  EXPECT_EQ(store.run_count(), 1);
}

}  // namespace
}  // namespace fragscope::storage
