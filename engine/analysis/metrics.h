#pragma once
// Fragmentation metrics over a run, computed from its allocator events (a PyTorch trace or the
// model's EventSink output: the same TraceEvent stream). One forward pass of
// snapshot::SegmentState gives the segment and block layout after every event; from it come the
// series users ask about when memory was "free" yet an allocation failed:
// - cached_free = reserved - active: bytes the cache holds in free blocks;
// - inactive_split: free bytes inside split segments, which empty_cache cannot return
//   (memory_summary's "Non-releasable memory");
// - external fragmentation = 1 - largest_free / cached_free: 0 when the free bytes form one
//   block, towards 1 when they are scattered over many small blocks;
// - GMLake's fragmentation (Guo et al., ASPLOS 2024) = 1 - peak_active / peak_reserved;
// - rounding waste = active - requested: block bytes beyond what the program asked for.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/allocator/config.h"
#include "engine/allocator/sizes.h"
#include "engine/core/memory_sample.h"
#include "engine/core/mempool_id.h"
#include "engine/core/strong_id.h"
#include "engine/core/trace.h"
#include "engine/core/units.h"
#include "engine/snapshot/segment_state.h"

namespace fragscope::snapshot {
class TraceBlocks;
}

namespace fragscope::analysis {

// Calls the allocator made on the device, counted from segment events.
struct DeviceCalls {
  std::uint64_t segment_allocs = 0;  // cudaMalloc
  std::uint64_t segment_frees = 0;   // cudaFree
  std::uint64_t maps = 0;            // expandable segments: page ranges mapped
  std::uint64_t unmaps = 0;
  std::uint64_t total() const { return segment_allocs + segment_frees + maps + unmaps; }
  DeviceCalls& operator+=(const DeviceCalls& other);
  friend bool operator==(const DeviceCalls&, const DeviceCalls&) = default;
};

// The memory state after one event: engine/core's MemorySample, the one the segment state tracks
// (the GUI names it analysis::MemorySample).
using fragscope::MemorySample;

// Free cached memory of one (stream, pool): what a request on that stream could reuse.
struct FreeSpace {
  StreamId stream{};
  alloc::PoolKind pool = alloc::PoolKind::large;
  Bytes free_bytes = 0;
  Bytes largest_block = 0;
  std::uint64_t blocks = 0;
  Bytes in_split_segments = 0;  // part of free_bytes that empty_cache could not return
  friend bool operator==(const FreeSpace&, const FreeSpace&) = default;
};

// One cached free block and where it lives.
struct FreeBlock {
  std::uint64_t address = 0;
  Bytes size = 0;
  StreamId stream{};
  alloc::PoolKind pool = alloc::PoolKind::large;
  bool in_split_segment = false;  // its segment has other blocks (and is not expandable)
  MempoolId pool_id{};            // a private pool's (CUDA graph, MemPool); (0,0): default pools
};

// Every cached free block of a segment state, in address order.
std::vector<FreeBlock> free_blocks(const snapshot::SegmentState& state);
// Free space per (stream, pool), ordered by stream then pool (small first).
std::vector<FreeSpace> summarize_free(std::span<const FreeBlock> blocks);
std::vector<FreeSpace> free_space(const snapshot::SegmentState& state);

// One training step of a simulated run (RequestOp::step_begin markers).
struct StepMetrics {
  std::uint64_t step = 0;       // the marker's step index
  std::size_t first_event = 0;  // first event of the step
  std::size_t end_event = 0;    // one past its last event
  MemorySample peak;            // per-series maximum inside the step
  std::uint64_t allocs = 0;     // alloc events
  std::uint64_t frees = 0;      // free_completed events
  Bytes bytes_allocated = 0;    // churn: requested bytes of the step's allocations
  DeviceCalls device_calls;
};

// Per-series maxima over a run of consecutive events.
struct MetricsBucket {
  std::size_t first = 0;  // first event index
  std::size_t last = 0;   // last event index (inclusive)
  MemorySample max;
  double max_external_fragmentation = 0;
};

struct RunMetrics {
  std::size_t events = 0;
  MemorySample initial;  // before the first event
  MemorySample final;
  MemorySample peak;                    // per-series maximum over initial and every event
  std::size_t peak_reserved_event = 0;  // first event after which reserved was at its peak
  MemorySample at_peak_reserved;        // the whole state there
  std::vector<FreeSpace> free_at_peak_reserved;
  double max_external_fragmentation = 0;
  std::size_t max_external_fragmentation_event = 0;
  DeviceCalls device_calls;
  std::uint64_t allocs = 0;
  std::uint64_t ooms = 0;

  // GMLake: 1 - peak_active / peak_reserved (0 for an empty run).
  double gmlake_fragmentation() const;
  // Peak of live requested bytes: what perfect packing of the same allocations would need.
  Bytes ideal_lower_bound() const { return peak.requested; }

  std::vector<MemorySample> samples;  // samples[i]: after event i (when kept)
  std::vector<MetricsBucket> buckets;
  std::vector<StepMetrics> steps;
};

MemorySample sample_of(const snapshot::SegmentState& state);

// Accumulates RunMetrics event by event, for producers that stream events (the allocator's
// EventSink, a stored run read in chunks).
class MetricsRecorder {
 public:
  struct Options {
    bool keep_samples = true;  // RunMetrics::samples and buckets need them
    std::size_t buckets = 512;
  };
  MetricsRecorder(snapshot::SegmentState initial, Options options);
  explicit MetricsRecorder(snapshot::SegmentState initial);

  // Applies one event. An event that contradicts the layout is an InputError naming its index.
  void apply(const TraceEvent& event);
  // The events from now on belong to training step `step` (until the next call).
  void begin_step(std::uint64_t step);
  const snapshot::SegmentState& state() const { return state_; }
  std::size_t event_count() const { return metrics_.events; }
  RunMetrics finish();

 private:
  void close_step();
  Options options_;
  snapshot::SegmentState state_;
  RunMetrics metrics_;
  std::optional<StepMetrics> step_;
};

// The metrics of a whole trace. `step_starts` (optional) pairs a step index with the event
// index where it begins, ascending.
struct StepStart {
  std::uint64_t step = 0;
  std::size_t event = 0;
};
RunMetrics measure_trace(std::span<const TraceEvent> events, snapshot::SegmentState initial,
                         MetricsRecorder::Options options = {},
                         std::span<const StepStart> step_starts = {});
// The same for a trace in either form (a spooled one read forward, never unpacked).
RunMetrics measure_trace(const snapshot::TraceBlocks& events, snapshot::SegmentState initial,
                         MetricsRecorder::Options options = {},
                         std::span<const StepStart> step_starts = {});

// Splits samples into at most `count` equal runs with the per-series maxima of each.
std::vector<MetricsBucket> bucket_samples(std::span<const MemorySample> samples, std::size_t count);

nlohmann::json to_json(const MemorySample& sample);
nlohmann::json to_json(const FreeSpace& space);
// Everything but the per-event samples; buckets and steps included.
nlohmann::json to_json(const RunMetrics& metrics);

}  // namespace fragscope::analysis
