#pragma once
// Storing one simulated experiment point as a run: the CLI's `run` and the GUI's designer both
// store points, and must store them the same way (record, labels, events, OOM report, summary).
#include "engine/workload/runner.h"
#include "storage/db/run_store.h"

namespace fragscope::storage {

// Stores `result` (with its labelled events) as a simulated run of `experiment`; the summary is
// workload::to_json(result) plus the point's resolved config. Returns the new run's id.
RunId store_simulated_run(RunStore& store, ExperimentId experiment,
                          const workload::ExperimentPoint& point,
                          const workload::PointResult& result);

}  // namespace fragscope::storage
