#include "engine/snapshot/segment_state.h"

#include <bit>

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

SegmentState::SegmentState(LayoutRules rules) : rules_(rules) {}

void SegmentState::fail(const TraceEvent& e, const std::string& what) const {
  throw InputError(std::string(to_string(e.action)) + " at " + hex_address(e.addr) + " (size " +
                   std::to_string(e.size) + "): " + what);
}

SegmentState::BlockIt SegmentState::find_block(std::uint64_t address) {
  if (hint_.has_block && hint_.block_address == address)
    return hint_.block;
  return blocks_.find(address);
}

SegmentState::SegmentIt SegmentState::segment_containing(std::uint64_t address) {
  // Segments never overlap: the hinted one, if it holds the address, is the one.
  if (hint_.has_segment && address - hint_.segment->first < hint_.segment->second.size)
    return hint_.segment;
  auto it = segments_.upper_bound(address);
  if (it == segments_.begin())
    return segments_.end();
  --it;
  if (address - it->first >= it->second.size)
    return segments_.end();
  hint_.segment = it;
  hint_.has_segment = true;
  return it;
}

Bytes SegmentState::split_contribution(const SegmentInfo& s) const {
  return (!s.expandable && s.block_count > 1) ? s.free_bytes : 0;
}

void SegmentState::add_free(std::uint64_t address, Bytes size, SegmentInfo& seg) {
  BlockInfo b;
  b.size = size;
  blocks_[address] = b;
  ++free_sizes_[size];
  ++seg.block_count;
  seg.free_bytes += size;
}

void SegmentState::remove_free(BlockIt it, SegmentInfo& seg) {
  forget_free_size(it->second.size);
  --seg.block_count;
  seg.free_bytes -= it->second.size;
  hint_.has_block = false;
  blocks_.erase(it);
}

void SegmentState::forget_free_size(Bytes size) {
  auto fs = free_sizes_.find(size);
  if (--fs->second == 0)
    free_sizes_.erase(fs);
}

SegmentState::BlockIt SegmentState::coalesce(BlockIt it, SegmentIt seg) {
  std::uint64_t seg_start = seg->first;
  std::uint64_t seg_end = seg->first + seg->second.size;
  // The merged block keeps the first node of the run (the free block before `it`, or `it`), so a
  // merge erases the nodes after it and inserts none: a free is most of a trace's map churn.
  BlockIt first = it;
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);
    if (prev->first >= seg_start && prev->first + prev->second.size == it->first &&
        prev->second.state == BlockState::inactive)
      first = prev;
  }
  BlockIt last = it;
  auto next = std::next(it);
  if (next != blocks_.end() && next->first < seg_end &&
      it->first + it->second.size == next->first && next->second.state == BlockState::inactive)
    last = next;
  if (first == last)
    return it;
  Bytes size = 0;
  const BlockIt end = std::next(last);
  for (auto merged = first; merged != end; ++merged) {
    forget_free_size(merged->second.size);
    --seg->second.block_count;
    size += merged->second.size;
  }
  hint_.has_block = false;
  blocks_.erase(std::next(first), end);
  first->second = BlockInfo{};
  first->second.size = size;
  ++free_sizes_[size];
  ++seg->second.block_count;
  return first;
}

void SegmentState::refresh_largest_free() {
  totals_.largest_free = free_sizes_.empty() ? 0 : free_sizes_.rbegin()->first;
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
  auto it = find_block(e.addr);
  if (it == blocks_.end() || it->second.state != BlockState::inactive)
    fail(e, "no free block starts at this address");
  auto seg = segment_containing(e.addr);
  if (seg == segments_.end())
    fail(e, "the free block here lies outside every segment");
  Bytes rounded = rules_.round_size(e.size);
  Bytes free_size = it->second.size;
  if (free_size < rounded)
    fail(e, "the free block here has only " + std::to_string(free_size) + " bytes for a " +
                std::to_string(rounded) + "-byte block");
  Bytes before = split_contribution(seg->second);
  Bytes size = free_size;
  // The free block's node becomes the allocation (the same key), and a split's rest goes right
  // after it: no node is erased and at most one is inserted, next to a known position.
  forget_free_size(free_size);
  seg->second.free_bytes -= free_size;
  if (rules_.should_split(free_size, rounded)) {
    size = rounded;
    BlockInfo rest;
    rest.size = free_size - rounded;
    hint_block(blocks_.emplace_hint(std::next(it), e.addr + rounded, rest));
    ++free_sizes_[rest.size];
    ++seg->second.block_count;
    seg->second.free_bytes += rest.size;
  }
  seg->second.pool = rounded <= kSmallSize ? PoolKind::small : PoolKind::large;
  it->second = BlockInfo{};
  it->second.size = size;
  it->second.requested = e.size;
  it->second.state = BlockState::active_allocated;
  it->second.frames = e.frames;
  totals_.inactive_split = totals_.inactive_split - before + split_contribution(seg->second);
  totals_.allocated += size;
  totals_.active += size;
  totals_.requested += e.size;
}

void SegmentState::on_free_requested(const TraceEvent& e) {
  auto it = find_block(e.addr);
  if (it == blocks_.end() || it->second.state != BlockState::active_allocated)
    fail(e, "no allocated block at this address");
  hint_block(it);
  it->second.state = BlockState::active_pending_free;
  totals_.allocated -= it->second.size;
}

