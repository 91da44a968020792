// SegmentState's blocks (issue #19): each segment's blocks are a ring in address order whose
// neighbours are found without a map walk, and largest_free comes from a heap with stale
// entries. These pin the edges of both: merges stop at the segment's ends, rings are cut and
// joined by unmaps and maps, a copy keeps its own links, and largest_free follows the largest
// block when it is taken.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/core/error.h"
#include "engine/snapshot/segment_state.h"
#include "engine/snapshot/snapshot_test_util.h"
#include "engine/snapshot/timeline.h"

namespace fragscope::snapshot::test {
namespace {

constexpr std::uint64_t kBase = 0x7f0000000000;

// (address, size, free) of every block, segment after segment.
struct Seen {
  std::uint64_t address;
  Bytes size;
  bool free;
  friend bool operator==(const Seen&, const Seen&) = default;
};
std::vector<Seen> blocks(const SegmentState& state) {
  std::vector<Seen> out;
  for (const auto& [segment_address, segment] : state.segment_map())
    for (const auto& [address, block] : state.blocks_of(segment_address))
      out.push_back({address, block.size, block.state == BlockState::inactive});
  return out;
}

void free_block(SegmentState& state, std::uint64_t address, Bytes size) {
  state.apply({TraceAction::free_requested, address, size});
  state.apply({TraceAction::free_completed, address, size});
}

// A block's ring neighbours past the segment's ends are its own segment's other end (the ring
// wraps) or, in address order, the next segment's first block: neither is merged with.
TEST(SegmentStateBlocks, AFreeMergesOnlyWithNeighboursInItsSegment) {
  SegmentState state;
  state.apply({TraceAction::segment_alloc, kBase, 20 * kMiB});
  state.apply({TraceAction::segment_alloc, kBase + 20 * kMiB, 20 * kMiB});  // right after it
  state.apply({TraceAction::alloc, kBase, 4 * kMiB});
  state.apply({TraceAction::alloc, kBase + 4 * kMiB, 4 * kMiB});  // the rest, 12 MiB, stays free
  state.apply({TraceAction::alloc, kBase + 20 * kMiB, 4 * kMiB});
  // The first block of the first segment: its ring prev is the free 12 MiB at the segment's end.
  free_block(state, kBase, 4 * kMiB);
  EXPECT_EQ(state.broken_invariant(), "");
  EXPECT_EQ(blocks(state), (std::vector<Seen>{{kBase, 4 * kMiB, true},
                                              {kBase + 4 * kMiB, 4 * kMiB, false},
                                              {kBase + 8 * kMiB, 12 * kMiB, true},
                                              {kBase + 20 * kMiB, 4 * kMiB, false},
                                              {kBase + 24 * kMiB, 16 * kMiB, true}}));
  // The second segment's first block: before it in address order lies the first segment's free
  // end, in its ring its own free end.
  free_block(state, kBase + 20 * kMiB, 4 * kMiB);
  EXPECT_EQ(state.broken_invariant(), "");
  EXPECT_EQ(state.segment_map().at(kBase + 20 * kMiB).block_count, 1u);
  // The middle block merges both ways into one block filling its segment.
  free_block(state, kBase + 4 * kMiB, 4 * kMiB);
  EXPECT_EQ(state.broken_invariant(), "");
  EXPECT_EQ(blocks(state),
            (std::vector<Seen>{{kBase, 20 * kMiB, true}, {kBase + 20 * kMiB, 20 * kMiB, true}}));
  EXPECT_EQ(state.block_count(), 2u);
  state.apply({TraceAction::segment_free, kBase, 20 * kMiB});
  EXPECT_EQ(state.broken_invariant(), "");
}

TEST(SegmentStateBlocks, LargestFreeFollowsTheLargestBlockWhenItIsTaken) {
  SegmentState state;
  state.apply({TraceAction::segment_alloc, kBase, 40 * kMiB});
  state.apply({TraceAction::segment_alloc, kBase + 64 * kMiB, 20 * kMiB});
  state.apply({TraceAction::segment_alloc, kBase + 128 * kMiB, 20 * kMiB});
  EXPECT_EQ(state.sample().largest_free, 40 * kMiB);
  state.apply({TraceAction::alloc, kBase, 40 * kMiB});  // the largest goes: two of 20 MiB left
  EXPECT_EQ(state.sample().largest_free, 20 * kMiB);
  state.apply({TraceAction::alloc, kBase + 64 * kMiB, 16 * kMiB});  // one of them is split
  EXPECT_EQ(state.sample().largest_free, 20 * kMiB);
  state.apply({TraceAction::alloc, kBase + 128 * kMiB, 12 * kMiB});
  EXPECT_EQ(state.sample().largest_free, 8 * kMiB);
  // The 40 MiB block comes back at the same place (its node reused) and goes again.
  free_block(state, kBase, 40 * kMiB);
  EXPECT_EQ(state.sample().largest_free, 40 * kMiB);
  state.apply({TraceAction::alloc, kBase, 40 * kMiB});
  EXPECT_EQ(state.sample().largest_free, 8 * kMiB);
  EXPECT_EQ(state.broken_invariant(), "");
  // Everything taken: nothing free.
  state.apply({TraceAction::alloc, kBase + 140 * kMiB, 8 * kMiB});
  state.apply({TraceAction::alloc, kBase + 80 * kMiB, 4 * kMiB});
  EXPECT_EQ(state.sample().largest_free, 0u);
  EXPECT_EQ(state.broken_invariant(), "");
}

// Many allocations and frees of varied sizes in a few segments: the heap gathers stale entries
// and is rebuilt; largest_free and the rings stay what the blocks say (broken_invariant checks
// largest_free against the blocks).
TEST(SegmentStateBlocks, ChurnKeepsLargestFreeAndTheRingsConsistent) {
  SegmentState state;
  constexpr int kSegments = 4;
  for (int s = 0; s < kSegments; ++s)
    state.apply({TraceAction::segment_alloc, kBase + s * 64 * kMiB, 64 * kMiB});
  std::vector<std::pair<std::uint64_t, Bytes>> live;
  std::uint64_t seed = 12345;
  auto next_random = [&] {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return seed >> 33;
  };
  for (int step = 0; step < 20000; ++step) {
    if (!live.empty() && (next_random() % 2 == 0 || live.size() > 200)) {
      const std::size_t i = next_random() % live.size();
      free_block(state, live[i].first, live[i].second);
      live[i] = live.back();
      live.pop_back();
    } else {
      // The first free block (in address order) with room for a random size.
      const Bytes size = (1 + next_random() % 4096) * 1024;
      for (const auto& [address, size_now, free] : blocks(state)) {
        if (free && size_now >= state.rules().round_size(size)) {
          state.apply({TraceAction::alloc, address, size});
          live.emplace_back(address, size);
          break;
        }
      }
    }
    if (step % 499 == 0) {
      ASSERT_EQ(state.broken_invariant(), "") << "step " << step;
    }
  }
  EXPECT_EQ(state.broken_invariant(), "");
  for (const auto& [address, size] : live)
    free_block(state, address, size);
  EXPECT_EQ(state.block_count(), std::size_t{kSegments});
  EXPECT_EQ(state.sample().largest_free, 64 * kMiB);
  EXPECT_EQ(state.broken_invariant(), "");
}

// Expandable segments: a mapping joins the range before it and the one after it into one ring;
// an unmap cuts the ring in two around the range it takes out.
TEST(SegmentStateBlocks, MapsJoinAndUnmapsCutTheRings) {
  LayoutRules rules;
  rules.expandable_segments = true;
  SegmentState state(rules);
  state.apply({TraceAction::segment_map, kBase, 20 * kMiB});
  state.apply({TraceAction::alloc, kBase, 8 * kMiB});
  state.apply({TraceAction::segment_map, kBase + 40 * kMiB, 20 * kMiB});
  state.apply({TraceAction::alloc, kBase + 40 * kMiB, 4 * kMiB});
  // The gap between them: one range of 60 MiB, the free blocks either side merged into it.
  state.apply({TraceAction::segment_map, kBase + 20 * kMiB, 20 * kMiB});
  EXPECT_EQ(state.broken_invariant(), "");
  EXPECT_EQ(state.segment_count(), 1u);
  EXPECT_EQ(blocks(state), (std::vector<Seen>{{kBase, 8 * kMiB, false},
                                              {kBase + 8 * kMiB, 32 * kMiB, true},
                                              {kBase + 40 * kMiB, 4 * kMiB, false},
                                              {kBase + 44 * kMiB, 16 * kMiB, true}}));
  // Out of the middle of the free 32 MiB: its ends stay, each in its own range.
  state.apply({TraceAction::segment_unmap, kBase + 20 * kMiB, 10 * kMiB});
  EXPECT_EQ(state.broken_invariant(), "");
  EXPECT_EQ(state.segment_count(), 2u);
  EXPECT_EQ(blocks(state), (std::vector<Seen>{{kBase, 8 * kMiB, false},
                                              {kBase + 8 * kMiB, 12 * kMiB, true},
                                              {kBase + 30 * kMiB, 10 * kMiB, true},
                                              {kBase + 40 * kMiB, 4 * kMiB, false},
                                              {kBase + 44 * kMiB, 16 * kMiB, true}}));
  // The whole free end of the second range, then its free start.
  state.apply({TraceAction::segment_unmap, kBase + 44 * kMiB, 16 * kMiB});
  state.apply({TraceAction::segment_unmap, kBase + 30 * kMiB, 10 * kMiB});
  EXPECT_EQ(state.broken_invariant(), "");
  EXPECT_EQ(blocks(state), (std::vector<Seen>{{kBase, 8 * kMiB, false},
                                              {kBase + 8 * kMiB, 12 * kMiB, true},
                                              {kBase + 40 * kMiB, 4 * kMiB, false}}));
  EXPECT_EQ(state.sample().largest_free, 12 * kMiB);
  EXPECT_EQ(state.sample().reserved, 24 * kMiB);
  // Mapped back: the three ranges are one again.
  state.apply({TraceAction::segment_map, kBase + 20 * kMiB, 20 * kMiB});
  EXPECT_EQ(state.broken_invariant(), "");
  EXPECT_EQ(state.segment_count(), 1u);
  EXPECT_EQ(state.sample().largest_free, 32 * kMiB);
}

// A copy's blocks belong to its own segments: changing the original leaves the copy as it was.
TEST(SegmentStateBlocks, ACopyKeepsItsOwnSegments) {
  SegmentState state;
  state.apply({TraceAction::segment_alloc, kBase, 20 * kMiB});
  state.apply({TraceAction::alloc, kBase, 4 * kMiB});
  auto copy = std::make_unique<SegmentState>(state);
  SegmentState assigned;
  assigned = *copy;
  free_block(state, kBase, 4 * kMiB);
  state.apply({TraceAction::segment_free, kBase, 20 * kMiB});
  EXPECT_EQ(copy->broken_invariant(), "");
  copy->apply({TraceAction::alloc, kBase + 4 * kMiB, 16 * kMiB});
  EXPECT_EQ(copy->segment_map().at(kBase).block_count, 2u);
  EXPECT_EQ(copy->segment_map().at(kBase).free_bytes, 0u);
  EXPECT_EQ(copy->broken_invariant(), "");
  copy.reset();
  free_block(assigned, kBase, 4 * kMiB);
  EXPECT_EQ(assigned.broken_invariant(), "");
  EXPECT_EQ(assigned.segment_map().at(kBase).block_count, 1u);
  EXPECT_EQ(assigned.sample().largest_free, 20 * kMiB);
}

// Equal states have equal blocks, not only equal segments and totals.
TEST(SegmentStateBlocks, StatesWithTheSameTotalsButOtherBlocksDiffer) {
  auto with_block_at = [](std::uint64_t address) {
    SegmentState state;
    SegmentState::SegmentInfo segment;
    segment.size = 20 * kMiB;
    state.add_segment(kBase, segment);
    SegmentState::BlockInfo block;
    block.size = 4 * kMiB;
    block.requested = 4 * kMiB;
    block.state = BlockState::active_allocated;
    state.place_block(address, block);
    return state;
  };
  EXPECT_EQ(with_block_at(kBase), with_block_at(kBase));
  EXPECT_EQ(with_block_at(kBase).sample(), with_block_at(kBase + 16 * kMiB).sample());
  EXPECT_NE(with_block_at(kBase), with_block_at(kBase + 16 * kMiB));
}

// The walk-back places a mid-run trace's live blocks in address order, thousands of them in one
// expandable segment: the state is the one the allocations would have made, in either order.
TEST(SegmentStateBlocks, PlacingManyBlocksInOneSegmentGivesTheAllocatedState) {
  constexpr int kBlocks = 5000;
  constexpr Bytes kSize = 2 * kMiB;
  LayoutRules rules;
  rules.expandable_segments = true;
  SegmentState::SegmentInfo segment;
  segment.size = 2 * kBlocks * kSize;
  segment.expandable = true;
  SegmentState allocated(rules);
  allocated.apply({TraceAction::segment_map, kBase, segment.size});
  SegmentState placed(rules);
  placed.add_segment(kBase, segment);
  SegmentState placed_backwards(rules);
  placed_backwards.add_segment(kBase, segment);
  SegmentState::BlockInfo block;
  block.size = kSize;
  block.requested = kSize;
  block.state = BlockState::active_allocated;
  // Every other 2 MiB: allocate two, free the first.
  for (int i = 0; i < kBlocks; ++i) {
    const std::uint64_t address = kBase + 2 * i * kSize;
    allocated.apply({TraceAction::alloc, address, kSize});
    allocated.apply({TraceAction::alloc, address + kSize, kSize});
    free_block(allocated, address, kSize);
    placed.place_block(address + kSize, block);
  }
  for (int i = kBlocks - 1; i >= kBlocks - 100; --i)
    placed_backwards.place_block(kBase + (2 * i + 1) * kSize, block);
  EXPECT_EQ(placed.broken_invariant(), "");
  EXPECT_EQ(placed_backwards.broken_invariant(), "");
  EXPECT_EQ(blocks(placed), blocks(allocated));
  EXPECT_EQ(placed.sample(), allocated.sample());
  EXPECT_EQ(placed.block_count(), 2u * kBlocks);
  EXPECT_EQ(placed_backwards.block_count(), 200u);  // 100 placed, 100 free gaps
  EXPECT_EQ(placed_backwards.sample().allocated, 100 * kSize);
}

// The recorded traces (expandable segments among them) keep the state consistent entry after
// entry, and so does the walk-back's start state of the trace's second half.
class FixtureBlocks : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureBlocks, EveryEntryKeepsTheStateConsistent) {
  const Snapshot& full = fixture(GetParam());
  const auto rules = LayoutRules::from_allocator_settings(full.allocator_settings);
  const std::vector<TraceEvent>& events = full.device_traces[0];
  SegmentState state(rules);
  for (std::size_t i = 0; i < events.size(); ++i) {
    state.apply(events[i]);
    if (i % 997 == 0) {
      ASSERT_EQ(state.broken_invariant(), "") << "after entry " << i;
    }
  }
  EXPECT_EQ(state.broken_invariant(), "");
  Snapshot cut = full;
  cut.device_traces[0].erase(
      cut.device_traces[0].begin(),
      cut.device_traces[0].begin() + static_cast<std::ptrdiff_t>(events.size() / 2));
  EXPECT_EQ(initial_state(cut, 0).broken_invariant(), "");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureBlocks, ::testing::ValuesIn(fixture_names()));

}  // namespace
}  // namespace fragscope::snapshot::test
