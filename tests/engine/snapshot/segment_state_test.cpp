// SegmentState on inconsistent traces (issue #18): addresses and sizes near 2^64 and impossible
// requests are InputErrors naming the entry, never a crash.
#include <gtest/gtest.h>

#include <limits>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/snapshot/segment_state.h"
#include "engine/snapshot/timeline.h"

namespace fragscope::snapshot {
namespace {

constexpr std::uint64_t kTop = std::numeric_limits<std::uint64_t>::max();

// What hostile/segfault-info-198b.pickle holds: a segment whose end wraps past 2^64, so its
// split-off remainder landed at address 4096, outside every segment (SIGSEGV before the fix).
std::vector<TraceEvent> wrapping_trace() {
  return {{TraceAction::segment_alloc, kTop - 4095, 12288},
          {TraceAction::alloc, kTop - 4095, 8192},
          {TraceAction::alloc, 4096, 512}};
}

TEST(SegmentStateHostile, BadLayoutSettingsQuoteWhatWasFound) {
  const auto error_of = [](const nlohmann::json& settings) -> std::string {
    try {
      (void)LayoutRules::from_allocator_settings(settings);
    } catch (const InputError& e) {
      return e.what();
    }
    return "(no error)";
  };
  // "must be an int" alone did not say what was there.
  EXPECT_EQ(error_of({{"max_split_size", "big"}}),
            "allocator_settings: 'max_split_size' must be an int, got \"big\"");
  EXPECT_EQ(
      error_of({{"roundup_power2_divisions", {{"1", std::numeric_limits<std::uint64_t>::max()}}}}),
      "allocator_settings: 'roundup_power2_divisions' must be a dict of ints in [0, 2^63), got "
      "18446744073709551615");
}

TEST(SegmentStateHostile, SegmentWrappingPastTwoToTheSixtyFourIsAnInputError) {
  SegmentState state;
  const auto trace = wrapping_trace();
  try {
    state.apply(trace[0]);
    FAIL() << "a segment reaching past 2^64 was accepted";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("64-bit address space"), std::string::npos)
        << error.what();
  }
}

TEST(SegmentStateHostile, TimelineOfTheWrappingSnapshotNamesTheEntry) {
  Snapshot snap;
  snap.device_traces.push_back(wrapping_trace());
  try {
    build_timeline(snap, 0);
    FAIL() << "the wrapping trace was laid out";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("trace entry 0"), std::string::npos) << error.what();
  }
}

TEST(SegmentStateHostile, ExabyteAllocationDoesNotFitATwoMebibyteSegment) {
  SegmentState state;
  state.apply({TraceAction::segment_alloc, 1ull << 40, 2 * kMiB});
  // round_size(2^64 - 1) wrapped to 0 before the fix, so it "fit".
  EXPECT_THROW(state.apply({TraceAction::alloc, 1ull << 40, kTop}), InputError);
  EXPECT_THROW(state.apply({TraceAction::alloc, 1ull << 40, 1ull << 60}), InputError);
  state.apply({TraceAction::alloc, 1ull << 40, 1000});  // the state is still usable
  EXPECT_EQ(state.sample().allocated, 1024u);
}

TEST(SegmentStateHostile, BlockOrSegmentPastTheAddressSpaceIsRefused) {
  SegmentState state;
  SegmentState::SegmentInfo segment;
  segment.size = 8192;
  EXPECT_THROW(state.add_segment(kTop - 4095, segment), InputError);
  state.add_segment(1ull << 40, segment);
  SegmentState::BlockInfo block;
  block.size = kTop;
  block.state = BlockState::active_allocated;
  EXPECT_THROW(state.place_block(1ull << 40, block), InputError);
  segment.size = 4096;
  EXPECT_THROW(state.add_segment((1ull << 40) - 2048, segment), InputError);  // overlaps
  EXPECT_THROW(state.apply({TraceAction::segment_map, kTop - 4095, 8192}), InputError);
}

TEST(SegmentStateHostile, FreeCompletedOutsideEverySegmentIsAnInputError) {
  SegmentState state;
  EXPECT_THROW(state.apply({TraceAction::free_completed, 4096, 512}), InputError);
}

// A freed segment's blocks go with it: after a segment_free, an alloc at its base finds no free
// block there.
TEST(SegmentStateHostile, AnAllocInAFreedSegmentFindsNoBlock) {
  constexpr std::uint64_t kBase = 1ull << 40;
  SegmentState state;
  state.apply({TraceAction::segment_alloc, kBase, 8 * kMiB});
  state.apply({TraceAction::alloc, kBase, 2 * kMiB});
  state.apply({TraceAction::alloc, kBase + 2 * kMiB, 2 * kMiB});  // the rest the first split off
  state.apply({TraceAction::free_requested, kBase + 2 * kMiB, 2 * kMiB});
  state.apply({TraceAction::free_completed, kBase + 2 * kMiB, 2 * kMiB});
  state.apply({TraceAction::free_completed, kBase, 2 * kMiB});  // merges the segment into one
  EXPECT_EQ(state.block_count(), 1u);
  state.apply({TraceAction::segment_free, kBase, 8 * kMiB});
  try {
    state.apply({TraceAction::alloc, kBase, 1 * kMiB});
    FAIL() << "an alloc in a freed segment was accepted";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("no free block starts at this address"),
              std::string::npos)
        << error.what();
  }
  // A copy's blocks belong to the copy's segments.
  state.apply({TraceAction::segment_alloc, kBase, 8 * kMiB});
  state.apply({TraceAction::alloc, kBase, 2 * kMiB});
  SegmentState copy = state;
  state.apply({TraceAction::free_completed, kBase, 2 * kMiB});
  copy.apply({TraceAction::alloc, kBase + 2 * kMiB, 6 * kMiB});
  EXPECT_EQ(copy.sample().allocated, 8 * kMiB);
  EXPECT_EQ(state.sample().allocated, 0u);
  EXPECT_EQ(state.block_count(), 1u);
}

}  // namespace
}  // namespace fragscope::snapshot
