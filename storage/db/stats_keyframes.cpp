#include "storage/db/stats_keyframes.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <future>
#include <map>
#include <memory>
#include <system_error>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/replay/replay.h"
#include "storage/db/packing.h"
#include "storage/db/stats_at.h"

namespace fragscope::storage {

namespace {

constexpr std::uint64_t kFormat = 1;

constexpr const char* kPrivatePools = "private pools that the replay infers";

// Why the chain cannot follow the events between two keyframes (each window starts at the end of
// an allocator call, so these local tests see what a test of the whole trace would). The
// empty_cache calls the replay infers from a burst of segment_free entries are no reason: one
// only returns whole free segments, which the next keyframe no longer holds; the private pools
// it infers are (a keyframe's segments do not record their pool), see the window's replay.
std::string why_no_keyframes(const std::vector<TraceEvent>& events, const StatsReplaySetup& setup) {
  for (const replay::SegmentPool& segment : setup.options.final_segments)
    if (!segment.pool.is_default())
      return kPrivatePools;
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (events[i].action != TraceAction::free_requested)
      continue;
    if (i + 1 == events.size() || events[i + 1].action != TraceAction::free_completed ||
        events[i + 1].addr != events[i].addr)
      return "frees that waited for stream events";
  }
  return {};
}

// Whether the model made the trace's own calls in a window: the same cudaMalloc and cudaFree
// entries and the same block addresses, in order. A recording replayed under its own settings is
// compared by the replay itself (ReplayResult::compared); a run replayed under its config (a
// simulated or GPU run, a replayed mitigation) is checked here, because a keyframe holds the
// model's blocks and the next window frees the trace's addresses: a model that placed a block
// elsewhere would have the next window miss that free and drift from the replay from event 0.
bool follows_trace(const std::vector<TraceEvent>& model, const std::vector<TraceEvent>& trace) {
  const auto compared = [](const TraceEvent& event) {
    return event.action == TraceAction::alloc || event.action == TraceAction::segment_alloc ||
           event.action == TraceAction::segment_free;
  };
  auto made = model.begin();
  auto recorded = trace.begin();
  for (;;) {
    made = std::find_if(made, model.end(), compared);
    recorded = std::find_if(recorded, trace.end(), compared);
    if (made == model.end() || recorded == trace.end())
      return made == model.end() && recorded == trace.end();
    if (made->action != recorded->action || made->addr != recorded->addr ||
        made->size != recorded->size || made->stream != recorded->stream)
      return false;
    ++made;
    ++recorded;
  }
}

// The model's segments as a SegmentState: live blocks placed, the gaps between them the free
// blocks (which the model always merges outside expandable segments).
snapshot::SegmentState state_of(const std::vector<alloc::SegmentInfo>& segments,
                                const snapshot::LayoutRules& rules) {
  snapshot::SegmentState state(rules);
  for (const alloc::SegmentInfo& segment : segments) {
    snapshot::SegmentState::SegmentInfo info;
    info.size = segment.total_size;
    info.stream = segment.stream;
    info.pool = segment.pool == alloc::PoolKind::small ? snapshot::PoolKind::small
                                                       : snapshot::PoolKind::large;
    info.expandable = segment.is_expandable;
    state.add_segment(segment.address, info);
    for (const alloc::BlockInfo& block : segment.blocks) {
      if (block.state == BlockState::inactive)
        continue;
      snapshot::SegmentState::BlockInfo placed;
      placed.size = block.size;
      placed.requested = block.requested_size;
      placed.state = block.state;
      state.place_block(block.address, placed);
    }
  }
  return state;
}

// The state's blob: per segment its address (a delta from the previous segment's end), size,
// stream, flags (bit 0 expandable, bit 1 small pool) and live blocks; per live block its offset
// from the end of the previous one, size, requested size and state. Free blocks are the gaps,
// as state_of() builds them; frame stacks are not kept (memory_stats() does not use them).
void put_state(std::vector<std::uint8_t>& out, const snapshot::SegmentState& state) {
  put_varint(out, state.segment_count());
  std::uint64_t previous_end = 0;
  for (const auto& [address, segment] : state.segment_map()) {
    put_varint(out, address - previous_end);
    put_varint(out, segment.size);
    put_varint(out, segment.stream.value);
    put_varint(out, (segment.expandable ? 1u : 0u) |
                        (segment.pool == snapshot::PoolKind::small ? 2u : 0u));
    const std::uint64_t end = address + segment.size;
    std::uint64_t live = 0;
    for (const auto& [block_address, block] : state.blocks_of(address))
      live += block.state != BlockState::inactive ? 1 : 0;
    put_varint(out, live);
    std::uint64_t cursor = address;
    for (const auto& [block_address, block] : state.blocks_of(address)) {
      if (block.state == BlockState::inactive)
        continue;
      put_varint(out, block_address - cursor);
      put_varint(out, block.size);
      put_varint(out, block.requested);
      put_varint(out, static_cast<std::uint64_t>(block.state));
      cursor = block_address + block.size;
    }
    previous_end = end;
  }
}

snapshot::SegmentState read_state(ByteReader& in, const snapshot::LayoutRules& rules) {
  snapshot::SegmentState state(rules);
  const std::uint64_t segments = in.varint();
  // Each segment takes at least five bytes: a count past that is damage, not a huge allocation.
  if (segments > in.remaining())
    in.fail("more segments than the blob has bytes");
  std::uint64_t previous_end = 0;
  try {
    for (std::uint64_t s = 0; s < segments; ++s) {
      const std::uint64_t address = previous_end + in.varint();
      snapshot::SegmentState::SegmentInfo segment;
      segment.size = in.varint();
      segment.stream = StreamId{in.varint()};
      const std::uint64_t flags = in.varint();
      if (flags > 3 || address < previous_end)
        in.fail("segment " + std::to_string(s) + " has invalid flags or address");
      segment.expandable = (flags & 1) != 0;
      segment.pool = (flags & 2) != 0 ? snapshot::PoolKind::small : snapshot::PoolKind::large;
      state.add_segment(address, segment);
      const std::uint64_t live = in.varint();
      if (live > in.remaining())
        in.fail("segment " + std::to_string(s) + " claims more blocks than the blob has bytes");
      std::uint64_t cursor = address;
      for (std::uint64_t b = 0; b < live; ++b) {
        snapshot::SegmentState::BlockInfo block;
        const std::uint64_t at = cursor + in.varint();
        block.size = in.varint();
        block.requested = in.varint();
        const std::uint64_t kind = in.varint();
        constexpr auto kAllocated = static_cast<std::uint64_t>(BlockState::active_allocated);
        constexpr auto kPending = static_cast<std::uint64_t>(BlockState::active_pending_free);
        if (kind != kAllocated && kind != kPending)
          in.fail("a block of segment " + std::to_string(s) + " is not live");
        block.state = static_cast<BlockState>(kind);
        state.place_block(at, block);
        cursor = at + block.size;
      }
      previous_end = address + segment.size;
    }
  } catch (const InputError& error) {
    in.fail(error.what());
  }
  return state;
}

void erase_keyframes(RunStore& store, RunId run) {
  auto erase = store.database().prepare("DELETE FROM stats_keyframes WHERE run_id = ?");
  erase.bind_int(1, run.value);
  erase.run();
}

void record_outcome(RunStore& store, RunId run, const nlohmann::json& outcome) {
  nlohmann::json summary = store.run(run).summary;
  summary["stats_keyframes"] = outcome;
  store.update_summary(run, summary);
}

}  // namespace

