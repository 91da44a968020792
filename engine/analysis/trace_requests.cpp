#include "engine/analysis/trace_requests.h"

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/core/packed_requests.h"
#include "engine/replay/replay.h"

namespace fragscope::analysis {

TraceRequests requests_from_trace(std::span<const TraceEvent> events,
                                  const snapshot::SegmentState& initial) {
  // One converter: replay's, with the state at the first entry seeded rather than re-made, so
  // what-if and post-mortem start where the recording did.
  const std::vector<TraceEvent> trace(events.begin(), events.end());
  replay::TraceRequests converted = replay::requests_from_trace(trace, &initial);
  TraceRequests out;
  out.requests = std::move(converted.requests);
  out.recorded_ooms = converted.ooms.size();
  out.oom_requests = std::move(converted.oom_requests);
  out.initial_segments = std::move(converted.initial_segments);
  out.recorded_segments = std::move(converted.segments);
  return out;
}

TraceRequests packed_requests_from_trace(const snapshot::Snapshot& snapshot, std::size_t device,
                                         const snapshot::SegmentState& initial) {
  TraceRequests out;
  replay::TraceRequests converted =
      replay::requests_from_trace(snapshot, device, &initial, out.packed_requests);
  out.recorded_ooms = converted.ooms.size();
  out.oom_requests = std::move(converted.oom_requests);
  out.initial_segments = std::move(converted.initial_segments);
  out.recorded_segments = std::move(converted.segments);
  return out;
}

alloc::AllocatorConfig config_from_settings(const nlohmann::json& settings) {
  return replay::config_from_settings(settings);  // one reading of allocator_settings
}

}  // namespace fragscope::analysis
