#include "engine/analysis/advisor.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/allocator/device.h"
#include "engine/allocator/event_sink.h"
#include "engine/allocator/run.h"
#include "engine/allocator/summary.h"
#include "engine/analysis/trace_requests.h"
#include "engine/core/error.h"
#include "engine/snapshot/profile_choice.h"
#include "engine/snapshot/timeline.h"
#include "engine/workload/workload.h"

namespace fragscope::analysis {
namespace {

bool is_release(TraceAction a) {
  return a == TraceAction::free_completed || a == TraceAction::segment_free ||
         a == TraceAction::segment_unmap;
}

std::string fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

std::string pad(std::string text, std::size_t width) {
  if (text.size() < width)
    text.append(width - text.size(), ' ');
  return text;
}

// "+3", "0", "-2". (Built with append: GCC 12 -O3 warns falsely on "+" + std::string.)
std::string signed_count(std::int64_t value) {
  std::string text = value > 0 ? std::string("+") : std::string();
  text.append(std::to_string(value));
  return text;
}

std::string outcome_of(const WhatIfRow& row) {
  if (!row.error.empty())
    return "error";
  if (row.ok)
    return "yes";
  std::string text("OOM after ");
  text.append(std::to_string(row.allocs_before_oom));
  return text;
}

}  // namespace

std::vector<StepStart> align_steps(const RequestStream& requests,
                                   std::span<const TraceEvent> events) {
  std::vector<StepStart> steps;
  std::size_t cursor = 0;
  for (const Request& r : requests.requests) {
    if (cursor > events.size())
      break;
    switch (r.op) {
      case RequestOp::step_begin:
        steps.push_back(StepStart{r.size, cursor});
        break;
      case RequestOp::malloc: {
        if (r.size == 0)
          break;
        while (cursor < events.size() && events[cursor].action != TraceAction::alloc &&
               events[cursor].action != TraceAction::oom)
          ++cursor;
        if (cursor < events.size() && events[cursor].action == TraceAction::oom)
          return steps;  // the run stopped here
        ++cursor;
        break;
      }
      case RequestOp::free: {
        if (cursor < events.size() && events[cursor].action == TraceAction::free_requested) {
          const std::uint64_t address = events[cursor++].addr;
          if (cursor < events.size() && events[cursor].action == TraceAction::free_completed &&
              events[cursor].addr == address)
            ++cursor;
        }
        break;
      }
      case RequestOp::empty_cache:
        while (cursor < events.size() && is_release(events[cursor].action))
          ++cursor;
        break;
      case RequestOp::record_stream:
      case RequestOp::events_ready:
      case RequestOp::reset_peak:
      case RequestOp::pool_create:
      case RequestOp::pool_begin:
      case RequestOp::pool_end:
      case RequestOp::pool_release:
      case RequestOp::pool_empty_cache:
        break;
    }
  }
  return steps;
}

std::string mid_run_what_if_note(const std::vector<alloc::SeedSegment>& initial_segments) {
  if (initial_segments.empty())
    return {};
  std::size_t live = 0;
  for (const alloc::SeedSegment& segment : initial_segments)
    for (const alloc::SeedBlock& block : segment.blocks)
      live += block.state == BlockState::inactive ? 0 : 1;
  return "the trace starts mid-run: every row starts from the " + std::to_string(live) +
         " live block(s) in " + std::to_string(initial_segments.size()) +
         " segment(s) rebuilt at its first entry, laid out under the recorded config (the "
         "history before the trace ran under it); a row changes what happens from there on";
}

std::vector<OomPostMortem> simulate_post_mortems(const RequestStream& requests,
                                                 const alloc::AllocatorConfig& config,
                                                 const WhatIfOptions& options,
                                                 RunMetrics* metrics) {
  auto gpu = candidate_device(options);
  alloc::TraceRecorder recorder;
  alloc::RunOptions run_options;
  run_options.allowed_memory = options.capacity;
  run_options.cancel = options.cancel;
  run_options.progress = progress_as(options.progress, kAdviseStages[0].name);
  alloc::run_requests(requests, config, gpu.device(), &recorder, run_options);
  const snapshot::SegmentState empty(snapshot::LayoutRules::from_config(config));
  if (metrics) {
    const auto steps = align_steps(requests, recorder.events());
    *metrics =
        measure_trace(recorder.events(), empty, {.keep_samples = false, .buckets = 0}, steps);
  }
  // The model's oom entry holds the device's free memory like PyTorch's; the limit caps it.
  return trace_post_mortems(recorder.events(), empty, config, options.capacity);
}

std::vector<Mitigation> trace_candidates(const TraceRequests& trace,
                                         const alloc::AllocatorConfig& config,
                                         const std::vector<TorchVersion>& releases,
                                         TorchVersion recorded) {
  // The stream as it was extracted: packed (packed_requests_from_trace) or not.
  std::vector<Mitigation> candidates = trace.packed_requests.empty()
                                           ? standard_mitigations(trace.requests, config)
                                           : standard_mitigations(trace.packed_requests, config);
  for (Mitigation& release : release_mitigations(config, releases, recorded))
    candidates.push_back(std::move(release));
  return candidates;
}

WhatIfOptions trace_what_if_options(const TraceRequests& trace, const alloc::ProfileChoice& profile,
                                    const AdviseOptions& options) {
  WhatIfOptions what_if;
  what_if.capacity = options.capacity;
  what_if.threads = options.threads;
  what_if.memory_budget = options.memory_budget;
  what_if.cancel = options.cancel;
  what_if.progress = options.progress;
  what_if.recorded_segments = trace.recorded_segments;
  what_if.initial_segments = trace.initial_segments;
  what_if.profile = profile.profile();
  return what_if;
}

Advice advise_snapshot(const snapshot::Snapshot& snap, const std::string& input,
                       const AdviseOptions& options) {
  const std::size_t device = options.device.value_or(snap.busiest_device());
  if (device >= std::max<std::size_t>(snap.device_traces.size(), 1))
    throw InputError(input + ": no device " + std::to_string(device) + " in the snapshot (it has " +
                     std::to_string(snap.device_traces.size()) + ")");
  // The trace in either form: a spooled one (read_snapshot_spooled) is read forward, a block at a
  // time, by every pass below.
  const snapshot::TraceBlocks events = snap.trace_blocks(device);

  options.progress.report(kAdviseStages[0].name, 0, 1);
  Advice advice;
  advice.input = input;
  advice.kind = "snapshot";
  const alloc::AllocatorConfig config = config_from_settings(snap.allocator_settings);
  advice.alloc_conf = config.raw;
  advice.capacity = options.capacity;

  const snapshot::SegmentState initial = snapshot::initial_state(snap, static_cast<int>(device));
  advice.baseline = measure_trace(events, initial, {.keep_samples = false, .buckets = 0});
  const PrivateSegments pools = private_segments(snap, static_cast<int>(device));
  advice.post_mortems = trace_post_mortems(events, initial, config, options.capacity, &pools);

  const TraceRequests trace = packed_requests_from_trace(snap, device, initial);
  advice.recorded_oom_requests = trace.oom_requests;
  advice.profile = snapshot::profile_choice(snap.torch_version);
  if (std::string note = mid_run_what_if_note(trace.initial_segments); !note.empty())
    advice.notes.push_back(std::move(note));
  options.cancel.throw_if_cancelled();
  options.progress.report(kAdviseStages[0].name, 1, 1);
  const WhatIfOptions what_if = trace_what_if_options(trace, advice.profile, options);
  advice.device_memory = what_if.device_memory;
  const std::vector<Mitigation> candidates =
      trace_candidates(trace, config, options.what_if_releases, advice.profile.version);
  advice.table = run_what_if(trace.packed_requests, candidates, what_if);
  return advice;
}

namespace {
// The point's configuration with `training` set over its training section, parsed (and so
// validated) as the designer would run it; nullopt with the model's reason when it refuses it.
std::optional<ProgramChange> program_change(const workload::ExperimentPoint& point,
                                            const std::string& name, const nlohmann::json& training,
                                            std::string* refused) {
  ProgramChange change;
  change.name = name;
  change.document = point.config;
  for (const auto& [key, value] : training.items())
    change.document["training"][key] = value;
  change.document["name"] = point.name + " · " + name;
  try {
    workload::Experiment parsed = workload::parse_experiment(change.document, name);
    if (parsed.points.size() != 1)
      throw InputError(name + ": the configuration is not one point");
    change.point = std::move(parsed.points.front());
  } catch (const InputError& error) {
    if (refused)
      *refused = error.what();
    return std::nullopt;
  }
  return change;
}
}  // namespace

std::vector<ProgramChange> program_changes(const workload::ExperimentPoint& point,
                                           std::vector<std::string>* refused) {
  std::vector<ProgramChange> changes;
  const workload::Training& training = point.workload.training;
  const auto add = [&](const std::string& name, const nlohmann::json& set, bool note) {
    std::string reason;
    std::optional<ProgramChange> change = program_change(point, name, set, &reason);
    if (change)
      changes.push_back(std::move(*change));
    else if (note && refused)
      refused->push_back("no \"" + name + "\" row: " + reason);
    return change.has_value();
  };
  if (training.batch_size >= 2 && training.batch_size % 2 == 0) {
    const int batch = training.batch_size / 2;
    const int accumulation = training.grad_accum * 2;
    add("micro-batch " + std::to_string(batch) + " x accumulation " + std::to_string(accumulation),
        {{"batch_size", batch}, {"grad_accum", accumulation}}, true);
  }
  if (training.checkpointing == workload::Checkpointing::none)
    add("activation checkpointing", {{"checkpointing", "blocks"}, {"checkpoint_every", 1}}, true);
  // torch.compile(model) where Inductor's recorded plans cover the model (the recorder's GPT
  // and Llama); otherwise the per-part compile of the LayerNorms and MLPs (GPT only).
  if (!training.compile.any() &&
      !add("torch.compile (whole model)", {{"compile", {{"scope", "model"}}}}, false))
    add("torch.compile (LayerNorms, MLPs)", {{"compile", true}}, true);
  return changes;
}

Advice advise_experiment(const workload::ExperimentPoint& point, const std::string& input,
                         const AdviseOptions& options) {
  Advice advice;
  advice.input = input;
  advice.kind = "experiment";
  advice.point = point.name;
  advice.alloc_conf = point.alloc_conf.raw;
  advice.profile.evidence = "a simulated experiment follows the model's own release";
  const alloc::AllocatorConfig& config = point.alloc_conf;
  if (options.capacity)
    advice.capacity = options.capacity;
  else if (point.device.allowed != 0)
    advice.capacity = point.device.allowed;

  WhatIfOptions what_if;
  what_if.capacity = advice.capacity;
  what_if.device_memory = point.device.capacity;
  what_if.device_total = point.device.total_memory;
  what_if.threads = options.threads;
  what_if.memory_budget = options.memory_budget;
  what_if.cancel = options.cancel;
  what_if.progress = options.progress;
  advice.device_memory = what_if.device_memory;

  const RequestStream requests = workload::generate(point.workload);
  advice.post_mortems = simulate_post_mortems(requests, config, what_if, &advice.baseline);

  std::vector<Mitigation> candidates = standard_mitigations(requests, config);
  const double base_time = workload::estimated_step_time_ratio(point.workload);
  std::vector<std::string> refused;
  for (ProgramChange& change : program_changes(point, &refused)) {
    Mitigation m;
    m.name = std::move(change.name);
    m.config = change.point.alloc_conf;
    m.requests = std::make_shared<const RequestStream>(workload::generate(change.point.workload));
    m.step_time_ratio = base_time > 0
                            ? workload::estimated_step_time_ratio(change.point.workload) / base_time
                            : 1.0;
    candidates.push_back(std::move(m));
  }
  for (std::string& reason : refused)
    advice.notes.push_back(std::move(reason));
  for (Mitigation& release :
       release_mitigations(config, options.what_if_releases, advice.profile.version))
    candidates.push_back(std::move(release));
  advice.table = run_what_if(requests, candidates, what_if);
  return advice;
}

nlohmann::json to_json(const Advice& advice) {
  nlohmann::json post_mortems = nlohmann::json::array();
  for (const auto& pm : advice.post_mortems)
    post_mortems.push_back(to_json(pm));
  nlohmann::json j = {
      {"input", advice.input},
      {"kind", advice.kind},
      {"alloc_conf", advice.alloc_conf},
      {"allocator_rules",
       {{"torch_version", advice.profile.version.to_string()},
        {"source", std::string(alloc::to_string(advice.profile.source))},
        {"describe", advice.profile.describe()}}},
      {"notes", advice.notes},
      {"capacity", advice.capacity ? nlohmann::json(*advice.capacity) : nlohmann::json(nullptr)},
      {"device_memory", advice.device_memory},
      {"baseline", to_json(advice.baseline)},
      {"post_mortems", std::move(post_mortems)},
      {"recorded_oom_requests", advice.recorded_oom_requests},
      {"what_if", to_json(advice.table)}};
  if (!advice.point.empty())
    j["point"] = advice.point;
  return j;
}

std::vector<const WhatIfRow*> rows_filling_the_limit(const Advice& advice) {
  const Bytes limit = advice.capacity.value_or(advice.device_memory);
  // Within one large-pool rounding step (20 MiB) of the limit, after freeing segments: the next
  // cudaMalloc failed there.
  constexpr Bytes kSlack = 20ull << 20;
  std::vector<const WhatIfRow*> out;
  for (const auto& row : advice.table.rows) {
    if (row.ok && limit > 0 && row.segment_frees > 0 && row.peak_reserved + kSlack >= limit)
      out.push_back(&row);
  }
  return out;
}

std::string to_text(const Advice& a) {
  using alloc::format_size;
  std::ostringstream out;
  out << "advise: " << a.input << " (" << a.kind;
  if (!a.point.empty())
    out << " point \"" << a.point << "\"";
  out << ", PYTORCH_CUDA_ALLOC_CONF=\"" << a.alloc_conf << "\", "
      << (a.capacity ? format_size(*a.capacity) + " allowed"
                     : "device " + format_size(a.device_memory))
      << ")\n";
  out << "allocator rules: " << a.profile.describe() << "\n";
  for (const std::string& note : a.notes)
    out << "note: " << note << "\n";
  const RunMetrics& m = a.baseline;
  out << (a.kind == "snapshot" ? "recording" : "baseline") << ": peak reserved "
      << format_size(m.peak.reserved) << ", peak allocated " << format_size(m.peak.allocated)
      << ", peak inactive split " << format_size(m.peak.inactive_split) << ", GMLake fragmentation "
      << fixed(m.gmlake_fragmentation(), 3) << ", " << m.device_calls.segment_allocs
      << " cudaMalloc / " << m.device_calls.segment_frees << " cudaFree, " << m.ooms << " OOM\n";
  for (const auto& pm : a.post_mortems) {
    out << "OOM at event " << pm.event_index << ": " << to_string(pm.cause) << "\n  "
        << pm.pytorch_figures() << "\n";
    for (const auto& sentence : pm.evidence)
      out << "  - " << sentence << "\n";
  }
  if (const WhatIfRow* base = a.table.baseline(); base && !a.recorded_oom_requests.empty()) {
    out << "replay under the recorded config: "
        << (base->first_oom_request ? "OOM at request " + std::to_string(*base->first_oom_request)
                                    : std::string("no OOM"))
        << " (the recording failed at request " << a.recorded_oom_requests.front() << ")\n";
  }
  out << "ideal lower bound (perfect packing): " << format_size(a.table.ideal_peak) << "\n";
  out << pad("rank", 6) << pad("candidate", 36) << pad("ok", 18) << pad("peak reserved", 16)
      << pad("vs ideal", 10) << pad("device calls", 14) << pad("extra", 8) << "step time\n";
  for (const auto& row : a.table.rows) {
    out << pad(std::to_string(row.rank), 6) << pad(row.name, 36) << pad(outcome_of(row), 18)
        << pad(format_size(row.peak_reserved), 16)
        << pad(fixed(row.distance_from_ideal(), 2) + "x", 10)
        << pad(std::to_string(row.device_calls()), 14)
        << pad(signed_count(row.extra_device_calls), 8) << fixed(row.step_time_ratio, 2) << "\n";
  }
  if (const auto full = rows_filling_the_limit(a); !full.empty()) {
    std::string names;
    for (const WhatIfRow* row : full)
      names += (names.empty() ? "" : ", ") + row->name;
    out << "note: " << names << " reserved all "
        << format_size(a.capacity.value_or(a.device_memory))
        << (a.capacity ? " allowed" : " the device has")
        << ": the allocator cached freed blocks it could not reuse and called cudaMalloc until it "
           "failed, then freed cached blocks and went on, as PyTorch does (under "
           "max_split_size_mb a cached block that large serves only requests less than 20 MiB "
           "smaller). That peak is the limit, not what the program needs.\n";
  }
  if (const WhatIfRow* best = a.table.best())
    out << "best: " << best->name << " (PYTORCH_CUDA_ALLOC_CONF=\"" << best->alloc_conf << "\")\n";
  return out.str();
}

}  // namespace fragscope::analysis
