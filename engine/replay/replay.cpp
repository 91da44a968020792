#include "engine/replay/replay.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <type_traits>

#include "engine/allocator/flat_map.h"
#include "engine/core/error.h"
#include "engine/core/hex.h"
#include "engine/core/packed_requests.h"
#include "engine/snapshot/timeline.h"

namespace fragscope::replay {
namespace {

constexpr std::uint64_t kSyntheticUseStream = std::numeric_limits<std::uint64_t>::max();

std::string entry_name(std::size_t index) {
  return "trace entry " + std::to_string(index);
}

}  // namespace

namespace {

bool private_pools_at_end(const ReplayOptions& options) {
  return std::any_of(options.final_segments.begin(), options.final_segments.end(),
                     [](const SegmentPool& segment) { return !segment.pool.is_default(); });
}

std::string describe_event(const TraceEvent& e) {
  return std::string(to_string(e.action)) + " addr=" + hex_address(e.addr) +
         " size=" + std::to_string(e.size) + " stream=" + std::to_string(e.stream.value);
}

}  // namespace

std::vector<std::pair<TraceAction, Bytes>> segment_events(const std::vector<TraceEvent>& events) {
  std::vector<std::pair<TraceAction, Bytes>> out;
  for (const TraceEvent& e : events)
    if (is_segment_action(e.action))
      out.emplace_back(e.action, e.size);
  return out;
}

namespace {

// A device trace as the replay reads it: in memory, or spooled (read through a TraceWindow, never
// unpacked whole; the pool inference looks back and ahead of the entry it reads, a burst at most).
struct TraceSource {
  const std::vector<TraceEvent>* events = nullptr;
  const snapshot::EventSpool* spool = nullptr;

  snapshot::TraceWindow window() const {
    return events != nullptr ? snapshot::TraceWindow(*events) : snapshot::TraceWindow(*spool);
  }
};

// needs_pool_inference of a trace in either form: a spool is read only where its runs of
// segment_free entries begin (it noted them as it was written), a vector is walked for them.
bool needs_inference(const TraceSource& source, const ReplayOptions& options) {
  if (private_pools_at_end(options))
    return true;
  const bool capped = options.capacity || options.allowed_memory;
  const snapshot::TraceWindow trace = source.window();
  if (source.spool != nullptr) {
    if (source.spool->count(TraceAction::segment_free) == 0)
      return false;
    if (const auto bursts = source.spool->segment_free_bursts()) {
      for (const std::size_t first_free : *bursts)
        if (!segment_frees_inside_malloc(trace, first_free, capped))
          return true;
      return false;
    }
  }
  // A run of entries at a time (the window may move while a burst is looked at: the run is
  // taken again after one).
  bool after_free = false;  // the entry before is a segment_free
  for (std::size_t first = 0; first < trace.size();) {
    const std::span<const TraceEvent> run = trace.run_from(first);
    std::size_t k = 0;
    while (k < run.size()) {
      const bool free = run[k].action == TraceAction::segment_free;
      ++k;
      if (free && !after_free) {
        if (!segment_frees_inside_malloc(trace, first + k - 1, capped))
          return true;
        after_free = true;
        break;
      }
      after_free = free;
    }
    first += k;
  }
  return false;
}

// got == segment_events(trace) without building the trace's list.
bool same_segment_events(const std::vector<std::pair<TraceAction, Bytes>>& got,
                         const TraceSource& source) {
  const snapshot::TraceWindow trace = source.window();
  std::size_t i = 0;
  for (std::size_t k = 0; k < trace.size(); ++k) {
    const TraceEvent& e = trace[k];
    if (!is_segment_action(e.action))
      continue;
    if (i == got.size() || got[i].first != e.action || got[i].second != e.size)
      return false;
    ++i;
  }
  return i == got.size();
}

// Address -> tensor, for the conversion's live and pending blocks.
using AddressTensors = alloc::FlatAddressMap<std::uint64_t>;

// The seeds for the allocator from the reconstructed start state, one tensor per active block.
void seed_from(const snapshot::SegmentState& initial, TraceRequests& out, AddressTensors& live,
               AddressTensors& pending, std::uint64_t& next_tensor) {
  for (const auto& [address, segment] : initial.segment_map()) {
    alloc::SeedSegment seed;
    seed.address = address;
    seed.size = segment.size;
    seed.stream = segment.stream;
    seed.pool = segment.pool;
    seed.expandable = segment.expandable;
    for (const auto& [block_address, info] : initial.blocks_of(address)) {
      alloc::SeedBlock block{block_address, info.size, info.requested, info.state, TensorId{}};
      if (block.state != BlockState::inactive) {
        block.tensor = TensorId{next_tensor++};
        (block.state == BlockState::active_allocated ? live : pending)
            .emplace(block_address, block.tensor.value);
      }
      seed.blocks.push_back(block);
    }
    if (!seed.expandable)
      out.segments.push_back({seed.address, seed.size});
    out.initial_segments.push_back(std::move(seed));
  }
}

// Compares what the model emits with the recording as it comes (the trace's entries but
// `snapshot`, in order) and keeps only the segment events: storing every event to compare them
// afterwards was a tenth of a replay, most of it the kernel handing out fresh pages. The entry
// expected next is read through a cursor over the trace's current run of entries (its block of
// a spool, the whole vector), so that an event that matches costs a few compares.
class ComparingSink final : public alloc::EventSink {
 public:
  // `compare`: find the first divergence (addresses too when `compare_addresses`); `keep`: keep
  // every event, about `expected` of them.
  ComparingSink(const TraceSource& trace, bool compare, bool compare_addresses, bool keep,
                std::size_t expected)
      : trace_(trace.window()),
        comparing_(compare),
        compare_addresses_(compare_addresses),
        keep_(keep) {
    if (keep_)
      events_.reserve(expected + expected / 8);
  }

