#pragma once
// What-if: the same request stream under other allocator settings (or a changed program), ranked
// by what users care about when a run ran out of memory or reserved too much: does it avoid the
// OOM, how high does reserved memory peak, how many extra cudaMalloc/cudaFree calls does it cost.
// The ideal lower bound (the peak of live requested bytes: perfect packing) shows how far any
// allocator setting still is from what the program needs.
//
// Every candidate is an independent run of alloc::run_requests on its own SimulatedDevice, so
// candidates run on a thread pool; rows are computed into fixed slots and ranked by a total
// order, so the table is the same for any thread count. The runs share their request streams;
// each holds its own allocator model and table of tensors (WhatIfOptions::memory_budget bounds
// how many of those exist at once).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/allocator/caching_allocator.h"
#include "engine/allocator/config.h"
#include "engine/allocator/device.h"
#include "engine/allocator/event_sink.h"
#include "engine/allocator/profile.h"
#include "engine/allocator/run.h"
#include "engine/core/cancel.h"
#include "engine/core/devices.h"
#include "engine/core/packed_requests.h"
#include "engine/core/progress.h"
#include "engine/core/request.h"
#include "engine/core/units.h"

namespace fragscope::analysis {

// One candidate: a configuration, and optionally the program changed: empty_cache calls inserted,
// or another request stream (e.g. a smaller micro-batch with accumulation).
struct Mitigation {
  std::string name;  // e.g. "expandable_segments", "max_split_size_mb:256"
  // What the candidate runs under; config.raw is the PYTORCH_CUDA_ALLOC_CONF that gives it.
  alloc::AllocatorConfig config;
  std::shared_ptr<const RequestStream> requests;  // null: the baseline stream
  // Time per step relative to the baseline (program changes cost time; settings ~1).
  double step_time_ratio = 1.0;
  // Another release's allocator rules (release_mitigations); nullopt: WhatIfOptions::profile.
  std::optional<alloc::AllocatorProfile> profile;
  // Why the candidate cannot run at all (e.g. that release's parser refuses an option of the
  // baseline config): the row carries it as its error.
  std::string unavailable;
  // empty_cache calls the candidate inserts into its stream (`requests`, else the baseline's):
  // one before the request at each index, ascending (alloc::RunOptions::empty_cache_before).
  // The runs read the stream with the calls in it; none copies it.
  std::vector<std::size_t> empty_cache_before;
};

// The standard candidates for a baseline configuration: the baseline itself (first),
// expandable_segments, max_split_size_mb 64/128/256/512, roundup_power2_divisions 2/4/8/16,
// garbage_collection_threshold 0.6/0.8 (effective only under a memory limit), and "empty_cache
// before the big phase" (before each training step, or before the largest request when the
// stream has no steps). Each candidate is the baseline config with one option changed, its
// config.raw the canonical string of the result; a max_split_size_mb below the baseline's
// large_segment_size_mb, which PyTorch refuses, is left out.
std::vector<Mitigation> standard_mitigations(const RequestStream& requests,
                                             const alloc::AllocatorConfig& baseline);
// The same for a packed stream.
std::vector<Mitigation> standard_mitigations(const PackedRequests& requests,
                                             const alloc::AllocatorConfig& baseline);

// "Would upgrading PyTorch have avoided this?": one candidate per release of `releases` other
// than `current`, named "PyTorch X.Y's allocator": the baseline config under that release's
// allocator rules (engine/allocator/profile.h), with the recorded PYTORCH_CUDA_ALLOC_CONF read by
// that release's parser (the roundup `>` rule, its options). A string that release refuses makes
// the candidate unavailable, with that release's message.
std::vector<Mitigation> release_mitigations(const alloc::AllocatorConfig& baseline,
                                            const std::vector<TorchVersion>& releases,
                                            TorchVersion current);

// The releases a --what-if-releases value names: "X.Y[,X.Y...]", "newer" (every release after
// `current`) or "all" (every release but `current`). An InputError naming the value otherwise.
std::vector<TorchVersion> parse_release_list(std::string_view text, TorchVersion current);

// Where "empty_cache before the big phase" calls empty_cache (Mitigation::empty_cache_before):
// before every step_begin marker, or, without markers, before the first malloc of the largest
// size.
std::vector<std::size_t> empty_cache_before_big_phase(const RequestStream& requests);
std::vector<std::size_t> empty_cache_before_big_phase(const PackedRequests& requests);

// Peak of live requested bytes (malloc adds its size, free removes it), counting the active
// blocks of `initial` (the state before the first request) as live from the start.
Bytes ideal_peak(const RequestStream& requests,
                 const std::vector<alloc::SeedSegment>& initial = {});
Bytes ideal_peak(const PackedRequests& requests,
                 const std::vector<alloc::SeedSegment>& initial = {});

struct WhatIfOptions {
  // Per-process limit (set_per_process_memory_fraction); nullopt = the whole device.
  std::optional<Bytes> capacity;
  Bytes device_memory = kH200TotalMemory;  // what the device can give the allocator
                                           // (raised to `capacity` when that is larger)
  Bytes device_total = 0;  // totalGlobalMem (OOM text, expandable reservations); 0 = same
  unsigned threads = 1;    // 0 = hardware concurrency
  // The most the runs in flight may hold together (alloc::run_state_bytes each: a run's table of
  // the stream's tensors): fewer threads run when `threads` runs would hold more, one at least.
  // 0 = no bound. The rows do not depend on it.
  std::size_t memory_budget = 0;
  // Segment addresses of the recording the stream came from: served while a candidate asks for
  // the recorded sizes, so best-fit ties break as they did in the real run.
  std::vector<alloc::RecordedAddressDevice::RecordedSegment> recorded_segments;
  // The allocator state before the first request (a trace that starts mid-run): every candidate
  // starts from it, as the recording did. It was laid out under the recorded config, so a
  // candidate changes only what happens from the first request on.
  std::vector<alloc::SeedSegment> initial_segments;
  // The release whose allocator rules the candidates follow (the recording's own).
  alloc::AllocatorProfile profile;
  // Polled between candidates and inside each run: run_what_if then throws fragscope::Cancelled.
  CancelToken cancel;
  // run_what_if: ("candidates", done, candidates · kNestedProgressUnits), each row's run counting
  // its share of kNestedProgressUnits as it goes (kWhatIfStages); called from the worker threads,
  // one report at a time. run_candidate: its run's ("requests", done, requests)
  // (alloc::kRunStages).
  Progress progress;
};

// The memory_budget of a what-if over an input of `input_bytes` (a snapshot file; a stored run's
// trace as loaded): its runs in flight hold a fifth of that at most together, so the sweep's
// memory beside its input stays a fraction of the input whatever the thread count. One byte at
// least: one run always goes.
std::size_t what_if_memory_budget(std::uint64_t input_bytes);

// The device a candidate (and the advisor's post-mortem run) runs on: `device_memory`, raised to
// `capacity`, serving `recorded_segments`, with totalGlobalMem `device_total` raised to that.
// Returned as a prvalue (alloc::ReplayDevice cannot move): `auto gpu = candidate_device(options);`
alloc::ReplayDevice candidate_device(const WhatIfOptions& options);

// The one stage run_what_if reports, for fraction_progress.
inline constexpr ProgressStage kWhatIfStages[] = {{"candidates", 1}};

struct WhatIfRow {
  std::size_t candidate = 0;  // index into the candidates given
  std::string name;
  std::string alloc_conf;
  TorchVersion torch_version = kLatestTorch;     // the release whose allocator rules it ran
  bool ok = false;                               // no OOM
  std::optional<std::size_t> first_oom_request;  // index in this row's request stream
  std::size_t allocs_before_oom = 0;  // successful mallocs before it: progress comparable across
                                      // rows whose streams differ
  std::string oom_message;
  Bytes peak_reserved = 0;
  Bytes peak_allocated = 0;
  Bytes ideal_peak = 0;  // of this row's request stream
  std::uint64_t segment_allocs = 0;
  std::uint64_t segment_frees = 0;
  std::uint64_t maps = 0;
  std::uint64_t unmaps = 0;
  std::int64_t alloc_retries = 0;
  std::int64_t extra_device_calls = 0;  // device calls minus the baseline's (first candidate)
  double step_time_ratio = 1.0;
  std::size_t rank = 0;  // 1 = best
  std::string error;     // the candidate could not run (e.g. a bad request stream)

