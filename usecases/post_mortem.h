#pragma once
// The post-mortem of a stored run and the mitigation run, once for both front-ends: every OOM
// diagnosed, the run's fragmentation figures, what held the memory at the failure (labelled runs)
// and the what-if table (the allocator settings; for a simulated run of an experiment also the
// workload changes), each row computed by running it. The GUI's Post-mortem page and
// `fragscope-cli post-mortem` show this; applying a row stores its replay as a simulated run.
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/analysis/advisor.h"
#include "engine/analysis/metrics.h"
#include "engine/analysis/post_mortem.h"
#include "engine/analysis/what_if.h"
#include "engine/core/cancel.h"
#include "storage/db/run_store.h"

namespace fragscope::usecases {

// The steps post_mortem_of reports: diagnosing, measuring, the what-if.
inline constexpr std::uint64_t kPostMortemSteps = 3;

struct StoredPostMortem {
  storage::RunRecord record;
  std::optional<Bytes> limit;  // the per-process limit the run had, when known
  // The release whose allocator rules the diagnosis and the what-if rows followed, and why.
  alloc::ProfileChoice profile;
  std::vector<std::string> notes;  // e.g. the caveat of a trace that starts mid-run
  std::vector<analysis::OomPostMortem> post_mortems;
  // The whole run's figures (no per-event samples). Absent when the trace cannot be measured from
  // its start state (metrics_error says why).
  std::optional<analysis::RunMetrics> metrics;
  std::string metrics_error;
  // Live bytes by category (index = Category) at the first OOM, for a labelled run.
  std::optional<std::array<std::int64_t, storage::kCategoryCount>> categories_at_oom;
  std::optional<analysis::WhatIfTable> what_if;
  std::string what_if_error;
  // The what-if rows that change the workload, by row name: the experiment document that runs
  // that change.
  std::map<std::string, nlohmann::json> workload_changes;
};

struct PostMortemOptions {
  bool what_if_for_oom_only = false;  // a run without OOM gets no what-if table
  // What-if rows run at once (0: the hardware's threads); the table does not depend on it. Fewer
  // run where more would hold more than analysis::what_if_memory_budget of the trace loaded.
  unsigned threads = 0;
};

// Polls `control` between the stages ("diagnosing", "measuring", "what-if") and inside the
// what-if's runs, and throws Cancelled. Reports (stage, done, kPostMortemSteps ·
// kNestedProgressUnits): each stage one step, the what-if moving through its step as its rows run,
// the whole at the end.
StoredPostMortem post_mortem_of(storage::RunStore& store, storage::RunId run,
                                const PostMortemOptions& options = {},
                                const WorkControl& control = {});

// The post-mortem in the advisor's shape, for its text and JSON writers.
analysis::Advice advice_of(const StoredPostMortem& post_mortem);

// Replays the run's requests under the named mitigation (a standard what-if row's name) on the
// same device the what-if row ran on, and stores the result as a simulated run named
// "<run> · <mitigation>"; returns its id. An unknown name is an InputError listing the names.
// Reports the replay as ("requests", done, requests) (alloc::kRunStages); a cancel (polled inside
// the replay and before the run is stored) stores nothing.
storage::RunId run_mitigation(storage::RunStore& store, storage::RunId run,
                              const std::string& mitigation, const WorkControl& control = {});

}  // namespace fragscope::usecases
