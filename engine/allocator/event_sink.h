#pragma once
// The one place where the allocator model reports what it decided. Every decision PyTorch would
// write to its memory-history ring buffer (alloc, free_requested, free_completed, segment_alloc,
// segment_free, segment_map, segment_unmap, oom) reaches the sink as a fragscope::TraceEvent with
// the same fields PyTorch records (torch-allocator-spec §10.2), in the same order.
#include <vector>

#include "engine/core/trace.h"

namespace fragscope::alloc {

class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void on_event(const TraceEvent& event) = 0;
};

// Keeps every event in memory, in order; for tests, comparisons and small runs.
class TraceRecorder final : public EventSink {
 public:
  void on_event(const TraceEvent& event) override { events_.push_back(event); }
  const std::vector<TraceEvent>& events() const { return events_; }
  void clear() { events_.clear(); }

 private:
  std::vector<TraceEvent> events_;
};

}  // namespace fragscope::alloc
