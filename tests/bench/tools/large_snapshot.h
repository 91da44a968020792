#pragma once
// Large valid snapshots for the benchmarks, built from a recorded trace so they replay: the trace
// is repeated, and between repetitions every live block is freed and the cache emptied (the
// segment_free entries PyTorch's empty_cache writes, in its order: torch-allocator-spec §5.3), so
// each repetition starts from an empty allocator exactly as the recording did. The last
// repetition is left as recorded, so the final segments are the recording's.
#include <cstddef>

#include "engine/snapshot/snapshot.h"

namespace fragscope::bench {

// `source` must record its device's history from the allocator's start (no seeded state), with
// no expandable segments and no private pools; InputError otherwise. `min_entries`: repetitions
// are added until the trace has at least this many entries.
snapshot::Snapshot repeat_recorded_trace(const snapshot::Snapshot& source, std::size_t min_entries,
                                         std::size_t device = 0);

}  // namespace fragscope::bench
