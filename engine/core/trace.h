#pragma once
// One stream of allocator events for every consumer (timelines, storage, GUI, comparison): the
// model emits these, and the snapshot reader turns a PyTorch trace into the same thing. The
// fields are those of a PyTorch trace entry (torch-allocator-spec §10.2).
#include <cstdint>
#include <optional>
#include <string_view>

#include "engine/core/strong_id.h"
#include "engine/core/units.h"

namespace fragscope {

enum class TraceAction : std::uint8_t {
  alloc,           // addr = block address, size = unrounded request
  free_requested,  // addr = block address, size = block.requested_size
  free_completed,  // idem; after free_requested once pending stream events completed
  segment_alloc,   // addr = segment base, size = segment bytes (cudaMalloc)
  segment_free,    // idem (cudaFree)
  segment_map,     // expandable segments: addr = range start, size = range bytes
  segment_unmap,   // idem
  snapshot,        // addr = 0, size = total active bytes
  oom,             // addr = device_free (cudaMemGetInfo free), size = rounded request
};
inline constexpr int kTraceActionCount = 9;

// The entries of a cudaMalloc, a cudaFree or an expandable segment's map or unmap, not a block's.
constexpr bool is_segment_action(TraceAction action) {
  return action == TraceAction::segment_alloc || action == TraceAction::segment_free ||
         action == TraceAction::segment_map || action == TraceAction::segment_unmap;
}

std::string_view to_string(TraceAction action);
std::optional<TraceAction> trace_action_from_string(std::string_view name);

// 40 bytes: the action is stored last, beside the 32-bit stack id, so that no field pads (with
// the action first it was 48, and a real 1.2M-entry trace held 9.6 MB of padding). Made as
// before, action first: TraceEvent{TraceAction::alloc, addr, size, stream, time_us, frames}.
struct TraceEvent {
  TraceEvent() = default;
  TraceEvent(TraceAction action, std::uint64_t addr, Bytes size = 0, StreamId stream = {},
             std::int64_t time_us = 0, FrameStackId frames = {})
      : addr(addr), size(size), stream(stream), time_us(time_us), frames(frames), action(action) {}

  std::uint64_t addr = 0;  // for TraceAction::oom this holds device_free
  Bytes size = 0;
  StreamId stream{};
  std::int64_t time_us = 0;  // epoch microseconds; 0 when unknown (PyTorch 2.0 traces, simulation)
  FrameStackId frames{};     // 0 = no stack
  TraceAction action{};

  friend bool operator==(const TraceEvent&, const TraceEvent&) = default;
};

}  // namespace fragscope