void SegmentState::on_free_completed(const TraceEvent& e) {
  auto it = find_block(e.addr);
  if (it == blocks_.end() || it->second.state == BlockState::inactive)
    fail(e, "no active block at this address");
  if (it->second.state == BlockState::active_allocated)  // free_requested was not recorded
    totals_.allocated -= it->second.size;
  auto seg = segment_containing(e.addr);
  if (seg == segments_.end())
    fail(e, "the block lies outside every segment");
  Bytes before = split_contribution(seg->second);
  Bytes size = it->second.size;
  totals_.active -= size;
  totals_.requested -= it->second.requested;
  it->second = BlockInfo{};
  it->second.size = size;
  ++free_sizes_[size];
  seg->second.free_bytes += size;
  hint_block(coalesce(it, seg));
  totals_.inactive_split = totals_.inactive_split - before + split_contribution(seg->second);
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
  auto it = blocks_.find(e.addr);
  if (seg->second.block_count != 1 || it == blocks_.end() ||
      it->second.state != BlockState::inactive)
    fail(e, "the segment still holds active blocks");
  remove_free(it, seg->second);
  hint_.has_segment = false;
  segments_.erase(seg);
  totals_.reserved -= e.size;
  --totals_.segments;
}

void SegmentState::recount(SegmentIt seg) {
  seg->second.block_count = 0;
  seg->second.free_bytes = 0;
  std::uint64_t end = seg->first + seg->second.size;
  for (auto it = blocks_.lower_bound(seg->first); it != blocks_.end() && it->first < end; ++it) {
    ++seg->second.block_count;
    if (it->second.state == BlockState::inactive)
      seg->second.free_bytes += it->second.size;
  }
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
  if (seg != segments_.end()) {
    seg->second.size += e.size;
  } else {
    SegmentInfo s;
    s.size = 0;
    s.stream = e.stream;
    s.expandable = true;
    seg = segments_.emplace(e.addr, s).first;
    seg->second.size = e.size;
  }
  auto next = std::next(seg);
  if (next != segments_.end() && next->second.expandable &&
      seg->first + seg->second.size == next->first && next->second.stream == e.stream) {
    seg->second.size += next->second.size;
    seg->second.block_count += next->second.block_count;
    seg->second.free_bytes += next->second.free_bytes;
    hint_.has_segment = false;
    segments_.erase(next);
  }
  add_free(e.addr, e.size, seg->second);
  coalesce(blocks_.find(e.addr), seg);
  totals_.reserved += e.size;
}

void SegmentState::on_segment_unmap(const TraceEvent& e) {
  auto seg = segment_containing(e.addr);
  if (seg == segments_.end() || !seg->second.expandable || !fits_address_space(e.addr, e.size) ||
      e.addr + e.size > seg->first + seg->second.size)
    fail(e, "does not lie inside one mapped expandable range");
  auto it = blocks_.upper_bound(e.addr);
  --it;  // a block starts at the segment base, so one starts at or below e.addr
  std::uint64_t block_start = it->first;
  Bytes block_size = it->second.size;
  if (it->second.state != BlockState::inactive || e.addr + e.size > block_start + block_size)
    fail(e, "unmaps memory that is not one free block");
  remove_free(it, seg->second);
  if (e.addr > block_start)
    add_free(block_start, e.addr - block_start, seg->second);
  if (block_start + block_size > e.addr + e.size)
    add_free(e.addr + e.size, block_start + block_size - (e.addr + e.size), seg->second);
  // The range leaves the segment: cut the segment into the parts before and after it.
  std::uint64_t seg_start = seg->first;
  std::uint64_t seg_end = seg->first + seg->second.size;
  SegmentInfo base = seg->second;
  hint_.has_segment = false;
  segments_.erase(seg);
  if (e.addr > seg_start) {
    SegmentInfo left = base;
    left.size = e.addr - seg_start;
    recount(segments_.emplace(seg_start, left).first);
  }
  if (seg_end > e.addr + e.size) {
    SegmentInfo right = base;
    right.size = seg_end - (e.addr + e.size);
    recount(segments_.emplace(e.addr + e.size, right).first);
  }
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
  auto it = blocks_.upper_bound(address);
  --it;
  std::uint64_t free_start = it->first;
  Bytes free_size = it->second.size;
  if (it->second.state != BlockState::inactive || address + info.size > free_start + free_size)
    throw InputError("block at " + hex_address(address) + " of " + std::to_string(info.size) +
                     " bytes overlaps another block");
  Bytes before = split_contribution(seg->second);
  remove_free(it, seg->second);
  if (address > free_start)
    add_free(free_start, address - free_start, seg->second);
  if (free_start + free_size > address + info.size)
    add_free(address + info.size, free_start + free_size - (address + info.size), seg->second);
  blocks_.emplace(address, info);
  ++seg->second.block_count;
  if (info.state == BlockState::inactive) {
    ++free_sizes_[info.size];
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
    std::uint64_t end = address + info.size;
    for (auto it = blocks_.lower_bound(address); it != blocks_.end() && it->first < end; ++it) {
      Block b;
      b.address = it->first;
      b.size = it->second.size;
      b.requested_size = it->second.requested;
      b.state = it->second.state;
      b.frames = it->second.frames;
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

}  // namespace fragscope::snapshot