std::vector<std::uint8_t> encode_stats_keyframe(const StatsKeyframe& keyframe) {
  std::vector<std::uint8_t> raw;
  put_varint(raw, kFormat);
  const std::map<std::string, std::int64_t> stats = alloc::to_memory_stats(keyframe.stats);
  put_varint(raw, stats.size());
  for (const auto& [key, value] : stats)
    put_signed(raw, value);
  put_state(raw, keyframe.state);
  std::vector<std::uint8_t> blob;
  put_varint(blob, raw.size());
  const std::vector<std::uint8_t> packed = deflate_bytes(raw);
  blob.insert(blob.end(), packed.begin(), packed.end());
  return blob;
}

StatsKeyframe decode_stats_keyframe(std::span<const std::uint8_t> blob,
                                    const snapshot::LayoutRules& rules, const std::string& what) {
  ByteReader header(blob, what);
  const std::uint64_t raw_size = header.varint();
  const std::vector<std::uint8_t> raw =
      inflate_bytes(header.take(header.remaining()), static_cast<std::size_t>(raw_size), what);
  ByteReader in(raw, what);
  if (in.varint() != kFormat)
    in.fail("unknown keyframe format");
  // The keys in memory_stats()'s order, the order encode wrote the values in.
  std::map<std::string, std::int64_t> stats = alloc::to_memory_stats(alloc::DeviceStats{});
  if (in.varint() != stats.size())
    in.fail("a different number of memory_stats() keys");
  for (auto& [key, value] : stats)
    value = in.signed_varint();
  StatsKeyframe keyframe;
  keyframe.stats = alloc::from_memory_stats(stats);
  keyframe.state = read_state(in, rules);
  if (!in.at_end())
    in.fail("trailing bytes after the segments");
  return keyframe;
}

