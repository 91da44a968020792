// The benchmark generator's snapshots must replay exactly: a repeated recording is only a fair
// large input if the model makes the recording's decisions in every repetition.
#include "large_snapshot.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "engine/core/error.h"
#include "engine/replay/replay.h"
#include "engine/snapshot/pickle_writer.h"

namespace fragscope::bench {
namespace {

snapshot::Snapshot fixture(const char* name) {
  return snapshot::read_snapshot(std::filesystem::path(FRAGSCOPE_FIXTURES) /
                                 (std::string(name) + ".pickle.gz"));
}

TEST(RepeatRecordedTrace, ReplaysExactlyAndEndsAtTheRecordedSegments) {
  const auto source = fixture("gpt_fixedlen_default");
  const std::size_t entries = source.device_traces[0].size();
  const auto big = repeat_recorded_trace(source, 3 * entries);
  ASSERT_GE(big.trace_entry_count(), 3 * entries);
  EXPECT_EQ(big.segments, source.segments);

  // Through the pickle, as the benchmarks read it.
  const std::string bytes = snapshot::write_snapshot_pickle(big);
  const auto reread = snapshot::read_snapshot_from_memory(
      {reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()}, "generated");
  ASSERT_EQ(reread.device_traces[0], big.device_traces[0]);

  const auto replayed = replay::replay_snapshot(reread);
  ASSERT_TRUE(replayed.compared);
  EXPECT_TRUE(replayed.segment_events_match);
  EXPECT_FALSE(replayed.first_divergence.has_value())
      << replay::describe(*replayed.first_divergence);
  EXPECT_EQ(replayed.seeded.segments, 0u);
}

TEST(RepeatRecordedTrace, RefusesATraceThatStartsMidRun) {
  auto source = fixture("gpt_fixedlen_default");
  source.device_traces[0].erase(source.device_traces[0].begin());
  EXPECT_THROW(repeat_recorded_trace(source, 10), InputError);
}

}  // namespace
}  // namespace fragscope::bench
