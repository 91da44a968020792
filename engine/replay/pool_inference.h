#pragma once
// Which pool each recorded allocation used. PyTorch's trace entries carry no pool id (2.11), so
// a replay of a recording with CUDA graphs or MemPools infers the pool requests the program made
// (beginAllocateToPool / endAllocateToPool / releasePool, empty_cache) from what the recording
// shows: the segment an allocation landed in, the final snapshot's `segment_pool_id` of every
// segment still alive, the stream, and, for a segment opened and freed within the trace, which
// pools could not have served the request (the model is run in lockstep to ask). The inference
// is checked by the replay itself: every segment event must then match.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "engine/allocator/caching_allocator.h"
#include "engine/allocator/config.h"
#include "engine/allocator/device.h"
#include "engine/allocator/flat_map.h"
#include "engine/allocator/run.h"
#include "engine/core/mempool_id.h"
#include "engine/core/request.h"
#include "engine/core/trace.h"
#include "engine/snapshot/event_spool.h"

namespace fragscope {
class PackedRequests;
}

namespace fragscope::replay {

// A segment of the final snapshot and the pool it belongs to (`segment_pool_id`).
struct SegmentPool {
  std::uint64_t address = 0;
  Bytes size = 0;
  MempoolId pool;
};

// What an earlier pass learned: segments (by the trace index of their segment_alloc) that belong
// to a private pool although nothing at the end shows it, and pools that never split blocks
// (MemPool(no_split=True)).
struct PoolHints {
  std::map<std::size_t, MempoolId> segment_pool;
  std::set<MempoolId> no_split;
  friend bool operator==(const PoolHints&, const PoolHints&) = default;
};

struct PoolInferenceSettings {
  alloc::AllocatorConfig config;
  Bytes total_memory = 0;
  std::optional<Bytes> capacity;
  std::optional<Bytes> allowed_memory;
  std::vector<alloc::RecordedAddressDevice::RecordedSegment> recorded_segments;
  std::vector<SegmentPool> final_segments;
  PoolHints hints;
  // The pools of final_segments by the trace index of the segment_alloc that opened each (the
  // last at its address, with no segment_free after): find_trace_segments finds them with
  // recorded_segments in one walk of the trace, for every pass; unset, each router walks the
  // trace for them.
  std::optional<std::map<std::size_t, MempoolId>> final_pools;
  // The state before the first entry of a trace that starts mid-run: its segments' addresses
  // lead the lockstep model's device (PoolRouter::seed seeds the model).
  std::vector<alloc::SeedSegment> initial_segments;
  alloc::AllocatorProfile profile;  // the release rules of the replay
};

struct PoolInferenceSummary {
  std::size_t private_allocations = 0;   // allocations routed to a private pool
  std::size_t pool_requests = 0;         // pool_* requests inserted
  std::size_t empty_cache_requests = 0;  // empty_cache calls inferred from segment_free bursts
  std::size_t passes = 1;                // inference passes (each adds what the last learned)
  std::vector<MempoolId> pools;          // private pools seen or inferred, in order of first use
};

class PoolRouter {
 public:
  explicit PoolRouter(PoolInferenceSettings settings);
  ~PoolRouter();
  PoolRouter(const PoolRouter&) = delete;
  PoolRouter& operator=(const PoolRouter&) = delete;

  // The state before the first entry of a trace that starts mid-run (requests_from_trace's
  // seeds): decides each seeded segment's pool (the final snapshot's segment_pool_id when the
  // trace never returns it, else what an earlier pass learned, else the default pools), writes
  // it into the seeds and starts the lockstep model from them.
  void seed(const snapshot::TraceWindow& trace, std::vector<alloc::SeedSegment>& seeds,
            RequestStream& out);
  // Before trace entry `index` becomes requests: appends the pool requests it needs first.
  void before_entry(const snapshot::TraceWindow& trace, std::size_t index, RequestStream& out);
  // After its requests were appended: runs them through the lockstep model.
  void after_entry(const RequestStream& out);
  // Moves the requests of `out` to `into` (a stream kept packed), all of them run through the
  // lockstep model (after_entry): the router reads back only the requests appended after.
  void move_applied(RequestStream& out, PackedRequests& into);
  const PoolInferenceSummary& summary() const { return summary_; }
  // The events the lockstep model emits also go to `sink` (null: nowhere), as they would in the
  // replay's own run of the requests.
  void forward_events(alloc::EventSink* sink) { recorder_.next = sink; }
  // What alloc::run_requests (stop_on_oom false, this router's config, device and seeds, no
  // invariant checks or initial stats) returns for the requests the router appended, once they
  // are all applied: the lockstep model ran each of them as that run does, in the same order.
  // nullopt when a malloc failed: an OOM's report needs the replay's own device.
  std::optional<alloc::RunResult> run_result(bool keep_final_segments) const;
  // Set when this pass met a recorded decision its pool assignment cannot explain and learned
  // something: run again with these hints.
  const std::optional<PoolHints>& revised_hints() const { return revised_; }

