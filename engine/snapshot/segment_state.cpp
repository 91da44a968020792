#include "engine/snapshot/segment_state.h"

#include <algorithm>
#include <bit>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "engine/allocator/config.h"
#include "engine/allocator/sizes.h"
#include "engine/core/error.h"
#include "engine/core/hex.h"

namespace fragscope::snapshot {
namespace {
constexpr Bytes kSmallSize = alloc::kSmallSize;

// A range [address, address + size) that does not reach past 2^64 - 1.
bool fits_address_space(std::uint64_t address, Bytes size) {
  return size <= std::numeric_limits<std::uint64_t>::max() - address;
}

}  // namespace

// ---- LayoutRules ------------------------------------------------------------------------------

LayoutRules LayoutRules::from_config(const alloc::AllocatorConfig& config) {
  LayoutRules r;
  r.max_split_size = config.max_split_size;
  r.roundup_power2_divisions = config.roundup_power2_divisions;
  r.expandable_segments = config.expandable_segments;
  return r;
}

LayoutRules LayoutRules::from_allocator_settings(const nlohmann::json& settings) {
  if (!settings.is_object() || settings.empty())
    return LayoutRules{};  // PyTorch 2.0 snapshots record no settings: the defaults applied
  try {
    return from_config(alloc::config_from_allocator_settings(settings));
  } catch (const alloc::AllocatorConfigError&) {
    // Releases between 2.1 and 2.11 record fewer keys than the strict parser wants; the three
    // that decide block sizes are read on their own below.
  }
  LayoutRules r;
  // The value found is quoted (cut short): "must be an int" alone did not say what was there.
  auto bad = [](const std::string& key, const char* expected, const nlohmann::json& found) {
    std::string text = found.dump();
    if (text.size() > 60)
      text = text.substr(0, 57) + "...";
    throw InputError("allocator_settings: '" + key + "' must be " + expected + ", got " + text);
  };
  if (auto it = settings.find("max_split_size"); it != settings.end()) {
    if (!it->is_number_integer())
      bad("max_split_size", "an int", *it);
    std::int64_t v = it->get<std::int64_t>();
    r.max_split_size = v < 0 ? std::numeric_limits<Bytes>::max() : static_cast<Bytes>(v);
  }
  if (auto it = settings.find("expandable_segments"); it != settings.end()) {
    if (!it->is_boolean())
      bad("expandable_segments", "a bool", *it);
    r.expandable_segments = it->get<bool>();
  }
  if (auto it = settings.find("roundup_power2_divisions"); it != settings.end()) {
    if (!it->is_object())
      bad("roundup_power2_divisions", "a dict of MiB interval start -> divisions", *it);
    for (const auto& [key, value] : it->items()) {
      std::uint64_t mib = 0;
      try {
        mib = std::stoull(key);
      } catch (const std::exception&) {
        bad("roundup_power2_divisions", "keyed by powers of two in MiB", key);
      }
      if (mib == 0 || !std::has_single_bit(mib) || std::bit_width(mib) > 16)
        bad("roundup_power2_divisions", "keyed by powers of two from 1 to 32768 (MiB)", key);
      if (!value.is_number_integer() ||
          (value.is_number_unsigned()
               ? value.get<std::uint64_t>() >
                     static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())
               : value.get<std::int64_t>() < 0))
        bad("roundup_power2_divisions", "a dict of ints in [0, 2^63)", value);
      r.roundup_power2_divisions[static_cast<std::size_t>(std::bit_width(mib) - 1)] =
          value.get<std::uint64_t>();
    }
  }
  return r;
}

// One set of rules: the allocator's own rounding and split decisions (engine/allocator/sizes.h).
Bytes LayoutRules::round_size(Bytes n) const {
  return alloc::round_size(n, roundup_power2_divisions);
}

bool LayoutRules::should_split(Bytes block_size, Bytes rounded) const {
  return alloc::should_split(block_size, rounded, alloc::pool_for(rounded), max_split_size,
                             expandable_segments);
}

// ---- SegmentState -----------------------------------------------------------------------------

SegmentState::SegmentState(LayoutRules rules) : rules_(rules), block_slots_(64) {}