namespace {

// Everything the keyframe chain reads of a run besides its events.
struct ChainInputs {
  std::uint64_t event_count = 0;
  alloc::AllocatorConfig config;
  bool starts_empty = true;  // no segment or block before the first event
  StatsReplaySetup setup;
};

ChainInputs chain_inputs(const RunTrace& trace, StatsReplaySetup setup) {
  ChainInputs inputs;
  inputs.event_count = trace.record.event_count;
  inputs.config = trace.config;
  inputs.starts_empty = trace.initial.segment_map().empty();
  inputs.setup = std::move(setup);
  return inputs;
}

// The stored run's: the config, the release and the start state (its events are read a window
// at a time, so the chain's memory does not grow with the run).
ChainInputs chain_inputs(RunStore& store, RunId run) {
  const RunTrace trace = load_run_trace(store, run, 0);
  return chain_inputs(trace, stats_replay_setup(store, trace));
}

// Whether two runs give the chain the same inputs: the fields stats_replay_setup sets.
bool same_inputs(const ChainInputs& a, const ChainInputs& b) {
  const replay::ReplayOptions& x = a.setup.options;
  const replay::ReplayOptions& y = b.setup.options;
  const auto same_segment = [](const replay::SegmentPool& p, const replay::SegmentPool& q) {
    return p.address == q.address && p.size == q.size && p.pool == q.pool;
  };
  return a.event_count == b.event_count && a.config == b.config &&
         a.starts_empty == b.starts_empty && a.setup.recorded == b.setup.recorded &&
         a.setup.settings == b.setup.settings && x.config == y.config &&
         x.torch_version == y.torch_version && x.allowed_memory == y.allowed_memory &&
         x.total_memory == y.total_memory &&
         std::equal(x.final_segments.begin(), x.final_segments.end(), y.final_segments.begin(),
                    y.final_segments.end(), same_segment);
}

// Why the chain cannot follow a run, from its config and start (see the header).
std::string why_no_keyframes(const ChainInputs& inputs) {
  if (!inputs.starts_empty)
    return "the trace starts mid-run (its start state is inferred)";
  if (inputs.config.expandable_segments)
    return "expandable segments";
  if (inputs.config.garbage_collection_threshold > 0)
    return "a garbage_collection_threshold";
  return {};
}

// The keyframes of a run (event index, blob), or why it has none.
struct KeyframeChain {
  std::vector<std::pair<std::uint64_t, std::vector<std::uint8_t>>> keyframes;
  std::string why;
};

// Replays the run from `inputs` window by window, a keyframe at each cut. `what` names the run
// in errors. A trace the model cannot replay gives no keyframes, and says why.
KeyframeChain build_keyframe_chain(const ChainInputs& inputs, const RunEventReader& events,
                                   std::uint64_t interval, const CancelToken& cancel,
                                   const std::string& what) {
  const StatsReplaySetup& setup = inputs.setup;
  const std::uint64_t count = inputs.event_count;
  const snapshot::LayoutRules rules = snapshot::LayoutRules::from_config(inputs.config);
  KeyframeChain chain;
  chain.why = why_no_keyframes(inputs);
  try {
    std::optional<StatsKeyframe> last;
    std::uint64_t target = interval;
    // The run's events read once, in order: `part` holds the events from `from` on, and what a
    // window read past its cut starts the next window.
    std::vector<TraceEvent> part;
    std::vector<TraceEvent> ahead;
    while (chain.why.empty()) {
      cancel.throw_if_cancelled();
      const std::uint64_t from = last ? last->event_index : 0;
      // The events up to the end of the allocator call at the target, or to the run's end (the
      // last window is replayed only to check that the model follows the recording to the end).
      const std::uint64_t window_end = std::min(count, std::min(target, count) + kCallLookahead);
      if (from + part.size() < window_end) {
        const auto wanted = static_cast<std::size_t>(window_end - from - part.size());
        if (events(wanted, part) != wanted)
          throw DatabaseError(what +
                              ": its events (the store's, or the trace it was imported "
                              "from) end before the " +
                              std::to_string(count) + " its record counts");
      }
      std::uint64_t cut = std::min(target, count) - from;
      // Not inside an allocator call, nor inside a burst of segment events (an empty_cache's
      // segment_free entries, which the replay infers one call from).
      auto inside_segment_events = [&part](std::uint64_t at) {
        return at > 0 && at < part.size() && is_segment_action(part[at - 1].action) &&
               is_segment_action(part[at].action);
      };
      while (cut < part.size() &&
             (end_of_allocator_call(part, cut) != cut || inside_segment_events(cut)))
        ++cut;
      if (cut == part.size() && from + cut < count) {
        chain.why = "an allocator call longer than " + std::to_string(kCallLookahead) + " events";
        break;
      }
      ahead.assign(part.begin() + static_cast<std::ptrdiff_t>(cut), part.end());
      part.resize(static_cast<std::size_t>(cut));
      if (chain.why = why_no_keyframes(part, setup); !chain.why.empty())
        break;
      replay::ReplayOptions options = setup.options;
      options.keep_final_segments = true;
      options.keep_events = options.config.has_value();  // not compared: follows_trace checks them
      if (last)
        options.initial_stats = last->stats;
      const replay::ReplayResult result =
          replay::replay_trace(part, setup.settings, options, last ? &last->state : nullptr);
      if (result.compared && result.first_divergence) {
        chain.why = "the model diverged from the recording";
        break;
      }
      if (!result.compared && !follows_trace(result.events, part)) {
        chain.why = "the model does not make the trace's allocations";
        break;
      }
      if (result.pools && (result.pools->private_allocations > 0 ||
                           result.pools->pool_requests > 0 || !result.pools->pools.empty())) {
        chain.why = kPrivatePools;
        break;
      }
      if (from + cut >= count)
        break;
      StatsKeyframe keyframe;
      keyframe.event_index = from + cut;
      keyframe.state = state_of(result.run.final_segments, rules);
      keyframe.stats = result.run.stats;
      chain.keyframes.emplace_back(keyframe.event_index, encode_stats_keyframe(keyframe));
      last = std::move(keyframe);
      part.swap(ahead);
      target = std::max(target + interval, from + cut + 1);
    }
  } catch (const InputError& error) {
    chain.why = std::string("the replay failed: ") + error.what();
  }
  if (!chain.why.empty())
    chain.keyframes.clear();
  return chain;
}

// Replaces the run's keyframes with `chain`'s and records the outcome.
std::size_t write_keyframe_chain(RunStore& store, RunId run, const KeyframeChain& chain,
                                 std::uint64_t interval, const CancelToken& cancel) {
  Transaction transaction(store.database());
  erase_keyframes(store, run);
  if (!chain.why.empty()) {
    record_outcome(store, run, {{"none", chain.why}});
    transaction.commit();
    return 0;
  }
  auto insert = store.database().prepare(
      "INSERT INTO stats_keyframes(run_id, event_index, data) VALUES (?, ?, ?)");
  for (const auto& [event_index, blob] : chain.keyframes) {
    insert.bind_int(1, run.value)
        .bind_int(2, static_cast<std::int64_t>(event_index))
        .bind_blob(3, blob);
    insert.run();
    insert.reset();
  }
  record_outcome(store, run, {{"interval", interval}, {"count", chain.keyframes.size()}});
  cancel.throw_if_cancelled();
  transaction.commit();
  return chain.keyframes.size();
}

std::string run_events_name(RunStore& store, RunId run) {
  return store.database_path() + ": run " + std::to_string(run.value);
}

// A run whose config or start state does not read, or whose keyframes the database refused:
// imported all the same; its Summary says why when asked.
std::size_t record_replay_failure(RunStore& store, RunId run, const InputError& error) {
  KeyframeChain none;
  none.why = std::string("the replay failed: ") + error.what();
  return write_keyframe_chain(store, run, none, 0, {});
}

// write_keyframe_chain, or the failure recorded when the database refuses the keyframes.
std::size_t store_chain(RunStore& store, RunId run, const KeyframeChain& chain,
                        std::uint64_t interval, const CancelToken& cancel) {
  try {
    return write_keyframe_chain(store, run, chain, interval, cancel);
  } catch (const InputError& error) {  // DatabaseError is one
    return record_replay_failure(store, run, error);
  }
}

void check_interval(std::uint64_t interval) {
  if (interval == 0)
    throw InputError("store_stats_keyframes: the interval must be at least one event");
}

}  // namespace

