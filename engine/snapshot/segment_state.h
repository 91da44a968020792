#pragma once
// The allocator's segments and blocks at one point of a trace, rebuilt from trace events alone.
// A trace entry gives an allocation's unrounded size; the block it got follows from PyTorch's
// rounding and split rules (torch-allocator-spec §1.2, §3.2, §3.3), which LayoutRules applies with
// the snapshot's own allocator_settings. SegmentState::apply() moves forward one event and keeps
// the totals a timeline plots, so a whole trace is one pass.
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/core/memory_sample.h"
#include "engine/core/trace.h"
#include "engine/core/units.h"
#include "engine/snapshot/snapshot.h"

namespace fragscope::alloc {
struct AllocatorConfig;
}  // namespace fragscope::alloc

namespace fragscope::snapshot {

// The part of the allocator configuration that decides block sizes.
struct LayoutRules {
  Bytes max_split_size = std::numeric_limits<Bytes>::max();  // unlimited
  std::array<std::uint64_t, 16> roundup_power2_divisions{};
  bool expandable_segments = false;

  static LayoutRules from_config(const alloc::AllocatorConfig& config);
  // From a snapshot's allocator_settings via alloc::config_from_allocator_settings; a dict older
  // releases wrote with fewer keys is read for just the keys above (missing ones keep PyTorch's
  // defaults), and a value of the wrong type is an InputError naming the key.
  static LayoutRules from_allocator_settings(const nlohmann::json& settings);
  // round_size(n): the block size PyTorch uses for a request of n bytes.
  Bytes round_size(Bytes n) const;
  // Whether a free block of `block_size` is split when `rounded` bytes of it are handed out.
  bool should_split(Bytes block_size, Bytes rounded) const;
  friend bool operator==(const LayoutRules&, const LayoutRules&) = default;
};

class SegmentState {
 public:
  struct BlockInfo {
    Bytes size = 0;
    Bytes requested = 0;
    BlockState state = BlockState::inactive;
    FrameStackId frames{};
    bool predates_trace = false;  // allocated before the first trace entry; size inferred
    friend bool operator==(const BlockInfo&, const BlockInfo&) = default;
  };
  struct SegmentInfo {
    Bytes size = 0;
    StreamId stream{};
    PoolKind pool = PoolKind::large;
    bool expandable = false;
    bool predates_trace = false;
    std::uint32_t block_count = 0;
    Bytes free_bytes = 0;
    friend bool operator==(const SegmentInfo&, const SegmentInfo&) = default;
  };

  explicit SegmentState(LayoutRules rules = {});

  // Applies one trace event; an event that contradicts the state (freeing an unknown block,
  // allocating inside an allocated block, ...) is an InputError saying which.
  void apply(const TraceEvent& event);

  const MemorySample& sample() const { return totals_; }
  const LayoutRules& rules() const { return rules_; }
  std::size_t block_count() const { return blocks_.size(); }
  std::size_t segment_count() const { return segments_.size(); }
  const std::map<std::uint64_t, SegmentInfo>& segment_map() const { return segments_; }
  const std::map<std::uint64_t, BlockInfo>& block_map() const { return blocks_; }

  // The state as snapshot segments (what _snapshot()["segments"] would have shown).
  std::vector<Segment> segments(int device = 0) const;

  // Builders for reconstructed states (used by the timeline's walk-back).
  void add_segment(std::uint64_t address, const SegmentInfo& info);
  // Places a live block inside an existing segment's free space.
  void place_block(std::uint64_t address, const BlockInfo& info);

  friend bool operator==(const SegmentState& a, const SegmentState& b) {
    return a.segments_ == b.segments_ && a.blocks_ == b.blocks_ && a.totals_ == b.totals_;
  }

 private:
  using BlockIt = std::map<std::uint64_t, BlockInfo>::iterator;
  using SegmentIt = std::map<std::uint64_t, SegmentInfo>::iterator;

  [[noreturn]] void fail(const TraceEvent& e, const std::string& what) const;
  BlockIt find_block(std::uint64_t address);  // blocks_.find, through the hint
  void hint_block(BlockIt it) {
    hint_.block = it;
    hint_.block_address = it->first;
    hint_.has_block = true;
  }
  SegmentIt segment_containing(std::uint64_t address);
  Bytes split_contribution(const SegmentInfo& s) const;
  void add_free(std::uint64_t address, Bytes size, SegmentInfo& seg);
  void remove_free(BlockIt it, SegmentInfo& seg);
  void forget_free_size(Bytes size);  // one free block of `size` fewer in free_sizes_
  // Merges the free block at `it` with free neighbours in the same segment; returns the merged
  // block.
  BlockIt coalesce(BlockIt it, SegmentIt seg);
  void recount(SegmentIt seg);
  void refresh_largest_free();

  void on_alloc(const TraceEvent& e);
  void on_free_requested(const TraceEvent& e);
  void on_free_completed(const TraceEvent& e);
  void on_segment_alloc(const TraceEvent& e);
  void on_segment_free(const TraceEvent& e);
  void on_segment_map(const TraceEvent& e);
  void on_segment_unmap(const TraceEvent& e);

  LayoutRules rules_;
  std::map<std::uint64_t, SegmentInfo> segments_;
  std::map<std::uint64_t, BlockInfo> blocks_;
  std::map<Bytes, std::uint32_t> free_sizes_;  // size -> number of free blocks of that size
  MemorySample totals_;

  // The block and the segment recent events used, looked at before the maps: a free_completed
  // follows its free_requested, an allocation often takes the rest of the block the previous one
  // split or the block a free just merged, and events stay in one segment for a while. A tree
  // descent is a chain of cache misses, and an event made two or three. Dropped when a node of
  // its map is erased, and on copy or move (its iterators point into the other object's maps).
  struct Hint {
    bool has_block = false;
    bool has_segment = false;
    std::uint64_t block_address = 0;
    BlockIt block;
    SegmentIt segment;

    Hint() = default;
    Hint(const Hint&) {}
    Hint& operator=(const Hint&) {
      has_block = false;
      has_segment = false;
      return *this;
    }
  };
  Hint hint_;
};

}  // namespace fragscope::snapshot
