#include "engine/analysis/trace_requests.h"

#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/replay/replay.h"

namespace fragscope::analysis {

TraceRequests requests_from_trace(std::span<const TraceEvent> events,
                                  const snapshot::SegmentState& initial) {
  TraceRequests out;
  std::vector<Request>& requests = out.requests.requests;
  requests.reserve(events.size());
  std::uint64_t next_tensor = 1;
  std::unordered_map<std::uint64_t, TensorId> live;     // block address -> tensor
  std::unordered_map<std::uint64_t, TensorId> pending;  // freed, completion not yet seen
  std::unordered_map<std::uint64_t, StreamId> stream_of;

  // Blocks live before the first entry: the segment they sit in gives the stream.
  const auto& segments = initial.segment_map();
  for (const auto& [address, block] : initial.block_map()) {
    if (block.state == snapshot::BlockState::inactive)
      continue;
    auto segment = segments.upper_bound(address);
    const StreamId stream =
        segment == segments.begin() ? StreamId{} : std::prev(segment)->second.stream;
    const TensorId tensor{next_tensor++};
    requests.push_back(Request{RequestOp::malloc, tensor, block.requested, stream, LabelId{}});
    live[address] = tensor;
    stream_of[address] = stream;
    ++out.predating_allocs;
    if (block.state == snapshot::BlockState::active_pending_free) {
      requests.push_back(
          Request{RequestOp::record_stream, tensor, 0, StreamId{stream.value + 1}, LabelId{}});
      requests.push_back(Request{RequestOp::free, tensor, 0, stream, LabelId{}});
      live.erase(address);
      pending[address] = tensor;
    }
  }

  for (std::size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    switch (e.action) {
      case TraceAction::alloc: {
        const TensorId tensor{next_tensor++};
        requests.push_back(Request{RequestOp::malloc, tensor, e.size, e.stream, LabelId{}});
        live[e.addr] = tensor;
        stream_of[e.addr] = e.stream;
        break;
      }
      case TraceAction::free_requested: {
        auto it = live.find(e.addr);
        if (it == live.end())
          throw InputError("trace event " + std::to_string(i) + ": free_requested of address " +
                           std::to_string(e.addr) + " with no live allocation");
        const TensorId tensor = it->second;
        live.erase(it);
        const bool completes_at_once = i + 1 < events.size() &&
                                       events[i + 1].action == TraceAction::free_completed &&
                                       events[i + 1].addr == e.addr;
        if (!completes_at_once) {
          // Another stream used the block; any stream other than the allocation stream will do.
          const StreamId user{stream_of[e.addr].value + 1};
          requests.push_back(Request{RequestOp::record_stream, tensor, 0, user, LabelId{}});
          pending[e.addr] = tensor;
        }
        requests.push_back(Request{RequestOp::free, tensor, 0, e.stream, LabelId{}});
        break;
      }
      case TraceAction::free_completed: {
        auto it = pending.find(e.addr);
        if (it != pending.end()) {
          requests.push_back(Request{RequestOp::events_ready, it->second, 0, e.stream, LabelId{}});
          pending.erase(it);
        }
        break;
      }
      case TraceAction::oom: {
        // The failed request: its tensor never existed, so nothing frees it.
        out.oom_requests.push_back(requests.size());
        requests.push_back(
            Request{RequestOp::malloc, TensorId{next_tensor++}, e.size, e.stream, LabelId{}});
        ++out.recorded_ooms;
        break;
      }
      case TraceAction::segment_alloc:
        out.recorded_segments.push_back({e.addr, e.size});
        break;
      case TraceAction::segment_free:
      case TraceAction::segment_map:
      case TraceAction::segment_unmap:
      case TraceAction::snapshot:
        break;
    }
  }
  return out;
}

alloc::AllocatorConfig config_from_settings(const nlohmann::json& settings) {
  return replay::config_from_settings(settings);  // one reading of allocator_settings
}

}  // namespace fragscope::analysis
