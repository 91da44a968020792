#pragma once
// Memory over time from a snapshot's trace: one MemorySample after every trace entry, built in
// one forward pass of SegmentState. When the trace does not start at the beginning (ring buffer
// full, recording started late), the state at its first entry is rebuilt by walking back from the
// final segments, as memory_viz does, and the timeline says so. (Stored runs are downsampled by
// storage's peak-preserving pyramid, storage/db/timeline.h.)
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/snapshot/segment_state.h"
#include "engine/snapshot/snapshot.h"

namespace fragscope::snapshot {

struct Timeline {
  int device = 0;
  MemorySample initial;                // before the first trace entry
  std::vector<MemorySample> samples;   // samples[i]: after trace entry i
  MemorySample peak;                   // per-series maximum over initial and samples
  bool truncated = false;              // the trace starts with memory already in use
  std::size_t predating_segments = 0;  // segments that existed before the first entry
  std::size_t predating_blocks = 0;    // live blocks allocated before the first entry
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
  // No segment predates the trace (its segment entries undo the final segments to none), so it
  // was walked from an empty state instead of one rebuilt by walking back through every entry;
  // the walk reaching the final segments exactly showed that no block predates it either.
  bool start_assumed_empty = false;
};

// The segment state just before a device's first trace entry: empty when the trace covers the
// whole run, else rebuilt from the final segments by undoing the trace.
// `guessed_blocks`, when given, receives the addresses of blocks whose size had to be guessed;
// `inferred_sizes`, the count of blocks in use at the start whose size no entry gives (the trace
// frees them before any allocation there), their sizes inferred from the rounding and split rules.
SegmentState initial_state(const Snapshot& snapshot, int device,
                           std::vector<std::uint64_t>* guessed_blocks = nullptr,
                           std::size_t* inferred_sizes = nullptr);
// Whether no segment predates the device's trace: undoing its `segment_events` (its segment_*
// entries, in trace order) from the final segments leaves none, as the walk of initial_state
// would. False as well where that walk fails.
bool no_segments_before(const Snapshot& snapshot, int device,
                        std::span<const TraceEvent> segment_events);

// Throws InputError when the trace contradicts itself (e.g. frees an address never allocated).
Timeline build_timeline(const Snapshot& snapshot, int device = 0);

// What build_timeline hands out as it goes, for a consumer that stores the timeline instead of
// keeping it (an import).
struct TimelineSinks {
  // Once the state before the first entry is known, before any sample: `header` has everything
  // but the samples, the peak and what the end of the trace decides (exact_from,
  // matches_final_segments). May be empty.
  std::function<void(const Timeline& header)> on_start;
  // Entries [first, first + events.size()) and the sample after each, in order, in slices of
  // kTimelineSlice entries (the last one shorter).
  std::function<void(std::span<const TraceEvent> events, std::span<const MemorySample> samples,
                     std::size_t first)>
      on_samples;
  // Given, build_timeline may first walk from an empty start when no segment predates the trace
  // (Timeline::start_assumed_empty, in on_start's header). If the walk shows otherwise (an entry
  // the empty state cannot take, or an end that is not the final segments), on_restart is called
  // and everything is handed over again from the rebuilt start: what came before it is void.
  // Without it the start is always rebuilt.
  std::function<void()> on_restart;
};
// As many as a spooled trace's block: an import holds a slice three times (its entries and
// samples here, the series the store takes) beside the store's own two chunks, so slices of 2^16
// entries were 8.4 MB of an import's peak.
inline constexpr std::size_t kTimelineSlice = std::size_t{1} << 12;

// build_timeline with the samples handed to `sinks` instead of kept (the returned Timeline's
// `samples` stay empty): its memory does not grow with the trace. An InputError thrown part way
// leaves the slices already handed over with the sink.
Timeline build_timeline(const Snapshot& snapshot, int device, const TimelineSinks& sinks);

}  // namespace fragscope::snapshot
