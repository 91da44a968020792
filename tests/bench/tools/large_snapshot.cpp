#include "large_snapshot.h"

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "engine/core/error.h"

namespace fragscope::bench {
namespace {

// The entries that take the allocator of `source` (its final segments) back to empty: frees of
// every live block, then the empty_cache that releases every (now whole, free) segment.
std::vector<TraceEvent> release_everything(const snapshot::Snapshot& source, int device,
                                           std::int64_t time_us) {
  std::vector<TraceEvent> out;
  std::vector<const snapshot::Segment*> large;
  std::vector<const snapshot::Segment*> small;
  for (const auto& segment : source.segments) {
    if (segment.device != device)
      continue;
    for (const auto& block : segment.blocks) {
      TraceEvent free{TraceAction::free_requested,
                      block.address,
                      block.requested_size,
                      segment.stream,
                      time_us,
                      block.frames};
      if (block.state == BlockState::active_allocated)
        out.push_back(free);
      if (block.state == BlockState::active_allocated ||
          block.state == BlockState::active_pending_free) {
        free.action = TraceAction::free_completed;
        out.push_back(free);
      }
    }
    (segment.pool == snapshot::PoolKind::small ? small : large).push_back(&segment);
  }
  // release_blocks walks each pool in (stream, size, address) order, large pool first.
  const auto order = [](const snapshot::Segment* a, const snapshot::Segment* b) {
    return std::tuple(a->stream.value, a->total_size, a->address) <
           std::tuple(b->stream.value, b->total_size, b->address);
  };
  std::sort(large.begin(), large.end(), order);
  std::sort(small.begin(), small.end(), order);
  for (const auto* pool : {&large, &small})
    for (const auto* segment : *pool)
      out.push_back(TraceEvent{TraceAction::segment_free, segment->address, segment->total_size,
                               segment->stream, time_us, FrameStackId{}});
  return out;
}

}  // namespace

snapshot::Snapshot repeat_recorded_trace(const snapshot::Snapshot& source, std::size_t min_entries,
                                         std::size_t device) {
  if (device >= source.device_traces.size() || source.device_traces[device].empty())
    throw InputError("repeat_recorded_trace: the source has no trace for device " +
                     std::to_string(device));
  const auto& trace = source.device_traces[device];
  if (trace.front().action != TraceAction::segment_alloc)
    throw InputError(
        "repeat_recorded_trace: the source trace must start at the allocator's "
        "start (its first entry is " +
        std::string(to_string(trace.front().action)) + ", not segment_alloc)");
  for (const auto& segment : source.segments) {
    if (segment.is_expandable || segment.pool_id != std::pair<std::int64_t, std::int64_t>{0, 0})
      throw InputError(
          "repeat_recorded_trace: expandable segments and private pools are not "
          "supported (segment at " +
          std::to_string(segment.address) + ")");
  }
  for (const auto& event : trace) {
    if (event.action == TraceAction::oom || event.action == TraceAction::segment_map)
      throw InputError("repeat_recorded_trace: the source trace must not contain " +
                       std::string(to_string(event.action)) + " entries");
  }

  snapshot::Snapshot out = source;
  out.device_entry_texts.clear();
  out.warnings.clear();
  auto& events = out.device_traces[device];
  const std::vector<TraceEvent> release =
      release_everything(source, static_cast<int>(device), trace.back().time_us);
  const std::size_t per_repetition = trace.size() + release.size();
  const std::size_t repetitions =
      std::max<std::size_t>(1, (min_entries + per_repetition - 1) / per_repetition);
  events.clear();
  events.reserve(repetitions * per_repetition);
  const std::int64_t span = trace.back().time_us - trace.front().time_us + 1000;
  for (std::size_t rep = 0; rep < repetitions; ++rep) {
    const std::int64_t shift = static_cast<std::int64_t>(rep) * span;
    for (TraceEvent event : trace) {
      event.time_us += shift;
      events.push_back(event);
    }
    if (rep + 1 == repetitions)
      break;
    for (TraceEvent event : release) {
      event.time_us += shift + 1;
      events.push_back(event);
    }
  }
  out.features.trace_entries = events.size();
  return out;
}

}  // namespace fragscope::bench
