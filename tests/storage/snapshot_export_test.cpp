// A run exported as a snapshot must be the snapshot it was imported from.
#include "storage/db/snapshot_export.h"

#include <gtest/gtest.h>

#include <map>

#include "storage/db/snapshot_import.h"
#include "storage_test_util.h"

namespace fragscope::storage {
namespace {

using test::import_options;

// "" when equal, else where the two sequences first differ (the elements print as bytes).
template <typename T>
std::string first_difference(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size())
    return "sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!(a[i] == b[i]))
      return "element " + std::to_string(i) + " differs";
  }
  return "";
}

std::string describe(const snapshot::Segment& s) {
  std::string text =
      "segment @" + std::to_string(s.address) + " size " + std::to_string(s.total_size) +
      " alloc " + std::to_string(s.allocated_size) + " active " + std::to_string(s.active_size) +
      " req " + std::to_string(s.requested_size) + " pool " +
      std::to_string(static_cast<int>(s.pool)) + " exp " + std::to_string(s.is_expandable) +
      " frames " + std::to_string(s.frames.value) + " stream " + std::to_string(s.stream.value) +
      " blocks " + std::to_string(s.blocks.size()) + ":";
  for (const auto& b : s.blocks)
    text += " [" + std::to_string(b.address) + " " + std::to_string(b.size) + " " +
            std::to_string(b.requested_size) + " " + std::to_string(static_cast<int>(b.state)) +
            " f" + std::to_string(b.frames.value) + "]";
  return text;
}

std::vector<snapshot::Segment> without_stale_requested_sizes(std::vector<snapshot::Segment> all) {
  for (auto& segment : all) {
    for (auto& block : segment.blocks) {
      if (block.state == snapshot::BlockState::inactive)
        block.requested_size = 0;
    }
  }
  return all;
}

class ExportFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(ExportFixture, ReproducesTheImportedSnapshot) {
  const std::string name = GetParam();
  const auto original =
      snapshot::read_snapshot(std::string(FRAGSCOPE_FIXTURES) + "/" + name + ".pickle.gz");
  RunStore store(":memory:");
  const auto imported = import_snapshot(store, original, import_options(name));
  const snapshot::Snapshot exported = export_snapshot(store, imported.run);

  EXPECT_TRUE(exported.warnings.empty()) << exported.warnings.at(0);
  ASSERT_EQ(exported.device_traces.size(), 1u);
  EXPECT_EQ(first_difference(exported.device_traces[0], original.device_traces[0]), "");
  // PyTorch leaves a freed block's requested_size stale (torch-allocator-spec §2.1); the layout
  // model cannot know it and writes 0. Every other field must be identical.
  const auto exported_segments = without_stale_requested_sizes(exported.segments);
  const auto original_segments = without_stale_requested_sizes(original.segments);
  EXPECT_EQ(first_difference(exported_segments, original_segments), "");
  for (std::size_t i = 0; i < std::min(exported_segments.size(), original_segments.size()); ++i) {
    if (!(exported_segments[i] == original_segments[i])) {
      ADD_FAILURE() << "exported " << describe(exported_segments[i]) << "\noriginal "
                    << describe(original_segments[i]);
      break;
    }
  }
  EXPECT_EQ(exported.allocator_settings, original.allocator_settings);
  EXPECT_TRUE(exported.frames == original.frames);
}

INSTANTIATE_TEST_SUITE_P(Torch211H200, ExportFixture,
                         ::testing::Values("gpt_varlen_default", "gpt_varlen_expandable",
                                           "gpt_oom_cap"));

// Private pools (CUDA graphs, MemPools) exist only in segment_pool_id: an export writes them back.
TEST(Export, WritesEverySegmentsPoolId) {
  for (const char* name : {"gpt_compile_reduce_overhead", "graph_manual"}) {
    SCOPED_TRACE(name);
    const auto original = snapshot::read_snapshot(
        std::string(FRAGSCOPE_FIXTURES) + "/../torch-2.11-h200-graphs/" + name + ".pickle.gz");
    RunStore store(":memory:");
    const auto imported = import_snapshot(store, original, import_options(name));
    const snapshot::Snapshot exported = export_snapshot(store, imported.run);
    std::map<std::uint64_t, std::pair<std::int64_t, std::int64_t>> want;
    std::size_t private_segments = 0;
    for (const auto& segment : original.segments) {
      want[segment.address] = segment.pool_id;
      private_segments += segment.pool_id != std::pair<std::int64_t, std::int64_t>{0, 0} ? 1 : 0;
    }
    EXPECT_GT(private_segments, 0u);
    ASSERT_EQ(exported.segments.size(), original.segments.size());
    for (const auto& segment : exported.segments)
      EXPECT_EQ(segment.pool_id, want.at(segment.address)) << segment.address;
  }
}

TEST(Export, FallsBackToTheSegmentMapWhenTheLayoutRulesDisagree) {
  // Synthetic events place blocks back to back without PyTorch's rounding: the layout model
  // refuses them, and the export still gives every segment and live block.
  RunStore store(":memory:");
  auto events = test::synthetic_trace(5000, 31);
  for (auto& event : events)
    event.frames = FrameStackId{};  // no stacks stored: a snapshot cannot refer to any
  RunRecord record;
  record.name = "synthetic";
  const RunId id = store.begin_run(record);
  store.append_events(id, events);
  store.finish_run(id, RunStatus::ok);
  const snapshot::Snapshot exported = export_snapshot(store, id);
  EXPECT_EQ(exported.device_traces.at(0), events);
  const SegmentMap end = store.segment_state(id, events.size()).state;
  ASSERT_EQ(exported.segments.size(), end.segments().size());
  std::size_t live = 0;
  for (const auto& segment : exported.segments) {
    Bytes covered = 0;
    for (const auto& block : segment.blocks) {
      covered += block.size;
      live += block.state != snapshot::BlockState::inactive ? 1 : 0;
    }
    EXPECT_EQ(covered, segment.total_size) << "blocks tile their segment";
  }
  EXPECT_EQ(live, end.blocks().size());
  if (!exported.warnings.empty()) {
    EXPECT_NE(exported.warnings[0].find("approximated"), std::string::npos);
  }
}

}  // namespace
}  // namespace fragscope::storage