SegmentState::SegmentState(const SegmentState& other)
    : rules_(other.rules_),
      segments_(other.segments_),
      nodes_(other.nodes_),
      unused_slots_(other.unused_slots_),
      block_slots_(other.block_slots_),
      last_placed_(other.last_placed_),
      free_size_heap_(other.free_size_heap_),
      largest_free_gone_(other.largest_free_gone_),
      totals_(other.totals_) {
  for (auto seg = segments_.begin(); seg != segments_.end(); ++seg)
    adopt_blocks(seg);
}

SegmentState& SegmentState::operator=(const SegmentState& other) {
  if (this != &other)
    *this = SegmentState(other);
  return *this;
}

void SegmentState::fail(const TraceEvent& e, const std::string& what) const {
  throw InputError(std::string(to_string(e.action)) + " at " + hex_address(e.addr) + " (size " +
                   std::to_string(e.size) + "): " + what);
}

std::uint32_t SegmentState::slot_of(std::uint64_t address) const {
  const std::uint32_t* slot = block_slots_.find(address);
  return slot == nullptr ? kNoBlock : *slot;
}

SegmentState::SegmentBlocks SegmentState::blocks_of(std::uint64_t segment_address) const {
  return {nodes_.data(),
          segments_.count(segment_address) != 0 ? first_block(segment_address) : kNoBlock};
}

const SegmentState::BlockInfo* SegmentState::block_at(std::uint64_t address) const {
  const std::uint32_t slot = slot_of(address);
  return slot == kNoBlock ? nullptr : &nodes_[slot].info;
}

std::uint32_t SegmentState::block_holding(SegmentIt seg, std::uint64_t address) const {
  std::uint32_t at = first_block(seg->first);
  if (last_placed_ != kNoBlock && nodes_[last_placed_].address >= seg->first &&
      nodes_[last_placed_].address <= address)
    at = last_placed_;
  // The ring wraps to the segment's first block after its last: stop there.
  for (std::uint32_t next = nodes_[at].next;
       nodes_[next].address > nodes_[at].address && nodes_[next].address <= address;
       next = nodes_[at].next)
    at = next;
  return at;
}

SegmentState::SegmentIt SegmentState::segment_containing(std::uint64_t address) {
  auto it = segments_.upper_bound(address);
  if (it == segments_.begin())
    return segments_.end();
  --it;
  if (address - it->first >= it->second.size)
    return segments_.end();
  return it;
}

std::pair<std::uint32_t, Bytes> SegmentState::adopt_blocks(SegmentIt seg) {
  std::uint32_t count = 0;
  Bytes free_bytes = 0;
  const std::uint32_t first = first_block(seg->first);
  std::uint32_t slot = first;
  do {
    BlockNode& node = nodes_[slot];
    node.segment = &seg->second;
    ++count;
    if (node.info.state == BlockState::inactive)
      free_bytes += node.info.size;
    slot = node.next;
  } while (slot != first);
  return {count, free_bytes};
}

Bytes SegmentState::split_contribution(const SegmentInfo& s) const {
  return (!s.expandable && s.block_count > 1) ? s.free_bytes : 0;
}

