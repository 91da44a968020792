#pragma once
// Comparison of two or more runs: one aligned table of the metrics that explain a memory
// difference (peaks, fragmentation, OOMs, retries, segments, device calls, step time), the
// differences per phase where the runs can be aligned, and warnings when the runs were not made
// under the same conditions (environment fingerprint, allocator config, capacity), since then a
// difference may not be the allocator's doing.
//
// Phases: runs with the same number of allocations made the same requests (a config what-if,
// or the same program recorded twice), so the k-th allocation is the same tensor in each; the
// runs are cut into phases of equal allocation counts and compared phase by phase. Runs whose
// allocation counts differ are compared as wholes only.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/analysis/metrics.h"
#include "engine/analysis/recorded_environment.h"
#include "engine/core/trace.h"
#include "engine/snapshot/segment_state.h"

namespace fragscope::analysis {

// What a comparison needs of one run, however it was stored.
struct RunProfile {
  std::string label;  // e.g. "#3 gpt_varlen_default"
  std::string alloc_conf;
  Bytes capacity = 0;  // 0 = unknown
  // Environment fingerprint: key -> value (torch, cuda, driver, gpu, gpu_memory, ...); empty
  // values count as unknown and are not compared.
  std::map<std::string, std::string> environment;
  // The full fingerprint fragscope-record wrote (NAME.env.json), when the run has one: then two
  // runs that both have it are compared point by point (torch build and how it was installed,
  // cuDNN, NCCL, driver, allocator variables, packages) instead of by `environment`.
  std::optional<RecordedEnvironment> recorded_environment;
  // Metrics from the events; fragmentation metrics are absent when the layout could not be
  // rebuilt (then `series_only` is set and only the peaks of the four series are known).
  RunMetrics metrics;
  bool series_only = false;
  std::optional<std::int64_t> alloc_retries;   // num_alloc_retries, when recorded
  std::optional<double> estimated_step_time;   // relative step time, when modelled
  std::vector<std::size_t> alloc_event_index;  // event index of every alloc, in order
};

// The cut points of `phases` equal allocation-count phases as step starts for measure_trace
// (phase i begins at the event of allocation floor(i * allocs / phases)).
std::vector<StepStart> allocation_phases(std::span<const std::size_t> alloc_event_index,
                                         std::size_t phases);

// Fills profile.metrics (cut into `phases` allocation phases) and profile.alloc_event_index
// from a run's events. When the events contradict the layout (a truncated trace whose start is
// unknown), only what the events alone tell (device calls, allocations, OOMs) is filled,
// series_only is set and false returned: the caller supplies the series peaks.
bool measure_run(RunProfile& profile, std::span<const TraceEvent> events,
                 const snapshot::SegmentState& initial, std::size_t phases = 10);

struct MetricRow {
  std::string name;
  std::string unit;                           // "bytes", "ratio", "count", "x"
  std::vector<std::optional<double>> values;  // one per run; nullopt = unknown
};

struct PhaseRow {
  std::size_t phase = 0;
  std::vector<Bytes> peak_reserved;   // per run
  std::vector<Bytes> peak_allocated;  // per run
  std::vector<std::uint64_t> device_calls;
};

struct Comparison {
  std::vector<std::string> runs;  // labels
  std::vector<MetricRow> metrics;
  std::vector<PhaseRow> phases;  // empty when the runs do not align
  std::string phase_alignment;   // how phases were aligned, or why not
  std::vector<std::string> warnings;
};

// `profiles` must have their metrics measured with allocation_phases() step starts for the
// phase table to be filled (compare_runs checks that every run has the same phases).
Comparison compare_runs(std::span<const RunProfile> profiles);

nlohmann::json to_json(const Comparison& comparison);
std::string to_text(const Comparison& comparison);

}  // namespace fragscope::analysis
