#pragma once
// What the post-mortem page and the report say about one run, loaded off the GUI thread: every
// OOM diagnosed (engine/analysis), the run's fragmentation figures, what held the memory at the
// failure (labelled runs), and the what-if table: the allocator settings, and for a simulated
// run of an experiment also the workload changes (smaller micro-batch with more accumulation,
// checkpointing), each computed by running it.
#include <QString>
#include <QStringList>
#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/analysis/metrics.h"
#include "engine/analysis/post_mortem.h"
#include "engine/analysis/what_if.h"
#include "storage/db/run_store.h"

namespace fragscope::gui {

class JobContext;

struct PostMortemData {
  storage::RunRecord record;
  std::optional<Bytes> limit;  // the per-process limit the run had, when known
  QString allocatorRules;      // the release whose rules the rows followed, and why
  QStringList notes;           // e.g. the caveat of a trace that starts mid-run
  std::vector<analysis::OomPostMortem> postMortems;
  std::optional<analysis::WhatIfTable> whatIf;
  QString whatIfError;
  // The whole run's figures (no per-event samples): the fragmentation report of a run without
  // OOM. Absent when the trace cannot be measured from an empty allocator (metricsError says why).
  std::optional<analysis::RunMetrics> metrics;
  QString metricsError;
  // Live bytes by category (index = Category) at the first OOM, for a labelled run.
  std::optional<std::array<std::int64_t, storage::kCategoryCount>> categoriesAtOom;
  // The what-if rows that change the workload, by row name: the experiment document that runs
  // that change (for the designer).
  std::map<std::string, nlohmann::json> workloadChanges;

  // A row avoids the failure (or, for a run without OOM, fits) and is not the baseline.
  std::vector<const analysis::WhatIfRow*> rowsThatFit() const;
  // Bytes the first OOM was short: allocated + rounded request - capacity (0 when it was not a
  // capacity shortage or the capacity is unknown).
  Bytes shortfall() const;
};

// usecases::post_mortem_of for the page: every OOM diagnosed and the what-if table (for a run
// without OOM too, unless `whatIfForOomOnly`). Runs in a job; a superseded job throws Cancelled.
PostMortemData loadPostMortem(const QString& databasePath, storage::RunId run,
                              bool whatIfForOomOnly = false, const JobContext* job = nullptr);
// usecases::run_mitigation: replays the run's requests under the named allocator mitigation (a
// WhatIfRow's name) and stores the result as a simulated run; returns its id.
storage::RunId runMitigation(const QString& databasePath, storage::RunId run,
                             const std::string& mitigation, const JobContext* job = nullptr);

// The post-mortem's one-line statement of the first OOM's request: "a request of 1.82 GiB
// (rounded 1.82 GiB)", or, when the trace recorded only the rounded size, "a request of 167 MiB
// (the rounded size: traces do not record the request); PyTorch tried to allocate 168 MiB".
QString describeFailingRequest(const analysis::OomPostMortem& oom);

}  // namespace fragscope::gui