std::size_t store_stats_keyframes(RunStore& store, RunId run, std::uint64_t interval,
                                  const CancelToken& cancel) {
  RunReader::EventStream stream = store.event_stream(run, 0);
  return store_stats_keyframes(
      store, run,
      [&stream](std::size_t count, std::vector<TraceEvent>& out) {
        return stream.read(count, out);
      },
      interval, cancel);
}

std::size_t store_stats_keyframes(RunStore& store, RunId run, const RunEventReader& events,
                                  std::uint64_t interval, const CancelToken& cancel) {
  check_interval(interval);
  ChainInputs inputs;
  try {
    inputs = chain_inputs(store, run);
  } catch (const InputError& error) {
    return record_replay_failure(store, run, error);
  }
  const KeyframeChain chain =
      build_keyframe_chain(inputs, events, interval, cancel, run_events_name(store, run));
  return store_chain(store, run, chain, interval, cancel);
}

struct KeyframeChainInAdvance::Job {
  ChainInputs expected;
  CancelToken stop = CancelToken::make();
  std::future<KeyframeChain> chain;
  ~Job() {
    stop.cancel();
    if (chain.valid())
      chain.wait();
  }
};

KeyframeChainInAdvance::KeyframeChainInAdvance(const RunRecord& record,
                                               const SegmentMap& final_state, RunEventReader events,
                                               std::uint64_t interval)
    : interval_(interval) {
  check_interval(interval);
  auto job = std::make_unique<Job>();
  try {
    const RunTrace trace = run_trace_of(record);
    std::vector<replay::SegmentPool> final_segments;
    if (trace.recorded_config)
      final_segments = final_segments_of(final_state, record);
    job->expected = chain_inputs(trace, stats_replay_setup(trace, std::move(final_segments)));
  } catch (const std::exception&) {
    return;  // store() reads the stored run's inputs again and reports what does not read
  }
  try {
    job->chain = std::async(std::launch::async, [inputs = job->expected, events = std::move(events),
                                                 interval, stop = job->stop] {
      return build_keyframe_chain(inputs, events, interval, stop, "the imported trace");
    });
  } catch (const std::system_error&) {
    return;  // no thread to be had: store() builds the chain after the commit, as before
  }
  job_ = std::move(job);
}

