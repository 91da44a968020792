#pragma once
// The GPU twin: the allocator model's prediction for exactly a run that happened on a GPU (the
// point's request stream, its allocator config, the real GPU's total memory, the run's
// per-process limit), stored as a simulated run and linked to the recording. `fragscope-cli
// torch-run` and its Slurm tasks build it here; the GUI shows the link (Runs, Compare).
#include <optional>
#include <string>

#include "engine/allocator/run.h"
#include "engine/core/cancel.h"
#include "engine/core/units.h"
#include "engine/workload/experiment.h"
#include "storage/db/run_store.h"

namespace fragscope::usecases {

struct TwinRun {
  storage::RunId run;       // the stored twin, linked from the recording (RunRecord::twin_run)
  alloc::RunResult result;  // the model's figures, for the real-vs-model comparison
};

// Simulates `point` on a device of `gpu_total` bytes within `limit`, stores it as
// "<point> [model twin]" (device "simulated <gpu_name>") in `experiment`, and links it as the
// twin of `recording`. Polls `control` inside the run (fragscope::Cancelled stores nothing) and
// reports the run to it as ("requests", done, requests) (alloc::kRunStages).
TwinRun store_twin(storage::RunStore& store, storage::RunId recording,
                   std::optional<storage::ExperimentId> experiment,
                   const workload::ExperimentPoint& point, Bytes gpu_total, Bytes limit,
                   const std::string& gpu_name, const WorkControl& control = {});

}  // namespace fragscope::usecases
