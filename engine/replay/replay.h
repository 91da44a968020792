#pragma once
// Replays a recorded PyTorch trace through the caching-allocator model and compares the result
// with the recording: the model must make the same decisions (every alloc address, every
// segment_alloc/free/map/unmap, the OOM at the same request) for the same requests.
//
// A trace is turned into the RequestStream it implies (requests_from_trace), so what-if analysis
// can run the same requests under another config or capacity through alloc::run_requests.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/allocator/caching_allocator.h"
#include "engine/allocator/run.h"
#include "engine/core/cancel.h"
#include "engine/core/devices.h"
#include "engine/core/progress.h"
#include "engine/core/request.h"
#include "engine/core/trace.h"
#include "engine/replay/pool_inference.h"
#include "engine/snapshot/segment_state.h"
#include "engine/snapshot/snapshot.h"

namespace fragscope {
class PackedRequests;
}

namespace fragscope::replay {

struct RecordedOom {
  std::size_t allocs_before = 0;  // successful allocations before the failing request
  Bytes size = 0;                 // rounded request, as the oom entry holds it
  Bytes device_free = 0;          // cudaMemGetInfo free at the failure
  friend bool operator==(const RecordedOom&, const RecordedOom&) = default;
};

// What a trace asks of the allocator, plus what the recording says the allocator did.
struct TraceRequests {
  RequestStream requests;
  std::size_t entries = 0;  // trace entries read
  std::size_t allocs = 0;   // alloc entries (successful allocations in the recording)
  // The recorded segment_alloc addresses in order, for alloc::RecordedAddressDevice.
  std::vector<alloc::RecordedAddressDevice::RecordedSegment> segments;
  std::vector<RecordedOom> ooms;
  std::vector<std::size_t> oom_requests;  // index in `requests` of each recorded OOM's malloc
  // Recorded entries the model also emits (everything but `snapshot`): the trace itself holds
  // the expected events.
  std::size_t expected_events = 0;
  // Frees of addresses neither the trace nor the seeded state allocated: skipped.
  std::size_t unmatched_frees = 0;
  // The state before the first entry, for a trace that starts mid-run (empty otherwise); its
  // non-expandable segments also lead `segments`, in this order.
  std::vector<alloc::SeedSegment> initial_segments;
};

// alloc -> malloc; free_requested -> free (preceded by record_stream on another stream when the
// free completed later, i.e. the block waited for stream events); a deferred free_completed ->
// events_ready; oom -> a malloc of the recorded (rounded) size that must fail. The stream a
// block was recorded on is not in the trace: with exactly two streams it is the other one,
// otherwise a synthetic stream (UINT64_MAX). Throws InputError for inconsistent traces (an alloc
// at a live address), naming the entry.
// `initial`: the state before the first entry (snapshot::initial_state, the one reconstruction
// every view shares); its active blocks become seeded tensors that the trace's frees refer to.
// With a PoolRouter, the pool requests of CUDA graphs and MemPools and the empty_cache calls
// are inferred and inserted too (engine/replay/pool_inference.h).
TraceRequests requests_from_trace(const std::vector<TraceEvent>& trace,
                                  const snapshot::SegmentState* initial = nullptr,
                                  PoolRouter* router = nullptr);
// The same (without a router) for one device's trace of a snapshot in either form, a spooled one
// read forward and never unpacked, with the requests packed into `requests` (the returned
// TraceRequests::requests stays empty).
TraceRequests requests_from_trace(const snapshot::Snapshot& snapshot, std::size_t device,
                                  const snapshot::SegmentState* initial, PackedRequests& requests);

// What a replay seeded for a trace that starts mid-run ("N live blocks in M segments at the
// trace's start"), and which parts of that state are inferred rather than recorded.
struct SeededState {
  std::size_t segments = 0;
  std::size_t live_blocks = 0;     // allocated at the start
  std::size_t pending_blocks = 0;  // freed before the start, waiting for stream events
  std::size_t free_blocks = 0;     // cached at the start (the gaps between active blocks)
  Bytes reserved = 0;
  Bytes allocated = 0;
  // Active blocks whose size no entry records (freed by the trace before the end): taken from
  // the split rule and the next allocation inside their gap.
  std::size_t inferred_sizes = 0;
  // Of those, blocks the split rule cannot decide (a large block that may not have been split
  // and whose neighbour was freed before the trace began): their size may be off by <= 1 MiB.
  std::size_t guessed_sizes = 0;
  bool empty() const { return segments == 0; }
};
// One sentence for the user, e.g. "seeded 12 live blocks in 3 segments at the trace's start
// (segments and free gaps from the final snapshot; 4 block sizes inferred from the split rule)".
std::string describe(const SeededState& seeded);

// The allocator config a snapshot's allocator_settings describe (alloc::
// config_from_allocator_settings: the raw PYTORCH_CUDA_ALLOC_CONF string, overridden by the
// recorded effective values). Settings of older releases lack keys (2.0 records none): then the
// keys that decide layouts are read, the rest keep PyTorch's defaults, and `note` (when given)
// says so. InputError naming the key when a value has the wrong type.
alloc::AllocatorConfig config_from_settings(const nlohmann::json& allocator_settings,
                                            std::string* note = nullptr);

struct ReplayOptions {
  std::optional<alloc::AllocatorConfig> config;  // default: the recorded config
  std::optional<Bytes> capacity;                 // device capacity; default unlimited
  std::optional<Bytes> allowed_memory;           // per-process limit (memory fraction)
  Bytes total_memory = kH200TotalMemory;
  std::size_t check_invariants_every = 0;  // is_valid() after every N-th request (0 = never)
  // cudaMalloc addresses to serve, in order, instead of the trace's own segment_alloc addresses
  // (e.g. another recording's, when comparing a what-if with that recording).
  std::optional<std::vector<alloc::RecordedAddressDevice::RecordedSegment>> segment_addresses;
  // The final snapshot's segments with their pools (replay_snapshot fills it). With private
  // pools among them, or empty_cache calls in the trace, the replay infers the pool requests.
  std::vector<SegmentPool> final_segments;
  // empty_cache calls that returned nothing leave no trace entry (torch.cuda.graph makes one
  // before every capture). When the recording's num_sync_all_streams is known, the replay
  // makes up the difference with such calls before the first entry, where they release nothing.
  std::optional<std::int64_t> recorded_sync_all_streams;
  // The release whose allocator rules the model follows (torch-allocator-spec §14): nullopt =
  // the snapshot's (replay_snapshot: its format's guess or --torch-version), else 2.11.
  std::optional<TorchVersion> torch_version;
  // The CUDA device the trace was recorded on ("GPU d" in the model's OOM text); replay_snapshot
  // sets it from its `device`.
  int device = 0;
  // Polled between pool-inference passes and inside the model's run: fragscope::Cancelled.
  CancelToken cancel;
  // Told how far the replay has come, in the stages of kReplayStages.
  Progress progress;
  // Replaying on from an allocator-state keyframe (`initial` its blocks): its counters
  // (alloc::RunOptions::initial_stats).
  std::optional<alloc::DeviceStats> initial_stats;
  // Keep the model's final segments and blocks in ReplayResult::run.final_segments.
  bool keep_final_segments = false;
  // Keep every event the model emits in ReplayResult::events (a replay otherwise compares them
  // with the trace as they come and keeps only the segment events).
  bool keep_events = false;
};

// What replay_trace reports to ReplayOptions::progress, in order: "pools" (pass k of at most
// kMaxPoolPasses; 1 of 1 when the inference is done), "sync calls" (the dry run that counts
// empty_cache calls, when recorded_sync_all_streams is set), "requests" (the model's run, as
// alloc::run_requests reports it) and "comparing" (1 of 1 once the result is complete). Stages a
// replay does not need are skipped.
inline constexpr ProgressStage kReplayStages[] = {
    {"pools", 2}, {"sync calls", 1}, {"requests", 2}, {"comparing", 0.1}};
// The most pool-inference passes a replay makes.
inline constexpr std::size_t kMaxPoolPasses = 24;

// Whether the replay must infer pool requests and empty_cache calls for this trace: the final
// snapshot shows private pools, or the trace returns segments outside an OOM path.
bool needs_pool_inference(const std::vector<TraceEvent>& trace, const ReplayOptions& options);

struct Divergence {
  std::size_t event_index = 0;         // index among the compared events
  std::size_t trace_entry = 0;         // index of the expected entry in the trace (or trace size)
  std::optional<TraceEvent> expected;  // nullopt: the model emitted more than the recording
  std::optional<TraceEvent> got;       // nullopt: the model stopped short
};
std::string describe(const Divergence& divergence);

struct ReplayResult {
  alloc::RunResult run;
  std::size_t emitted_events = 0;  // what the model emitted (compared as it came, not kept)
  // (action, size) of the emitted segment_alloc/free/map/unmap events, in order.
  std::vector<std::pair<TraceAction, Bytes>> segment_events;
  std::vector<TraceEvent> events;  // every emitted event, with ReplayOptions::keep_events
  std::size_t entries = 0;
  std::size_t allocs = 0;  // alloc requests replayed
  std::vector<RecordedOom> recorded_ooms;
  // Filled when replayed under the recorded config (options.config unset):
  bool compared = false;
  bool segment_events_match = false;           // same segment_* actions and sizes, in order
  bool ooms_match = false;                     // same OOMs at the same request with the same size
  std::optional<Divergence> first_divergence;  // first event that differs (addresses compared
                                               // except inside expandable reservations)
  // What the pool inference found (nullopt when the recording needed none).
  std::optional<PoolInferenceSummary> pools;
  std::size_t silent_empty_caches = 0;  // empty_cache calls added for recorded_sync_all_streams
  SeededState seeded;                   // the state seeded before the first entry
  alloc::AllocatorProfile profile;      // the release rules the model followed
  std::vector<std::string> warnings;    // e.g. the start state could not be rebuilt
};

// `initial`: the state before the first entry when the trace starts mid-run (null: empty).
ReplayResult replay_trace(const std::vector<TraceEvent>& trace,
                          const nlohmann::json& allocator_settings,
                          const ReplayOptions& options = {},
                          const snapshot::SegmentState* initial = nullptr);
// The segment_alloc addresses of a trace, in order.
std::vector<alloc::RecordedAddressDevice::RecordedSegment> recorded_segments(
    const std::vector<TraceEvent>& trace);
// One device's trace of a snapshot, seeded with the state at its first entry when it starts
// mid-run (snapshot::initial_state); InputError when the snapshot has no trace for `device`.
ReplayResult replay_snapshot(const snapshot::Snapshot& snapshot, const ReplayOptions& options = {},
                             std::size_t device = 0);

// (action, size) of the segment_alloc/free/map/unmap events, in order.
std::vector<std::pair<TraceAction, Bytes>> segment_events(const std::vector<TraceEvent>& events);

}  // namespace fragscope::replay
