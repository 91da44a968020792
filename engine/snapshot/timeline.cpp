#include "engine/snapshot/timeline.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>

#include "engine/allocator/flat_map.h"
#include "engine/core/error.h"
#include "engine/snapshot/slice_buffer.h"

namespace fragscope::snapshot {
namespace {

TraceBlocks trace_of(const Snapshot& snapshot, int device) {
  if (device < 0)
    return TraceBlocks();
  return snapshot.trace_blocks(static_cast<std::size_t>(device));
}

struct RangeSegment {
  Bytes size = 0;
  StreamId stream{};
  PoolKind pool = PoolKind::large;
  bool expandable = false;
};

// Removes [addr, addr+size) from the expandable range containing it (undoing a segment_map).
void remove_range(std::map<std::uint64_t, RangeSegment>& segs, std::uint64_t addr, Bytes size) {
  auto it = segs.upper_bound(addr);
  if (it == segs.begin())
    throw InputError("segment_map at " + std::to_string(addr) + " is not inside a final range");
  --it;
  std::uint64_t start = it->first;
  RangeSegment seg = it->second;
  if (addr + size > start + seg.size)
    throw InputError("segment_map at " + std::to_string(addr) + " is not inside a final range");
  segs.erase(it);
  if (addr > start) {
    RangeSegment left = seg;
    left.size = addr - start;
    segs.emplace(start, left);
  }
  if (start + seg.size > addr + size) {
    RangeSegment right = seg;
    right.size = start + seg.size - (addr + size);
    segs.emplace(addr + size, right);
  }
}

// Adds [addr, addr+size) to the expandable ranges, merging with touching ones (undoing an unmap).
void add_range(std::map<std::uint64_t, RangeSegment>& segs, std::uint64_t addr, Bytes size,
               StreamId stream) {
  RangeSegment seg;
  seg.size = size;
  seg.stream = stream;
  seg.expandable = true;
  auto next = segs.lower_bound(addr);
  if (next != segs.begin()) {
    auto prev = std::prev(next);
    if (prev->second.expandable && prev->second.stream == stream &&
        prev->first + prev->second.size == addr) {
      addr = prev->first;
      seg.pool = prev->second.pool;
      seg.size += prev->second.size;
      segs.erase(prev);
    }
  }
  next = segs.lower_bound(addr);
  if (next != segs.end() && next->second.expandable && next->second.stream == stream &&
      addr + seg.size == next->first) {
    seg.size += next->second.size;
    seg.pool = next->second.pool;
    segs.erase(next);
  }
  segs.emplace(addr, seg);
}

// Walking back through the trace: the segments before `e` from those after it.
void undo_segment_event(std::map<std::uint64_t, RangeSegment>& segs, const TraceEvent& e) {
  switch (e.action) {
    case TraceAction::segment_alloc:
      segs.erase(e.addr);
      break;
    case TraceAction::segment_free:
      segs[e.addr] = RangeSegment{e.size, e.stream,
                                  e.size == 2 * kMiB ? PoolKind::small : PoolKind::large, false};
      break;
    case TraceAction::segment_map:
      remove_range(segs, e.addr, e.size);
      break;
    case TraceAction::segment_unmap:
      add_range(segs, e.addr, e.size, e.stream);
      break;
    default:
      break;
  }
}

struct LiveBlock {
  Bytes size = 0;  // 0 = not known: the block was allocated before the trace began
  Bytes requested = 0;
  BlockState state = BlockState::active_allocated;
  FrameStackId frames{};
  // Walking back: the entry of the block's earliest free seen so far (of a block of unknown
  // size, once the walk is done, its first free in the trace); none for a final block the trace
  // never frees (any allocation inside its gap then comes before it).
  std::size_t earliest_free = std::numeric_limits<std::size_t>::max();
};

std::string describe_segment_difference(const Segment& a, const Segment& b) {
  if (a.address != b.address || a.total_size != b.total_size)
    return "segment at " + std::to_string(b.address) + " (" + std::to_string(b.total_size) +
           " bytes) was rebuilt as " + std::to_string(a.address) + " (" +
           std::to_string(a.total_size) + " bytes)";
  for (std::size_t i = 0; i < std::min(a.blocks.size(), b.blocks.size()); ++i) {
    const Block& x = a.blocks[i];
    const Block& y = b.blocks[i];
    if (x.address != y.address || x.size != y.size || x.state != y.state ||
        (y.state != BlockState::inactive && x.requested_size != y.requested_size))
      return "segment at " + std::to_string(b.address) + " block " + std::to_string(i) +
             ": snapshot has " + std::to_string(y.address) + "+" + std::to_string(y.size) + " " +
             std::string(to_string(y.state)) + ", replay gives " + std::to_string(x.address) + "+" +
             std::to_string(x.size) + " " + std::string(to_string(x.state));
  }
  if (a.blocks.size() != b.blocks.size())
    return "segment at " + std::to_string(b.address) + " has " + std::to_string(b.blocks.size()) +
           " blocks, replay gives " + std::to_string(a.blocks.size());
  return {};
}

}  // namespace

bool no_segments_before(const Snapshot& snapshot, int device,
                        std::span<const TraceEvent> segment_events) {
  std::map<std::uint64_t, RangeSegment> segs;
  for (const Segment& s : snapshot.segments)
    if (s.device == device)
      segs[s.address] = RangeSegment{s.total_size, s.stream, s.pool, s.is_expandable};
  try {
    for (auto e = segment_events.rbegin(); e != segment_events.rend(); ++e)
      undo_segment_event(segs, *e);
  } catch (const InputError&) {
    return false;
  }
  return segs.empty();
}

SegmentState initial_state(const Snapshot& snapshot, int device,
                           std::vector<std::uint64_t>* guessed_blocks,
                           std::size_t* inferred_sizes) {
  LayoutRules rules = LayoutRules::from_allocator_settings(snapshot.allocator_settings);
  const TraceBlocks events = trace_of(snapshot, device);
  std::map<std::uint64_t, RangeSegment> segs;
  // Hashed while walking back through every entry (a 1.2M-entry trace made the ordered map a
  // quarter of build_timeline, and a node-based hash map a tenth of a replay); ordered once the
  // walk is done.
  alloc::FlatAddressMap<LiveBlock> walking(1024);
  for (const Segment& s : snapshot.segments) {
    if (s.device != device)
      continue;
    segs[s.address] = RangeSegment{s.total_size, s.stream, s.pool, s.is_expandable};
    for (const Block& b : s.blocks) {
      if (b.state != BlockState::inactive)
        walking.insert_or_assign(b.address, LiveBlock{b.size, b.requested_size, b.state, b.frames});
    }
  }
  // The first allocation the trace makes at each address, gathered walking back (the last one
  // seen is the first): evidence for the sizes the trace does not give (below).
  alloc::FlatAddressMap<std::size_t> first_alloc(1024);
  try {
    events.for_each_backward([&](const TraceEvent& event, std::size_t i) {
      const TraceEvent* e = &event;
      switch (e->action) {
        case TraceAction::alloc:
          walking.erase(e->addr);
          first_alloc.insert_or_assign(e->addr, i);
          break;
        case TraceAction::free_requested: {
          if (LiveBlock* block = walking.find(e->addr)) {
            block->state = BlockState::active_allocated;
            block->earliest_free = i;
          } else {
            walking.insert_or_assign(e->addr,
                                     LiveBlock{0, e->size, BlockState::active_allocated, {}, i});
          }
          break;
        }
        case TraceAction::free_completed:
          walking.insert_or_assign(e->addr,
                                   LiveBlock{0, e->size, BlockState::active_pending_free, {}, i});
          break;
        case TraceAction::segment_alloc:
        case TraceAction::segment_free:
        case TraceAction::segment_map:
        case TraceAction::segment_unmap:
          undo_segment_event(segs, *e);
          break;
        case TraceAction::snapshot:
        case TraceAction::oom:
          break;
      }
    });
    std::map<std::uint64_t, LiveBlock> live;
    walking.for_each(
        [&live](std::uint64_t address, const LiveBlock& block) { live.emplace(address, block); });
    // Evidence for sizes the trace does not give: while a predating block is live, the free
    // space after it starts where it ends, so the first allocation the trace makes inside its gap
    // lands exactly on its end. Only a trace that frees blocks it never allocated needs it.
    // Only the first allocation at each address can be the earliest inside a gap, so one per
    // address is kept (the trace's allocations would be a vector as long as the trace).
    std::vector<std::pair<std::uint64_t, std::size_t>> allocs;  // (address, first alloc entry)
    // The first free entry of each block whose size is unknown, the only addresses asked: a
    // table of a few thousand, not of every address the trace frees. (The walk back ends at a
    // predating block's first free: it is live from the trace's start until then.)
    alloc::FlatAddressMap<std::size_t> first_free(64);
    for (const auto& [address, block] : live)
      if (block.size == 0)
        first_free.insert_or_assign(address, block.earliest_free);
    if (first_free.size() != 0) {
      allocs.reserve(first_alloc.size());
      first_alloc.for_each(
          [&allocs](std::uint64_t address, std::size_t i) { allocs.emplace_back(address, i); });
    }
    std::sort(allocs.begin(), allocs.end());
    auto first_allocation_inside = [&](std::uint64_t start, std::uint64_t end) {
      const std::size_t* first = first_free.find(start);
      std::size_t earliest = first ? *first : events.size();
      std::uint64_t address = 0;
      auto it = std::upper_bound(allocs.begin(), allocs.end(),
                                 std::make_pair(start, std::numeric_limits<std::size_t>::max()));
      for (; it != allocs.end() && it->first < end; ++it) {
        if (it->second < earliest) {
          earliest = it->second;
          address = it->first;
        }
      }
      return address;
    };
    SegmentState state(rules);
    for (const auto& [addr, seg] : segs) {
      SegmentState::SegmentInfo info;
      info.size = seg.size;
      info.stream = seg.stream;
      info.pool = seg.pool;
      info.expandable = seg.expandable;
      info.predates_trace = true;
      state.add_segment(addr, info);
    }
    for (auto it = live.begin(); it != live.end(); ++it) {
      SegmentState::BlockInfo info;
      info.requested = it->second.requested;
      info.state = it->second.state;
      info.frames = it->second.frames;
      info.predates_trace = true;
      info.size = it->second.size;
      if (info.size == 0) {
        if (inferred_sizes != nullptr)
          ++*inferred_sizes;
        // The block's size is not in the trace. It sits at the start of the free space up to the
        // next live block, and PyTorch's split rule says whether it took all of that space.
        auto seg = state.segment_map().upper_bound(it->first);
        if (seg == state.segment_map().begin())
          throw InputError("a block freed by the trace at " + std::to_string(it->first) +
                           " lies outside every segment");
        --seg;
        std::uint64_t end = seg->first + seg->second.size;
        auto next = std::next(it);
        if (next != live.end() && next->first < end)
          end = next->first;
        Bytes rounded = rules.round_size(info.requested);
        if (end < it->first + rounded)
          throw InputError("a block freed by the trace at " + std::to_string(it->first) +
                           " does not fit before the next block");
        Bytes gap = end - it->first;
        info.size = rules.should_split(gap, rounded) ? rounded : gap;
        std::uint64_t next_alloc = first_allocation_inside(it->first, end);
        if (next_alloc >= it->first + rounded)
          info.size = next_alloc - it->first;
        else if (guessed_blocks != nullptr && gap > rounded && rounded > kMiB &&
                 !rules.expandable_segments)
          guessed_blocks->push_back(it->first);  // a large block might not have been split
      }
      state.place_block(it->first, info);
    }
    return state;
  } catch (const InputError& e) {
    throw InputError("cannot rebuild the state before device " + std::to_string(device) +
                     "'s first trace entry from the final segments: " + e.what());
  }
}

namespace {

// The device's segment entries in trace order where they are at hand without decoding the trace:
// noted by its spool as the pickle was read, or filtered from a trace kept as a vector.
std::optional<std::vector<TraceEvent>> noted_segment_events(const Snapshot& snapshot, int device) {
  if (device < 0)
    return std::nullopt;
  const auto d = static_cast<std::size_t>(device);
  if (const EventSpool* spool = snapshot.spool(d)) {
    const auto noted = spool->segment_events();
    if (!noted)
      return std::nullopt;
    return std::vector<TraceEvent>(noted->begin(), noted->end());
  }
  std::vector<TraceEvent> found;
  if (d < snapshot.device_traces.size())
    for (const TraceEvent& event : snapshot.device_traces[d])
      if (is_segment_action(event.action))
        found.push_back(event);
  return found;
}

// Thrown inside walk_forward's visit when an entry contradicts an assumed empty start.
struct StartNotEmpty {};

// The walk forward from `state`, the state before the first entry. With `start_assumed_empty`,
// an entry that state cannot take ends the walk with nullopt instead of an InputError.
std::optional<Timeline> walk_forward(const Snapshot& snapshot, int device, SegmentState state,
                                     std::vector<std::uint64_t> guessed, bool start_assumed_empty,
                                     const TimelineSinks& sinks) {
  Timeline tl;
  tl.device = device;
  tl.start_assumed_empty = start_assumed_empty;
  tl.guessed_blocks = guessed.size();
  tl.initial = state.sample();
  tl.peak = tl.initial;
  tl.predating_segments = state.segment_count();
  for (const auto& [segment_address, segment] : state.segment_map())
    for (const auto& [address, block] : state.blocks_of(segment_address))
      tl.predating_blocks += block.state != BlockState::inactive ? 1 : 0;
  tl.truncated = tl.predating_segments > 0;
  if (sinks.on_start)
    sinks.on_start(tl);
  const TraceBlocks events = trace_of(snapshot, device);
  // Once every guessed block is freed (free_completed merges it away), sizes are exact again.
  std::sort(guessed.begin(), guessed.end());
  std::size_t open_guesses = guessed.size();
  tl.exact_from = open_guesses > 0 ? events.size() + 1 : 0;
  // Samples go out in slices of kTimelineSlice entries, so a long trace never has all of them.
  SliceBuffer<MemorySample> slices(sinks.on_samples, events.size());
  try {
    events.for_each([&](const TraceEvent& event, std::size_t i) {
      if (open_guesses > 0 && event.action == TraceAction::free_completed &&
          std::binary_search(guessed.begin(), guessed.end(), event.addr)) {
        guessed.erase(std::lower_bound(guessed.begin(), guessed.end(), event.addr));
        if (--open_guesses == 0)
          tl.exact_from = i + 1;
      }
      try {
        state.apply(event);
      } catch (const InputError& e) {
        if (start_assumed_empty)
          throw StartNotEmpty{};
        throw InputError("device " + std::to_string(device) + " trace entry " + std::to_string(i) +
                         ": " + e.what());
      }
      const MemorySample sample = state.sample();
      take_max(tl.peak, sample);
      slices.push(event, sample);
    });
  } catch (const StartNotEmpty&) {
    return std::nullopt;
  }
  slices.finish();
  std::vector<Segment> expected;
  for (const Segment& s : snapshot.segments)
    if (s.device == device)
      expected.push_back(s);
  std::sort(expected.begin(), expected.end(),
            [](const Segment& a, const Segment& b) { return a.address < b.address; });
  std::vector<Segment> replayed = state.segments(device);
  tl.matches_final_segments = true;
  if (expected.size() != replayed.size()) {
    tl.matches_final_segments = false;
    tl.mismatch = "snapshot has " + std::to_string(expected.size()) + " segments, replay gives " +
                  std::to_string(replayed.size());
  } else {
    for (std::size_t i = 0; i < expected.size(); ++i) {
      std::string diff = describe_segment_difference(replayed[i], expected[i]);
      if (!diff.empty()) {
        tl.matches_final_segments = false;
        tl.mismatch = diff;
        break;
      }
    }
  }
  return tl;
}

}  // namespace

Timeline build_timeline(const Snapshot& snapshot, int device, const TimelineSinks& sinks) {
  // A trace recorded from the process's start (most, and every trace FragScope records) has no
  // segment before it: walked from an empty state, it needs no walk back through every entry
  // (a sixth of an info, twice that of an import with its store's own walk back). Whether a
  // block predates it shows only on the way: a free of a block the walk does not hold, or a
  // final block the walk never made. Either way the walk begins again from the rebuilt start,
  // so the timeline is the same as that of the rebuilt start (empty for such a trace).
  if (sinks.on_restart) {
    const std::optional<std::vector<TraceEvent>> segment_events =
        noted_segment_events(snapshot, device);
    if (segment_events && no_segments_before(snapshot, device, *segment_events)) {
      SegmentState empty(LayoutRules::from_allocator_settings(snapshot.allocator_settings));
      std::optional<Timeline> tl =
          walk_forward(snapshot, device, std::move(empty), {}, true, sinks);
      if (tl && tl->matches_final_segments)
        return std::move(*tl);
      sinks.on_restart();
    }
  }
  std::vector<std::uint64_t> guessed;
  SegmentState state = initial_state(snapshot, device, &guessed);
  return *walk_forward(snapshot, device, std::move(state), std::move(guessed), false, sinks);
}

Timeline build_timeline(const Snapshot& snapshot, int device) {
  std::vector<MemorySample> samples;
  samples.reserve(device < 0 ? 0 : snapshot.trace_size(static_cast<std::size_t>(device)));
  TimelineSinks sinks;
  sinks.on_samples = [&samples](std::span<const TraceEvent>, std::span<const MemorySample> slice,
                                std::size_t) {
    samples.insert(samples.end(), slice.begin(), slice.end());
  };
  sinks.on_restart = [&samples] { samples.clear(); };
  Timeline tl = build_timeline(snapshot, device, sinks);
  tl.samples = std::move(samples);
  return tl;
}

}  // namespace fragscope::snapshot
