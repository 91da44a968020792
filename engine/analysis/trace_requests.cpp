#include "engine/analysis/trace_requests.h"

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/replay/replay.h"

namespace fragscope::analysis {

TraceRequests requests_from_trace(std::span<const TraceEvent> events,
                                  const snapshot::SegmentState& initial) {
  // One converter: replay's. Its seeds (the blocks live before the first entry) become mallocs
  // up front here, so a what-if under another config lays them out by its own rules.
  const std::vector<TraceEvent> trace(events.begin(), events.end());
  const replay::TraceRequests converted = replay::requests_from_trace(trace, &initial);
  TraceRequests out;
  std::vector<Request>& requests = out.requests.requests;
  std::size_t seeded_segments = 0;
  for (const alloc::SeedSegment& segment : converted.initial_segments) {
    seeded_segments += segment.expandable ? 0 : 1;
    for (const alloc::SeedBlock& block : segment.blocks) {
      if (block.state == BlockState::inactive)
        continue;
      requests.push_back(
          Request{RequestOp::malloc, block.tensor, block.requested_size, segment.stream, {}});
      ++out.predating_allocs;
      if (block.state == BlockState::active_pending_free) {
        // Freed before the trace began and still waiting for another stream's events.
        requests.push_back(Request{
            RequestOp::record_stream, block.tensor, 0, StreamId{segment.stream.value + 1}, {}});
        requests.push_back(Request{RequestOp::free, block.tensor, 0, segment.stream, {}});
      }
    }
  }
  const std::size_t offset = requests.size();
  requests.insert(requests.end(), converted.requests.requests.begin(),
                  converted.requests.requests.end());
  out.requests.pools = converted.requests.pools;
  out.recorded_ooms = converted.ooms.size();
  for (const std::size_t index : converted.oom_requests)
    out.oom_requests.push_back(offset + index);
  out.recorded_segments.assign(
      converted.segments.begin() + static_cast<std::ptrdiff_t>(seeded_segments),
      converted.segments.end());
  return out;
}

alloc::AllocatorConfig config_from_settings(const nlohmann::json& settings) {
  return replay::config_from_settings(settings);  // one reading of allocator_settings
}

}  // namespace fragscope::analysis
