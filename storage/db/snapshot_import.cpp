#include "storage/db/snapshot_import.h"

#include "storage/db/stats_keyframes.h"

#include "storage/db/recording_stats.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <memory>
#include <optional>

#include "engine/analysis/recorded_environment.h"
#include "engine/core/error.h"
#include "engine/core/input_file.h"
#include "engine/snapshot/recording_stats.h"
#include "engine/snapshot/slice_buffer.h"
#include "engine/snapshot/timeline.h"
#include "fragscope/version.h"

namespace fragscope::storage {
namespace {

std::vector<std::string> all_warnings(const std::vector<std::string>& a,
                                      const std::vector<std::string>& b) {
  std::vector<std::string> out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

SeriesPoint series_of(const SegmentMap& state) {
  SeriesPoint point;
  point.reserved = static_cast<std::int64_t>(state.reserved_bytes());
  for (const auto& [addr, block] : state.blocks()) {
    const auto size = static_cast<std::int64_t>(block.size);
    point.active += size;
    point.requested += size;
    if (block.state == BlockState::active_allocated)
      point.allocated += size;
  }
  return point;
}

SeriesPoint point_of(const MemorySample& sample) {
  return {static_cast<std::int64_t>(sample.allocated), static_cast<std::int64_t>(sample.reserved),
          static_cast<std::int64_t>(sample.active), static_cast<std::int64_t>(sample.requested)};
}

// What the replays of the stored run read of its summary (stats_replay_setup): the recorded
// settings, the release, the private pools of the final segments and the recorded cap.
nlohmann::json replay_summary(const snapshot::Snapshot& snapshot, std::size_t device,
                              const ImportOptions& options) {
  nlohmann::json summary = {
      {"allocator_settings", snapshot.allocator_settings},
      {"torch_version",
       {{"range", snapshot.torch_version.range()},
        {"profile", snapshot.torch_version.profile().to_string()},
        {"evidence", snapshot.torch_version.evidence},
        {"from_override", snapshot.torch_version.from_override}}},
  };
  // Private pools (CUDA graphs, MemPool) are only in the final segments' segment_pool_id:
  // kept so an export writes them back and views can tell the pools apart.
  nlohmann::json segment_pools = nlohmann::json::array();
  for (const snapshot::Segment& segment : snapshot.segments) {
    if (segment.device == static_cast<int>(device) &&
        (segment.pool_id.first != 0 || segment.pool_id.second != 0))
      segment_pools.push_back(
          {segment.address, segment.total_size, segment.pool_id.first, segment.pool_id.second});
  }
  if (!segment_pools.empty())
    summary["segment_pools"] = std::move(segment_pools);
  if (options.recorded_stats && options.recorded_stats->is_object())
    add_recorded_stats(*options.recorded_stats, summary);
  return summary;
}

// The device's trace read forward from its first event, a block at a time (a spooled trace is
// never unpacked whole), for the keyframe chain.
RunEventReader trace_reader(const snapshot::Snapshot& snapshot, std::size_t device) {
  const snapshot::EventSpool* spool = snapshot.spool(device);
  struct Position {
    snapshot::TraceWindow trace;
    std::size_t next = 0;
  };
  auto at = std::make_shared<Position>(Position{
      spool != nullptr
          ? snapshot::TraceWindow(*spool)
          : snapshot::TraceWindow(std::span<const TraceEvent>(snapshot.device_traces[device]))});
  return [at](std::size_t count, std::vector<TraceEvent>& out) {
    const std::size_t first = at->next;
    while (at->next - first < count && at->next < at->trace.size()) {
      const std::span<const TraceEvent> run = at->trace.run_from(at->next);
      const std::size_t take = std::min(run.size(), count - (at->next - first));
      out.insert(out.end(), run.begin(), run.begin() + static_cast<std::ptrdiff_t>(take));
      at->next += take;
    }
    return at->next - first;
  };
}

}  // namespace

SegmentMap segment_map_of(const snapshot::Snapshot& snapshot, std::size_t device) {
  SegmentMap map;
  for (const auto& segment : snapshot.segments) {
    if (segment.device != static_cast<int>(device))
      continue;
    map.add_segment(
        SegmentRange{segment.address, segment.total_size, segment.stream, segment.is_expandable});
    for (const auto& block : segment.blocks) {
      if (block.state == snapshot::BlockState::inactive)
        continue;
      map.add_block(LiveBlock{block.address, block.requested_size, segment.stream, block.state,
                              block.frames});
    }
  }
  return map;
}

namespace {

// The run's environment columns from a fingerprint: the PyTorch build, driver, the GPU the
// run used (else the first) and the host.
Environment fingerprint_environment(const analysis::RecordedEnvironment& env, std::size_t device) {
  Environment environment = Environment::current();
  environment.torch_version = env.torch_version;
  environment.cuda_version = env.torch_cuda;
  environment.driver_version = env.driver;
  const analysis::RecordedGpu* gpu = env.gpus.empty() ? nullptr : &env.gpus.front();
  for (const auto& candidate : env.gpus)
    if (candidate.index == static_cast<std::int64_t>(device))
      gpu = &candidate;
  if (gpu != nullptr) {
    environment.gpu_name = gpu->name;
    environment.gpu_memory = gpu->total_memory;
  }
  if (!env.host.empty())
    environment.host = env.host;
  return environment;
}

}  // namespace

std::string run_name_for(const std::string& snapshot_path) {
  std::string name = std::filesystem::path(snapshot_path).filename().string();
  for (const std::string suffix : {".pickle.gz", ".pickle", ".pkl.gz", ".pkl"}) {
    if (name.size() > suffix.size() &&
        std::equal(suffix.rbegin(), suffix.rend(), name.rbegin(),
                   [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); }))
      return name.substr(0, name.size() - suffix.size());
  }
  return name;
}

nlohmann::json read_recording_environment(const std::string& env_path) {
  // Regular files only, bounded nesting and size, like the stats file.
  nlohmann::json json = read_json_file(env_path, "environment file");
  analysis::parse_recorded_environment(json, env_path);  // throws, naming the place
  return json;
}

std::string companion_environment_path(const std::string& snapshot_path) {
  return (std::filesystem::path(snapshot_path).parent_path() /
          (run_name_for(snapshot_path) + ".env.json"))
      .string();
}

std::optional<nlohmann::json> read_companion_environment(const std::string& snapshot_path) {
  const std::string path = companion_environment_path(snapshot_path);
  std::error_code error;
  if (!std::filesystem::exists(path, error))
    return std::nullopt;  // no fingerprint beside the snapshot
  return read_recording_environment(path);
}

std::string companion_stats_path(const std::string& snapshot_path) {
  return (std::filesystem::path(snapshot_path).parent_path() /
          (run_name_for(snapshot_path) + ".stats.json"))
      .string();
}

std::optional<nlohmann::json> read_companion_stats(const std::string& snapshot_path) {
  const std::string stats = companion_stats_path(snapshot_path);
  std::error_code error;
  if (!std::filesystem::exists(stats, error))
    return std::nullopt;  // no recording stats beside the snapshot
  return snapshot::read_recording_stats(stats);
}

namespace {

// One import's writes: the run begun with its start series, its events stored a slice at a time
// as the timeline makes them, the OOM reports at the end.
class ImportWriter {
 public:
  ImportWriter(RunStore& store, const snapshot::Snapshot& snapshot, const ImportOptions& options,
               const WorkControl& control, std::size_t event_count)
      : store_(store),
        snapshot_(snapshot),
        options_(options),
        control_(control),
        event_count_(event_count) {}

