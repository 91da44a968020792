#pragma once
// Runs a RequestStream (engine/core/request.h) through the caching-allocator model: the one loop
// workloads, what-if analysis and replays share.
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/allocator/caching_allocator.h"
#include "engine/core/cancel.h"
#include "engine/core/progress.h"
#include "engine/core/request.h"

namespace fragscope {
class PackedRequests;
}

namespace fragscope::alloc {

struct RequestOom {
  std::size_t request_index = 0;  // index into RequestStream::requests of the failing malloc
  std::size_t allocs_before = 0;  // successful mallocs before it
  OutOfMemory oom;
};

struct RunOptions {
  // A failing malloc stops the run, as the Python exception would stop the training script.
  // Replays of recorded traces that continue after an OOM (the script caught it, or the trace
  // shows the unwinding frees) set this to false; frees of tensors whose malloc failed are then
  // skipped and counted in RunResult::skipped_requests.
  bool stop_on_oom = true;
  // Per-process limit in bytes (set_per_process_memory_fraction); overrides the config's
  // per_process_memory_fraction when set.
  std::optional<Bytes> allowed_memory;
  // Run is_valid() after every N-th request (1 = every request, 0 = never) and after the last
  // one; throw std::logic_error on the first violation.
  std::size_t check_invariants_every = 0;
  // Segments that existed before the first request (a trace recorded mid-run), seeded into the
  // allocator before it (CachingAllocator::seed); requests refer to their active blocks by the
  // seeds' tensor ids.
  std::vector<SeedSegment> initial_segments;
  // The release whose allocator rules apply (CachingAllocator::set_profile).
  AllocatorProfile profile;
  // Polled every kCancelPollRequests requests: a cancelled run throws fragscope::Cancelled.
  CancelToken cancel;
  // Told ("requests", requests done, requests) at every poll of `cancel`, and (n, n) once the run
  // is over (also when an OOM stopped it early): kRunStages.
  Progress progress;
  // The counters as they stood at the seeded state (an allocator-state keyframe's), restored
  // after seeding; unset: the seeded state's peaks and totals start afresh.
  std::optional<DeviceStats> initial_stats;
  // Fill RunResult::final_segments with the allocator's state after the last request.
  bool keep_final_segments = false;
  // empty_cache calls the run inserts into the stream (a what-if candidate's changed program):
  // one before the request at each index (ascending; indices into the stream given, its size for
  // one after the last request). Request indices (RequestOom, errors, progress) count them as in
  // a stream that held them; the stream is not copied. The caller keeps the indices alive.
  std::span<const std::size_t> empty_cache_before;
};

// How often run_requests polls RunOptions::cancel: a few microseconds of allocator work between
// polls, so a cancel is seen within a millisecond.
inline constexpr std::size_t kCancelPollRequests = 4096;

// The one stage run_requests reports, for fraction_progress.
inline constexpr ProgressStage kRunStages[] = {{"requests", 1}};

struct RunResult {
  DeviceStats stats;  // final memory_stats()
  std::vector<RequestOom> ooms;
  std::size_t requests_run = 0;      // requests processed (up to and including a stopping OOM)
  std::size_t allocs = 0;            // successful mallocs
  std::size_t skipped_requests = 0;  // ops on tensors that were never allocated
  bool stopped_on_oom = false;
  Bytes peak_allocated = 0;       // allocated_bytes.all.peak (since the last reset_peak request)
  Bytes peak_reserved = 0;        // reserved_bytes.all.peak
  DeviceCallCounts device_calls;  // calls this run made on the device
  // The per-process limit the run had (its config's fraction or RunOptions::allowed_memory).
  std::optional<Bytes> allowed_memory;
  Bytes gc_check_peak = 0;                  // CachingAllocator::gc_check_peak after the run
  std::vector<SegmentInfo> final_segments;  // with RunOptions::keep_final_segments
};

// Bad requests (a free of an unknown tensor id, a malloc of a tensor id that is live) throw
// fragscope::InputError naming the request index; options.empty_cache_before out of order or past
// the stream's end, std::invalid_argument.
RunResult run_requests(const RequestStream& requests, const AllocatorConfig& config, Device& device,
                       EventSink* sink = nullptr, const RunOptions& options = {});
// The same for a packed stream (engine/core/packed_requests.h), unpacked a block at a time.
RunResult run_requests(const PackedRequests& requests, const AllocatorConfig& config,
                       Device& device, EventSink* sink = nullptr, const RunOptions& options = {});

// What run_requests holds beside the allocator model while it runs `requests` (with
// options.empty_cache_before's calls) from options.initial_segments: its per-tensor table (16 bytes
// a tensor id up to the largest, for a stream whose ids are small as requests_from_trace numbers
// them; else hash maps, counted here as if every malloc stayed live) and a packed stream's decoded
// block. Runs in parallel hold this each (run_what_if bounds their number by it).
std::size_t run_state_bytes(const RequestStream& requests, const RunOptions& options = {});
std::size_t run_state_bytes(const PackedRequests& requests, const RunOptions& options = {});

}  // namespace fragscope::alloc
