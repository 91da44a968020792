#pragma once
// Simulating an experiment, once for every front-end: the GUI's designer (Run, the case study) and
// `fragscope-cli run`. Points run through the allocator model, in parallel when asked, and are
// reported and stored in point order, each as a simulated run of one experiment.
#include <cstddef>
#include <functional>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/cancel.h"
#include "engine/workload/experiment.h"
#include "engine/workload/runner.h"
#include "storage/db/run_store.h"

namespace fragscope::usecases {

struct StoredExperiment {
  storage::ExperimentId experiment;  // unset when nothing was stored
  std::vector<storage::RunId> runs;  // one per point, in point order
};

struct SimulateOptions {
  storage::RunStore* store = nullptr;  // where the runs go; nullptr simulates only
  unsigned threads = 1;                // points run at once; the results do not depend on it
  // The most points held in memory at once, each with its whole trace: running, or done and
  // waiting for the points before it to be reported (a slow point holds up every later one).
  // Workers wait while this many are held; 0: default_points_held(threads). The results do not
  // depend on it.
  std::size_t max_points_held = 0;
  // Called in point order as each point is done (and stored, with its run id).
  std::function<void(std::size_t point, const workload::PointResult& result,
                     std::optional<storage::RunId> run)>
      on_point;
};

// SimulateOptions::max_points_held when unset: twice the threads, so every worker can run a point
// while one finished point each waits for its turn.
std::size_t default_points_held(unsigned threads);

// Runs every point of `experiment` through the allocator model. With a store, the experiment (its
// definition: `document`) is created when the first point is done and marked incomplete until its
// last point is stored, so a cancel (fragscope::Cancelled, polled between points and inside each
// point's run) or a failure leaves it visibly so, with the points stored so far. Reports progress
// as ("simulating", points done, points).
StoredExperiment simulate_experiment(const workload::Experiment& experiment,
                                     const nlohmann::json& document, const SimulateOptions& options,
                                     const WorkControl& control = {});

// simulate_experiment into `store`, one point at a time.
StoredExperiment simulate_and_store(storage::RunStore& store,
                                    const workload::Experiment& experiment,
                                    const nlohmann::json& document,
                                    const WorkControl& control = {});

}  // namespace fragscope::usecases
