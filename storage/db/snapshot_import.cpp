#include "storage/db/snapshot_import.h"

#include "storage/db/stats_keyframes.h"

#include "storage/db/recording_stats.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "engine/analysis/recorded_environment.h"
#include "engine/core/error.h"
#include "engine/core/input_file.h"
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
  return read_recording_stats(stats);
}

ImportResult import_snapshot(RunStore& store, const snapshot::Snapshot& snapshot,
                             const ImportOptions& options, const WorkControl& control) {
  const auto stage = [&control](std::string_view name, std::uint64_t done, std::uint64_t total) {
    control.progress.report(name, done, total);
    control.check();
  };
  const std::size_t device_count = std::max<std::size_t>(snapshot.device_count(), 1);
  const std::size_t device = options.device.value_or(snapshot.busiest_device());
  if (device >= device_count) {
    throw InputError(options.source_file + ": no device " + std::to_string(device) +
                     " in the snapshot (it has " + std::to_string(device_count) + ")");
  }
  static const std::vector<TraceEvent> kNoEvents;
  const std::vector<TraceEvent>& events =
      device < snapshot.device_traces.size() ? snapshot.device_traces[device] : kNoEvents;

  stage("layout", 0, 1);
  const SegmentMap final_state = segment_map_of(snapshot, device);
  const SegmentMap initial = rewind(final_state, events);

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
  result.events = events.size();
  result.segments = final_state.segments().size();
  // A state-only device (no entries) is not a truncated trace: it has nothing but its state.
  result.truncated = !events.empty() && (!initial.segments().empty() || !initial.blocks().empty());

  // The exact series (rounded block sizes, as memory_stats() counts them) come from replaying the
  // trace with PyTorch's layout rules. A trace that contradicts itself cannot be laid out; it is
  // still stored, with the series the trace alone gives, and the summary says so.
  nlohmann::json series_info;
  std::vector<SeriesPoint> series;
  SeriesPoint start = series_of(initial);
  try {
    const snapshot::Timeline timeline =
        snapshot::build_timeline(snapshot, static_cast<int>(device));
    series.reserve(timeline.samples.size());
    for (const auto& sample : timeline.samples)
      series.push_back(point_of(sample));
    start = point_of(timeline.initial);
    if (!timeline.matches_final_segments)
      result.warnings.push_back("the trace does not end in the snapshot's final segments: " +
                                timeline.mismatch);
    series_info = {{"source", "layout"},
                   {"matches_final_segments", timeline.matches_final_segments},
                   {"mismatch", timeline.mismatch},
                   {"guessed_blocks", timeline.guessed_blocks},
                   {"exact_from", timeline.exact_from}};
  } catch (const InputError& e) {
    series = derive_series(events, start);
    series_info = {{"source", "trace"}, {"layout_error", e.what()}};
    result.warnings.push_back(std::string("the snapshot is inconsistent (") + e.what() +
                              "): stored with the series the trace alone gives");
  }

  stage("layout", 1, 1);
  const RunId run = store.begin_run(record, initial, start);
  try {
    stage("stacks", 0, 1);
    std::vector<std::vector<Frame>> stacks;
    for (std::size_t id = 1; id < snapshot.frames.stack_count(); ++id) {
      stacks.push_back(snapshot.frames.stack_frames(FrameStackId{static_cast<std::uint32_t>(id)}));
    }
    if (!stacks.empty())
      store.set_frame_stacks(run, stacks);
    if (options.recorded_environment)
      store.set_recorded_environment(run, *options.recorded_environment,
                                     options.recorded_environment_file);
    // In slices, so that a cancel is seen within a fraction of a second on a 1M-event trace.
    constexpr std::size_t kSlice = 1u << 16;
    if (series.size() != events.size())
      throw InputError(options.source_file + ": " + std::to_string(series.size()) +
                       " series samples for " + std::to_string(events.size()) + " events");
    const std::span<const TraceEvent> all_events(events);
    const std::span<const SeriesPoint> all_series(series);
    for (std::size_t first = 0; first < events.size(); first += kSlice) {
      stage("events", first, events.size());
      const std::size_t count = std::min(kSlice, events.size() - first);
      store.append_events(run, all_events.subspan(first, count),
                          {all_series.subspan(first, count), {}});
    }
    stage("events", events.size(), events.size());
    stage("ooms", 0, 1);
    for (std::size_t i = 0; i < events.size(); ++i) {
      const TraceEvent& event = events[i];
      if (event.action != TraceAction::oom)
        continue;
      ++result.ooms;
      store.add_oom_report(run, i,
                           {{"event_index", i},
                            {"device_free", event.addr},
                            {"requested", event.size},
                            {"stream", event.stream.value},
                            {"time_us", event.time_us},
                            {"allocated", series[i].allocated},
                            {"reserved", series[i].reserved},
                            {"active", series[i].active},
                            {"requested", series[i].requested}});
    }
    nlohmann::json summary = {
        {"source_file", options.source_file},
        {"device", device},
        {"allocator_settings", snapshot.allocator_settings},
        {"segments", result.segments},
        {"truncated", result.truncated},
        {"ooms", result.ooms},
        {"format", snapshot.format == snapshot::SnapshotFormat::v2_1 ? "2.1" : "2.0"},
        {"pickle_protocol", snapshot.pickle_protocol},
        {"warnings", all_warnings(snapshot.warnings, result.warnings)},
        {"external_annotations", snapshot.external_annotations.size()},
        {"state_only", events.empty()},
        {"device_count", snapshot.device_count()},
        {"allocator_settings_recorded", snapshot.allocator_settings_recorded},
        {"torch_version",
         {{"range", snapshot.torch_version.range()},
          {"profile", snapshot.torch_version.profile().to_string()},
          {"evidence", snapshot.torch_version.evidence},
          {"from_override", snapshot.torch_version.from_override}}},
        {"series", series_info},
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
    stage("commit", 0, 1);
    store.finish_run(run, result.ooms > 0 ? RunStatus::oom : RunStatus::ok, summary, 0,
                     control.cancel);
    control.progress.report("commit", 1, 1);  // stored: no cancel applies any more
  } catch (...) {
    if (store.ingesting())
      store.cancel_run(run);
    throw;
  }
  result.run = run;
  // The run is committed; its allocator-state keyframes follow in their own transaction (a
  // cancel here leaves the run without them, replayed from event 0 when asked).
  if (run_has_stats_keyframes(events.size())) {
    try {
      store_stats_keyframes(store, run, kStatsKeyframeInterval, control.cancel);
    } catch (const Cancelled&) {
    }
  }
  return result;
}

}  // namespace fragscope::storage