  void on_event(const TraceEvent& got) override {
    const std::size_t index = emitted_++;
    if (keep_ || is_segment_action(got.action)) [[unlikely]]
      record(got);
    if (!comparing_)
      return;
    if ((cursor_ == run_end_ || cursor_->action == TraceAction::snapshot) && !seek_entry())
        [[unlikely]] {
      diverge(index, trace_.size(), nullptr, &got);
      return;
    }
    const TraceEvent& want = *cursor_;
    const bool same = want.action == got.action && want.size == got.size &&
                      want.stream == got.stream && (!compare_addresses_ || want.addr == got.addr);
    if (!same) [[unlikely]] {
      diverge(index, cursor_index(), &want, &got);
      return;
    }
    ++cursor_;
  }

  // Once the run is over: the first divergence, counting recorded events the model never emitted.
  std::optional<Divergence> first_divergence() {
    if (comparing_ && seek_entry())
      diverge(emitted_, cursor_index(), cursor_, nullptr);
    return divergence_;
  }
  std::size_t emitted() const { return emitted_; }
  std::vector<std::pair<TraceAction, Bytes>> take_segment_events() {
    return std::move(segment_events_);
  }
  std::vector<TraceEvent> take_events() { return std::move(events_); }

 private:
  // The trace index of the entry at the cursor.
  std::size_t cursor_index() const {
    return run_first_ + static_cast<std::size_t>(cursor_ - run_begin_);
  }
  // Moves the cursor past snapshot entries, to the next run of the trace when this one is done:
  // false once the trace has no entry left.
  [[gnu::noinline]] bool seek_entry() {
    for (;;) {
      if (cursor_ == run_end_) {
        const std::size_t next = cursor_index();
        if (next >= trace_.size())
          return false;
        const std::span<const TraceEvent> run = trace_.run_from(next);
        run_first_ = next;
        run_begin_ = cursor_ = run.data();
        run_end_ = run.data() + run.size();
      }
      if (cursor_->action != TraceAction::snapshot)
        return true;
      ++cursor_;
    }
  }
  // The event kept (keep_) or noted as a segment event. This, seek_entry and diverge are out of
  // line: the frame of an event that matches stays small.
  [[gnu::noinline]] void record(const TraceEvent& got) {
    if (keep_)
      events_.push_back(got);
    if (is_segment_action(got.action))
      segment_events_.emplace_back(got.action, got.size);
  }
  // The first divergence: comparing stops there.
  [[gnu::cold, gnu::noinline]] void diverge(std::size_t event, std::size_t entry,
                                            const TraceEvent* want, const TraceEvent* got) {
    divergence_ = Divergence{event, entry, want ? std::optional<TraceEvent>(*want) : std::nullopt,
                             got ? std::optional<TraceEvent>(*got) : std::nullopt};
    comparing_ = false;
  }