  std::uint64_t device_calls() const { return segment_allocs + segment_frees + maps + unmaps; }
  // peak_reserved / ideal_peak: 1.0 = perfect packing.
  double distance_from_ideal() const;
};

struct WhatIfTable {
  Bytes ideal_peak = 0;  // of the baseline stream
  std::optional<Bytes> capacity;
  std::vector<WhatIfRow> rows;  // ranked: best first
  const WhatIfRow* baseline() const;
  const WhatIfRow* best() const { return rows.empty() ? nullptr : &rows.front(); }
};

// Runs every candidate (the first is the baseline the others are measured against) and ranks
// them: avoids the OOM first (among those that do not, the later OOM first), then lower peak
// reserved, then fewer extra device calls, then lower step time, then candidate order.
WhatIfTable run_what_if(const RequestStream& requests, const std::vector<Mitigation>& candidates,
                        const WhatIfOptions& options = {});
// The same for a packed stream (a recorded trace's: a tenth of the memory, shared by the runs).
WhatIfTable run_what_if(const PackedRequests& requests, const std::vector<Mitigation>& candidates,
                        const WhatIfOptions& options = {});

// Runs one candidate exactly as its what-if row does: on the device `options` describes (the
// recording's segment addresses served first), from its start state, under the candidate's
// release (else options.profile). `requests` is the candidate's own stream when it has one (its
// empty_cache calls are inserted as it runs). The mitigation run stores this very replay, so its
// peak is the row's.
alloc::RunResult run_candidate(const RequestStream& requests, const Mitigation& candidate,
                               const WhatIfOptions& options, alloc::EventSink* sink = nullptr);

nlohmann::json to_json(const WhatIfRow& row);
nlohmann::json to_json(const WhatIfTable& table);

}  // namespace fragscope::analysis
