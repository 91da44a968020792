#pragma once
// memory_stats() at any event of a stored run: the run's events up to that point replayed through
// the allocator model, so the summary page and `fragscope-cli summary` can print PyTorch's
// memory_summary() of the state at a cursor, not only at the run's end. The model reproduces
// complete recordings exactly (tests/engine/replay), so for those the figures are what PyTorch's
// own counters said at that moment; `caveats` says when they cannot be.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/allocator/config.h"
#include "engine/allocator/profile_choice.h"
#include "engine/allocator/stats.h"
#include "engine/replay/replay.h"
#include "engine/snapshot/segment_state.h"
#include "storage/db/run_store.h"

namespace fragscope::storage {

struct MemoryStatsAt {
  alloc::DeviceStats stats;
  // Events replayed: the asked index clamped to the run, moved to the end of the allocator call
  // when it falls inside one (between a segment_alloc and the alloc it serves, say).
  std::uint64_t event_index = 0;
  std::uint64_t event_count = 0;  // events in the run
  std::string config;             // the allocator config replayed, as PYTORCH_CUDA_ALLOC_CONF
  alloc::ProfileChoice profile;   // the release whose rules the replay followed
  // Why the figures may differ from what PyTorch printed at that moment (a trace that starts
  // mid-run, an OOM whose device limit is unknown, a model that diverged from the recording).
  std::vector<std::string> caveats;
  // The model's replay stopped following the recording: `stats` are the model's, not the
  // recording's (front-ends then show the recorded figures beside them).
  bool diverged = false;
  // Where the replay started: the allocator-state keyframe at or before the event
  // (stats_keyframes.h), or 0 for a run without keyframes there.
  std::uint64_t replayed_from = 0;
};

// The per-process memory limit a run had: RunRecord::capacity when set, else
// summary["allowed_bytes"] (the cap of a recording imported with its NAME.stats.json); nullopt
// when it is not known.
std::optional<Bytes> run_memory_limit(const RunRecord& record);

// The release whose allocator rules analyses of the run follow, and why: what the import read
// from the snapshot's format (or the --torch-version it was given), stored in
// summary["torch_version"]; for any other run the latest release, assumed.
alloc::ProfileChoice profile_choice_of(const RunRecord& record);
// The choice as summary["torch_version"] stores it (profile_choice_of reads it back).
nlohmann::json to_json(const alloc::ProfileChoice& choice);
// The allocator config a stored run ran under, derived in this one place: an imported snapshot's
// recorded allocator_settings (read for any release), else the run's alloc_conf.
struct RunAllocatorConfig {
  alloc::AllocatorConfig config;
  bool recorded = false;  // config is the snapshot's allocator_settings
  std::string note;       // what the recorded settings lacked ("" when complete)
};
// InputError naming the run when the config does not parse.
RunAllocatorConfig allocator_config_of(const RunRecord& record);

// What every analysis of a stored run starts from (post-mortem, what-if, memory_stats_at): the
// config it ran under (the recorded allocator_settings for imported snapshots, read for any
// release; else the run's PYTORCH_CUDA_ALLOC_CONF), its events, and the allocator state before
// the first event laid out with that config's own rounding and split rules (empty unless the
// trace started mid-run; block sizes of blocks live at the start follow the split rule).
struct RunTrace {
  RunRecord record;
  alloc::AllocatorConfig config;
  bool recorded_config = false;  // config is the snapshot's allocator_settings
  alloc::ProfileChoice profile;  // profile_choice_of(record)
  std::vector<TraceEvent> events;
  snapshot::SegmentState initial;
  std::vector<std::string> notes;  // e.g. allocator_settings that lacked keys
};
// A run's trace as its record gives it, without events, and with an empty start state laid out
// with its config's rules; InputError naming the run when its config does not parse.
RunTrace run_trace_of(RunRecord record);
// `event_count`: how many events to load (default all). InputError naming the run when its
// config does not parse or its stored start state contradicts itself.
RunTrace load_run_trace(RunStore& store, RunId run,
                        std::optional<std::uint64_t> event_count = std::nullopt);

// What the replay behind memory_stats_at starts from: the nearest allocator-state keyframe
// before the event (at most kStatsKeyframeInterval events of replay), or event 0 (the whole
// prefix; what the keyframes must agree with).
enum class StatsStart : std::uint8_t { nearest_keyframe, first_event };

// The state after the first `event_index` events. The config is the recorded allocator_settings
// for imported snapshots, else the run's PYTORCH_CUDA_ALLOC_CONF; the device limit is the run's
// capacity or summary["allowed_bytes"]. A config that does not parse is an InputError naming the
// run. `cancel` is polled inside the replay (fragscope::Cancelled), so a front-end whose cursor
// or run changed stops a replay from event 0 instead of letting it run to its end.
MemoryStatsAt memory_stats_at(RunStore& store, RunId run, std::uint64_t event_index,
                              StatsStart start = StatsStart::nearest_keyframe,
                              const CancelToken& cancel = {});

// One malloc()/free() of PyTorch's writes several trace entries (cudaMalloc, cache release and
// unmap before the alloc or oom entry; free_requested then free_completed), and the model can
// only stop between calls: the end of the call that `cut` (events applied) falls inside, or
// `cut` itself when it lies between calls.
std::uint64_t end_of_allocator_call(std::span<const TraceEvent> events, std::uint64_t cut);

// How far past a cut the events of the allocator call it falls inside may reach (its segment
// events are few): the events read beyond a cut to find that call's end.
inline constexpr std::uint64_t kCallLookahead = 4096;

// How memory_stats_at replays a run (and the keyframes that shortcut it): the options and the
// recorded allocator_settings when the run is a recording replayed under its own config.
struct StatsReplaySetup {
  replay::ReplayOptions options;
  nlohmann::json settings = nlohmann::json::object();
  bool recorded = false;
};
StatsReplaySetup stats_replay_setup(RunStore& store, const RunTrace& trace);
// The same with the run's final segments given (final_segments_of), for a run not stored yet.
StatsReplaySetup stats_replay_setup(const RunTrace& trace,
                                    std::vector<replay::SegmentPool> final_segments);
// The segments of `at_end` (a run's state after its last event) with their pools
// (record.summary["segment_pools"] holds the private ones), for the replay's pool inference, as
// replay_snapshot passes a snapshot's. Expandable segments are left out.
std::vector<replay::SegmentPool> final_segments_of(const SegmentMap& at_end,
                                                   const RunRecord& record);

}  // namespace fragscope::storage
