#include "storage/db/snapshot_export.h"

#include <algorithm>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "engine/snapshot/segment_state.h"

namespace fragscope::storage {
namespace {

constexpr Bytes kMinBlockSize = 512;  // PyTorch's kMinBlockSize (torch-allocator-spec §1.1)

Bytes round_up(Bytes n, Bytes multiple) {
  return n == 0 ? multiple : (n + multiple - 1) / multiple * multiple;
}

snapshot::PoolKind pool_of(const SegmentRange& segment) {
  return is_small_pool_range(segment) ? snapshot::PoolKind::small : snapshot::PoolKind::large;
}

// The private pool of each final segment, as the import kept it ([address, size, first, second]).
void apply_segment_pools(const nlohmann::json& summary, std::vector<snapshot::Segment>& segments) {
  const auto pools = summary.find("segment_pools");
  if (pools == summary.end() || !pools->is_array())
    return;
  for (const auto& entry : *pools) {
    if (!entry.is_array() || entry.size() != 4)
      continue;
    const auto address = entry[0].get<std::uint64_t>();
    const auto size = entry[1].get<Bytes>();
    for (auto& segment : segments)
      if (segment.address == address && segment.total_size == size)
        segment.pool_id = {entry[2].get<std::int64_t>(), entry[3].get<std::int64_t>()};
  }
}

// The state before the first event, in the layout model. Sizes of blocks that were live before
// the events began are not recorded anywhere; they get the 512-byte rounding of their request.
snapshot::SegmentState initial_layout(const SegmentMap& initial,
                                      const snapshot::LayoutRules& rules) {
  snapshot::SegmentState state(rules);
  for (const auto& [base, segment] : initial.segments()) {
    snapshot::SegmentState::SegmentInfo info;
    info.size = segment.size;
    info.stream = segment.stream;
    info.pool = pool_of(segment);
    info.expandable = segment.expandable;
    info.predates_trace = true;
    state.add_segment(base, info);
  }
  for (const auto& [addr, block] : initial.blocks()) {
    snapshot::SegmentState::BlockInfo info;
    info.size = round_up(block.size, kMinBlockSize);
    info.requested = block.size;
    info.state = block.state;
    info.frames = block.frames;
    info.predates_trace = true;
    state.place_block(addr, info);
  }
  return state;
}

// Segments from the stored segment map when the layout model cannot replay the run: each live
// block is its request rounded to 512 bytes (never past the next block), gaps are inactive.
std::vector<snapshot::Segment> approximate_segments(const SegmentMap& map) {
  std::vector<snapshot::Segment> out;
  for (const auto& [base, range] : map.segments()) {
    snapshot::Segment segment;
    segment.address = base;
    segment.total_size = range.size;
    segment.stream = range.stream;
    segment.pool = pool_of(range);
    segment.is_expandable = range.expandable;
    const std::uint64_t end = base + range.size;
    std::uint64_t cursor = base;
    auto add_free = [&](std::uint64_t until) {
      if (until > cursor)
        segment.blocks.push_back({cursor, until - cursor, 0, snapshot::BlockState::inactive, {}});
    };
    for (auto it = map.blocks().lower_bound(base); it != map.blocks().end() && it->first < end;
         ++it) {
      const LiveBlock& live = it->second;
      add_free(live.addr);
      const auto next = std::next(it);
      const std::uint64_t limit =
          next != map.blocks().end() && next->first < end ? next->first : end;
      const Bytes size = std::min<Bytes>(round_up(live.size, kMinBlockSize), limit - live.addr);
      segment.blocks.push_back({live.addr, size, live.size, live.state, live.frames});
      segment.active_size += size;
      segment.requested_size += live.size;
      if (live.state == BlockState::active_allocated)
        segment.allocated_size += size;
      cursor = live.addr + size;
    }
    add_free(end);
    out.push_back(std::move(segment));
  }
  return out;
}

}  // namespace

snapshot::Snapshot export_snapshot(RunStore& store, RunId run) {
  const RunRecord record = store.run(run);
  snapshot::Snapshot out;

  // Stacks: re-interned in order, so stored stack i becomes the table's stack i when all are
  // distinct (they are, as set_frame_stacks interned them); events are remapped either way.
  std::vector<FrameStackId> remap(1, FrameStackId{});
  for (const auto& stack : store.frame_stacks(run)) {
    std::vector<std::uint32_t> frame_ids;
    for (const auto& frame : stack)
      frame_ids.push_back(out.frames.intern_frame({frame.filename, frame.line, frame.name}));
    remap.push_back(out.frames.intern_stack(frame_ids));
  }
  auto remapped = [&](FrameStackId id) {
    return id.value < remap.size() ? remap[id.value] : FrameStackId{};
  };
  std::vector<TraceEvent> events = store.events(run, 0, record.event_count);
  for (auto& event : events)
    event.frames = remapped(event.frames);

  const auto settings = record.summary.find("allocator_settings");
  if (settings != record.summary.end() && settings->is_object())
    out.allocator_settings = *settings;
  else
    out.allocator_settings = {{"PYTORCH_CUDA_ALLOC_CONF", record.alloc_conf}};

  const SegmentMap initial = store.segment_state(run, 0).state;
  try {
    const auto rules = snapshot::LayoutRules::from_allocator_settings(out.allocator_settings);
    snapshot::SegmentState state = initial_layout(initial, rules);
    // A snapshot's segment stack is the cudaMalloc's context, which PyTorch keeps on the Block
    // object that was the segment's head. Splitting the head block gives the segment a new head
    // object without it, and no later merge brings it back (the context moves only from the
    // absorbed predecessor, which is that new head). So the stack survives exactly while no
    // allocation at the segment's base has split the block there.
    std::unordered_map<std::uint64_t, FrameStackId> segment_stacks;
    for (std::size_t i = 0; i < events.size(); ++i) {
      const TraceEvent& event = events[i];
      Bytes free_at_base = 0;
      const bool at_base = event.action == TraceAction::alloc &&
                           segment_stacks.count(event.addr) != 0 &&
                           state.block_at(event.addr) != nullptr;
      if (at_base)
        free_at_base = state.block_at(event.addr)->size;
      try {
        state.apply(event);
      } catch (const InputError& e) {
        throw InputError("event " + std::to_string(i) + ": " + e.what());
      }
      if (event.action == TraceAction::segment_alloc)
        segment_stacks[event.addr] = event.frames;
      else if (event.action == TraceAction::segment_free)
        segment_stacks.erase(event.addr);
      else if (at_base && state.block_at(event.addr)->size < free_at_base)
        segment_stacks[event.addr] = FrameStackId{};
    }
    out.segments = state.segments(0);
    for (auto& segment : out.segments) {
      if (auto it = segment_stacks.find(segment.address);
          !segment.is_expandable && it != segment_stacks.end())
        segment.frames = it->second;
    }
  } catch (const InputError& e) {
    SegmentMap final_state = store.segment_state(run, record.event_count).state;
    for (const auto& [addr, block] : final_state.blocks())
      final_state.add_block({addr, block.size, block.stream, block.state, remapped(block.frames)});
    out.segments = approximate_segments(final_state);
    out.warnings.push_back(std::string("segments approximated from the trace: ") + e.what());
  }
  apply_segment_pools(record.summary, out.segments);
  out.device_traces.push_back(std::move(events));
  return out;
}

}  // namespace fragscope::storage
