#pragma once
// EventSpool: a device trace kept as packed blocks instead of a TraceEvent vector, so that an
// import holds ~10 bytes per trace entry instead of 48 (and no series beside them). Events are
// appended as the pickle is read and visited block by block, forward (the timeline, the store)
// or backward (the state before the first entry); one event can be read back by index (a pickle
// that references an entry twice).
//
// A block is kBlockEvents events, each a head (the action, and how many bytes each field takes)
// and the fields as the low bytes of words: address, stream and time as zigzag deltas from the
// block's previous event, size and stack id as they are (event_spool.cpp). The block being
// filled stays unpacked. Packed blocks past `memory_limit` bytes go to an unnamed temporary file
// (under TMPDIR, gone when the last spool using it is), so a spool's memory is bounded whatever
// the trace's length; where no file can be made they stay in memory.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "engine/core/trace.h"

namespace fragscope::snapshot {

class EventSpool {
 public:
  static constexpr std::size_t kBlockEvents = 4096;
  // Packed bytes a spool keeps in memory before it writes blocks to a file (~400k entries of a
  // real trace): the traces users share stay in memory, and a 1.2M-entry import holds 4 MB of
  // its trace instead of 12 (the file's blocks are read back from the page cache).
  static constexpr std::size_t kDefaultMemoryLimit = std::size_t{4} << 20;

  explicit EventSpool(std::size_t memory_limit = kDefaultMemoryLimit)
      : memory_limit_(memory_limit) {}

  void push_back(const TraceEvent& event);
  std::size_t size() const { return packed_events_ + tail_.size(); }
  bool empty() const { return size() == 0; }
  // Events of `action`, counted as they were appended (no block decoded).
  std::size_t count(TraceAction action) const {
    return action_counts_[static_cast<std::size_t>(action)];
  }
  // Bursts of segment_free noted at most: a trace with more (an empty_cache call every step) is
  // walked instead, and the notes stay within 8 KiB.
  static constexpr std::size_t kMaxNotedBursts = 1024;
  // Where each run of segment_free entries begins, in order (empty_cache and a malloc's OOM path
  // free segments in bursts): a reader that looks only there need not decode the whole spool.
  // nullopt past kMaxNotedBursts runs.
  std::optional<std::span<const std::size_t>> segment_free_bursts() const {
    if (too_many_bursts_)
      return std::nullopt;
    return std::span<const std::size_t>(segment_free_bursts_);
  }
  // Segment entries noted at most (~3 MiB of them): a trace with more is walked instead.
  static constexpr std::size_t kMaxNotedSegmentEvents = std::size_t{1} << 16;
  // Its segment_alloc, segment_free, segment_map and segment_unmap entries, in order: whether any
  // segment predates the trace (snapshot::no_segments_before) is known without decoding the
  // spool. nullopt past kMaxNotedSegmentEvents of them.
  std::optional<std::span<const TraceEvent>> segment_events() const {
    if (too_many_segment_events_)
      return std::nullopt;
    return std::span<const TraceEvent>(segment_events_);
  }
  // The first three distinct streams of its entries, in the order they first appear (fewer when
  // the trace has fewer): whether a trace runs on exactly two streams, without decoding it.
  std::span<const StreamId> first_streams() const {
    return std::span(first_streams_).first(first_stream_count_);
  }
  // The event at `index` (< size()): decodes its block, so only for the odd lookup.
  TraceEvent at(std::size_t index) const;
  // Calls visit(block, index of its first event) for every block in order; `backward` visits the
  // last block first (each block's events still in order). `visit` returns void.
  template <typename Visit>
  void for_each_block(bool backward, Visit&& visit) const {
    Scratch scratch;
    const std::size_t blocks = blocks_.size() + (tail_.empty() ? 0 : 1);
    for (std::size_t k = 0; k < blocks; ++k) {
      const std::size_t b = backward ? blocks - 1 - k : k;
      visit(block(b, scratch), b * kBlockEvents);
    }
  }
  // Bytes held in memory (the packed blocks not in the file and the unpacked tail's capacity).
  std::size_t memory_bytes() const;
  // Packed bytes written to the temporary file.
  std::uint64_t file_bytes() const { return file_bytes_; }
  std::vector<TraceEvent> to_vector() const;

  friend bool operator==(const EventSpool& a, const EventSpool& b) {
    return a.to_vector() == b.to_vector();
  }

 private:
  friend class TraceWindow;
  struct Scratch {
    std::vector<TraceEvent> events;
    std::vector<std::uint8_t> bytes;
  };
  struct Block {
    std::vector<std::uint8_t> bytes;  // empty when the block is in the file
    std::uint64_t file_offset = 0;
    std::uint32_t file_size = 0;
  };
  class File;
  std::span<const TraceEvent> block(std::size_t b, Scratch& scratch) const;
  void pack_tail();

