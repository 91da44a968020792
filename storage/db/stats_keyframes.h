#pragma once
// Allocator-state keyframes: the caching-allocator model's exact state (every segment and block,
// free ones included) and its memory_stats() counters every `interval` events of a stored run,
// written once after ingest. memory_stats_at() then replays at most `interval` events from the
// keyframe before the cursor instead of the whole run from event 0.
//
// Each keyframe is the previous one replayed forward, so the chain is exact only where the
// model's whole state lies in its blocks and counters. A run the chain cannot follow stores none
// and is replayed from event 0 (summary["stats_keyframes"]["none"] says why): expandable
// segments (unmapped pages), a garbage-collection threshold (block ages), private pools (a
// keyframe's segments do not say which pool holds them; inferred empty_cache calls are followed),
// frees that waited for stream events (pending blocks and their
// per-stream order), a trace that starts mid-run (its start state is inferred), a replay that
// diverges from the recording, and a run replayed under its config whose trace the model does not
// make (its blocks would not be the trace's: a synthetic trace, say).
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/allocator/stats.h"
#include "engine/core/cancel.h"
#include "engine/snapshot/segment_state.h"
#include "storage/db/run_store.h"

namespace fragscope::storage {

// At most this many events of replay from a keyframe to any cursor (~10 ms of the model).
inline constexpr std::uint64_t kStatsKeyframeInterval = 8192;

// Whether a run of `event_count` events has keyframes: a shorter one is replayed from event 0.
inline bool run_has_stats_keyframes(std::uint64_t event_count) {
  return event_count > kStatsKeyframeInterval;
}

struct StatsKeyframe {
  std::uint64_t event_index = 0;  // events applied; always the end of an allocator call
  snapshot::SegmentState state;   // the model's segments and blocks after them
  alloc::DeviceStats stats;       // and its counters, peaks and totals from event 0
};

// Replays the run once and stores a keyframe at the end of the first allocator call at or after
// every multiple of `interval` (replacing the run's keyframes). Returns how many were stored;
// summary["stats_keyframes"] records the interval, or under "none" why the run has none.
// `cancel` is polled between keyframes (Cancelled: nothing is stored).
std::size_t store_stats_keyframes(RunStore& store, RunId run,
                                  std::uint64_t interval = kStatsKeyframeInterval,
                                  const CancelToken& cancel = {});

// A run's events in order, read forward: appends the next `count` of them (fewer at the end) to
// `out` and returns how many.
using RunEventReader = std::function<std::size_t(std::size_t count, std::vector<TraceEvent>& out)>;
// store_stats_keyframes with the run's events from `events` rather than read back from the store:
// an import has them at hand (its snapshot's trace, which it has just stored), and reading a
// stored run back costs more than decoding the trace it came from.
std::size_t store_stats_keyframes(RunStore& store, RunId run, const RunEventReader& events,
                                  std::uint64_t interval = kStatsKeyframeInterval,
                                  const CancelToken& cancel = {});

// An import's keyframe chain, built on a thread of its own while the import stores the run's
// events: the chain replays the whole run, a third of an import's work, which another core does
// meanwhile. It is built from what the run is about to be stored with; store() keeps it only when
// the stored run gives the chain the same inputs, and otherwise builds the chain again from the
// store, so the keyframes are always store_stats_keyframes'.
class KeyframeChainInAdvance {
 public:
  // `record`: the run as it will be stored (its event_count, capacity, environment, alloc_conf,
  // and the summary's allocator_settings, torch_version, segment_pools and allowed_bytes);
  // `final_state`: its segments after the last event; `events`: its events from the first, read
  // on the chain's thread, so it must not touch what the caller uses meanwhile (the store: read
  // the snapshot's trace). The run is taken to start with no segment. No thread starts when the
  // record's inputs do not read (store() reads the stored ones and says so).
  KeyframeChainInAdvance(const RunRecord& record, const SegmentMap& final_state,
                         RunEventReader events, std::uint64_t interval = kStatsKeyframeInterval);
  ~KeyframeChainInAdvance();  // stops the chain's thread and waits for it
  KeyframeChainInAdvance(const KeyframeChainInAdvance&) = delete;
  KeyframeChainInAdvance& operator=(const KeyframeChainInAdvance&) = delete;

  // store_stats_keyframes(store, run, events_again, interval, cancel), with the chain built in
  // advance when the stored run gives the same inputs; `cancel` reaches the chain's thread.
  std::size_t store(RunStore& store, RunId run, const RunEventReader& events_again,
                    const CancelToken& cancel = {});
  // Whether store() kept the chain built in advance.
  bool taken() const { return taken_; }

 private:
  struct Job;
  std::unique_ptr<Job> job_;
  std::uint64_t interval_;
  bool taken_ = false;
};

// Keyframes for a run stored before FragScope kept them (its summary has no "stats_keyframes"
// outcome), built once through a writer on the database at `path`, so that this Summary and
// every later one replays at most one interval. False when the run needs none (short, or its
// outcome is already recorded) or the file cannot be written (a read-only copy): the Summary
// then replays from event 0 as before. Cancelled propagates.
bool backfill_stats_keyframes(const std::string& path, RunId run, const CancelToken& cancel = {});
// Whether backfill_stats_keyframes has work for the run: long enough for keyframes, and no
// outcome (keyframes, or why none) recorded.
bool stats_keyframes_missing(const RunRecord& record);

// The last keyframe at or before `event_index`; nullopt when the run has none there. `rules`
// lay out the stored blocks (the run's config's).
std::optional<StatsKeyframe> stats_keyframe_before(RunStore& store, RunId run,
                                                   std::uint64_t event_index,
                                                   const snapshot::LayoutRules& rules);

// The blob format (zstd around varints); decode throws DatabaseError naming `what` on a damaged
// blob.
std::vector<std::uint8_t> encode_stats_keyframe(const StatsKeyframe& keyframe);
StatsKeyframe decode_stats_keyframe(std::span<const std::uint8_t> blob,
                                    const snapshot::LayoutRules& rules, const std::string& what);

}  // namespace fragscope::storage
