#include "usecases/simulate.h"

#include <algorithm>

#include "storage/db/experiment_status.h"
#include "storage/db/simulated_run.h"
#include "usecases/point_pool.h"

namespace fragscope::usecases {

std::size_t default_points_held(unsigned threads) {
  return 2 * static_cast<std::size_t>(std::max(threads, 1u));
}

StoredExperiment simulate_experiment(const workload::Experiment& experiment,
                                     const nlohmann::json& document, const SimulateOptions& options,
                                     const WorkControl& control) {
  const std::size_t points = experiment.points.size();
  StoredExperiment stored;
  const unsigned threads = std::clamp<unsigned>(
      options.threads, 1, static_cast<unsigned>(std::max<std::size_t>(points, 1)));
  const std::size_t held =
      options.max_points_held == 0 ? default_points_held(threads) : options.max_points_held;
  PointPool pool(points, threads, held, [&](std::size_t i) {
    control.cancel.throw_if_cancelled();
    return workload::run_point(experiment.points[i], true, control.cancel);
  });
  for (std::size_t i = 0; i < points; ++i) {
    const workload::ExperimentPoint& point = experiment.points[i];
    const workload::PointResult result = pool.take_next();
    control.check();
    std::optional<storage::RunId> run;
    if (options.store) {
      if (i == 0)  // incomplete until the last point is stored (experiment_status.h)
        stored.experiment =
            storage::begin_experiment(*options.store, experiment.name, document, points);
      run = storage::store_simulated_run(*options.store, stored.experiment, point, result);
      stored.runs.push_back(*run);
    }
    if (options.on_point)
      options.on_point(i, result, run);
    control.progress.report("simulating", i + 1, points);
  }
  if (options.store && points > 0)
    storage::finish_experiment(*options.store, stored.experiment);
  return stored;
}

StoredExperiment simulate_and_store(storage::RunStore& store,
                                    const workload::Experiment& experiment,
                                    const nlohmann::json& document, const WorkControl& control) {
  SimulateOptions options;
  options.store = &store;
  return simulate_experiment(experiment, document, options, control);
}

}  // namespace fragscope::usecases
