#include "storage/db/segment_map.h"

#include <algorithm>
#include <exception>
#include <memory>
#include <utility>

#include "engine/allocator/flat_map.h"
#include "storage/db/packing.h"

namespace fragscope::storage {
namespace {
constexpr std::uint8_t kKeyframeFormat = 1;

// A batch's change table is kept for the next batch up to this many entries (ingest's parts of
// 16k events, unapply_all's windows); one made for a larger batch (a whole trace at once) is let
// go, so that later batches do not sweep its slots at every commit.
constexpr std::size_t kKeptChanges = std::size_t{1} << 16;

// Lets a map's batch tables go when the batch throws (memory): its half-filled change table must
// not reach the next batch's commit, and an index that missed a change must not be trusted.
template <typename Tables>
class DropOnThrow {
 public:
  explicit DropOnThrow(std::unique_ptr<Tables>& tables) : tables_(tables) {}
  DropOnThrow(const DropOnThrow&) = delete;
  DropOnThrow& operator=(const DropOnThrow&) = delete;
  ~DropOnThrow() {
    if (std::uncaught_exceptions() > exceptions_)
      tables_.reset();
  }

 private:
  std::unique_ptr<Tables>& tables_;
  int exceptions_ = std::uncaught_exceptions();
};
}  // namespace

void SegmentMap::apply(const TraceEvent& event) {
  switch (event.action) {
    case TraceAction::alloc:
      put_block(LiveBlock{event.addr, event.size, event.stream, BlockState::active_allocated,
                          event.frames});
      break;
    case TraceAction::free_requested:
      if (auto it = blocks_.find(event.addr); it != blocks_.end())
        it->second.state = BlockState::active_pending_free;
      else
        ++unmatched_;
      break;
    case TraceAction::free_completed:
      if (!drop_block(event.addr))
        ++unmatched_;
      break;
    case TraceAction::segment_alloc:
      segments_[event.addr] = SegmentRange{event.addr, event.size, event.stream, false};
      break;
    case TraceAction::segment_free:
      if (segments_.erase(event.addr) == 0)
        ++unmatched_;
      break;
    case TraceAction::segment_map:
      map_range(SegmentRange{event.addr, event.size, event.stream, true});
      break;
    case TraceAction::segment_unmap:
      unmap_range(event.addr, event.size);
      break;
    case TraceAction::snapshot:
    case TraceAction::oom:
      break;
  }
}

void SegmentMap::put_block(const LiveBlock& block) {
  blocks_[block.addr] = block;
  if (batch_.tables) {
    DropOnThrow drop(batch_.tables);
    batch_.tables->index.insert_or_assign(block.addr, true);
  }
}

bool SegmentMap::drop_block(std::uint64_t addr) {
  if (batch_.tables && !batch_.tables->index.erase(addr))
    return false;  // not there: no descent of the tree to learn it
  return blocks_.erase(addr) != 0;
}

SegmentMap::BatchTables& SegmentMap::batch_tables() {
  if (!batch_.tables) {
    // Kept only once whole: while a map has tables, their index holds every block.
    auto tables = std::make_unique<BatchTables>();
    tables->index = alloc::FlatAddressMap<bool>(std::max<std::size_t>(1024, 2 * blocks_.size()));
    for (const auto& entry : blocks_)
      tables->index.insert_or_assign(entry.first, true);
    batch_.tables = std::move(tables);
  }
  return *batch_.tables;
}

SegmentMap::BlockChange& SegmentMap::change_of(std::uint64_t addr) {
  alloc::FlatAddressMap<BlockChange>& changes = batch_.tables->changes;
  if (BlockChange* change = changes.find(addr))
    return *change;
  BlockChange change;
  if (batch_.tables->index.contains(addr))
    if (const auto it = blocks_.find(addr); it != blocks_.end())
      change = BlockChange{true, it->second};
  changes.insert_or_assign(addr, change);
  return *changes.find(addr);
}

void SegmentMap::commit_changes() {
  alloc::FlatAddressMap<BlockChange>& changes = batch_.tables->changes;
  changes.for_each([this](std::uint64_t addr, const BlockChange& change) {
    if (change.live)
      put_block(change.block);
    else
      drop_block(addr);
  });
  if (changes.size() > kKeptChanges)
    changes = alloc::FlatAddressMap<BlockChange>();
  else
    changes.clear();
}

void SegmentMap::apply_all(std::span<const TraceEvent> events) {
  alloc::FlatAddressMap<BlockChange>& changes = batch_tables().changes;
  DropOnThrow drop(batch_.tables);
  for (const TraceEvent& event : events) {
    switch (event.action) {
      case TraceAction::alloc:
        changes.insert_or_assign(
            event.addr, BlockChange{true, LiveBlock{event.addr, event.size, event.stream,
                                                    BlockState::active_allocated, event.frames}});
        break;
      case TraceAction::free_requested: {
        BlockChange& change = change_of(event.addr);
        if (change.live)
          change.block.state = BlockState::active_pending_free;
        else
          ++unmatched_;
        break;
      }
      case TraceAction::free_completed: {
        BlockChange& change = change_of(event.addr);
        if (change.live)
          change.live = false;
        else
          ++unmatched_;
        break;
      }
      default:
        apply(event);  // segments: not blocks
        break;
    }
  }
  commit_changes();
}

void SegmentMap::unapply_all(const snapshot::TraceBlocks& events) {
  // Committed every kWindow events, so the hash map stays small on any trace; most blocks a
  // window frees it also allocates, and those never reach the ordered map.
  constexpr std::size_t kWindow = std::size_t{1} << 14;
  alloc::FlatAddressMap<BlockChange>& changes = batch_tables().changes;
  DropOnThrow drop(batch_.tables);
  std::size_t in_window = 0;
  events.for_each_backward([&](const TraceEvent& event, std::size_t) {
    switch (event.action) {
      case TraceAction::alloc:
        changes.insert_or_assign(event.addr, BlockChange{});
        break;
      case TraceAction::free_requested: {
        BlockChange& change = change_of(event.addr);
        if (change.live)
          change.block.state = BlockState::active_allocated;
        else
          change = BlockChange{
              true,
              LiveBlock{event.addr, event.size, event.stream, BlockState::active_allocated, {}}};
        break;
      }
      case TraceAction::free_completed:
        // The stack of a free event is the free's, not the allocation's: unknown here.
        changes.insert_or_assign(
            event.addr,
            BlockChange{
                true,
                LiveBlock{
                    event.addr, event.size, event.stream, BlockState::active_pending_free, {}}});
        break;
      default:
        unapply(event);  // segments: not blocks
        break;
    }
    if (++in_window == kWindow) {
      commit_changes();
      in_window = 0;
    }
  });
  commit_changes();
}

void SegmentMap::unapply(const TraceEvent& event) {
  switch (event.action) {
    case TraceAction::alloc:
      drop_block(event.addr);
      break;
    case TraceAction::free_requested:
      if (auto it = blocks_.find(event.addr); it != blocks_.end())
        it->second.state = BlockState::active_allocated;
      else
        put_block(LiveBlock{event.addr, event.size, event.stream, BlockState::active_allocated,
                            FrameStackId{}});
      break;
    case TraceAction::free_completed:
      // The stack of a free event is the free's, not the allocation's: unknown here.
      put_block(LiveBlock{event.addr, event.size, event.stream, BlockState::active_pending_free,
                          FrameStackId{}});
      break;
    case TraceAction::segment_alloc:
      segments_.erase(event.addr);
      break;
    case TraceAction::segment_free:
      segments_[event.addr] = SegmentRange{event.addr, event.size, event.stream, false};
      break;
    case TraceAction::segment_map:
      unmap_range(event.addr, event.size);
      break;
    case TraceAction::segment_unmap:
      map_range(SegmentRange{event.addr, event.size, event.stream, true});
      break;
    case TraceAction::snapshot:
    case TraceAction::oom:
      break;
  }
}

SegmentMap rewind(SegmentMap final_state, const snapshot::TraceBlocks& events) {
  final_state.unapply_all(events);
  return SegmentMap(final_state.segments(), final_state.blocks());
}

SegmentMap rewind(SegmentMap final_state, std::span<const TraceEvent> events) {
  return rewind(std::move(final_state), snapshot::TraceBlocks(events));
}

// Mapping next to a mapped range of the same stream extends it, as PyTorch's snapshot reports
// one segment per contiguous mapped range.
void SegmentMap::map_range(const SegmentRange& range) {
  SegmentRange merged = range;
  auto next = segments_.lower_bound(range.base);
  if (next != segments_.begin()) {
    auto previous = std::prev(next);
    const SegmentRange& p = previous->second;
    if (p.expandable && p.stream == range.stream && p.base + p.size == range.base) {
      merged.base = p.base;
      merged.size += p.size;
      segments_.erase(previous);
    }
  }
  next = segments_.find(range.base + range.size);
  if (next != segments_.end() && next->second.expandable && next->second.stream == range.stream) {
    merged.size += next->second.size;
    segments_.erase(next);
  }
  segments_[merged.base] = merged;
}

void SegmentMap::unmap_range(std::uint64_t base, Bytes size) {
  const std::uint64_t end = base + size;
  auto it = segments_.upper_bound(base);
  if (it != segments_.begin())
    --it;
  bool touched = false;
  while (it != segments_.end() && it->second.base < end) {
    const SegmentRange range = it->second;
    const std::uint64_t range_end = range.base + range.size;
    if (!range.expandable || range_end <= base) {
      ++it;
      continue;
    }
    touched = true;
    it = segments_.erase(it);
    if (range.base < base)
      segments_[range.base] = SegmentRange{range.base, base - range.base, range.stream, true};
    if (range_end > end)
      segments_[end] = SegmentRange{end, range_end - end, range.stream, true};
    it = segments_.lower_bound(range_end);
  }
  if (!touched)
    ++unmatched_;
}

Bytes SegmentMap::reserved_bytes() const {
  Bytes total = 0;
  for (const auto& [base, segment] : segments_)
    total += segment.size;
  return total;
}

std::vector<std::uint8_t> SegmentMap::serialize() const {
  std::vector<std::uint8_t> raw;
  raw.reserve(16 + segments_.size() * 12 + blocks_.size() * 12);
  put_varint(raw, unmatched_);
  put_varint(raw, segments_.size());
  std::uint64_t previous = 0;
  for (const auto& [base, segment] : segments_) {
    put_varint(raw, base - previous);
    put_varint(raw, segment.size);
    put_varint(raw, segment.stream.value);
    raw.push_back(segment.expandable ? 1 : 0);
    previous = base;
  }
  put_varint(raw, blocks_.size());
  previous = 0;
  for (const auto& [addr, block] : blocks_) {
    put_varint(raw, addr - previous);
    put_varint(raw, block.size);
    put_varint(raw, block.stream.value);
    raw.push_back(static_cast<std::uint8_t>(block.state));
    put_varint(raw, block.frames.value);
    previous = addr;
  }
  std::vector<std::uint8_t> blob;
  blob.push_back(kKeyframeFormat);
  put_varint(blob, raw.size());
  const auto compressed = deflate_bytes(raw);
  blob.insert(blob.end(), compressed.begin(), compressed.end());
  return blob;
}

SegmentMap SegmentMap::deserialize(std::span<const std::uint8_t> blob, const std::string& what) {
  ByteReader header(blob, what);
  if (const auto format = header.byte(); format != kKeyframeFormat)
    header.fail("unknown keyframe format " + std::to_string(format));
  const std::uint64_t raw_size = header.varint();
  if (raw_size > (std::uint64_t{1} << 32))
    header.fail("implausible keyframe size");
  const auto raw =
      inflate_bytes(header.take(header.remaining()), static_cast<std::size_t>(raw_size), what);
  ByteReader in(raw, what);
  SegmentMap map;
  map.unmatched_ = in.varint();
  const std::uint64_t segment_count = in.varint();
  if (segment_count > raw.size())
    in.fail("implausible segment count");
  std::uint64_t address = 0;
  for (std::uint64_t i = 0; i < segment_count; ++i) {
    SegmentRange segment;
    address += in.varint();
    segment.base = address;
    segment.size = in.varint();
    segment.stream = StreamId{in.varint()};
    segment.expandable = in.byte() != 0;
    map.segments_.emplace_hint(map.segments_.end(), segment.base, segment);
  }
  const std::uint64_t block_count = in.varint();
  if (block_count > raw.size())
    in.fail("implausible block count");
  address = 0;
  for (std::uint64_t i = 0; i < block_count; ++i) {
    LiveBlock block;
    address += in.varint();
    block.addr = address;
    block.size = in.varint();
    block.stream = StreamId{in.varint()};
    const std::uint8_t state = in.byte();
    if (state > static_cast<std::uint8_t>(BlockState::active_pending_free))
      in.fail("unknown block state " + std::to_string(state));
    block.state = static_cast<BlockState>(state);
    block.frames = FrameStackId{static_cast<std::uint32_t>(in.varint())};
    // Not put_block: a new map has no batch index to keep.
    map.blocks_.emplace_hint(map.blocks_.end(), block.addr, block);
  }
  if (!in.at_end())
    in.fail("trailing bytes");
  return map;
}

}  // namespace fragscope::storage