  void stage(std::string_view name, std::uint64_t done, std::uint64_t total) const {
    control_.progress.report(name, done, total);
    control_.check();
  }

  void begin(const RunRecord& record, const SegmentMap& initial, SeriesPoint start) {
    run_ = store_.begin_run(record, initial, start);
    ooms_.clear();
    stage("stacks", 0, 1);
    std::vector<std::vector<Frame>> stacks;
    for (std::size_t id = 1; id < snapshot_.frames.stack_count(); ++id) {
      stacks.push_back(snapshot_.frames.stack_frames(FrameStackId{static_cast<std::uint32_t>(id)}));
    }
    if (!stacks.empty())
      store_.set_frame_stacks(*run_, stacks);
    if (options_.recorded_environment)
      store_.set_recorded_environment(*run_, *options_.recorded_environment,
                                      options_.recorded_environment_file);
  }

  // Entries [first, first + events.size()) with the series after each. Slices of
  // snapshot::kTimelineSlice entries (as the timeline hands them out), so that a cancel is seen
  // within a fraction of a second.
  void append(std::span<const TraceEvent> events, std::span<const SeriesPoint> series,
              std::size_t first) {
    stage("events", first, event_count_);
    store_.append_events(*run_, events, {series, {}});
    for (std::size_t i = 0; i < events.size(); ++i)
      if (events[i].action == TraceAction::oom)
        ooms_.push_back({first + i, events[i], series[i]});
  }

