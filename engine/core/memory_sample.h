#pragma once
// The memory state after one event, in PyTorch's memory_stats() meanings ("all" pools): what the
// segment state tracks (snapshot::SegmentState::sample), the snapshot timeline plots and the
// analyses measure. Stored series are storage's SeriesPoint: signed, because they also carry the
// deltas between events, and only the four series every event changes.
#include <algorithm>
#include <cstdint>

#include "engine/core/units.h"

namespace fragscope {

struct MemorySample {
  Bytes allocated = 0;       // allocated_bytes: blocks handed out and not yet freed
  Bytes reserved = 0;        // reserved_bytes: cudaMalloc'd + mapped bytes
  Bytes active = 0;          // active_bytes: allocated + freed blocks awaiting stream events
  Bytes requested = 0;       // requested_bytes: unrounded sizes of active blocks
  Bytes inactive_split = 0;  // free bytes inside split, non-expandable segments ("Non-releasable")
  Bytes largest_free = 0;    // largest cached free block, any pool or stream
  std::uint64_t segments = 0;  // cudaMalloc'd segments (mapped expandable ranges not counted)

  Bytes cached_free() const { return reserved > active ? reserved - active : 0; }
  Bytes cached_unused() const { return reserved > allocated ? reserved - allocated : 0; }
  Bytes rounding_waste() const { return active > requested ? active - requested : 0; }
  // 1 - largest_free / cached_free; 0 when nothing is cached.
  double external_fragmentation() const {
    const Bytes free = cached_free();
    if (free == 0)
      return 0.0;
    const Bytes largest = std::min(largest_free, free);
    return 1.0 - static_cast<double>(largest) / static_cast<double>(free);
  }
  friend bool operator==(const MemorySample&, const MemorySample&) = default;
};

// Raises every series of `peak` to `sample`'s where that is higher (a per-series maximum).
inline void take_max(MemorySample& peak, const MemorySample& sample) {
  peak.allocated = std::max(peak.allocated, sample.allocated);
  peak.reserved = std::max(peak.reserved, sample.reserved);
  peak.active = std::max(peak.active, sample.active);
  peak.requested = std::max(peak.requested, sample.requested);
  peak.inactive_split = std::max(peak.inactive_split, sample.inactive_split);
  peak.largest_free = std::max(peak.largest_free, sample.largest_free);
  peak.segments = std::max(peak.segments, sample.segments);
}

}  // namespace fragscope
