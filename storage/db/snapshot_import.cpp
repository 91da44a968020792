#include "storage/db/snapshot_import.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

#include "engine/analysis/recorded_environment.h"
#include "engine/core/error.h"
#include "engine/snapshot/timeline.h"
#include "fragscope/version.h"

namespace fragscope::storage {
namespace {

SeriesPoint series_of(const SegmentMap& state) {
  SeriesPoint point;
  point.reserved = static_cast<std::int64_t>(state.reserved_bytes());
  for (const auto& [addr, block] : state.blocks()) {
    const auto size = static_cast<std::int64_t>(block.size);
    point.active += size;
    point.requested += size;
    if (block.state == BlockState::allocated)
      point.allocated += size;
  }
  return point;
}

SeriesPoint point_of(const snapshot::TimelineSample& sample) {
  return {static_cast<std::int64_t>(sample.allocated), static_cast<std::int64_t>(sample.reserved),
          static_cast<std::int64_t>(sample.active), static_cast<std::int64_t>(sample.requested)};
}

std::size_t busiest_device(const snapshot::Snapshot& snapshot) {
  std::size_t best = 0;
  for (std::size_t d = 1; d < snapshot.device_traces.size(); ++d) {
    if (snapshot.device_traces[d].size() > snapshot.device_traces[best].size())
      best = d;
  }
  return best;
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
      map.add_block(LiveBlock{block.address, block.requested_size, segment.stream,
                              block.state == snapshot::BlockState::active_allocated
                                  ? BlockState::allocated
                                  : BlockState::pending_free,
                              block.frames});
    }
  }
  return map;
}

namespace {

std::string string_field(const nlohmann::json& json, const char* key) {
  const auto it = json.find(key);
  return it != json.end() && it->is_string() ? it->get<std::string>() : std::string();
}

Environment recorded_environment(const nlohmann::json& stats) {
  Environment environment = Environment::current();
  environment.torch_version = string_field(stats, "torch");
  environment.cuda_version = string_field(stats, "cuda");
  environment.gpu_name = string_field(stats, "device");
  if (const auto total = stats.find("total_memory");
      total != stats.end() && total->is_number_unsigned())
    environment.gpu_memory = total->get<Bytes>();
  return environment;
}

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

void add_recorded_stats(const nlohmann::json& stats, nlohmann::json& summary) {
  // What PyTorch itself reported after the run, shown beside FragScope's figures.
  if (const auto it = stats.find("memory_stats"); it != stats.end() && it->is_object())
    summary["memory_stats"] = *it;
  if (const auto it = stats.find("outcome"); it != stats.end())
    summary["recorded_outcome"] = *it;
  if (const auto it = stats.find("alloc_conf"); it != stats.end())
    summary["recorded_alloc_conf"] = *it;
  // record_torch_traces.py's cap: set_per_process_memory_fraction to exactly cap_gib GiB.
  const auto params = stats.find("params");
  if (params != stats.end() && params->is_object()) {
    const auto cap = params->find("cap_gib");
    if (cap != params->end() && cap->is_number() && cap->get<double>() > 0)
      summary["allowed_bytes"] = static_cast<Bytes>(cap->get<double>() * static_cast<double>(kGiB));
  }
  // fragscope-record's cap: the allocator's own limit (fraction x device total) as recorded.
  if (const auto allowed = stats.find("allowed_bytes");
      allowed != stats.end() && allowed->is_number_unsigned() && allowed->get<Bytes>() > 0)
    summary["allowed_bytes"] = allowed->get<Bytes>();
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

namespace {
nlohmann::json parse_recording_stats(std::istream& in, const std::string& stats_path) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& error) {
    throw InputError(stats_path + ": not valid JSON: " + error.what());
  }
  if (!json.is_object())
    throw InputError(stats_path + ": expected a JSON object (the recording's memory_stats)");
  return json;
}
}  // namespace