  std::size_t write_oom_reports() {
    for (const Oom& oom : ooms_) {
      store_.add_oom_report(*run_, oom.index,
                            {{"event_index", oom.index},
                             {"device_free", oom.event.addr},
                             {"requested", oom.event.size},
                             {"stream", oom.event.stream.value},
                             {"time_us", oom.event.time_us},
                             {"allocated", oom.series.allocated},
                             {"reserved", oom.series.reserved},
                             {"active", oom.series.active},
                             {"requested", oom.series.requested}});
    }
    return ooms_.size();
  }

  // Rolls back a run begun (a layout that failed part way; any error).
  void cancel() {
    if (run_ && store_.ingesting())
      store_.cancel_run(*run_);
    run_.reset();
  }

  bool begun() const { return run_.has_value(); }
  RunId run() const { return *run_; }

 private:
  struct Oom {
    std::size_t index = 0;
    TraceEvent event;
    SeriesPoint series;
  };
  RunStore& store_;
  const snapshot::Snapshot& snapshot_;
  const ImportOptions& options_;
  const WorkControl& control_;
  std::size_t event_count_;
  std::optional<RunId> run_;
  std::vector<Oom> ooms_;
};

}  // namespace

ImportResult import_snapshot(RunStore& store, const snapshot::Snapshot& snapshot,
                             const ImportOptions& options, const WorkControl& control) {
  const std::size_t device_count = std::max<std::size_t>(snapshot.device_count(), 1);
  const std::size_t device = options.device.value_or(snapshot.busiest_device());
  if (device >= device_count) {
    throw InputError(options.source_file + ": no device " + std::to_string(device) +
                     " in the snapshot (it has " + std::to_string(device_count) + ")");
  }
  // The trace is walked a slice at a time (backward for the start state, forward for the
  // series), never copied: a spooled snapshot (read_snapshot_spooled) imports in memory that
  // does not grow with its entries.
  const snapshot::TraceBlocks events = snapshot.trace_blocks(device);
  const std::size_t event_count = events.size();
  ImportWriter writer(store, snapshot, options, control, event_count);

  writer.stage("layout", 0, 1);
  const SegmentMap final_state = segment_map_of(snapshot, device);
  // The stored start: the final segments rewound through every entry, walked only when asked.
  // The timeline's walk from an empty start (a trace without segments before it) needs none
  // unless that walk fails and begins again from the rebuilt start.
  std::optional<SegmentMap> rewound;
  const SegmentMap empty_start;
  bool start_assumed_empty = false;
  auto initial = [&]() -> const SegmentMap& {
    if (start_assumed_empty)
      return empty_start;
    if (!rewound)
      rewound = rewind(final_state, events);
    return *rewound;
  };

  // Checked before anything is written: a bad fingerprint stores nothing.
  std::optional<analysis::RecordedEnvironment> fingerprint;
  if (options.recorded_environment)
    fingerprint = analysis::parse_recorded_environment(*options.recorded_environment,
                                                       options.recorded_environment_file.empty()
                                                           ? options.source_file + " (environment)"
                                                           : options.recorded_environment_file);

  RunRecord record;
  record.name = options.name;
  record.experiment = options.experiment;
  record.source = options.source;
  if (options.environment)
    record.environment = *options.environment;
  else if (fingerprint)
    record.environment = fingerprint_environment(*fingerprint, device);
  else if (options.recorded_stats && options.recorded_stats->is_object()) {
    record.environment = Environment::current();
    apply_recorded_environment(*options.recorded_stats, record.environment);
  }
  if (const auto conf = snapshot.allocator_settings.find("PYTORCH_CUDA_ALLOC_CONF");
      conf != snapshot.allocator_settings.end() && conf->is_string())
    record.alloc_conf = conf->get<std::string>();
  record.device_name = "cuda:" + std::to_string(device);
  record.environment.fragscope_version = kVersion;
  record.environment.git_revision = kGitRevision;

  ImportResult result;
  result.events = event_count;
  result.segments = final_state.segments().size();
  // What the run's replays read of its summary: given to the keyframe chain built meanwhile, on
  // a thread of its own, for a run from an empty start, and stored with the summary.
  const nlohmann::json summary_for_replays = replay_summary(snapshot, device, options);
  std::optional<KeyframeChainInAdvance> chain_in_advance;

  try {
    // The exact series (rounded block sizes, as memory_stats() counts them) come from replaying
    // the trace with PyTorch's layout rules, stored as they are made. A trace that contradicts
    // itself cannot be laid out; it is still stored, with the series the trace alone gives, and
    // the summary says so (a run begun before the contradiction showed is begun again).
    nlohmann::json series_info;
    std::vector<SeriesPoint> slice_series;
    bool storing = false;  // an InputError from the store is no layout failure
    try {
      snapshot::TimelineSinks sinks;
      sinks.on_start = [&](const snapshot::Timeline& header) {
        writer.stage("layout", 1, 1);
        storing = true;
        start_assumed_empty = header.start_assumed_empty;
        writer.begin(record, initial(), point_of(header.initial));
        storing = false;
        if (run_has_stats_keyframes(event_count) && initial().segments().empty() &&
            initial().blocks().empty()) {
          RunRecord stored = record;  // as finish_run will have stored it
          stored.event_count = event_count;
          stored.summary = summary_for_replays;
          chain_in_advance.emplace(stored, final_state, trace_reader(snapshot, device));
        }
      };
      sinks.on_restart = [&] {
        storing = true;
        writer.cancel();
        start_assumed_empty = false;
        storing = false;
        chain_in_advance.reset();  // it took the start to be empty
      };
      sinks.on_samples = [&](std::span<const TraceEvent> slice,
                             std::span<const MemorySample> samples, std::size_t first) {
        storing = true;
        slice_series.clear();
        for (const MemorySample& sample : samples)
          slice_series.push_back(point_of(sample));
        writer.append(slice, slice_series, first);
        storing = false;
      };
      const snapshot::Timeline timeline =
          snapshot::build_timeline(snapshot, static_cast<int>(device), sinks);
      if (!timeline.matches_final_segments)
        result.warnings.push_back("the trace does not end in the snapshot's final segments: " +
                                  timeline.mismatch);
      series_info = {{"source", "layout"},
                     {"matches_final_segments", timeline.matches_final_segments},
                     {"mismatch", timeline.mismatch},
                     {"guessed_blocks", timeline.guessed_blocks},
                     {"exact_from", timeline.exact_from}};
    } catch (const InputError& e) {
      if (storing)
        throw;
      chain_in_advance.reset();
      writer.cancel();
      writer.stage("layout", 1, 1);
      start_assumed_empty = false;
      writer.begin(record, initial(), series_of(initial()));
      SeriesPoint current = series_of(initial());
      snapshot::SliceBuffer<SeriesPoint> slices(
          [&](std::span<const TraceEvent> slice, std::span<const SeriesPoint> series,
              std::size_t first) { writer.append(slice, series, first); },
          event_count);
      events.for_each([&](const TraceEvent& event, std::size_t) {
        current = plus(current, trace_delta(event));
        slices.push(event, current);
      });
      slices.finish();
      series_info = {{"source", "trace"}, {"layout_error", e.what()}};
      result.warnings.push_back(std::string("the snapshot is inconsistent (") + e.what() +
                                "): stored with the series the trace alone gives");
    }
    // A state-only device (no entries) is not a truncated trace: it has nothing but its state.
    result.truncated =
        event_count > 0 && (!initial().segments().empty() || !initial().blocks().empty());
    writer.stage("events", event_count, event_count);
    writer.stage("ooms", 0, 1);
    result.ooms = writer.write_oom_reports();
    nlohmann::json summary = {
        {"source_file", options.source_file},
        {"device", device},
        {"segments", result.segments},
        {"truncated", result.truncated},
        {"ooms", result.ooms},
        {"format", snapshot.format == snapshot::SnapshotFormat::v2_1 ? "2.1" : "2.0"},
        {"pickle_protocol", snapshot.pickle_protocol},
        {"warnings", all_warnings(snapshot.warnings, result.warnings)},
        {"external_annotations", snapshot.external_annotations.size()},
        {"state_only", event_count == 0},
        {"device_count", snapshot.device_count()},
        {"allocator_settings_recorded", snapshot.allocator_settings_recorded},
        {"series", series_info},
    };
    summary.update(summary_for_replays);
    writer.stage("commit", 0, 1);
    store.finish_run(writer.run(), result.ooms > 0 ? RunStatus::oom : RunStatus::ok, summary, 0,
                     control.cancel);
    control.progress.report("commit", 1, 1);  // stored: no cancel applies any more
  } catch (...) {
    writer.cancel();
    throw;
  }
  result.run = writer.run();
  // The run is committed; its allocator-state keyframes follow in their own transaction (a
  // cancel here leaves the run without them, replayed from event 0 when asked). The run's events
  // are the device's trace as it is, read from the snapshot rather than back from the store.
  if (run_has_stats_keyframes(event_count)) {
    try {
      if (chain_in_advance) {
        chain_in_advance->store(store, result.run, trace_reader(snapshot, device), control.cancel);
        result.keyframes_built_in_advance = chain_in_advance->taken();
      } else {
        store_stats_keyframes(store, result.run, trace_reader(snapshot, device),
                              kStatsKeyframeInterval, control.cancel);
      }
    } catch (const Cancelled&) {
    }
  }
  return result;
}

}  // namespace fragscope::storage
