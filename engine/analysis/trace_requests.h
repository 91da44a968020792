#pragma once
// What a recorded program asked of its allocator, recovered from a PyTorch trace, so the same
// requests can be replayed under another configuration (what-if). The trace's segment events are
// the recording allocator's answers and are dropped; what remains is the request stream:
// - alloc -> malloc of the unrounded size on the event's stream;
// - free_requested -> free; when its free_completed does not follow at once, another stream
//   used the block (record_stream), so a record_stream precedes the free and an events_ready
//   stands where the recording completed it;
// - oom -> a malloc of the recorded (rounded) size that the recording could not serve;
// - the state before the first entry (a trace that starts mid-run) is kept as seed segments:
//   every what-if candidate starts from the allocator state the recording had at its first
//   entry (laid out by the recorded config: the history before the trace ran under it), so the
//   baseline row's figures are the recording's.
// The conversion itself is replay::requests_from_trace's (one converter for replay, what-if and
// the post-mortem); this adds the OOM request indexes what-if needs.
#include <cstddef>
#include <span>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/allocator/caching_allocator.h"
#include "engine/allocator/config.h"
#include "engine/allocator/device.h"
#include "engine/core/packed_requests.h"
#include "engine/core/request.h"
#include "engine/core/trace.h"
#include "engine/snapshot/segment_state.h"
#include "engine/snapshot/snapshot.h"

namespace fragscope::analysis {

struct TraceRequests {
  RequestStream requests;
  PackedRequests packed_requests;         // instead, from packed_requests_from_trace
  std::size_t recorded_ooms = 0;          // oom entries turned into mallocs
  std::vector<std::size_t> oom_requests;  // request index of each of those mallocs
  // The segments that existed before the first entry (empty for a complete trace), for
  // alloc::RunOptions::initial_segments; the stream's frees refer to their active blocks.
  std::vector<alloc::SeedSegment> initial_segments;
  // The recording's cudaMalloc'd segments in order (the seeded ones first), so a replay can
  // break best-fit ties by the same addresses (alloc::RecordedAddressDevice).
  std::vector<alloc::RecordedAddressDevice::RecordedSegment> recorded_segments;
};

// `initial` is the state before the first entry (empty for a complete trace). A free of an
// address neither the trace nor `initial` allocated is skipped (replay counts it).
TraceRequests requests_from_trace(std::span<const TraceEvent> events,
                                  const snapshot::SegmentState& initial);
// The same for one device's trace of a snapshot in either form (a spooled one read forward, never
// unpacked), the requests in packed_requests (`requests` stays empty).
TraceRequests packed_requests_from_trace(const snapshot::Snapshot& snapshot, std::size_t device,
                                         const snapshot::SegmentState& initial);

// The allocator configuration a snapshot recorded (allocator_settings, PyTorch 2.x keys): the
// size and split rules, expandable segments and the garbage-collection threshold. A value of the
// wrong type is an InputError naming the key.
alloc::AllocatorConfig config_from_settings(const nlohmann::json& allocator_settings);

}  // namespace fragscope::analysis