nlohmann::json read_recording_stats(const std::string& stats_path) {
  std::ifstream in(stats_path, std::ios::binary);
  if (!in)
    throw InputError(stats_path + ": cannot open the stats file");
  return parse_recording_stats(in, stats_path);
}

nlohmann::json read_recording_environment(const std::string& env_path) {
  std::ifstream in(env_path, std::ios::binary);
  if (!in)
    throw InputError(env_path + ": cannot open the environment file");
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& error) {
    throw InputError(env_path + ": not valid JSON: " + error.what());
  }
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
  if (!std::filesystem::exists(path))
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
  std::ifstream in(stats, std::ios::binary);
  if (!in)
    return std::nullopt;  // no recording stats beside the snapshot
  return parse_recording_stats(in, stats);
}

ImportResult import_snapshot(RunStore& store, const snapshot::Snapshot& snapshot,
                             const ImportOptions& options) {
  const std::size_t device_count = std::max<std::size_t>(snapshot.device_traces.size(), 1);
  const std::size_t device = options.device.value_or(busiest_device(snapshot));
  if (device >= device_count) {
    throw InputError(options.source_file + ": no device " + std::to_string(device) +
                     " in the snapshot (it has " + std::to_string(device_count) + ")");
  }
  static const std::vector<TraceEvent> kNoEvents;
  const std::vector<TraceEvent>& events =
      device < snapshot.device_traces.size() ? snapshot.device_traces[device] : kNoEvents;

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
  else if (options.recorded_stats && options.recorded_stats->is_object())
    record.environment = recorded_environment(*options.recorded_stats);
  if (const auto conf = snapshot.allocator_settings.find("PYTORCH_CUDA_ALLOC_CONF");
      conf != snapshot.allocator_settings.end() && conf->is_string())
    record.alloc_config = conf->get<std::string>();
  record.device_name = "cuda:" + std::to_string(device);
  record.environment.fragscope_version = kVersion;
  record.environment.git_revision = kGitRevision;

  ImportResult result;
  result.events = events.size();
  result.segments = final_state.segments().size();
  result.truncated = !initial.segments().empty() || !initial.blocks().empty();

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
    series_info = {{"source", "layout"},
                   {"matches_final_segments", timeline.matches_final_segments},
                   {"mismatch", timeline.mismatch},
                   {"guessed_blocks", timeline.guessed_blocks},
                   {"exact_from", timeline.exact_from}};
  } catch (const InputError& e) {
    series = derive_series(events, start);
    series_info = {{"source", "trace"}, {"layout_error", e.what()}};
  }

  const RunId run = store.begin_run(record, initial, start);
  try {
    std::vector<std::vector<StackFrame>> stacks;
    for (std::size_t id = 1; id < snapshot.frames.stack_count(); ++id) {
      std::vector<StackFrame> stack;
      for (const auto& frame :
           snapshot.frames.stack_frames(FrameStackId{static_cast<std::uint32_t>(id)}))
        stack.push_back(StackFrame{frame.filename, frame.line, frame.name});
      stacks.push_back(std::move(stack));
    }
    if (!stacks.empty())
      store.set_frame_stacks(run, stacks);
    if (options.recorded_environment)
      store.set_recorded_environment(run, *options.recorded_environment,
                                     options.recorded_environment_file);
    store.append_events(run, events, {series, {}});
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
        {"warnings", snapshot.warnings},
        {"external_annotations", snapshot.external_annotations.size()},
        {"series", series_info},
    };
    if (options.recorded_stats && options.recorded_stats->is_object())
      add_recorded_stats(*options.recorded_stats, summary);
    store.finish_run(run, result.ooms > 0 ? RunStatus::oom : RunStatus::ok, summary);
  } catch (...) {
    if (store.ingesting())
      store.cancel_run(run);
    throw;
  }
  result.run = run;
  return result;
}

}  // namespace fragscope::storage
