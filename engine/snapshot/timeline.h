#pragma once
// Memory over time from a snapshot's trace: one TimelineSample after every trace entry, built in
// one forward pass of SegmentState. When the trace does not start at the beginning (ring buffer
// full, recording started late), the state at its first entry is rebuilt by walking back from the
// final segments, as memory_viz does, and the timeline says so. Downsampling keeps each bucket's
// minimum and maximum, so a peak never disappears when zoomed out. SegmentHistory gives the full
// segment state at any event from keyframes plus the events after them.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/snapshot/segment_state.h"
#include "engine/snapshot/snapshot.h"

namespace fragscope::snapshot {

struct Timeline {
  int device = 0;
  TimelineSample initial;               // before the first trace entry
  std::vector<TimelineSample> samples;  // samples[i]: after trace entry i
  TimelineSample peak;                  // per-series maximum over initial and samples
  bool truncated = false;               // the trace starts with memory already in use
  std::size_t predating_segments = 0;   // segments that existed before the first entry
  std::size_t predating_blocks = 0;     // live blocks allocated before the first entry
  // Predating blocks freed by the trace have no recorded block size. Most are pinned down by the
  // trace itself (the next allocation after them lands on their end); the rest follow PyTorch's
  // split rule, which can be wrong for a block that was not split and whose neighbour was freed
  // before the trace began (size off by at most 1 MiB each). Samples from `exact_from` on (the
  // entry after the last guessed block is freed) no longer depend on any guess; reserved,
  // requested and segment counts never do.
  std::size_t guessed_blocks = 0;
  std::size_t exact_from = 0;
  // Replaying the trace reproduced the snapshot's final segments exactly (block boundaries and
  // states). False means the trace and the final state disagree; `mismatch` says where.
  bool matches_final_segments = false;
  std::string mismatch;
};

// The segment state just before a device's first trace entry: empty when the trace covers the
// whole run, else rebuilt from the final segments by undoing the trace.
// `guessed_blocks`, when given, receives the addresses of blocks whose size had to be guessed.
SegmentState initial_state(const Snapshot& snapshot, int device,
                           std::vector<std::uint64_t>* guessed_blocks = nullptr);

// Throws InputError when the trace contradicts itself (e.g. frees an address never allocated).
Timeline build_timeline(const Snapshot& snapshot, int device = 0);

struct TimelineBucket {
  std::size_t first = 0;  // first sample index in the bucket
  std::size_t last = 0;   // last sample index in the bucket (inclusive)
  TimelineSample min;
  TimelineSample max;
};

// Splits samples into at most `buckets` equal runs, each with the min and max of every series.
// `index_offset` is added to the reported indices (for a zoomed window of a larger timeline).
std::vector<TimelineBucket> downsample(std::span<const TimelineSample> samples, std::size_t buckets,
                                       std::size_t index_offset = 0);

// Random access to the segment state at any event of one device's trace.
class SegmentHistory {
 public:
  SegmentHistory(const Snapshot& snapshot, int device, std::size_t keyframe_interval = 4096);

  // The state after the first `count` trace entries (0 = before the first entry).
  SegmentState state_after(std::size_t count) const;
  std::size_t event_count() const { return events_->size(); }
  std::size_t keyframe_interval() const { return interval_; }
  // Keyframe k is the state after k * keyframe_interval() entries, serialized.
  const std::vector<std::string>& keyframes() const { return keyframes_; }

 private:
  const std::vector<TraceEvent>* events_;
  LayoutRules rules_;
  std::size_t interval_;
  std::vector<std::string> keyframes_;
};

}  // namespace fragscope::snapshot
