#include "usecases/post_mortem.h"

#include <algorithm>

#include "engine/allocator/device.h"
#include "engine/allocator/event_sink.h"
#include "engine/allocator/run.h"
#include "engine/analysis/trace_requests.h"
#include "engine/core/devices.h"
#include "engine/core/error.h"
#include "engine/workload/experiment.h"
#include "storage/db/stats_at.h"

namespace fragscope::usecases {

namespace {
struct RunRequests {
  storage::RunRecord record;
  alloc::AllocatorConfig config;
  analysis::TraceRequests requests;
  std::vector<TraceEvent> events;
  snapshot::SegmentState initial;
  alloc::ProfileChoice profile;
};

RunRequests load_requests(storage::RunStore& store, storage::RunId run) {
  // The recorded config and the state at the first event, laid out with that config's rules (one
  // loader below storage, shared with the summary's memory_stats_at).
  storage::RunTrace trace = storage::load_run_trace(store, run);
  RunRequests loaded;
  loaded.record = std::move(trace.record);
  loaded.config = std::move(trace.config);
  loaded.events = std::move(trace.events);
  loaded.initial = std::move(trace.initial);
  loaded.profile = trace.profile;
  loaded.requests = analysis::requests_from_trace(loaded.events, loaded.initial);
  return loaded;
}

// What the loaded run holds (its events and the requests made from them): the input whose
// analysis::what_if_memory_budget bounds the what-if runs in flight.
std::uint64_t loaded_bytes(const RunRequests& loaded) {
  return loaded.events.size() * sizeof(TraceEvent) +
         loaded.requests.requests.requests.size() * sizeof(Request);
}

// The seeded state as the store keeps a run's start (segments, live blocks by request size) and
// the series before the first event, so a stored replay of a mid-run trace starts where it did.
std::pair<storage::SegmentMap, storage::SeriesPoint> start_of(
    const std::vector<alloc::SeedSegment>& seeds) {
  storage::SegmentMap state;
  storage::SeriesPoint point;
  for (const alloc::SeedSegment& segment : seeds) {
    state.add_segment({segment.address, segment.size, segment.stream, segment.expandable});
    point.reserved += static_cast<std::int64_t>(segment.size);
    for (const alloc::SeedBlock& block : segment.blocks) {
      if (block.state == BlockState::inactive)
        continue;
      const bool allocated = block.state == BlockState::active_allocated;
      state.add_block({block.address, block.requested_size, segment.stream, block.state, {}});
      point.active += static_cast<std::int64_t>(block.size);
      point.requested += static_cast<std::int64_t>(block.requested_size);
      if (allocated)
        point.allocated += static_cast<std::int64_t>(block.size);
    }
  }
  return {std::move(state), point};
}

// The stored run's what-if, as `advise` runs a snapshot's: the standard allocator settings, and,
// for a run recorded under an older release, the same run under the newest release's allocator
// ("would upgrading PyTorch have avoided this?").
analysis::AdviseOptions advise_options(std::optional<Bytes> limit, const CancelToken& cancel) {
  analysis::AdviseOptions options;
  options.capacity = limit;
  options.cancel = cancel;
  options.what_if_releases = {kLatestTorch};
  return options;
}

std::vector<analysis::Mitigation> candidates_of(const RunRequests& loaded,
                                                const analysis::AdviseOptions& options) {
  return analysis::trace_candidates(loaded.requests, loaded.config, options.what_if_releases,
                                    loaded.profile.version);
}

// The experiment point a simulated run was made from (its resolved configuration is stored in
// the summary), or nullopt for any other run.
std::optional<workload::ExperimentPoint> experiment_point_of(const storage::RunRecord& record) {
  if (record.source != storage::RunSource::simulated)
    return std::nullopt;
  const auto config = record.summary.find("config");
  if (config == record.summary.end() || !config->is_object())
    return std::nullopt;
  workload::Experiment experiment =
      workload::parse_experiment(*config, "run " + std::to_string(record.id.value));
  if (experiment.points.size() != 1)
    return std::nullopt;
  return std::move(experiment.points.front());
}

}  // namespace

StoredPostMortem post_mortem_of(storage::RunStore& store, storage::RunId run,
                                const PostMortemOptions& post_mortem_options,
                                const WorkControl& control) {
  StoredPostMortem data;
  const auto step = [&control](std::string_view stage, std::uint64_t done) {
    control.progress.report(stage, done * kNestedProgressUnits,
                            kPostMortemSteps * kNestedProgressUnits);
  };
  step("diagnosing", 0);
  RunRequests loaded = load_requests(store, run);
  data.record = loaded.record;
  data.limit = storage::run_memory_limit(loaded.record);
  data.profile = loaded.profile;
  if (std::string note = analysis::mid_run_what_if_note(loaded.requests.initial_segments);
      !note.empty())
    data.notes.push_back(std::move(note));
  // Free memory in CUDA graph / MemPool segments is stranded for a default-pool request.
  const auto pools = analysis::private_segments_from_json(
      loaded.record.summary.value("segment_pools", nlohmann::json()));
  data.post_mortems = analysis::trace_post_mortems(loaded.events, loaded.initial, loaded.config,
                                                   data.limit, &pools);
  control.check();
  step("measuring", 1);
  try {
    analysis::MetricsRecorder::Options options;
    options.keep_samples = false;
    data.metrics = analysis::measure_trace(loaded.events, loaded.initial, options);
  } catch (const std::exception& error) {
    data.metrics_error = error.what();
  }
  if (!data.post_mortems.empty() && !store.labels(run).empty()) {
    const std::uint64_t at = data.post_mortems.front().event_index;
    const auto buckets = store.category_timeline(run, at, at + 1, 1);
    if (!buckets.empty())
      data.categories_at_oom = buckets.front().bytes;
  }
  control.check();
  step("what-if", 2);
  if (data.post_mortems.empty() && post_mortem_options.what_if_for_oom_only)
    return data;
  // Each row's run in flight holds its own table of the trace's tensors: on a many-core machine
  // unbounded runs at once held more than the trace itself.
  const std::size_t memory_budget = analysis::what_if_memory_budget(loaded_bytes(loaded));
  try {
    // A simulated run of an experiment: the advisor also runs the workload changes.
    std::optional<workload::ExperimentPoint> point;
    try {
      point = experiment_point_of(loaded.record);
    } catch (const std::exception&) {
      point.reset();  // an older or foreign configuration: the allocator settings alone
    }
    if (point) {
      analysis::AdviseOptions options;
      options.capacity = data.limit;
      options.threads = post_mortem_options.threads;
      options.memory_budget = memory_budget;
      options.cancel = control.cancel;
      options.progress = nested_progress(control.progress, "what-if", 2, kPostMortemSteps,
                                         kPostMortemSteps, analysis::kAdviseStages);
      const analysis::Advice advice =
          analysis::advise_experiment(*point, loaded.record.name, options);
      data.what_if = advice.table;
      // The documents the program-change rows ran, for "Open in Designer".
      for (analysis::ProgramChange& change : analysis::program_changes(*point))
        data.workload_changes[change.name] = std::move(change.document);
    } else {
      analysis::AdviseOptions options = advise_options(data.limit, control.cancel);
      options.threads = post_mortem_options.threads;
      options.memory_budget = memory_budget;
      options.progress = nested_progress(control.progress, "what-if", 2, kPostMortemSteps,
                                         kPostMortemSteps, analysis::kWhatIfStages);
      data.what_if = analysis::run_what_if(
          loaded.requests.requests, candidates_of(loaded, options),
          analysis::trace_what_if_options(loaded.requests, loaded.profile, options));
    }
  } catch (const Cancelled&) {
    throw;
  } catch (const std::exception& error) {
    data.what_if_error = error.what();
  }
  step("what-if", kPostMortemSteps);
  return data;
}

analysis::Advice advice_of(const StoredPostMortem& post_mortem) {
  analysis::Advice advice;
  advice.input =
      "run " + std::to_string(post_mortem.record.id.value) + " (" + post_mortem.record.name + ")";
  advice.kind = "stored run";
  advice.alloc_conf = post_mortem.record.alloc_conf;
  advice.profile = post_mortem.profile;
  advice.notes = post_mortem.notes;
  advice.capacity = post_mortem.limit;
  advice.device_memory = std::max(kH200TotalMemory, post_mortem.limit.value_or(0));
  if (post_mortem.metrics)
    advice.baseline = *post_mortem.metrics;
  advice.post_mortems = post_mortem.post_mortems;
  if (post_mortem.what_if)
    advice.table = *post_mortem.what_if;
  return advice;
}

storage::RunId run_mitigation(storage::RunStore& store, storage::RunId run,
                              const std::string& mitigation, const WorkControl& control) {
  RunRequests loaded = load_requests(store, run);
  const std::optional<Bytes> limit = storage::run_memory_limit(loaded.record);
  analysis::AdviseOptions options = advise_options(limit, control.cancel);
  options.progress = control.progress;  // the row's run: ("requests", done, requests)
  const auto candidates = candidates_of(loaded, options);
  const auto chosen =
      std::find_if(candidates.begin(), candidates.end(),
                   [&](const analysis::Mitigation& m) { return m.name == mitigation; });
  if (chosen == candidates.end()) {
    std::string names;
    for (const analysis::Mitigation& candidate : candidates)
      names += (names.empty() ? "\"" : ", \"") + candidate.name + "\"";
    throw InputError("run " + std::to_string(run.value) + ": no mitigation named \"" + mitigation +
                     "\" (this run has: " + names + ")");
  }
  if (!chosen->unavailable.empty())
    throw InputError("run " + std::to_string(run.value) + ": " + chosen->unavailable);
  control.check();
  // The what-if row's own run, so the stored replay's peak is the row's.
  alloc::TraceRecorder recorder;
  const RequestStream& requests = chosen->requests ? *chosen->requests : loaded.requests.requests;
  const alloc::RunResult result = analysis::run_candidate(
      requests, *chosen, analysis::trace_what_if_options(loaded.requests, loaded.profile, options),
      &recorder);
  control.check();

  storage::RunRecord record;
  record.name = loaded.record.name + " · " + chosen->name;
  record.source = storage::RunSource::simulated;
  record.alloc_conf = chosen->config.raw;
  record.capacity = limit.value_or(0);
  record.device_name = loaded.record.device_name;
  record.environment = storage::Environment::current();
  record.environment.gpu_name = loaded.record.environment.gpu_name;
  const auto [start_state, start_point] = start_of(loaded.requests.initial_segments);
  const storage::RunId created = store.begin_run(record, start_state, start_point);
  store.append_events(created, recorder.events());
  nlohmann::json summary;
  summary["mitigation_of"] = run.value;
  summary["mitigation"] = chosen->name;
  alloc::ProfileChoice profile = loaded.profile;
  if (chosen->profile) {
    profile = alloc::ProfileChoice{chosen->profile->version, alloc::ProfileSource::user,
                                   chosen->profile->version.to_string(),
                                   "the what-if row \"" + chosen->name + "\""};
  }
  summary["torch_version"] = storage::to_json(profile);
  store.finish_run(created, result.ooms.empty() ? storage::RunStatus::ok : storage::RunStatus::oom,
                   summary);
  return created;
}

}  // namespace fragscope::usecases
