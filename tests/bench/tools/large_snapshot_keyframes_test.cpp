// A run whose script empties the cache keeps its allocator-state keyframes: the generator's
// repetitions each end with torch.cuda.empty_cache()'s burst of segment_free entries, and
// memory_stats() from the keyframe before any event (before, inside and after the bursts)
// equals the replay from event 0.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "engine/allocator/summary.h"
#include "large_snapshot.h"
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

}  // namespace
}  // namespace fragscope::storage