 private:
  struct Context {
    std::optional<std::uint64_t> stream;  // nullopt: every stream
  };
  struct LiveSegment {
    Bytes size = 0;
    MempoolId pool;
    std::size_t index = 0;  // trace index of its segment_alloc (seeded: kSeededIndex + k)
    std::uint64_t stream = 0;
    std::size_t live_allocs = 0;  // recorded allocations alive in it
  };
  // The recorded segments alive now, by base: a sorted array, searched at every alloc and free
  // entry (a trace keeps a few hundred alive and opens one every few hundred entries; a
  // std::map's walk and node loads were a fifth of the inference). Past kMaxSorted alive they
  // move to a std::map: each segment opened or returned shifts the arrays' entries after it, so
  // a trace of many thousands alive (a hostile file) would take time quadratic in them.
  class LiveSegments {
   public:
    LiveSegment* find(std::uint64_t base);
    LiveSegment& at(std::uint64_t base);  // std::out_of_range when not alive
    void assign(std::uint64_t base, const LiveSegment& segment);
    void erase(std::uint64_t base);
    // The segment holding `address` and its `base`; null (base 0) when none does, or only one
    // at base 0 (segment_base's "none").
    const LiveSegment* holding(std::uint64_t address, std::uint64_t& base) const;
    LiveSegment* holding(std::uint64_t address, std::uint64_t& base) {
      return const_cast<LiveSegment*>(std::as_const(*this).holding(address, base));
    }

   private:
    static constexpr std::size_t kMaxSorted = 1024;
    std::vector<std::uint64_t> bases_;  // ascending
    std::vector<LiveSegment> segments_;
    std::map<std::uint64_t, LiveSegment> many_;  // every one, once kMaxSorted were alive at once
    bool in_map_ = false;
  };

  void prepare(const snapshot::TraceWindow& trace);
  MempoolId pool_of_new_segment(std::size_t index, Bytes request, std::uint64_t stream);
  void infer_empty_cache(const snapshot::TraceWindow& trace, std::size_t index, RequestStream& out);
  bool known(std::size_t segment_index) const;
  MempoolId invented_pool(std::uint64_t stream) const;
  // Contradictions teach the next pass: a segment belongs to a private pool, a pool never splits.
  void learn_private(std::size_t segment_index, std::uint64_t stream);
  void learn_no_split(MempoolId pool);
  void check_malloc(std::uint64_t model_address);
  // Runs `empty_cache` (the model's empty_cache call) and checks what it returned.
  template <typename EmptyCache>
  void record_empty_cache(EmptyCache&& empty_cache);
  void check_empty_cache();  // the events of the last empty_cache: recorder_.events
  std::uint64_t segment_base(std::uint64_t address) const;  // 0 when in no live segment
  void route(std::uint64_t stream, MempoolId pool, RequestStream& out);
  void end_context(MempoolId pool, RequestStream& out);
  void push(RequestStream& out, RequestOp op, MempoolId pool, std::uint64_t stream = 0,
            Bytes size = 0);
  void apply(const Request& request, const RequestStream& stream);
  bool is_oom_path(const snapshot::TraceWindow& trace, std::size_t first_free) const;

  PoolInferenceSettings settings_;
  alloc::ReplayDevice gpu_;
  alloc::DeviceCallCounts calls_at_start_;  // the device's, before the model's first call
  // The lockstep model's events while it runs an empty_cache, for check_empty_cache (recording
  // all of them held 40 bytes an entry of the trace).
  struct EmptyCacheEvents final : alloc::EventSink {
    void on_event(const TraceEvent& event) override {
      if (recording)
        events.push_back(event);
      if (next != nullptr)
        next->on_event(event);
    }
    bool recording = false;
    std::vector<TraceEvent> events;
    alloc::EventSink* next = nullptr;  // forward_events
  };
  EmptyCacheEvents recorder_;
  alloc::CachingAllocator model_;
  std::size_t applied_ = 0;  // requests of the stream already run through the model
  // Keyed by tensor id + 1 (key 0 is the maps' empty marker).
  alloc::FlatMap64<std::uint64_t> address_of_{4096};  // tensor -> model address
  alloc::FlatMap64<std::uint64_t> pending_{1024};     // tensor -> address (events)
  std::optional<alloc::OutOfMemory> oom_;             // the lockstep malloc's, reset after each
  // As alloc::run_requests counts them (run_result): requests applied, mallocs that succeeded,
  // requests of tensors whose malloc returned no block (size 0), whether a malloc failed.
  std::size_t requests_run_ = 0;
  std::size_t allocs_ = 0;
  std::size_t skipped_requests_ = 0;
  bool malloc_failed_ = false;
  alloc::FlatMap64<bool> without_block_{64};  // tensor + 1 of a malloc that returned address 0
  LiveSegments live_segments_;
  std::map<std::uint64_t, LiveSegment> freed_segments_;  // the latest freed segment at a base
  std::map<std::size_t, MempoolId> final_pool_;    // by segment_alloc index, segments alive at end
  std::set<MempoolId> split_seen_;                 // pools the recording shows splitting a block
  std::set<std::uint64_t> burst_;                  // segments the current empty_cache returns
  std::vector<std::uint64_t> burst_order_;         // the same, in the recorded order
  std::optional<std::uint64_t> expected_address_;  // of the malloc being applied
  std::optional<PoolHints> revised_;
  const snapshot::TraceWindow* trace_ = nullptr;
  std::map<MempoolId, Context> open_;  // contexts underway
  std::map<MempoolId, bool> owned_;    // pools created here; false once released
  PoolInferenceSummary summary_;
};

// settings.recorded_segments (the segment_alloc addresses in order) and settings.final_pools,
// from one walk of `trace`; settings.final_segments must be set.
void find_trace_segments(const snapshot::TraceWindow& trace, PoolInferenceSettings& settings);

// Whether the segment_free burst starting at `first_free` happened inside a malloc (returning
// cached memory before an OOM retry) rather than in an empty_cache call.
bool segment_frees_inside_malloc(const snapshot::TraceWindow& trace, std::size_t first_free,
                                 bool memory_capped);

}  // namespace fragscope::replay
