#include "usecases/simulate.h"

#include "engine/workload/runner.h"
#include "storage/db/experiment_status.h"
#include "storage/db/simulated_run.h"

namespace fragscope::usecases {

StoredExperiment simulate_and_store(storage::RunStore& store,
                                    const workload::Experiment& experiment,
                                    const nlohmann::json& document, const WorkControl& control) {
  const std::size_t points = experiment.points.size();
  StoredExperiment stored;
  stored.experiment = storage::begin_experiment(store, experiment.name, document, points);
  for (std::size_t i = 0; i < points; ++i) {
    control.check();
    const workload::ExperimentPoint& point = experiment.points[i];
    const workload::PointResult result = workload::run_point(point, true, control.cancel);
    control.check();
    stored.runs.push_back(storage::store_simulated_run(store, stored.experiment, point, result));
    control.progress.report("simulating", i + 1, points);
  }
  storage::finish_experiment(store, stored.experiment);
  return stored;
}

}  // namespace fragscope::usecases