KeyframeChainInAdvance::~KeyframeChainInAdvance() = default;

std::size_t KeyframeChainInAdvance::store(RunStore& store, RunId run,
                                          const RunEventReader& events_again,
                                          const CancelToken& cancel) {
  std::unique_ptr<Job> job = std::move(job_);
  taken_ = false;
  ChainInputs stored;
  try {
    stored = chain_inputs(store, run);
  } catch (const InputError& error) {
    return record_replay_failure(store, run, error);
  }
  std::optional<KeyframeChain> chain;
  if (job && same_inputs(job->expected, stored)) {
    // The caller's cancel reaches the chain's thread through the job's own token.
    while (job->chain.wait_for(std::chrono::milliseconds(10)) != std::future_status::ready) {
      if (cancel.cancelled())
        job->stop.cancel();
    }
    chain = job->chain.get();
    taken_ = true;
  }
  job.reset();  // a chain built from other inputs is stopped and dropped
  if (!chain)
    chain =
        build_keyframe_chain(stored, events_again, interval_, cancel, run_events_name(store, run));
  return store_chain(store, run, *chain, interval_, cancel);
}

bool stats_keyframes_missing(const RunRecord& record) {
  return run_has_stats_keyframes(record.event_count) && !record.summary.contains("stats_keyframes");
}

bool backfill_stats_keyframes(const std::string& path, RunId run, const CancelToken& cancel) {
  try {
    const std::unique_ptr<RunStore> store = open_run_store(path, OpenMode::read_write, true);
    if (!stats_keyframes_missing(store->run(run)))
      return false;
    store_stats_keyframes(*store, run, kStatsKeyframeInterval, cancel);
    return true;
  } catch (const DatabaseError&) {
    return false;  // not writable: replayed from event 0, as every Summary of the run was before
  }
}

std::optional<StatsKeyframe> stats_keyframe_before(RunStore& store, RunId run,
                                                   std::uint64_t event_index,
                                                   const snapshot::LayoutRules& rules) {
  auto query = store.database().prepare(
      "SELECT event_index, data FROM stats_keyframes WHERE run_id = ? AND event_index <= ? "
      "ORDER BY event_index DESC LIMIT 1");
  query.bind_int(1, run.value).bind_int(2, static_cast<std::int64_t>(event_index));
  if (!query.step())
    return std::nullopt;
  const auto at = static_cast<std::uint64_t>(query.column_int(0));
  StatsKeyframe keyframe =
      decode_stats_keyframe(query.column_blob(1), rules,
                            store.database().path() + ": run " + std::to_string(run.value) +
                                ", allocator-state keyframe at event " + std::to_string(at));
  keyframe.event_index = at;
  return keyframe;
}

}  // namespace fragscope::storage
