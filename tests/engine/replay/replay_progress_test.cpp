// A replay reports its stages (kReplayStages) as one fraction that only grows and ends at 1, and a
// cancel midway stops it there (fragscope::Cancelled, no result).
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/replay/replay.h"
#include "engine/snapshot/snapshot.h"
#include "tests/progress_test_util.h"

namespace fragscope::replay {
namespace {

const std::string kFixtures = FRAGSCOPE_FIXTURES;

// A recording with CUDA graphs: the replay infers its pools and counts its silent empty_cache
// calls in a dry run, so every stage reports.
TEST(ReplayProgress, EveryStageGrowsToOne) {
  const std::string base = kFixtures + "/../torch-2.11-h200-graphs/gpt_compile_reduce_overhead";
  const snapshot::Snapshot snap = snapshot::read_snapshot(base + ".pickle.gz");
  std::ifstream in(base + ".stats.json");
  const nlohmann::json stats = nlohmann::json::parse(in);
  ReplayOptions options;
  options.total_memory = stats.at("total_memory").get<Bytes>();
  options.recorded_sync_all_streams =
      stats.at("memory_stats").at("num_sync_all_streams").get<std::int64_t>();
  const ReplayResult quiet = replay_snapshot(snap, options);

  fragscope::test::ProgressRecorder recorder(kReplayStages);
  options.progress = recorder.progress();
  const ReplayResult result = replay_snapshot(snap, options);
  ASSERT_TRUE(result.pools.has_value());
  EXPECT_TRUE(fragscope::test::grows_to_one(recorder, 5));
  // Reporting changes nothing.
  EXPECT_EQ(result.emitted_events, quiet.emitted_events);
  EXPECT_EQ(result.segment_events, quiet.segment_events);
  EXPECT_EQ(alloc::to_memory_stats(result.run.stats), alloc::to_memory_stats(quiet.run.stats));
  EXPECT_EQ(result.silent_empty_caches, quiet.silent_empty_caches);
  EXPECT_FALSE(result.first_divergence.has_value());
}

TEST(ReplayProgress, ACancelHalfwayStopsThere) {
  const snapshot::Snapshot snap = snapshot::read_snapshot(kFixtures + "/gpt_oom_cap.pickle.gz");
  fragscope::test::ProgressRecorder whole(kReplayStages);
  ReplayOptions options;
  options.progress = whole.progress();
  const ReplayResult result = replay_snapshot(snap, options);
  ASSERT_GT(result.run.requests_run, 3 * alloc::kCancelPollRequests);
  EXPECT_TRUE(fragscope::test::grows_to_one(whole, 5));

  // Half the model's run: the stages before "requests" count as done (skipped or not).
  double whole_share = 0;
  for (const ProgressStage& stage : kReplayStages)
    whole_share += stage.share;
  const auto at = [&](double requests_part) {
    return (kReplayStages[0].share + kReplayStages[1].share +
            kReplayStages[2].share * requests_part) /
           whole_share;
  };
  fragscope::test::ProgressRecorder halfway(kReplayStages);
  halfway.cancel_at = at(0.5);
  options.progress = halfway.progress();
  options.cancel = halfway.token;
  EXPECT_THROW(replay_snapshot(snap, options), Cancelled);
  // Stopped at the poll that reported the half.
  const double poll = static_cast<double>(alloc::kCancelPollRequests) /
                      static_cast<double>(result.run.requests_run);
  EXPECT_TRUE(fragscope::test::stopped_before(halfway, at(0.5 + poll)));
}

}  // namespace
}  // namespace fragscope::replay
