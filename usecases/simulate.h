#pragma once
// Simulating an experiment and storing every point as a run, once for the GUI (the designer's Run,
// the case study) and any other front-end that stores a whole experiment.
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/cancel.h"
#include "engine/workload/experiment.h"
#include "storage/db/run_store.h"

namespace fragscope::usecases {

struct StoredExperiment {
  storage::ExperimentId experiment;
  std::vector<storage::RunId> runs;  // one per point, in point order
};

// Runs every point of `experiment` through the allocator model, in order, and stores each as a
// simulated run of one new experiment (its definition: `document`). The experiment is marked
// incomplete until its last point is stored, so a cancel (fragscope::Cancelled, polled between
// points and inside each point's run) or a failure leaves it visibly so, with the points stored
// so far. Reports progress as ("simulating", points stored, points).
StoredExperiment simulate_and_store(storage::RunStore& store,
                                    const workload::Experiment& experiment,
                                    const nlohmann::json& document,
                                    const WorkControl& control = {});

}  // namespace fragscope::usecases