std::uint32_t SegmentState::new_node(std::uint64_t address, const BlockInfo& info,
                                     SegmentInfo& seg) {
  std::uint32_t slot;
  if (!unused_slots_.empty()) {
    slot = unused_slots_.back();
    unused_slots_.pop_back();
  } else {
    if (nodes_.size() >= kNoBlock)
      throw InputError("more than 2^32 - 1 blocks at once");
    slot = static_cast<std::uint32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  nodes_[slot] = BlockNode{address, info, slot, slot, &seg};
  block_slots_.insert_or_assign(address, slot);
  return slot;
}

void SegmentState::release_node(std::uint32_t slot) {
  block_slots_.erase(nodes_[slot].address);
  nodes_[slot].segment = nullptr;  // unused (the heaps' rebuild skips it)
  if (last_placed_ == slot)
    last_placed_ = kNoBlock;
  unused_slots_.push_back(slot);
}

void SegmentState::link_after(std::uint32_t at, std::uint32_t slot) {
  const std::uint32_t next = nodes_[at].next;
  nodes_[slot].prev = at;
  nodes_[slot].next = next;
  nodes_[next].prev = slot;
  nodes_[at].next = slot;
}

void SegmentState::unlink(std::uint32_t slot) {
  const std::uint32_t prev = nodes_[slot].prev;
  const std::uint32_t next = nodes_[slot].next;
  nodes_[prev].next = next;
  nodes_[next].prev = prev;
}

void SegmentState::join_rings(std::uint32_t first, std::uint32_t second) {
  const std::uint32_t first_last = nodes_[first].prev;
  const std::uint32_t second_last = nodes_[second].prev;
  nodes_[first_last].next = second;
  nodes_[second].prev = first_last;
  nodes_[second_last].next = first;
  nodes_[first].prev = second_last;
}

std::uint32_t SegmentState::add_free(std::uint64_t address, Bytes size, SegmentInfo& seg) {
  BlockInfo b;
  b.size = size;
  ++seg.block_count;
  seg.free_bytes += size;
  const std::uint32_t slot = new_node(address, b, seg);
  count_free_block(slot);
  return slot;
}

void SegmentState::count_free_block(std::uint32_t slot) {
  const Bytes size = nodes_[slot].info.size;
  if (size > totals_.largest_free)
    totals_.largest_free = size;
  free_size_heap_.emplace_back(size, slot);
  std::push_heap(free_size_heap_.begin(), free_size_heap_.end());
}

void SegmentState::forget_free_size(Bytes size) {
  if (size == totals_.largest_free)
    largest_free_gone_ = true;
}

std::uint32_t SegmentState::coalesce(std::uint32_t slot, SegmentInfo& seg) {
  // Ring neighbours are in the segment; the prev of its first block (and the next of its last)
  // wraps around and lies on the wrong side.
  const std::uint64_t address = nodes_[slot].address;
  const std::uint32_t prev = nodes_[slot].prev;
  const std::uint32_t next = nodes_[slot].next;
  const bool merge_prev =
      nodes_[prev].address < address && nodes_[prev].info.state == BlockState::inactive;
  const bool merge_next =
      nodes_[next].address > address && nodes_[next].info.state == BlockState::inactive;
  if (!merge_prev && !merge_next) {
    count_free_block(slot);
    return slot;
  }
  // The merged block keeps the first node of the run (the free block before `slot`, or `slot`).
  const std::uint32_t first = merge_prev ? prev : slot;
  Bytes size = 0;
  auto absorb = [&](std::uint32_t merged) {
    if (merged != slot)
      forget_free_size(nodes_[merged].info.size);
    --seg.block_count;
    size += nodes_[merged].info.size;
    if (merged != first) {
      unlink(merged);
      release_node(merged);
    }
  };
  if (merge_prev)
    absorb(prev);
  absorb(slot);
  if (merge_next)
    absorb(next);
  nodes_[first].info = BlockInfo{};
  nodes_[first].info.size = size;
  count_free_block(first);
  ++seg.block_count;
  return first;
}

void SegmentState::find_largest_free() {
  // The rebuild scans the slab; twice its size in pushes pays for it.
  const auto is_free_block = [&](const std::pair<Bytes, std::uint32_t>& entry) {
    const BlockNode& node = nodes_[entry.second];
    return node.segment != nullptr && node.info.state == BlockState::inactive &&
           node.info.size == entry.first;
  };
  if (free_size_heap_.size() > 2 * nodes_.size() + 1024) {
    free_size_heap_.clear();
    for (std::uint32_t slot = 0; slot < nodes_.size(); ++slot)
      if (is_free_block({nodes_[slot].info.size, slot}))
        free_size_heap_.emplace_back(nodes_[slot].info.size, slot);
    std::make_heap(free_size_heap_.begin(), free_size_heap_.end());
    largest_free_gone_ = true;
  }
  // count_free_block raised largest_free as blocks came; only a block of the largest size that
  // went needs the heap.
  if (!largest_free_gone_)
    return;
  largest_free_gone_ = false;
  while (!free_size_heap_.empty() && !is_free_block(free_size_heap_.front())) {
    std::pop_heap(free_size_heap_.begin(), free_size_heap_.end());
    free_size_heap_.pop_back();
  }
  totals_.largest_free = free_size_heap_.empty() ? 0 : free_size_heap_.front().first;
}

void SegmentState::apply(const TraceEvent& e) {
  switch (e.action) {
    case TraceAction::alloc:
      on_alloc(e);
      break;
    case TraceAction::free_requested:
      on_free_requested(e);
      break;
    case TraceAction::free_completed:
      on_free_completed(e);
      break;
    case TraceAction::segment_alloc:
      on_segment_alloc(e);
      break;
    case TraceAction::segment_free:
      on_segment_free(e);
      break;
    case TraceAction::segment_map:
      on_segment_map(e);
      break;
    case TraceAction::segment_unmap:
      on_segment_unmap(e);
      break;
    case TraceAction::snapshot:
    case TraceAction::oom:
      return;
  }
  refresh_largest_free();
}

void SegmentState::on_alloc(const TraceEvent& e) {
  if (e.size >= alloc::kOneExbibyte)
    fail(e, "PyTorch refuses allocations of 1 EiB and more");
  const std::uint32_t slot = slot_of(e.addr);
  if (slot == kNoBlock || nodes_[slot].info.state != BlockState::inactive)
    fail(e, "no free block starts at this address");
  SegmentInfo& seg = *nodes_[slot].segment;
  Bytes rounded = rules_.round_size(e.size);
  Bytes free_size = nodes_[slot].info.size;
  if (free_size < rounded)
    fail(e, "the free block here has only " + std::to_string(free_size) + " bytes for a " +
                std::to_string(rounded) + "-byte block");
  Bytes before = split_contribution(seg);
  Bytes size = free_size;
  // The free block's node becomes the allocation, and a split's rest goes right after it.
  forget_free_size(free_size);
  seg.free_bytes -= free_size;
  if (rules_.should_split(free_size, rounded)) {
    size = rounded;
    link_after(slot, add_free(e.addr + rounded, free_size - rounded, seg));
  }
  seg.pool = rounded <= kSmallSize ? PoolKind::small : PoolKind::large;
  BlockInfo& block = nodes_[slot].info;
  block = BlockInfo{};
  block.size = size;
  block.requested = e.size;
  block.state = BlockState::active_allocated;
  block.frames = e.frames;
  totals_.inactive_split = totals_.inactive_split - before + split_contribution(seg);
  totals_.allocated += size;
  totals_.active += size;
  totals_.requested += e.size;
}

void SegmentState::on_free_requested(const TraceEvent& e) {
  const std::uint32_t slot = slot_of(e.addr);
  if (slot == kNoBlock || nodes_[slot].info.state != BlockState::active_allocated)
    fail(e, "no allocated block at this address");
  nodes_[slot].info.state = BlockState::active_pending_free;
  totals_.allocated -= nodes_[slot].info.size;
}

void SegmentState::on_free_completed(const TraceEvent& e) {
  const std::uint32_t slot = slot_of(e.addr);
  if (slot == kNoBlock || nodes_[slot].info.state == BlockState::inactive)
    fail(e, "no active block at this address");
  BlockInfo& block = nodes_[slot].info;
  if (block.state == BlockState::active_allocated)  // free_requested was not recorded
    totals_.allocated -= block.size;
  SegmentInfo& seg = *nodes_[slot].segment;
  Bytes before = split_contribution(seg);
  Bytes size = block.size;
  totals_.active -= size;
  totals_.requested -= block.requested;
  block = BlockInfo{};
  block.size = size;
  seg.free_bytes += size;
  coalesce(slot, seg);
  totals_.inactive_split = totals_.inactive_split - before + split_contribution(seg);
}

void SegmentState::on_segment_alloc(const TraceEvent& e) {
  if (e.size == 0)
    fail(e, "a segment of 0 bytes");
  if (!fits_address_space(e.addr, e.size))
    fail(e, "the segment reaches past the end of the 64-bit address space");
  auto after = segments_.lower_bound(e.addr);
  if ((after != segments_.end() && after->first < e.addr + e.size) ||
      segment_containing(e.addr) != segments_.end())
    fail(e, "overlaps an existing segment");
  SegmentInfo s;
  s.size = e.size;
  s.stream = e.stream;
  s.pool = e.size == 2 * kMiB ? PoolKind::small : PoolKind::large;
  auto seg = segments_.emplace(e.addr, s).first;
  add_free(e.addr, e.size, seg->second);
  totals_.reserved += e.size;
  ++totals_.segments;
}

void SegmentState::on_segment_free(const TraceEvent& e) {
  auto seg = segments_.find(e.addr);
  if (seg == segments_.end() || seg->second.size != e.size || seg->second.expandable)
    fail(e, "no cudaMalloc segment of this size starts here");
  const std::uint32_t slot = first_block(e.addr);
  if (seg->second.block_count != 1 || slot == kNoBlock ||
      nodes_[slot].info.state != BlockState::inactive)
    fail(e, "the segment still holds active blocks");
  forget_free_size(nodes_[slot].info.size);
  release_node(slot);
  segments_.erase(seg);
  totals_.reserved -= e.size;
  --totals_.segments;
}

void SegmentState::on_segment_map(const TraceEvent& e) {
  if (e.size == 0)
    fail(e, "a mapping of 0 bytes");
  if (!fits_address_space(e.addr, e.size))
    fail(e, "the mapping reaches past the end of the 64-bit address space");
  auto after = segments_.lower_bound(e.addr);
  if ((after != segments_.end() && after->first < e.addr + e.size) ||
      segment_containing(e.addr) != segments_.end())
    fail(e, "maps memory that is already mapped");
  // A mapping grows the expandable segment it touches (same stream), else starts a new range.
  SegmentIt seg = segments_.end();
  if (after != segments_.begin()) {
    auto prev = std::prev(after);
    if (prev->second.expandable && prev->first + prev->second.size == e.addr &&
        prev->second.stream == e.stream)
      seg = prev;
  }
  const bool grows = seg != segments_.end();
  if (grows) {
    seg->second.size += e.size;
  } else {
    SegmentInfo s;
    s.size = 0;
    s.stream = e.stream;
    s.expandable = true;
    seg = segments_.emplace(e.addr, s).first;
    seg->second.size = e.size;
  }
  std::uint32_t following = kNoBlock;  // the first block of the range the mapping joins
  auto next = std::next(seg);
  if (next != segments_.end() && next->second.expandable &&
      seg->first + seg->second.size == next->first && next->second.stream == e.stream) {
    following = first_block(next->first);
    for (std::uint32_t slot = following;;) {
      nodes_[slot].segment = &seg->second;
      slot = nodes_[slot].next;
      if (slot == following)
        break;
    }
    seg->second.size += next->second.size;
    seg->second.block_count += next->second.block_count;
    seg->second.free_bytes += next->second.free_bytes;
    segments_.erase(next);
  }
  BlockInfo mapped_block;  // counted by coalesce
  mapped_block.size = e.size;
  ++seg->second.block_count;
  seg->second.free_bytes += e.size;
  const std::uint32_t mapped = new_node(e.addr, mapped_block, seg->second);
  const std::uint32_t first = grows ? first_block(seg->first) : mapped;
  if (grows)
    join_rings(first, mapped);
  if (following != kNoBlock)
    join_rings(first, following);
  coalesce(mapped, seg->second);
  totals_.reserved += e.size;
}

void SegmentState::on_segment_unmap(const TraceEvent& e) {
  auto seg = segment_containing(e.addr);
  if (seg == segments_.end() || !seg->second.expandable || !fits_address_space(e.addr, e.size) ||
      e.addr + e.size > seg->first + seg->second.size)
    fail(e, "does not lie inside one mapped expandable range");
  const std::uint32_t first = first_block(seg->first);
  const std::uint32_t last = nodes_[first].prev;
  const std::uint32_t slot = block_holding(seg, e.addr);
  const std::uint64_t block_start = nodes_[slot].address;
  const Bytes block_size = nodes_[slot].info.size;
  if (nodes_[slot].info.state != BlockState::inactive || e.addr + e.size > block_start + block_size)
    fail(e, "unmaps memory that is not one free block");
  // The range leaves the segment: its ring is cut into the blocks before the unmapped block (and
  // the free part of it below the range) and those after it (after the free part above).
  const std::uint32_t before = slot != first ? nodes_[slot].prev : kNoBlock;
  const std::uint32_t after = slot != last ? nodes_[slot].next : kNoBlock;
  forget_free_size(block_size);
  release_node(slot);
  std::uint32_t left = kNoBlock;
  if (before != kNoBlock) {
    left = first;
    nodes_[before].next = first;
    nodes_[first].prev = before;
  }
  std::uint32_t right = kNoBlock;
  if (after != kNoBlock) {
    right = after;
    nodes_[last].next = after;
    nodes_[after].prev = last;
  }
  if (e.addr > block_start) {
    const std::uint32_t piece = add_free(block_start, e.addr - block_start, seg->second);
    if (left == kNoBlock)
      left = piece;
    else
      join_rings(left, piece);
  }
  if (block_start + block_size > e.addr + e.size) {
    const std::uint32_t piece =
        add_free(e.addr + e.size, block_start + block_size - (e.addr + e.size), seg->second);
    if (right != kNoBlock)
      join_rings(piece, right);
  }
  std::uint64_t seg_start = seg->first;
  std::uint64_t seg_end = seg->first + seg->second.size;
  SegmentInfo base = seg->second;
  segments_.erase(seg);
  auto add_part = [&](std::uint64_t start, Bytes size) {
    SegmentInfo part = base;
    part.size = size;
    auto it = segments_.emplace(start, part).first;
    std::tie(it->second.block_count, it->second.free_bytes) = adopt_blocks(it);
  };
  if (e.addr > seg_start)
    add_part(seg_start, e.addr - seg_start);
  if (seg_end > e.addr + e.size)
    add_part(e.addr + e.size, seg_end - (e.addr + e.size));
  totals_.reserved -= e.size;
}

void SegmentState::add_segment(std::uint64_t address, const SegmentInfo& info) {
  if (info.size == 0 || !fits_address_space(address, info.size))
    throw InputError("segment at " + hex_address(address) + " of " + std::to_string(info.size) +
                     " bytes is empty or reaches past the end of the 64-bit address space");
  auto after = segments_.lower_bound(address);
  if (segment_containing(address) != segments_.end() ||
      (after != segments_.end() && after->first < address + info.size))
    throw InputError("segment at " + hex_address(address) + " overlaps another segment");
  SegmentInfo s = info;
  s.block_count = 0;
  s.free_bytes = 0;
  auto seg = segments_.emplace(address, s).first;
  add_free(address, info.size, seg->second);
  totals_.reserved += info.size;
  if (!info.expandable)
    ++totals_.segments;
  totals_.inactive_split += split_contribution(seg->second);
  refresh_largest_free();
}

void SegmentState::place_block(std::uint64_t address, const BlockInfo& info) {
  auto seg = segment_containing(address);
  if (seg == segments_.end())
    throw InputError("block at " + hex_address(address) + " lies outside every segment");
  if (info.size == 0 || !fits_address_space(address, info.size))
    throw InputError("block at " + hex_address(address) + " of " + std::to_string(info.size) +
                     " bytes is empty or reaches past the end of the 64-bit address space");
  const std::uint32_t free_slot = block_holding(seg, address);
  const std::uint64_t free_start = nodes_[free_slot].address;
  const Bytes free_size = nodes_[free_slot].info.size;
  if (nodes_[free_slot].info.state != BlockState::inactive ||
      address + info.size > free_start + free_size)
    throw InputError("block at " + hex_address(address) + " of " + std::to_string(info.size) +
                     " bytes overlaps another block");
  Bytes before = split_contribution(seg->second);
  // The free block's node keeps the free part below the block, or becomes the block.
  forget_free_size(free_size);
  seg->second.free_bytes -= free_size;
  std::uint32_t placed = free_slot;
  if (address > free_start) {
    nodes_[free_slot].info.size = address - free_start;
    count_free_block(free_slot);
    seg->second.free_bytes += address - free_start;
    placed = new_node(address, info, seg->second);
    link_after(free_slot, placed);
    ++seg->second.block_count;
  } else {
    nodes_[free_slot].info = info;
  }
  last_placed_ = placed;
  if (free_start + free_size > address + info.size)
    link_after(placed, add_free(address + info.size, free_start + free_size - (address + info.size),
                                seg->second));
  if (info.state == BlockState::inactive) {
    count_free_block(placed);
    seg->second.free_bytes += info.size;
  } else {
    totals_.active += info.size;
    totals_.requested += info.requested;
    if (info.state == BlockState::active_allocated)
      totals_.allocated += info.size;
  }
  totals_.inactive_split = totals_.inactive_split - before + split_contribution(seg->second);
  refresh_largest_free();
}

std::vector<Segment> SegmentState::segments(int device) const {
  std::vector<Segment> out;
  out.reserve(segments_.size());
  for (const auto& [address, info] : segments_) {
    Segment s;
    s.device = device;
    s.address = address;
    s.total_size = info.size;
    s.stream = info.stream;
    s.pool = info.pool;
    s.is_expandable = info.expandable;
    for (const auto& [block_address, block] : blocks_of(address)) {
      Block b;
      b.address = block_address;
      b.size = block.size;
      b.requested_size = block.requested;
      b.state = block.state;
      b.frames = block.frames;
      if (b.state != BlockState::inactive) {
        s.active_size += b.size;
        s.requested_size += b.requested_size;
        if (b.state == BlockState::active_allocated)
          s.allocated_size += b.size;
      }
      s.blocks.push_back(b);
    }
    out.push_back(std::move(s));
  }
  return out;
}

bool operator==(const SegmentState& a, const SegmentState& b) {
  if (a.segments_ != b.segments_ || !(a.totals_ == b.totals_) || a.block_count() != b.block_count())
    return false;
  // Equal segments hold equal block counts: walking both rings in step compares every block.
  for (const auto& [address, segment] : a.segments_) {
    const auto a_blocks = a.blocks_of(address);
    const auto b_blocks = b.blocks_of(address);
    auto a_it = a_blocks.begin();
    auto b_it = b_blocks.begin();
    for (; a_it != a_blocks.end() && b_it != b_blocks.end(); ++a_it, ++b_it) {
      if ((*a_it).first != (*b_it).first || !((*a_it).second == (*b_it).second))
        return false;
    }
    if (a_it != a_blocks.end() || b_it != b_blocks.end())
      return false;
  }
  return true;
}

std::string SegmentState::broken_invariant() const {
  std::size_t blocks = 0;
  std::map<Bytes, std::uint32_t> free_sizes;
  for (const auto& [address, segment] : segments_) {
    const std::string where = "segment " + hex_address(address) + ": ";
    const std::uint32_t first = first_block(address);
    if (first == kNoBlock)
      return where + "no block starts at its base";
    std::uint64_t cursor = address;
    std::uint32_t count = 0;
    Bytes free_bytes = 0;
    std::uint32_t slot = first;
    do {
      const BlockNode& node = nodes_[slot];
      if (node.address != cursor)
        return where + "a block at " + hex_address(node.address) + " where one should start at " +
               hex_address(cursor);
      if (slot_of(node.address) != slot)
        return where + "the block at " + hex_address(node.address) + " is not found by address";
      if (nodes_[node.next].prev != slot)
        return where + "the block after " + hex_address(node.address) + " does not link back";
      if (node.info.size == 0 || node.info.size > address + segment.size - cursor)
        return where + "the block at " + hex_address(node.address) + " has a bad size";
      if (node.info.state == BlockState::inactive) {
        free_bytes += node.info.size;
        ++free_sizes[node.info.size];
      }
      cursor += node.info.size;
      ++count;
      slot = node.next;
    } while (slot != first && count <= nodes_.size());
    if (cursor != address + segment.size)
      return where + "its blocks end at " + hex_address(cursor);
    if (count != segment.block_count || free_bytes != segment.free_bytes)
      return where + "counts " + std::to_string(segment.block_count) + " blocks and " +
             std::to_string(segment.free_bytes) + " free bytes, holds " + std::to_string(count) +
             " and " + std::to_string(free_bytes);
    blocks += count;
  }
  if (blocks != block_count() || blocks + unused_slots_.size() != nodes_.size())
    return "the segments hold " + std::to_string(blocks) + " blocks, the index " +
           std::to_string(block_count()) + ", the slab " + std::to_string(nodes_.size()) +
           " slots of which " + std::to_string(unused_slots_.size()) + " unused";
  const std::set<std::pair<Bytes, std::uint32_t>> heap(free_size_heap_.begin(),
                                                       free_size_heap_.end());
  for (std::uint32_t slot = 0; slot < nodes_.size(); ++slot) {
    const BlockNode& node = nodes_[slot];
    if (node.segment != nullptr && node.info.state == BlockState::inactive &&
        heap.count({node.info.size, slot}) == 0)
      return "the free block at " + hex_address(node.address) + " is not in the size heap";
  }
  const Bytes largest = free_sizes.empty() ? 0 : free_sizes.rbegin()->first;
  if (totals_.largest_free != largest)
    return "largest_free is " + std::to_string(totals_.largest_free) + ", the largest free block " +
           std::to_string(largest);
  return "";
}

}  // namespace fragscope::snapshot
