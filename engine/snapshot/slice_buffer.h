#pragma once
// SliceBuffer: trace entries and the sample after each, handed on a slice at a time, so that a
// consumer of a long trace (an import storing its series) never holds all of them. Full slices
// of kTimelineSlice entries go out as they fill, and finish() hands out the shorter rest.
//
// build_timeline uses it for the layout's samples (MemorySample); the import's fallback for the
// series the trace alone gives (storage's SeriesPoint), both with the same slicing.
#include <algorithm>
#include <cstddef>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "engine/core/trace.h"
#include "engine/snapshot/timeline.h"

namespace fragscope::snapshot {

template <typename Sample>
class SliceBuffer {
 public:
  // Entries [first, first + events.size()) and the sample after each.
  using Flush = std::function<void(std::span<const TraceEvent> events,
                                   std::span<const Sample> samples, std::size_t first)>;

  // `expected`: how many entries will come at most (bounds the first reservation).
  SliceBuffer(Flush flush, std::size_t expected) : flush_(std::move(flush)) {
    events_.reserve(std::min(kTimelineSlice, expected));
    samples_.reserve(std::min(kTimelineSlice, expected));
  }

  // The next entry and the sample after it; a full slice goes out.
  void push(const TraceEvent& event, const Sample& sample) {
    events_.push_back(event);
    samples_.push_back(sample);
    if (samples_.size() == kTimelineSlice)
      hand_out();
  }

  // Hands out what is left (nothing when the last slice was full).
  void finish() {
    if (!samples_.empty())
      hand_out();
  }

 private:
  void hand_out() {
    flush_(events_, samples_, first_);
    first_ += samples_.size();
    events_.clear();
    samples_.clear();
  }

  Flush flush_;
  std::vector<TraceEvent> events_;
  std::vector<Sample> samples_;
  std::size_t first_ = 0;  // the index of events_.front() in the trace
};

}  // namespace fragscope::snapshot
