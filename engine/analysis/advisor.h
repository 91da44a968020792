#pragma once
// The advisor behind `fragscope-cli advise` and the GUI's what-if page: for a recorded PyTorch
// snapshot or an experiment file, what the run did (metrics, OOM post-mortems) and which
// allocator setting or program change would have done better (the what-if table).
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/allocator/profile_choice.h"
#include "engine/analysis/metrics.h"
#include "engine/analysis/post_mortem.h"
#include "engine/analysis/trace_requests.h"
#include "engine/analysis/what_if.h"
#include "engine/snapshot/snapshot.h"
#include "engine/workload/experiment.h"

namespace fragscope::analysis {

struct AdviseOptions {
  std::optional<Bytes> capacity;      // per-process limit; default: the input's own (or none)
  unsigned threads = 0;               // 0 = hardware concurrency; the result does not depend on it
  std::optional<std::size_t> device;  // snapshot device; default: the one with most entries
  // The most the what-if runs in flight hold together (WhatIfOptions::memory_budget): fewer
  // threads run where more would hold more. 0 = no bound.
  std::size_t memory_budget = 0;
  // Releases to try the same run under (release_mitigations): "would upgrading have avoided it".
  std::vector<TorchVersion> what_if_releases;
  CancelToken cancel;  // polled inside every run: fragscope::Cancelled
  // Told how far the advice has come, in the stages of kAdviseStages.
  Progress progress;
};

// What advise_snapshot and advise_experiment report to AdviseOptions::progress, in order:
// "baseline" (the recording measured and its OOMs diagnosed, 1 of 1 when done; for an experiment
// the baseline's run, as alloc::run_requests reports it), then run_what_if's "candidates".
inline constexpr ProgressStage kAdviseStages[] = {{"baseline", 1}, {"candidates", 4}};

struct Advice {
  std::string input;  // file name as given
  std::string kind;   // "snapshot" or "experiment"
  std::string point;  // experiment point advised (its variant name)
  std::string alloc_conf;
  // The release whose allocator rules the replay and the what-if rows followed, and why.
  alloc::ProfileChoice profile;
  // What the reader must know to trust the table (e.g. a trace that starts mid-run).
  std::vector<std::string> notes;
  std::optional<Bytes> capacity;  // per-process limit applied
  Bytes device_memory = 0;        // what the simulated device could give (no limit)
  RunMetrics baseline;  // the recording (snapshot) or the baseline simulation (experiment)
  std::vector<OomPostMortem> post_mortems;
  // Snapshot: request index of each recorded OOM in the replayed stream, to hold against the
  // baseline row's first_oom_request (the model failing where PyTorch failed).
  std::vector<std::size_t> recorded_oom_requests;
  WhatIfTable table;
};

// The caveat of a what-if from a trace that starts mid-run (empty for a complete trace).
std::string mid_run_what_if_note(const std::vector<alloc::SeedSegment>& initial_segments);

// Post-mortems of a simulated run: the model emits the same oom entries PyTorch records, so the
// run's own events are diagnosed like a trace; its run reports to options.progress as "baseline".
// `metrics`, when given, receives the run's metrics (no per-event samples).
std::vector<OomPostMortem> simulate_post_mortems(const RequestStream& requests,
                                                 const alloc::AllocatorConfig& config,
                                                 const WhatIfOptions& options,
                                                 RunMetrics* metrics = nullptr);

// Where each step_begin marker of `requests` falls in the events the model emitted for them
// (a malloc's events end with its alloc or oom entry, a free's with its free_requested and an
// immediate free_completed, an empty_cache's are the completions and segment releases it made).
std::vector<StepStart> align_steps(const RequestStream& requests,
                                   std::span<const TraceEvent> model_events);

// Candidates without an OOM whose peak reserved is the whole limit (the allowed memory, else
// the device): PyTorch's allocator keeps caching freed blocks it cannot reuse (under
// max_split_size_mb, a cached block at least that large serves only requests less than 20 MiB
// smaller) and calls cudaMalloc until it fails, then frees cached blocks and goes on
// (torch-allocator-spec §5.2-5.3). Their peak is the limit, not what the program needs; the
// text report says so under the table.
std::vector<const WhatIfRow*> rows_filling_the_limit(const Advice& advice);

// The what-if of a recorded trace, written once for a snapshot file (`advise`) and a stored run
// (the post-mortem, the mitigation run). The candidates: the standard allocator settings, then
// each of `releases` other than the recording's own under that release's allocator rules.
std::vector<Mitigation> trace_candidates(const TraceRequests& trace,
                                         const alloc::AllocatorConfig& config,
                                         const std::vector<TorchVersion>& releases,
                                         TorchVersion recorded);
// How each candidate runs: from the trace's start state, on the recording's segment addresses,
// under the recorded release's rules, within `options.capacity`.
WhatIfOptions trace_what_if_options(const TraceRequests& trace, const alloc::ProfileChoice& profile,
                                    const AdviseOptions& options);

Advice advise_snapshot(const snapshot::Snapshot& snapshot, const std::string& input,
                       const AdviseOptions& options);

// A change to an experiment point's program: the point's configuration with the change set, as
// the experiment document that runs it (what the Experiment Designer opens), and the point that
// document parses to (what the what-if row runs).
struct ProgramChange {
  std::string name;  // the what-if row's name
  nlohmann::json document;
  workload::ExperimentPoint point;
};
// The program changes of a point, each only when the point does not have it already: half the
// micro-batch with twice the accumulation (an even micro-batch), activation checkpointing of
// every block, and torch.compile (of the whole model where its Inductor plans are modelled, else
// of the LayerNorms and MLPs). A change the workload model refuses for this point (validate's
// InputError) is left out, its reason in `refused` when given.
std::vector<ProgramChange> program_changes(const workload::ExperimentPoint& point,
                                           std::vector<std::string>* refused = nullptr);

// Advises one point of an experiment. The program changes join the candidates, each run from
// its own document with its estimated step time relative to the point; a refused change is a
// note.
Advice advise_experiment(const workload::ExperimentPoint& point, const std::string& input,
                         const AdviseOptions& options);

nlohmann::json to_json(const Advice& advice);
// A plain-text report: the baseline, each OOM's cause and evidence, the ranked table.
std::string to_text(const Advice& advice);

}  // namespace fragscope::analysis
