// Every snapshot layout PyTorch 2.0 to 2.11 wrote opens: tests/fixtures/snapshot-variants, made
// by make_variants.py with the standard pickler (see there for what each file holds).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/allocator/config.h"
#include "engine/core/error.h"
#include "engine/snapshot/snapshot.h"
#include "engine/snapshot/timeline.h"

namespace fragscope::snapshot {
namespace {

using ::testing::HasSubstr;

constexpr std::uint64_t kBase = 0x7F0000000000ull;
constexpr std::uint64_t kSegment = 2u << 20;

Snapshot variant(const std::string& name) {
  return read_snapshot(std::filesystem::path(FRAGSCOPE_SOURCE_DIR) / "tests" / "fixtures" /
                       "snapshot-variants" / (name + ".pickle"));
}

// The history every variant holds on a device with a trace.
void expect_the_small_history(const Snapshot& s, int device, bool traced = true) {
  SCOPED_TRACE("device " + std::to_string(device));
  const Segment* seg = nullptr;
  for (const Segment& candidate : s.segments)
    if (candidate.device == device)
      seg = &candidate;
  ASSERT_NE(seg, nullptr);
  const std::uint64_t base = kBase + static_cast<std::uint64_t>(device) * (1ull << 36);
  EXPECT_EQ(seg->address, base);
  EXPECT_EQ(seg->total_size, kSegment);
  ASSERT_EQ(seg->blocks.size(), 3u);
  EXPECT_EQ(seg->blocks[1].address, base + 512);
  EXPECT_EQ(seg->blocks[1].state, BlockState::active_allocated);
  EXPECT_EQ(seg->blocks[2].address, base + 1536);
  const auto frames = s.frames.stack_frames(seg->blocks[1].frames);
  ASSERT_FALSE(frames.empty());
  if (!traced)
    return;
  ASSERT_GT(s.device_traces.size(), static_cast<std::size_t>(device));
  const auto& trace = s.device_traces[static_cast<std::size_t>(device)];
  ASSERT_GE(trace.size(), 5u);
  EXPECT_EQ(trace[0].action, TraceAction::segment_alloc);
  EXPECT_EQ(trace[2].addr, base + 512);
  EXPECT_EQ(trace[2].size, 1000u);
  EXPECT_EQ(trace[4].action, TraceAction::free_completed);
  // The timeline rebuilt from the trace is the recorded final state.
  const Timeline tl = build_timeline(s, device);
  EXPECT_TRUE(tl.matches_final_segments) << tl.mismatch;
}

struct Expected {
  const char* name;
  const char* versions;  // TorchVersionGuess::range()
  bool settings;
};

TEST(Variants, EveryReleaseLayoutOpensWithItsVersion) {
  const Expected all[] = {
      {"v2_0_history", "2.0", false},          {"v2_1_no_time_us", "2.1", false},
      {"v2_2_no_settings", "2.2", false},      {"v2_3_settings", "2.3-2.4", true},
      {"v2_5_annotations", "2.5-2.7", true},   {"v2_8_compile_context", "2.8", true},
      {"v2_9_graph_capture_key", "2.9", true}, {"v2_10_user_metadata", "2.10-2.11", true},
  };
  for (const Expected& e : all) {
    SCOPED_TRACE(e.name);
    const Snapshot s = variant(e.name);
    EXPECT_EQ(s.torch_version.range(), e.versions) << s.torch_version.describe();
    EXPECT_FALSE(s.torch_version.evidence.empty());
    EXPECT_EQ(s.allocator_settings_recorded, e.settings);
    expect_the_small_history(s, 0);
    // Settings of every release read without error; absent ones are "unknown, defaults".
    const alloc::RecordedAllocatorConfig config = recorded_allocator_config(s);
    EXPECT_EQ(config.recorded, e.settings);
    EXPECT_EQ(config.config.max_split_size, alloc::kUnlimited);
    EXPECT_TRUE(s.warnings.empty()) << s.warnings.front();
  }
}

TEST(Variants, TwoZeroHistoryGivesAddressesAndFrames) {
  const Snapshot s = variant("v2_0_history");
  EXPECT_EQ(s.format, SnapshotFormat::v2_0);
  EXPECT_EQ(s.pickle_protocol, 2);
  EXPECT_EQ(s.device_traces[0][1].time_us, 0);
  EXPECT_EQ(s.frames.stack_frames(s.segments[0].blocks[1].frames).at(0).name, "forward");
}

TEST(Variants, TextFieldsOfTraceEntriesAreKept) {
  const Snapshot s = variant("v2_10_user_metadata");
  EXPECT_EQ(s.compile_context(0, 0), "N/A");
  EXPECT_EQ(s.compile_context(0, 2), "0/1");
  EXPECT_EQ(s.user_metadata(0, 2), "step 3");
  EXPECT_EQ(s.user_metadata(0, 1), "");
  const Snapshot older = variant("v2_8_compile_context");
  EXPECT_EQ(older.compile_context(0, 2), "0/1");
  EXPECT_EQ(older.features.entries_with_user_metadata, 0u);
  const Snapshot annotated = variant("v2_5_annotations");
  ASSERT_EQ(annotated.external_annotations.size(), 1u);
  EXPECT_EQ(annotated.external_annotations[0]["stage"], "forward");
}

TEST(Variants, StateOnlySnapshotsAndTheBareSegmentsList) {
  for (const char* name : {"v2_1_state_only", "v2_5_state_only_no_traces_key"}) {
    SCOPED_TRACE(name);
    const Snapshot s = variant(name);
    EXPECT_EQ(s.trace_entry_count(), 0u);
    EXPECT_EQ(s.device_count(), 1u);
    expect_the_small_history(s, 0, false);
  }
  const Snapshot list = variant("memory_snapshot_list");
  EXPECT_TRUE(list.features.segments_list_only);
  EXPECT_EQ(list.torch_version.range(), "2.1-2.11");
  EXPECT_FALSE(list.allocator_settings_recorded);
  expect_the_small_history(list, 0, false);
}

TEST(Variants, MultiDeviceFilesKeepEveryDevice) {
  const Snapshot s = variant("multi_device");
  EXPECT_EQ(s.device_count(), 3u);
  EXPECT_TRUE(s.device_traces[1].empty());
  expect_the_small_history(s, 0);
  expect_the_small_history(s, 2);
  // A device with segments but no entries: state only, not a truncated trace.
  const Snapshot state = variant("multi_device_state_only_device");
  EXPECT_EQ(state.device_count(), 2u);
  expect_the_small_history(state, 1, false);
}

TEST(Variants, ObjectsReferencedAgainAnywhereReadCorrectly) {
  const Snapshot s = variant("shared_objects");
  expect_the_small_history(s, 0);
  expect_the_small_history(s, 1);
  // The segment's frames list is the block's and a trace entry's: one stack, read once.
  EXPECT_EQ(s.segments[0].frames, s.segments[0].blocks[1].frames);
  EXPECT_EQ(s.device_traces[0][5].frames, s.segments[0].frames);
  const auto reversed = s.frames.stack_frames(s.segments[1].frames);
  ASSERT_EQ(reversed.size(), 2u);
  EXPECT_EQ(reversed[0].name, "main");
  EXPECT_EQ(s.device_traces[1][2].frames, s.segments[1].frames);

  const Snapshot twice = variant("shared_trace_entry");
  ASSERT_EQ(twice.device_traces[0].size(), 7u);
  EXPECT_EQ(twice.device_traces[0][6], twice.device_traces[0][5]);
  EXPECT_EQ(twice.device_traces[0][6].action, TraceAction::snapshot);
  expect_the_small_history(twice, 0);

  const Snapshot same = variant("shared_trace_list");
  ASSERT_EQ(same.device_traces.size(), 2u);
  EXPECT_EQ(same.device_traces[1], same.device_traces[0]);
}

TEST(Variants, OddFramesAreKeptAsFarAsTheyGo) {
  const Snapshot s = variant("odd_frames");
  const auto frames = s.frames.stack_frames(s.segments[0].blocks[1].frames);
  ASSERT_EQ(frames.size(), 4u);
  EXPECT_EQ(frames[0].line, -1);  // 2^64-1: C++ size_t(-1)
  EXPECT_EQ(frames[0].filename, "<unknown>");
  EXPECT_EQ(frames[1].filename, "");
  EXPECT_EQ(frames[1].name, "no_line");
  EXPECT_EQ(frames[1].line, 0);
  EXPECT_EQ(frames[2].name, "no_file");
  EXPECT_EQ(frames[2].line, 7);
  EXPECT_EQ(frames[3].name, "big");
  EXPECT_EQ(s.device_traces[0][2].frames, s.segments[0].blocks[1].frames);
  ASSERT_EQ(s.warnings.size(), 1u);  // the frames without some field, said once
  EXPECT_THAT(s.warnings[0], HasSubstr("without 'filename', 'line' or 'name'"));
}

TEST(Variants, KeysAndActionsOfNewerReleasesAreIgnoredAndSaid) {
  const Snapshot s = variant("newer_keys");
  expect_the_small_history(s, 0);
  EXPECT_EQ(s.device_traces[0].size(), 5u);  // the "annotate" entry is not an allocator event
  EXPECT_THAT(
      s.features.unknown_keys,
      ::testing::ElementsAre("snapshot.host_segments", "segment.pool_name", "block.category"));
  ASSERT_EQ(s.warnings.size(), 2u);
  EXPECT_THAT(s.warnings[0], HasSubstr("annotate"));
  EXPECT_THAT(s.warnings[1], HasSubstr("host_segments"));
  const alloc::RecordedAllocatorConfig config = recorded_allocator_config(s);
  EXPECT_EQ(config.ignored_keys, std::vector<std::string>{"pinned_reserve_segment_size_mb"});
}

TEST(Variants, TheVersionCanBeOverridden) {
  Snapshot s = variant("v2_5_annotations");
  override_torch_version(s, TorchVersion{2, 6});
  EXPECT_EQ(s.torch_version.range(), "2.6");
  EXPECT_TRUE(s.torch_version.from_override);
  EXPECT_EQ(s.torch_version.profile(), (TorchVersion{2, 6}));
  EXPECT_THAT(s.torch_version.describe(), HasSubstr("--torch-version"));
}

}  // namespace
}  // namespace fragscope::snapshot
