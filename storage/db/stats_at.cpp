#include "storage/db/stats_at.h"

#include <algorithm>
#include <map>

#include "engine/allocator/config.h"
#include "engine/allocator/sizes.h"
#include "engine/core/error.h"
#include "engine/replay/replay.h"
#include "storage/db/stats_keyframes.h"

#include <nlohmann/json.hpp>

namespace fragscope::storage {

namespace {

std::string run_name(RunId run) {
  return "run " + std::to_string(run.value);
}

}  // namespace

std::uint64_t end_of_allocator_call(std::span<const TraceEvent> events, std::uint64_t cut) {
  if (cut == 0 || cut >= events.size())
    return std::min<std::uint64_t>(cut, events.size());
  const TraceEvent& last = events[cut - 1];
  if (last.action == TraceAction::free_requested) {
    const TraceEvent& next = events[cut];
    return next.action == TraceAction::free_completed && next.addr == last.addr ? cut + 1 : cut;
  }
  if (!is_segment_action(last.action))
    return cut;
  std::uint64_t end = cut;
  while (end < events.size() && is_segment_action(events[end].action))
    ++end;
  // Segment events the trace ends on, or that a free follows (torch.cuda.empty_cache()), close
  // no malloc: the cut stays.
  if (end < events.size() &&
      (events[end].action == TraceAction::alloc || events[end].action == TraceAction::oom))
    return end + 1;
  return cut;
}

RunAllocatorConfig allocator_config_of(const RunRecord& record) {
  RunAllocatorConfig out;
  const auto settings = record.summary.find("allocator_settings");
  out.recorded = settings != record.summary.end() && settings->is_object();
  try {
    out.config = out.recorded ? replay::config_from_settings(*settings, &out.note)
                              : alloc::AllocatorConfig::parse(record.alloc_conf);
  } catch (const alloc::AllocatorConfigError& error) {
    throw InputError(run_name(record.id) + ": its allocator config \"" + record.alloc_conf +
                     "\" does not parse: " + error.what());
  } catch (const InputError& error) {
    throw InputError(run_name(record.id) + ": " + error.what());
  }
  return out;
}

std::optional<Bytes> run_memory_limit(const RunRecord& record) {
  if (record.capacity > 0)
    return record.capacity;
  const auto allowed = record.summary.find("allowed_bytes");
  if (allowed != record.summary.end() && allowed->is_number_unsigned())
    return allowed->get<Bytes>();
  return std::nullopt;
}

alloc::ProfileChoice profile_choice_of(const RunRecord& record) {
  alloc::ProfileChoice choice;
  const auto stored = record.summary.find("torch_version");
  const std::optional<TorchVersion> version =
      stored != record.summary.end() && stored->is_object() && stored->contains("profile") &&
              (*stored)["profile"].is_string()
          ? TorchVersion::parse((*stored)["profile"].get<std::string>())
          : std::nullopt;
  if (!version) {
    choice.evidence = record.source == RunSource::simulated
                          ? "a simulated run follows the model's own release"
                          : "the run records no snapshot format to tell the release by";
    return choice;
  }
  choice.version = std::clamp(*version, kOldestTorch, kLatestTorch);
  choice.range = stored->value("range", version->to_string());
  choice.evidence = stored->value("evidence", std::string());
  const std::string source = stored->value("source", std::string());
  if (stored->value("from_override", false) || source == "user") {
    choice.source = alloc::ProfileSource::user;
    constexpr std::string_view kPrefix = "--torch-version; ";
    if (choice.evidence.starts_with(kPrefix))
      choice.evidence.erase(0, kPrefix.size());
  } else if (source == "assumed") {
    choice.source = alloc::ProfileSource::assumed;
  } else {
    choice.source = alloc::ProfileSource::snapshot_format;
  }
  return choice;
}

nlohmann::json to_json(const alloc::ProfileChoice& choice) {
  const char* source = choice.source == alloc::ProfileSource::user              ? "user"
                       : choice.source == alloc::ProfileSource::snapshot_format ? "snapshot_format"
                                                                                : "assumed";
  return {{"profile", choice.version.to_string()},
          {"range", choice.range.empty() ? choice.version.to_string() : choice.range},
          {"evidence", choice.evidence},
          {"from_override", choice.source == alloc::ProfileSource::user},
          {"source", source},
          {"describe", choice.describe()}};
}

RunTrace run_trace_of(RunRecord record) {
  RunTrace out;
  out.record = std::move(record);
  out.profile = profile_choice_of(out.record);
  RunAllocatorConfig config = allocator_config_of(out.record);
  out.config = std::move(config.config);
  out.recorded_config = config.recorded;
  if (!config.note.empty())
    out.notes.push_back(std::move(config.note));
  out.initial = snapshot::SegmentState(snapshot::LayoutRules::from_config(out.config));
  return out;
}

RunTrace load_run_trace(RunStore& store, RunId run, std::optional<std::uint64_t> event_count) {
  RunRecord record = store.run(run);
  std::vector<TraceEvent> events =
      store.events(run, 0, std::min(event_count.value_or(record.event_count), record.event_count));
  RunTrace out = run_trace_of(std::move(record));
  out.events = std::move(events);
  // The stored start state has request sizes; its blocks get the block size the config's split
  // rule gives them inside the gap up to the next live block.
  const snapshot::LayoutRules rules = out.initial.rules();
  const SegmentMap start = store.segment_state(run, 0).state;
  try {
    for (const auto& [base, range] : start.segments()) {
      snapshot::SegmentState::SegmentInfo info;
      info.size = range.size;
      info.stream = range.stream;
      info.pool = is_small_pool_range(range, out.config.large_segment_size)
                      ? snapshot::PoolKind::small
                      : snapshot::PoolKind::large;
      info.expandable = range.expandable;
      info.predates_trace = true;
      out.initial.add_segment(base, info);
    }
    const auto& blocks = start.blocks();
    for (auto it = blocks.begin(); it != blocks.end(); ++it) {
      const auto segment = out.initial.segment_map().upper_bound(it->first);
      if (segment == out.initial.segment_map().begin())
        throw InputError("a block live at the start lies outside every segment");
      const auto& [segment_base, segment_info] = *std::prev(segment);
      std::uint64_t end = segment_base + segment_info.size;
      if (auto next = std::next(it); next != blocks.end() && next->first < end)
        end = next->first;
      snapshot::SegmentState::BlockInfo block;
      block.requested = it->second.size;
      block.state = it->second.state;
      block.frames = it->second.frames;
      block.predates_trace = true;
      const Bytes rounded = rules.round_size(block.requested);
      const Bytes gap = end > it->first ? end - it->first : 0;
      if (gap < rounded)
        throw InputError("a block live at the start does not fit before the next block");
      block.size = rules.should_split(gap, rounded) ? rounded : gap;
      out.initial.place_block(it->first, block);
    }
  } catch (const InputError& error) {
    throw InputError(run_name(run) + ": the state at its first event: " + error.what());
  }
  return out;
}

std::vector<replay::SegmentPool> final_segments_of(const SegmentMap& at_end,
                                                   const RunRecord& record) {
  std::map<std::uint64_t, MempoolId> private_pools;
  const auto pools = record.summary.find("segment_pools");
  if (pools != record.summary.end() && pools->is_array()) {
    for (const nlohmann::json& entry : *pools) {
      if (entry.is_array() && entry.size() == 4)
        private_pools[entry[0].get<std::uint64_t>()] =
            MempoolId{entry[2].get<std::uint64_t>(), entry[3].get<std::uint64_t>()};
    }
  }
  std::vector<replay::SegmentPool> out;
  for (const auto& [base, range] : at_end.segments()) {
    if (range.expandable)
      continue;
    const auto pool = private_pools.find(base);
    out.push_back({base, range.size, pool == private_pools.end() ? MempoolId{} : pool->second});
  }
  return out;
}

StatsReplaySetup stats_replay_setup(RunStore& store, const RunTrace& trace) {
  const RunRecord& record = trace.record;
  return stats_replay_setup(
      trace,
      trace.recorded_config
          ? final_segments_of(store.segment_state(record.id, record.event_count).state, record)
          : std::vector<replay::SegmentPool>{});
}

// KeyframeChainInAdvance compares what this sets (same_inputs, stats_keyframes.cpp): a field
// set here belongs there too.
StatsReplaySetup stats_replay_setup(const RunTrace& trace,
                                    std::vector<replay::SegmentPool> final_segments) {
  const RunRecord& record = trace.record;
  StatsReplaySetup setup;
  setup.recorded = trace.recorded_config;
  // A recording is replayed under its own settings (and compared with itself); any other run
  // under the config it was simulated with.
  if (setup.recorded)
    setup.settings = record.summary["allocator_settings"];
  else
    setup.options.config = trace.config;
  setup.options.torch_version = trace.profile.version;
  setup.options.allowed_memory = run_memory_limit(record);
  if (record.environment.gpu_memory > 0)
    setup.options.total_memory = record.environment.gpu_memory;
  if (setup.recorded)
    setup.options.final_segments = std::move(final_segments);
  return setup;
}

MemoryStatsAt memory_stats_at(RunStore& store, RunId run, std::uint64_t event_index,
                              StatsStart start, const CancelToken& cancel) {
  const RunRecord record = store.run(run);
  MemoryStatsAt out;
  out.event_count = record.event_count;
  const std::uint64_t asked = std::min(event_index, record.event_count);
  // The config, the release and the state at the first event: what every analysis starts from.
  RunTrace trace = load_run_trace(store, run, 0);
  std::optional<StatsKeyframe> keyframe;
  if (start == StatsStart::nearest_keyframe)
    keyframe =
        stats_keyframe_before(store, run, asked, snapshot::LayoutRules::from_config(trace.config));
  out.replayed_from = keyframe ? keyframe->event_index : 0;
  std::vector<TraceEvent>& events = trace.events;
  events =
      store.events(run, out.replayed_from, std::min(record.event_count, asked + kCallLookahead));
  out.event_index = out.replayed_from + end_of_allocator_call(events, asked - out.replayed_from);
  events.resize(out.event_index - out.replayed_from);
  cancel.throw_if_cancelled();  // reading a long run's events takes a while too
  out.profile = trace.profile;
  try {
    out.config = alloc::to_alloc_conf_string(trace.config);
  } catch (const alloc::AllocatorConfigError&) {
    out.config = record.alloc_conf;  // a recorded value no string expresses: show the raw one
  }
  StatsReplaySetup setup = stats_replay_setup(store, trace);
  setup.options.cancel = cancel;
  const std::optional<Bytes> limit = setup.options.allowed_memory;
  const snapshot::SegmentState* initial = nullptr;
  const bool mid_run = !trace.initial.segment_map().empty();
  if (keyframe) {
    setup.options.initial_stats = keyframe->stats;
    initial = &keyframe->state;
  } else if (mid_run) {
    initial = &trace.initial;
  }

  // Even before its OOM, a capped run's cache releases depend on the cap.
  const bool has_oom = record.status == RunStatus::oom;
  const replay::ReplayResult result =
      replay::replay_trace(events, setup.settings, setup.options, initial);
  out.stats = result.run.stats;
  for (const std::string& warning : result.warnings)
    out.caveats.push_back(warning);

  if (mid_run)
    out.caveats.push_back("the trace starts mid-run: " + replay::describe(result.seeded) +
                          "; the peaks and totals count from the trace's first event");
  if (has_oom && !limit)
    out.caveats.push_back(
        "the run ran out of memory under a device limit that was not recorded (import it with its "
        "NAME.stats.json), so the model cannot release and fail where the recording did");
  out.diverged = result.compared && result.first_divergence;
  if (out.diverged)
    out.caveats.push_back("the model diverged from the recording: " +
                          replay::describe(*result.first_divergence));
  return out;
}

}  // namespace fragscope::storage