  snapshot::TraceWindow trace_;
  bool comparing_;  // comparing, and no divergence yet
  bool compare_addresses_;
  bool keep_;
  std::size_t emitted_ = 0;
  // The run of trace entries being compared (from trace index run_first_) and the entry the
  // next emitted event must match.
  std::size_t run_first_ = 0;
  const TraceEvent* run_begin_ = nullptr;
  const TraceEvent* run_end_ = nullptr;
  const TraceEvent* cursor_ = nullptr;
  std::optional<Divergence> divergence_;
  std::vector<std::pair<TraceAction, Bytes>> segment_events_;
  std::vector<TraceEvent> events_;
};

// What extracting a trace's requests without a start state shows of one: whether an entry frees
// a block no earlier entry allocated (a block from before the trace, or an inconsistent trace),
// whether the trace allocated every block active at its end, and its segment events
// (snapshot::no_segments_before). Together they prove that snapshot::initial_state is empty.
struct StartEvidence {
  std::vector<std::uint64_t> active_at_end;  // in: the final snapshot's active blocks
  bool frees_older_block = false;            // out: the extraction stopped at such a free
  bool allocates_every_final_block = false;  // out
  std::vector<TraceEvent> segment_events;    // out: the segment_* entries, in order
};

// The requests of an extraction with the pool inference, kept packed: the router appends its
// pool requests beside the trace's to `staging` and reads them back to run them through its
// model; those it has run move on to `packed` a block at a time.
struct RoutedRequests {
  RequestStream staging;
  PackedRequests packed;
  void push_back(const Request& request) { staging.requests.push_back(request); }
  std::size_t size() const { return packed.size() + staging.requests.size(); }
};

// requests_from_trace into `out`, its requests into `requests` (out.requests.requests, a
// PackedRequests beside it, or RoutedRequests with a router), gathering `evidence` when given
// (without `initial`; a routed extraction's first pass gathers it too).
// `cancel`, when given, is polled as often as alloc::run_requests polls it (the router's lockstep
// model runs the requests as they are extracted).
template <typename Requests>
void extract_into(const TraceSource& source, const snapshot::SegmentState* initial,
                  PoolRouter* router, StartEvidence* evidence, TraceRequests& out,
                  Requests& requests, const CancelToken* cancel = nullptr) {
  const snapshot::TraceWindow trace = source.window();
  out.entries = trace.size();
  // A trace gives about a request an entry: sized once, the buffer is not copied as it grows,
  // and the pages of the words no request took are never touched (not resident).
  if constexpr (std::is_same_v<Requests, std::vector<Request>> ||
                std::is_same_v<Requests, PackedRequests>)
    requests.reserve(trace.size());

  // The distinct streams, as far as a third (only "exactly two" matters), counted at the first
  // free with pending events: a trace without any (one stream, mostly) is not walked for them.
  std::vector<std::uint64_t> streams;
  bool streams_counted = false;
  // The stream that used a block freed with pending events: not recorded in the trace.
  auto use_stream = [&](std::uint64_t allocation_stream) {
    if (!streams_counted && source.spool != nullptr) {
      // A spool noted them as it was written.
      streams_counted = true;
      for (const StreamId stream : source.spool->first_streams())
        streams.push_back(stream.value);
    }
    if (!streams_counted) {
      // A window of its own: the caller's entry stays where trace's window keeps it.
      streams_counted = true;
      const snapshot::TraceWindow walk = source.window();
      for (std::size_t i = 0; i < walk.size(); ++i) {
        const std::uint64_t stream = walk[i].stream.value;
        // Every stream known is compared, without a branch on which one matches: a find's
        // early exit mispredicted wherever two streams' entries interleave.
        bool known = false;
        for (const std::uint64_t seen : streams)
          known |= seen == stream;
        if (!known) {
          streams.push_back(stream);
          if (streams.size() > 2)
            break;
        }
      }
    }
    if (streams.size() == 2)
      return allocation_stream == streams[0] ? streams[1] : streams[0];
    return kSyntheticUseStream;
  };

  AddressTensors live(4096);     // address -> tensor
  AddressTensors pending(1024);  // address -> tensor awaiting events
  std::uint64_t next_tensor = 1;
  if (initial)
    seed_from(*initial, out, live, pending, next_tensor);
  // The stream the router appends to and reads back.
  RequestStream* routed = &out.requests;
  if constexpr (std::is_same_v<Requests, RoutedRequests>)
    routed = &requests.staging;
  if (router)
    router->seed(trace, out.initial_segments, *routed);
  std::size_t completes_prior_free = trace.size();  // the free_completed right after its free
  for (std::size_t i = 0; i < trace.size(); ++i) {
    if (cancel != nullptr && i % alloc::kCancelPollRequests == 0)
      cancel->throw_if_cancelled();
    if (router)
      router->before_entry(trace, i, *routed);
    // After the router, which may have read entries of other blocks.
    const TraceEvent& e = trace[i];
    if (e.action != TraceAction::snapshot)
      ++out.expected_events;
    switch (e.action) {
      case TraceAction::alloc: {
        const std::uint64_t tensor = next_tensor++;
        if (!live.emplace(e.addr, tensor) || (pending.size() != 0 && pending.contains(e.addr)))
          throw InputError(entry_name(i) + ": alloc at " + hex_address(e.addr) +
                           ", which is still allocated");
        requests.push_back(Request{RequestOp::malloc, TensorId{tensor}, e.size, e.stream, {}});
        ++out.allocs;
        break;
      }
      case TraceAction::free_requested: {
        const std::uint64_t* found = live.find(e.addr);
        if (!found) {
          if (evidence) {
            evidence->frees_older_block = true;
            return;
          }
          ++out.unmatched_frees;
          break;
        }
        const std::uint64_t tensor = *found;
        live.erase(e.addr);
        const bool completes_now = i + 1 < trace.size() &&
                                   trace[i + 1].action == TraceAction::free_completed &&
                                   trace[i + 1].addr == e.addr;
        if (completes_now)
          completes_prior_free = i + 1;
        if (!completes_now) {
          requests.push_back(Request{RequestOp::record_stream,
                                     TensorId{tensor},
                                     0,
                                     StreamId{use_stream(e.stream.value)},
                                     {}});
          pending.emplace(e.addr, tensor);
        }
        requests.push_back(Request{RequestOp::free, TensorId{tensor}, 0, e.stream, {}});
        break;
      }
      case TraceAction::free_completed: {
        if (const std::uint64_t* tensor = pending.size() == 0 ? nullptr : pending.find(e.addr)) {
          requests.push_back(Request{RequestOp::events_ready, TensorId{*tensor}, 0, e.stream, {}});
          pending.erase(e.addr);
        } else if (evidence && i != completes_prior_free) {
          evidence->frees_older_block = true;
          return;
        }
        break;
      }
      case TraceAction::segment_alloc:
        out.segments.push_back({e.addr, e.size});
        if (evidence)
          evidence->segment_events.push_back(e);
        break;
      case TraceAction::oom:
        out.ooms.push_back(RecordedOom{out.allocs, e.size, e.addr});
        out.oom_requests.push_back(requests.size());
        requests.push_back(
            Request{RequestOp::malloc, TensorId{next_tensor++}, e.size, e.stream, {}});
        break;
      case TraceAction::segment_free:
      case TraceAction::segment_map:
      case TraceAction::segment_unmap:
        if (evidence)
          evidence->segment_events.push_back(e);
        break;
      case TraceAction::snapshot:
        break;
    }
    if (router) {
      router->after_entry(*routed);
      if constexpr (std::is_same_v<Requests, RoutedRequests>) {
        if (requests.staging.requests.size() >= PackedRequests::kBlockRequests)
          router->move_applied(requests.staging, requests.packed);
      }
    }
  }
  if constexpr (std::is_same_v<Requests, RoutedRequests>) {
    if (router)
      router->move_applied(requests.staging, requests.packed);
    requests.packed.pools = requests.staging.pools;
  }
  if (evidence) {
    evidence->allocates_every_final_block = std::all_of(
        evidence->active_at_end.begin(), evidence->active_at_end.end(),
        [&](std::uint64_t address) { return live.contains(address) || pending.contains(address); });
  }
}

// A trace's requests packed, for a replay without the pool inference: a tenth of the memory of
// the Requests (`trace.requests` stays empty).
struct PackedTrace {
  TraceRequests trace;
  PackedRequests requests;
};

PackedTrace extract_packed(const TraceSource& source, const snapshot::SegmentState* initial,
                           StartEvidence* evidence) {
  PackedTrace out;
  extract_into(source, initial, nullptr, evidence, out.trace, out.requests);
  return out;
}

// The same through the pool inference's `router`.
PackedTrace extract_routed(const TraceSource& source, const snapshot::SegmentState* initial,
                           PoolRouter& router, StartEvidence* evidence = nullptr,
                           const CancelToken* cancel = nullptr) {
  PackedTrace out;
  RoutedRequests requests;
  extract_into(source, initial, &router, evidence, out.trace, requests, cancel);
  out.requests = std::move(requests.packed);
  return out;
}

// A start state the first pass of the pool inference may prove empty (replay_snapshot): that
// pass extracts the requests without one, gathering `evidence`; when `proves` does not accept
// it, `rebuild` gives the state (null when it cannot be rebuilt) and the pass is made again.
struct StartProof {
  StartEvidence* evidence = nullptr;
  std::function<bool(const StartEvidence&)> proves;
  std::function<const snapshot::SegmentState*()> rebuild;
};

// replay_trace, with the requests already `extracted` (for a trace that needs no pool
// inference) or extracted here; `infer_pools` is needs_inference of the trace; `proof` (with
// `infer_pools`, no `initial`): the start state is to be proven empty or rebuilt.
ReplayResult replay_trace_from(const TraceSource& trace, const nlohmann::json& allocator_settings,
                               const ReplayOptions& options, const snapshot::SegmentState* initial,
                               bool infer_pools, std::optional<PackedTrace> extracted,
                               StartProof* proof = nullptr);

}  // namespace

TraceRequests requests_from_trace(const std::vector<TraceEvent>& trace,
                                  const snapshot::SegmentState* initial, PoolRouter* router) {
  TraceRequests out;
  extract_into(TraceSource{&trace}, initial, router, nullptr, out, out.requests.requests);
  return out;
}

TraceRequests requests_from_trace(const snapshot::Snapshot& snapshot, std::size_t device,
                                  const snapshot::SegmentState* initial, PackedRequests& requests) {
  static const std::vector<TraceEvent> kNoEvents;
  TraceSource source{device < snapshot.device_traces.size() ? &snapshot.device_traces[device]
                                                            : &kNoEvents};
  if (const snapshot::EventSpool* spool = snapshot.spool(device))
    source = TraceSource{nullptr, spool};
  TraceRequests out;
  extract_into(source, initial, nullptr, nullptr, out, requests);
  return out;
}

alloc::AllocatorConfig config_from_settings(const nlohmann::json& settings, std::string* note) {
  // One reader of allocator_settings for every release (the allocator's own): a key the writing
  // release did not record keeps its default, and the note says which. An empty dict is a
  // snapshot that recorded none.
  const bool absent = settings.is_null() || (settings.is_object() && settings.empty());
  alloc::RecordedAllocatorConfig recorded;
  try {
    recorded = alloc::read_allocator_settings(absent ? nullptr : &settings);
  } catch (const alloc::AllocatorConfigError& error) {
    // The allocator's reader already names the field ("allocator_settings: 'x' must be ...").
    const std::string what = error.what();
    throw InputError(what.rfind("allocator_settings", 0) == 0 ? what
                                                              : "allocator_settings: " + what);
  }
  if (note)
    *note = recorded.note();
  return recorded.config;
}

std::string describe(const Divergence& d) {
  std::string text = "event " + std::to_string(d.event_index) + " (trace entry " +
                     std::to_string(d.trace_entry) + "): expected ";
  text += d.expected ? describe_event(*d.expected) : std::string("nothing more");
  text += ", got ";
  text += d.got ? describe_event(*d.got) : std::string("nothing more");
  return text;
}

std::string describe(const SeededState& seeded) {
  if (seeded.empty())
    return "the trace starts with an empty allocator: nothing seeded";
  std::string text = "seeded " + std::to_string(seeded.live_blocks) + " live block(s)";
  if (seeded.pending_blocks > 0)
    text += " and " + std::to_string(seeded.pending_blocks) + " pending free(s)";
  text += " in " + std::to_string(seeded.segments) + " segment(s) at the trace's start (" +
          std::to_string(seeded.reserved) + " bytes reserved, " + std::to_string(seeded.allocated) +
          " allocated); segments, stream and cached gaps " + "from the final snapshot";
  if (seeded.inferred_sizes > 0) {
    text += "; " + std::to_string(seeded.inferred_sizes) +
            " block size(s) inferred from the rounding and split rules";
    if (seeded.guessed_sizes > 0)
      text += " (" + std::to_string(seeded.guessed_sizes) +
              " of them undecidable: a large block may not have been split, off by <= 1 MiB)";
  }
  return text;
}

bool needs_pool_inference(const std::vector<TraceEvent>& trace, const ReplayOptions& options) {
  return needs_inference(TraceSource{&trace}, options);
}

ReplayResult replay_trace(const std::vector<TraceEvent>& trace,
                          const nlohmann::json& allocator_settings, const ReplayOptions& options,
                          const snapshot::SegmentState* initial) {
  return replay_trace_from(TraceSource{&trace}, allocator_settings, options, initial,
                           needs_pool_inference(trace, options), std::nullopt);
}

namespace {

ReplayResult replay_trace_from(const TraceSource& trace, const nlohmann::json& allocator_settings,
                               const ReplayOptions& options, const snapshot::SegmentState* initial,
                               bool infer_pools, std::optional<PackedTrace> extracted,
                               StartProof* proof) {
  const bool recorded_config = !options.config.has_value();
  const alloc::AllocatorProfile profile =
      alloc::allocator_profile(options.torch_version.value_or(kLatestTorch));
  std::unique_ptr<PoolRouter> router;
  std::size_t passes = 0;
  // The last pass's lockstep model runs the requests the replay runs, in the same order, from
  // the same seeds, on a device that hands out the same addresses: unless the replay's run
  // differs from it (another config, other addresses, a dry run, invariant checks, keyframe
  // stats, or an OOM, whose report needs the replay's own device), its run is the replay's, and
  // its events are compared as they come; the extraction then polls the cancel token. A pass
  // that learns something wastes its comparison. Not with a progress sink: the passes would
  // report the model's run as "pools", not as the "requests" stage.
  const bool lockstep_is_the_run = recorded_config && !options.progress &&
                                   !options.segment_addresses &&
                                   !options.recorded_sync_all_streams &&
                                   options.check_invariants_every == 0 && !options.initial_stats;
  std::unique_ptr<ComparingSink> lockstep_recorder;
  TraceRequests requests;  // its `requests` stay empty: they are packed
  PackedRequests packed;
  if (!extracted && !infer_pools)
    extracted = extract_packed(trace, initial, nullptr);
  if (extracted) {
    requests = std::move(extracted->trace);
    packed = std::move(extracted->requests);
    extracted.reset();
  } else {
    PoolInferenceSettings settings;
    settings.config = config_from_settings(allocator_settings);
    settings.total_memory = options.total_memory;
    settings.capacity = options.capacity;
    settings.allowed_memory = options.allowed_memory;
    settings.final_segments = options.final_segments;
    find_trace_segments(trace.window(), settings);  // one walk for every pass
    settings.profile = profile;
    if (initial)
      settings.initial_segments = requests_from_trace({}, initial).initial_segments;
    // Each pass that meets a decision its pool assignment cannot explain learns which segment
    // or pool was different and runs again; the last pass's requests are replayed.
    for (std::size_t pass = 1;; ++pass) {
      options.progress.report("pools", pass - 1, kMaxPoolPasses);
      options.cancel.throw_if_cancelled();
      router = std::make_unique<PoolRouter>(settings);
      if (lockstep_is_the_run) {
        lockstep_recorder =
            std::make_unique<ComparingSink>(trace, true, !settings.config.expandable_segments,
                                            options.keep_events, trace.window().size());
        router->forward_events(lockstep_recorder.get());
      }
      packed = PackedRequests();
      StartEvidence* const evidence = proof != nullptr ? proof->evidence : nullptr;
      std::optional<PackedTrace> routed;
      try {
        routed = extract_routed(trace, initial, *router, evidence,
                                lockstep_is_the_run ? &options.cancel : nullptr);
      } catch (const InputError&) {
        if (evidence == nullptr)
          throw;
        evidence->frees_older_block = true;  // the pass below reports it, or not, seeded
      }
      if (evidence != nullptr) {
        const bool empty_start = routed && proof->proves(*evidence);
        if (!empty_start) {
          // The first pass again, from the state rebuilt for the trace's start.
          initial = proof->rebuild();
          if (initial)
            settings.initial_segments = requests_from_trace({}, initial).initial_segments;
          proof = nullptr;
          --pass;
          continue;
        }
        proof = nullptr;
      }
      requests = std::move(routed->trace);
      packed = std::move(routed->requests);
      passes = pass;
      const auto& revised = router->revised_hints();
      if (std::getenv("FRAGSCOPE_DEBUG_POOLS") && revised) {
        for (const auto& [idx, id] : revised->segment_pool)
          std::fprintf(stderr, "pass %zu hint seg@%zu -> %s\n", pass, idx, to_string(id).c_str());
        for (const auto& id : revised->no_split)
          std::fprintf(stderr, "pass %zu no_split %s\n", pass, to_string(id).c_str());
      }
      if (!revised || *revised == settings.hints || pass == kMaxPoolPasses)
        break;
      settings.hints = *revised;
    }
    options.progress.report("pools", 1, 1);
  }
  std::string config_note;
  const alloc::AllocatorConfig config =
      recorded_config ? config_from_settings(allocator_settings, &config_note) : *options.config;

  const auto segments = options.segment_addresses.value_or(requests.segments);
  const Bytes capacity = options.capacity.value_or(alloc::kUnlimited);
  alloc::ReplayDevice gpu(segments, capacity, options.total_memory, options.device);
  std::vector<Bytes> free_at_ooms;
  for (const RecordedOom& oom : requests.ooms)
    free_at_ooms.push_back(oom.device_free);
  if (recorded_config)
    gpu.device().set_free_memory_at_ooms(std::move(free_at_ooms));

  std::optional<alloc::RunResult> lockstep_run;
  if (lockstep_recorder)
    lockstep_run = router->run_result(options.keep_final_segments);
  std::unique_ptr<ComparingSink> recorder =
      lockstep_run
          ? std::move(lockstep_recorder)
          : std::make_unique<ComparingSink>(trace, recorded_config, !config.expandable_segments,
                                            options.keep_events, requests.expected_events);
  alloc::RunOptions run_options;
  run_options.stop_on_oom = false;  // the recording goes on after an OOM: the script caught it
  run_options.allowed_memory = options.allowed_memory;
  run_options.check_invariants_every = options.check_invariants_every;
  run_options.initial_segments = requests.initial_segments;
  run_options.profile = profile;
  run_options.cancel = options.cancel;
  run_options.progress = options.progress;  // its stage is "requests"
  run_options.initial_stats = options.initial_stats;
  run_options.keep_final_segments = options.keep_final_segments;

  auto run = [&](alloc::Device& device, alloc::EventSink* sink, const alloc::RunOptions& how) {
    return alloc::run_requests(packed, config, device, sink, how);
  };
  ReplayResult result;
  result.profile = profile;
  if (router) {
    result.pools = router->summary();
    result.pools->passes = passes;
  }
  if (options.recorded_sync_all_streams) {
    // A dry run gives the calls the trace shows; the rest released nothing.
    alloc::ReplayDevice dry_gpu(segments, capacity, options.total_memory, options.device);
    alloc::RunOptions dry_options = run_options;
    dry_options.progress = progress_as(options.progress, "sync calls");
    const auto dry = run(dry_gpu.device(), nullptr, dry_options);
    const std::int64_t missing =
        *options.recorded_sync_all_streams - dry.stats.num_sync_all_streams;
    if (missing > 0) {
      Request call{};
      call.op = RequestOp::empty_cache;
      PackedRequests with_calls;
      with_calls.pools = packed.pools;
      for (std::int64_t k = 0; k < missing; ++k)
        with_calls.push_back(call);
      packed.for_each_block([&](std::span<const Request> block, std::size_t) {
        for (const Request& r : block)
          with_calls.push_back(r);
        return true;
      });
      packed = std::move(with_calls);
      result.silent_empty_caches = static_cast<std::size_t>(missing);
    }
  }
  if (lockstep_run) {
    options.progress.report(alloc::kRunStages[0].name, packed.size(), packed.size());
    result.run = std::move(*lockstep_run);
  } else {
    result.run = run(gpu.device(), recorder.get(), run_options);
  }
  result.emitted_events = recorder->emitted();
  result.segment_events = recorder->take_segment_events();
  result.events = recorder->take_events();
  result.entries = requests.entries;
  result.allocs = requests.allocs + requests.ooms.size();
  result.recorded_ooms = requests.ooms;
  if (!config_note.empty())
    result.warnings.push_back(config_note);
  for (const alloc::SeedSegment& segment : requests.initial_segments) {
    ++result.seeded.segments;
    result.seeded.reserved += segment.size;
    for (const alloc::SeedBlock& block : segment.blocks) {
      if (block.state == BlockState::active_allocated) {
        ++result.seeded.live_blocks;
        result.seeded.allocated += block.size;
      } else if (block.state == BlockState::active_pending_free) {
        ++result.seeded.pending_blocks;
      } else {
        ++result.seeded.free_blocks;
      }
    }
  }
  if (!recorded_config) {
    options.progress.report("comparing", 1, 1);
    return result;
  }

  result.compared = true;
  // Addresses inside expandable reservations are the simulated device's, not the driver's: the
  // sink compared them only without expandable segments.
  result.first_divergence = recorder->first_divergence();
  // The trace's snapshot entries are no segment events: the trace itself is the expectation.
  // Without a divergence every event matched its entry's action and size, these among them.
  result.segment_events_match =
      !result.first_divergence || same_segment_events(result.segment_events, trace);
  std::vector<RecordedOom> got_ooms;
  for (const alloc::RequestOom& oom : result.run.ooms)
    got_ooms.push_back(RecordedOom{oom.allocs_before, oom.oom.rounded_size, oom.oom.device_free});
  result.ooms_match = got_ooms == requests.ooms;
  options.progress.report("comparing", 1, 1);
  return result;
}

}  // namespace

std::vector<alloc::RecordedAddressDevice::RecordedSegment> recorded_segments(
    const std::vector<TraceEvent>& trace) {
  std::vector<alloc::RecordedAddressDevice::RecordedSegment> out;
  for (const TraceEvent& e : trace)
    if (e.action == TraceAction::segment_alloc)
      out.push_back({e.addr, e.size});
  return out;
}

ReplayResult replay_snapshot(const snapshot::Snapshot& snapshot, const ReplayOptions& given,
                             std::size_t device) {
  ReplayOptions options = given;
  options.device = static_cast<int>(device);
  if (!options.torch_version)
    options.torch_version = snapshot.torch_version.profile();
  if (options.final_segments.empty()) {
    for (const snapshot::Segment& segment : snapshot.segments) {
      if (segment.device != static_cast<int>(device) || segment.is_expandable)
        continue;
      options.final_segments.push_back(
          SegmentPool{segment.address, segment.total_size,
                      MempoolId{static_cast<std::uint64_t>(segment.pool_id.first),
                                static_cast<std::uint64_t>(segment.pool_id.second)}});
    }
  }
  if (device >= snapshot.device_traces.size()) {
    // A snapshot of an idle run may have no trace at all: device 0 then replays nothing.
    if (device == 0 && snapshot.device_traces.empty())
      return replay_trace({}, snapshot.allocator_settings, options);
    throw InputError("snapshot has traces for " + std::to_string(snapshot.device_traces.size()) +
                     " device(s); there is no device " + std::to_string(device));
  }
  // A spooled trace (read_snapshot_spooled) is read from its packed blocks, never unpacked
  // whole, also by the pool inference: replaying a real 1.2M-entry trace then holds its requests
  // packed, not its 48 MB of entries as well.
  TraceSource trace{&snapshot.device_traces[device]};
  if (const snapshot::EventSpool* spool = snapshot.spool(device))
    trace = TraceSource{nullptr, spool};
  const bool infer_pools = needs_inference(trace, options);
  // A trace recorded from the process's start touches no block or segment from before it: its
  // start state is empty, which extracting its requests proves, without initial_state's walk
  // back through every entry (a tenth of a replay). Otherwise, and where the extraction fails,
  // the replay below does it all again, seeded as initial_state says; with the pool inference,
  // its first pass does so.
  StartEvidence evidence;
  for (const snapshot::Segment& segment : snapshot.segments)
    if (segment.device == static_cast<int>(device))
      for (const snapshot::Block& block : segment.blocks)
        if (block.state != BlockState::inactive)
          evidence.active_at_end.push_back(block.address);
  auto proves_empty_start = [&](const StartEvidence& found) {
    return !found.frees_older_block && found.allocates_every_final_block &&
           snapshot::no_segments_before(snapshot, static_cast<int>(device), found.segment_events);
  };
  if (!infer_pools) {
    std::optional<PackedTrace> requests;
    try {
      requests = extract_packed(trace, nullptr, &evidence);
    } catch (const InputError&) {
      requests.reset();  // the replay below reports it, or not, with the start state seeded
    }
    if (requests && proves_empty_start(evidence))
      return replay_trace_from(trace, snapshot.allocator_settings, options, nullptr, infer_pools,
                               std::move(requests));
  }
  std::vector<std::uint64_t> guessed;
  std::size_t inferred = 0;
  std::optional<snapshot::SegmentState> initial;
  std::string rebuild_error;
  auto rebuild = [&]() -> const snapshot::SegmentState* {
    try {
      initial = snapshot::initial_state(snapshot, static_cast<int>(device), &guessed, &inferred);
    } catch (const InputError& error) {
      rebuild_error = error.what();
    }
    return initial ? &*initial : nullptr;
  };
  StartProof proof{&evidence, proves_empty_start, rebuild};
  ReplayResult result = infer_pools ? replay_trace_from(trace, snapshot.allocator_settings, options,
                                                        nullptr, infer_pools, std::nullopt, &proof)
                                    : replay_trace_from(trace, snapshot.allocator_settings, options,
                                                        rebuild(), infer_pools, std::nullopt);
  if (!rebuild_error.empty())
    result.warnings.push_back(
        "the state at the trace's start could not be rebuilt from the "
        "final segments (" +
        rebuild_error + "); replayed from an empty allocator");
  // The blocks in use at the start that the trace frees: no entry records their size.
  result.seeded.inferred_sizes = initial ? inferred : 0;
  result.seeded.guessed_sizes = guessed.size();
  return result;
}

}  // namespace fragscope::replay
