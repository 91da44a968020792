#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>

#include "engine/snapshot/snapshot.h"
#include "engine/snapshot/snapshot_test_util.h"

namespace fragscope::snapshot::test {
namespace {

nlohmann::json stats_of(const std::string& name) {
  std::ifstream in(std::filesystem::path(FRAGSCOPE_FIXTURES) / (name + ".stats.json"));
  return nlohmann::json::parse(in);
}

class FixtureRead : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureRead, ImportsWithTheDocumentedShape) {
  const Snapshot& s = fixture(GetParam());
  EXPECT_EQ(s.pickle_protocol, 4);
  EXPECT_EQ(s.format, SnapshotFormat::v2_1);
  ASSERT_EQ(s.device_traces.size(), 1u);
  EXPECT_GT(s.device_traces[0].size(), 1000u);
  EXPECT_FALSE(s.segments.empty());
  EXPECT_TRUE(s.allocator_settings.contains("PYTORCH_CUDA_ALLOC_CONF"));
  nlohmann::json stats = stats_of(GetParam());
  EXPECT_EQ(s.allocator_settings["PYTORCH_CUDA_ALLOC_CONF"].get<std::string>(),
            stats["alloc_conf"].get<std::string>());
  // The final segments agree with memory_stats(): reserved bytes and segment bytes per block.
  Bytes reserved = 0;
  for (const Segment& seg : s.segments) {
    reserved += seg.total_size;
    Bytes sum = 0, allocated = 0;
    for (const Block& b : seg.blocks) {
      EXPECT_EQ(b.address, seg.address + sum);
      sum += b.size;
      if (b.state == BlockState::active_allocated)
        allocated += b.size;
    }
    EXPECT_EQ(sum, seg.total_size);
    EXPECT_EQ(allocated, seg.allocated_size);
  }
  const auto& ms = stats["memory_stats"];
  EXPECT_EQ(reserved, ms["reserved_bytes.all.current"].get<Bytes>());
  // Every trace entry has a time and a known action.
  for (const TraceEvent& e : s.device_traces[0])
    ASSERT_GT(e.time_us, 0);
}

INSTANTIATE_TEST_SUITE_P(AllFixtures, FixtureRead, ::testing::ValuesIn(fixture_names()));

TEST(FixtureRead, StacksAreInterned) {
  const Snapshot& s = fixture("gpt_varlen_default");
  EXPECT_GT(s.frames.frame_count(), 10u);
  const TraceEvent& first = s.device_traces[0].front();
  EXPECT_EQ(first.action, TraceAction::segment_alloc);
  EXPECT_EQ(first.size, 33554432u);
  EXPECT_EQ(first.addr, 140269068484608u);
  auto frames = s.frames.stack_frames(first.frames);
  ASSERT_EQ(frames.size(), 7u);
  EXPECT_EQ(frames[0].name, "<lambda>");
  EXPECT_EQ(frames[0].line, 1097);
  EXPECT_EQ(frames[6].name, "<module>");
  EXPECT_EQ(frames[6].filename, "/home/researcher/bench/record_torch_traces.py");
  // Far fewer distinct stacks than entries: identical stacks are stored once.
  EXPECT_LT(s.frames.stack_count(), s.device_traces[0].size() / 2);
  const Snapshot& plain = fixture("random_default");
  EXPECT_EQ(plain.frames.stack_count(), 1u);
}

TEST(FixtureRead, EntryCountsMatchTheFixtureReadme) {
  EXPECT_EQ(fixture("gpt_ckpt_accum").device_traces[0].size(), 148180u);
  EXPECT_EQ(fixture("gpt_oom_cap").device_traces[0].size(), 22135u);
  EXPECT_EQ(fixture("streams_default").device_traces[0].size(), 31348u);
}

// The device the import and the advisor analyse: most trace entries, else most segments.
TEST(Snapshot, BusiestDeviceHasTheMostEntriesOrElseTheMostSegments) {
  Snapshot traced;
  traced.device_traces.resize(3);
  traced.device_traces[2].resize(5);
  traced.device_traces[1].resize(4);
  EXPECT_EQ(traced.busiest_device(), 2u);

  Snapshot state_only;  // memory_snapshot() without history: segments, no trace entries
  state_only.device_traces.resize(1);
  for (int device : {1, 3, 3}) {
    Segment segment;
    segment.device = device;
    state_only.segments.push_back(segment);
  }
  EXPECT_EQ(state_only.busiest_device(), 3u);
  EXPECT_EQ(Snapshot{}.busiest_device(), 0u);
}

}  // namespace
}  // namespace fragscope::snapshot::test
