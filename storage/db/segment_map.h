#pragma once
// The segment map as a trace describes it: which segments (or mapped ranges of expandable
// segments) exist and which blocks are live in them, after a prefix of a run's events. The store
// keeps a serialized SegmentMap as a keyframe at the start of every event chunk, so the state at
// any event is one keyframe plus less than one chunk of events.
//
// Sizes are what the trace records: segment bytes, and for blocks the request size (PyTorch's
// trace does not carry the rounded block size).
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/allocator/flat_map.h"
#include "engine/core/block_state.h"
#include "engine/core/trace.h"
#include "engine/snapshot/event_spool.h"

namespace fragscope::storage {

// A live block is active_allocated or active_pending_free (engine/core/block_state.h); the map
// holds no inactive blocks.

struct LiveBlock {
  std::uint64_t addr = 0;
  Bytes size = 0;  // the request size from the alloc event
  StreamId stream{};
  BlockState state = BlockState::active_allocated;
  FrameStackId frames{};
  friend bool operator==(const LiveBlock&, const LiveBlock&) = default;
};

// One cudaMalloc segment, or one contiguous mapped range of an expandable segment.
struct SegmentRange {
  std::uint64_t base = 0;
  Bytes size = 0;
  StreamId stream{};
  bool expandable = false;
  friend bool operator==(const SegmentRange&, const SegmentRange&) = default;
};

// Whether a stored range is the small pool's (the trace does not say): a plain segment of exactly
// 2 MiB; an expandable range that is not a whole number of the large pool's pages (the small
// pool maps 2 MiB pages, the large pool pages of `large_page` bytes, 20 MiB unless
// large_segment_size_mb says otherwise).
inline bool is_small_pool_range(const SegmentRange& range, Bytes large_page = 20ULL << 20) {
  constexpr Bytes kSmallSegment = 2ULL << 20;
  return range.expandable ? large_page == 0 || range.size % large_page != 0
                          : range.size == kSmallSegment;
}

class SegmentMap {
 public:
  SegmentMap() = default;
  SegmentMap(std::map<std::uint64_t, SegmentRange> segments,
             std::map<std::uint64_t, LiveBlock> blocks)
      : segments_(std::move(segments)), blocks_(std::move(blocks)) {}

  // Applies one event. Events that refer to something unknown (a free of a block allocated
  // before a truncated trace began) are counted in unmatched_events() and otherwise ignored.
  void apply(const TraceEvent& event);
  // apply() of each event in order, the same state and count of unmatched events. The blocks'
  // changes are gathered in a hash map first and only the net change reaches the ordered map:
  // most blocks a run of events allocates it also frees, so the map is spared a node insert and
  // erase per allocation (ingest applies each 64k-event chunk for its keyframe).
  void apply_all(std::span<const TraceEvent> events);

  // Keyed by base / address, in address order.
  const std::map<std::uint64_t, SegmentRange>& segments() const { return segments_; }
  const std::map<std::uint64_t, LiveBlock>& blocks() const { return blocks_; }
  std::uint64_t unmatched_events() const { return unmatched_; }
  Bytes reserved_bytes() const;

  // Adds state that existed before the first event (an imported trace that does not start at
  // an empty allocator).
  void add_segment(const SegmentRange& segment) { segments_[segment.base] = segment; }
  void add_block(const LiveBlock& block) { put_block(block); }

  // Undoes one event: the state before `event`, given the state after it. Rewinding a final
  // state through a whole trace gives the state the trace started from.
  void unapply(const TraceEvent& event);
  // unapply() of each event from the last to the first: the same state, with the blocks' changes
  // gathered in a hash map as apply_all() does (rewind walks a whole trace back).
  void unapply_all(const snapshot::TraceBlocks& events);

  std::vector<std::uint8_t> serialize() const;
  // `what` names the blob in errors.
  static SegmentMap deserialize(std::span<const std::uint8_t> blob, const std::string& what);

  // The same segments, blocks and count of unmatched events.
  friend bool operator==(const SegmentMap& a, const SegmentMap& b) {
    return a.segments_ == b.segments_ && a.blocks_ == b.blocks_ && a.unmatched_ == b.unmatched_;
  }

 private:
  // A block's state after the events of a batch so far, where they touched it: live (with its
  // record) or gone. Blocks not in the table are as the ordered map holds them.
  struct BlockChange {
    bool live = false;
    LiveBlock block;
  };
  // What apply_all and unapply_all work with, kept between batches: ingest applies chunk after
  // chunk of one run, each changing about as many blocks, so the change table is sized once.
  struct BatchTables {
    alloc::FlatAddressMap<BlockChange> changes;
    // The addresses blocks_ holds: most blocks a batch touches it also allocates and frees, and
    // one probe here says they never reached blocks_, where a descent of the tree per block said
    // the same.
    alloc::FlatAddressMap<bool> index;
  };
  // Scratch, not state: made by the first batch; a copy of the map starts without it.
  struct Scratch {
    Scratch() = default;
    Scratch(const Scratch&) {}
    Scratch& operator=(const Scratch&) {
      tables.reset();
      return *this;
    }
    Scratch(Scratch&&) noexcept = default;
    Scratch& operator=(Scratch&&) noexcept = default;
    ~Scratch() = default;
    std::unique_ptr<BatchTables> tables;
  };

  void map_range(const SegmentRange& range);
  void unmap_range(std::uint64_t base, Bytes size);
  // Every change of blocks_ goes through these two, which keep the batch index while the map
  // has its tables; drop_block: whether the block was there.
  void put_block(const LiveBlock& block);
  bool drop_block(std::uint64_t addr);
  // The batch's change of the block at `addr`, made from the ordered map where the batch has not
  // touched it yet.
  BlockChange& change_of(std::uint64_t addr);
  // The batch's net changes into the ordered map; the table is left empty for the next batch.
  void commit_changes();
  // The batch tables, made (their index from blocks_) where the map has none.
  BatchTables& batch_tables();

  std::map<std::uint64_t, SegmentRange> segments_;
  std::map<std::uint64_t, LiveBlock> blocks_;
  std::uint64_t unmatched_ = 0;
  Scratch batch_;
};

// The state before the first of `events`, given `final_state` after the last (a snapshot's
// segments at dump time): empty when the trace recorded everything since the allocator started,
// and otherwise what was already live when recording began (a late start or a ring buffer that
// overflowed).
SegmentMap rewind(SegmentMap final_state, const snapshot::TraceBlocks& events);
SegmentMap rewind(SegmentMap final_state, std::span<const TraceEvent> events);

// The segment map after the first `event_index` events of a run.
struct SegmentStateAt {
  std::uint64_t event_index = 0;
  SegmentMap state;
};

}  // namespace fragscope::storage
