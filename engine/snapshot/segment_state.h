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
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/allocator/flat_map.h"
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
  // A copy points its blocks at its own segments; a move keeps the map's nodes and so the links.
  SegmentState(const SegmentState& other);
  SegmentState& operator=(const SegmentState& other);
  SegmentState(SegmentState&&) noexcept = default;
  SegmentState& operator=(SegmentState&&) noexcept = default;

  // Applies one trace event; an event that contradicts the state (freeing an unknown block,
  // allocating inside an allocated block, ...) is an InputError saying which.
  void apply(const TraceEvent& event);

 private:
  static constexpr std::uint32_t kNoBlock = std::numeric_limits<std::uint32_t>::max();
  // One block in the slab. The blocks of a segment form a ring in address order (the first
  // block's prev is the last): an allocation's split, a free's merge and a mapping that grows a
  // segment relink neighbours in O(1), where a map of all blocks walked a tree for each. Each
  // knows its segment (a node of segments_, which stays put), so allocs and frees, which
  // alternate between segments, look none up.
  struct BlockNode {
    std::uint64_t address = 0;
    BlockInfo info;
    std::uint32_t prev = kNoBlock;
    std::uint32_t next = kNoBlock;
    SegmentInfo* segment = nullptr;
  };

 public:
  // The blocks of one segment in address order: `for (const auto& [address, block] : ...)`.
  class SegmentBlocks {
   public:
    class iterator {
     public:
      using value_type = std::pair<std::uint64_t, const BlockInfo&>;
      iterator(const BlockNode* nodes, std::uint32_t first, std::uint32_t at)
          : nodes_(nodes), first_(first), at_(at) {}
      value_type operator*() const { return {nodes_[at_].address, nodes_[at_].info}; }
      iterator& operator++() {
        at_ = nodes_[at_].next;
        if (at_ == first_)
          at_ = kNoBlock;
        return *this;
      }
      bool operator==(const iterator& other) const { return at_ == other.at_; }

     private:
      const BlockNode* nodes_;
      std::uint32_t first_;
      std::uint32_t at_;
    };
    SegmentBlocks(const BlockNode* nodes, std::uint32_t first) : nodes_(nodes), first_(first) {}
    iterator begin() const { return {nodes_, first_, first_}; }
    iterator end() const { return {nodes_, first_, kNoBlock}; }

   private:
    const BlockNode* nodes_;
    std::uint32_t first_;
  };

  const MemorySample& sample() const { return totals_; }
  const LayoutRules& rules() const { return rules_; }
  std::size_t block_count() const { return block_slots_.size(); }
  std::size_t segment_count() const { return segments_.size(); }
  const std::map<std::uint64_t, SegmentInfo>& segment_map() const { return segments_; }
  // The blocks of the segment that starts at `segment_address` (none if no segment starts there).
  SegmentBlocks blocks_of(std::uint64_t segment_address) const;
  // The block that starts at `address`, or nullptr.
  const BlockInfo* block_at(std::uint64_t address) const;

  // The state as snapshot segments (what _snapshot()["segments"] would have shown).
  std::vector<Segment> segments(int device = 0) const;

  // Builders for reconstructed states (used by the timeline's walk-back).
  void add_segment(std::uint64_t address, const SegmentInfo& info);
  // Places a live block inside an existing segment's free space. Blocks placed in address order
  // each find their free space in O(1) (the walk starts at the previous one).
  void place_block(std::uint64_t address, const BlockInfo& info);

  // What is inconsistent in the state (rings against addresses and the address index, each
  // segment's block count and free bytes, the size heap and largest_free), or "" when nothing
  // is; for tests.
  std::string broken_invariant() const;

  friend bool operator==(const SegmentState& a, const SegmentState& b);

 private:
  using SegmentIt = std::map<std::uint64_t, SegmentInfo>::iterator;

  [[noreturn]] void fail(const TraceEvent& e, const std::string& what) const;
  std::uint32_t slot_of(std::uint64_t address) const;  // kNoBlock when no block starts there
  std::uint32_t first_block(std::uint64_t segment_address) const {
    return slot_of(segment_address);
  }
  // The block of `seg` that holds `address` (inside the segment), walked to from the segment's
  // first block or from the last placed block when that lies at or before `address`.
  std::uint32_t block_holding(SegmentIt seg, std::uint64_t address) const;
  SegmentIt segment_containing(std::uint64_t address);
  // Points every block of `seg` at it; returns how many blocks it has and how many bytes of
  // them are free.
  std::pair<std::uint32_t, Bytes> adopt_blocks(SegmentIt seg);
  Bytes split_contribution(const SegmentInfo& s) const;

  // The slab: a new node is a ring of one; a released node leaves its ring first unless the
  // caller relinks the ring itself.
  std::uint32_t new_node(std::uint64_t address, const BlockInfo& info, SegmentInfo& seg);
  void release_node(std::uint32_t slot);
  void link_after(std::uint32_t at, std::uint32_t slot);
  void unlink(std::uint32_t slot);
  // Appends ring `second` to ring `first` (first's blocks then second's).
  void join_rings(std::uint32_t first, std::uint32_t second);

  std::uint32_t add_free(std::uint64_t address, Bytes size, SegmentInfo& seg);  // a ring of one
  void count_free_block(std::uint32_t slot);  // a free block made, or resized: after its size
  void forget_free_size(Bytes size);          // a free block of `size` went or changed size
  // Merges the free block at `slot` (not counted yet) with free neighbours in its segment and
  // counts the merged block; returns it.
  std::uint32_t coalesce(std::uint32_t slot, SegmentInfo& seg);
  // At the end of an update, when the blocks are consistent; the heap is looked at only when a
  // block of the largest size went or the heap outgrew the slab.
  void refresh_largest_free() {
    if (largest_free_gone_ || free_size_heap_.size() > 2 * nodes_.size() + 1024)
      find_largest_free();
  }
  void find_largest_free();

  void on_alloc(const TraceEvent& e);
  void on_free_requested(const TraceEvent& e);
  void on_free_completed(const TraceEvent& e);
  void on_segment_alloc(const TraceEvent& e);
  void on_segment_free(const TraceEvent& e);
  void on_segment_map(const TraceEvent& e);
  void on_segment_unmap(const TraceEvent& e);

  LayoutRules rules_;
  std::map<std::uint64_t, SegmentInfo> segments_;
  std::vector<BlockNode> nodes_;
  std::vector<std::uint32_t> unused_slots_;           // released nodes, reused first
  alloc::FlatAddressMap<std::uint32_t> block_slots_;  // block address -> its node
  std::uint32_t last_placed_ = kNoBlock;              // place_block's walk starts here
  // largest_free without an ordered map of sizes (most free sizes are unique, so a map or a hash
  // of counts inserted and erased a node for nearly every free block): a max-heap of (size,
  // slot) pushed for every free block made or resized. An entry whose slot no longer holds a
  // free block of that size is stale, and is popped when it reaches the top, which is looked at
  // only when a block of the largest size went. Rebuilt from the slab when it outgrows it.
  std::vector<std::pair<Bytes, std::uint32_t>> free_size_heap_;
  bool largest_free_gone_ = false;
  MemorySample totals_;
};

}  // namespace fragscope::snapshot