  std::size_t memory_limit_;
  std::vector<Block> blocks_;      // packed, kBlockEvents events each
  std::size_t packed_events_ = 0;  // kBlockEvents * blocks_.size()
  std::size_t memory_packed_ = 0;  // bytes of the blocks kept in memory
  std::uint64_t file_bytes_ = 0;
  std::shared_ptr<File> file_;    // shared by copies; appends go to its end
  bool no_file_ = false;          // making the file failed: keep everything in memory
  std::vector<TraceEvent> tail_;  // the block being filled
  std::array<std::size_t, kTraceActionCount> action_counts_{};
  std::vector<std::size_t> segment_free_bursts_;
  bool last_was_segment_free_ = false;
  bool too_many_bursts_ = false;  // segment_free_bursts_ is cleared and no longer kept
  std::vector<TraceEvent> segment_events_;
  bool too_many_segment_events_ = false;  // segment_events_ is cleared and no longer kept
  std::array<StreamId, 3> first_streams_{};
  std::size_t first_stream_count_ = 0;
};

// A device trace in either form, visited block by block (a vector is one block).
class TraceBlocks {
 public:
  TraceBlocks() = default;
  explicit TraceBlocks(std::span<const TraceEvent> events) : events_(events) {}
  explicit TraceBlocks(const EventSpool& spool) : spool_(&spool) {}

  std::size_t size() const { return spool_ != nullptr ? spool_->size() : events_.size(); }
  template <typename Visit>
  void for_each_block(bool backward, Visit&& visit) const {
    if (spool_ != nullptr)
      spool_->for_each_block(backward, visit);
    else if (!events_.empty())
      visit(events_, std::size_t{0});
  }
  // Every event in order: visit(event, index).
  template <typename Visit>
  void for_each(Visit&& visit) const {
    for_each_block(false, [&](std::span<const TraceEvent> block, std::size_t first) {
      for (std::size_t i = 0; i < block.size(); ++i)
        visit(block[i], first + i);
    });
  }
  // Every event from the last to the first: visit(event, index).
  template <typename Visit>
  void for_each_backward(Visit&& visit) const {
    for_each_block(true, [&](std::span<const TraceEvent> block, std::size_t first) {
      for (std::size_t i = block.size(); i-- > 0;)
        visit(block[i], first + i);
    });
  }

 private:
  std::span<const TraceEvent> events_;
  const EventSpool* spool_ = nullptr;
};

// A device trace in either form read by index, for a reader that moves forward and looks at most
// one block back or ahead (a replay's request extraction, its comparison with the recording): a
// spool's blocks are decoded as they are reached, the last two kept, so the trace need not be
// unpacked whole. A reference it returns stays valid until a third block is decoded.
class TraceWindow {
 public:
  explicit TraceWindow(std::span<const TraceEvent> events) : events_(events) {}
  explicit TraceWindow(const EventSpool& spool) : spool_(&spool) {}
  TraceWindow(const TraceWindow&) = delete;  // the kept blocks' spans point into the scratches
  TraceWindow& operator=(const TraceWindow&) = delete;
  TraceWindow(TraceWindow&&) = default;

  std::size_t size() const { return spool_ != nullptr ? spool_->size() : events_.size(); }
  // Inlined always: the extraction and the comparison read every entry through it, twice.
  [[gnu::always_inline]] const TraceEvent& operator[](std::size_t index) const {
    if (spool_ == nullptr)
      return events_[index];
    const std::size_t b = index / EventSpool::kBlockEvents;
    const Kept& last = kept_[last_];
    if (last.block == b)
      return last.events[index - b * EventSpool::kBlockEvents];
    return decode(b)[index - b * EventSpool::kBlockEvents];
  }
  // The entries from `index` to the end of its block (a vector's window: to the vector's end) as
  // one array, for a reader that goes forward a run at a time rather than an entry at a time. It
  // stays valid as long as a reference operator[] returns does.
  std::span<const TraceEvent> run_from(std::size_t index) const {
    if (spool_ == nullptr)
      return events_.subspan(index);
    const std::size_t b = index / EventSpool::kBlockEvents;
    const Kept& last = kept_[last_];
    const std::span<const TraceEvent> block = last.block == b ? last.events : decode(b);
    return block.subspan(index - b * EventSpool::kBlockEvents);
  }

 private:
  struct Kept {
    std::size_t block = static_cast<std::size_t>(-1);
    EventSpool::Scratch scratch;
    std::span<const TraceEvent> events;
  };
  // Block `b`, kept or decoded into the slot used less recently; it becomes the last used.
  std::span<const TraceEvent> decode(std::size_t b) const;

  std::span<const TraceEvent> events_;
  const EventSpool* spool_ = nullptr;
  mutable Kept kept_[2];
  mutable std::size_t last_ = 0;
};

}  // namespace fragscope::snapshot
