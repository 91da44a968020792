#include "usecases/simulate.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "storage/db/experiment_status.h"
#include "storage/db/simulated_run.h"

namespace fragscope::usecases {
namespace {

// Runs points on `threads` workers; the caller takes the results in point order as they finish.
class PointPool {
 public:
  PointPool(const std::vector<workload::ExperimentPoint>& points, unsigned threads,
            CancelToken cancel)
      : points_(points),
        cancel_(std::move(cancel)),
        results_(points.size()),
        errors_(points.size()) {
    for (unsigned t = 0; t < threads; ++t)
      workers_.emplace_back([this] { work(); });
  }
  ~PointPool() {
    stop_ = true;
    for (std::thread& t : workers_)
      t.join();
  }
  PointPool(const PointPool&) = delete;
  PointPool& operator=(const PointPool&) = delete;

  // Blocks until point `i` is done; rethrows its error.
  workload::PointResult take(std::size_t i) {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return results_[i].has_value() || errors_[i] != nullptr; });
    if (errors_[i])
      std::rethrow_exception(errors_[i]);
    workload::PointResult r = std::move(*results_[i]);
    results_[i].reset();
    return r;
  }

 private:
  void work() {
    while (!stop_) {
      const std::size_t i = next_.fetch_add(1);
      if (i >= points_.size())
        return;
      std::optional<workload::PointResult> result;
      std::exception_ptr error;
      try {
        cancel_.throw_if_cancelled();
        result = workload::run_point(points_[i], true, cancel_);
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard lock(mutex_);
        results_[i] = std::move(result);
        errors_[i] = error;
      }
      done_.notify_all();
    }
  }

  const std::vector<workload::ExperimentPoint>& points_;
  CancelToken cancel_;
  std::vector<std::optional<workload::PointResult>> results_;
  std::vector<std::exception_ptr> errors_;
  std::atomic<std::size_t> next_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable done_;
  std::vector<std::thread> workers_;
};

}  // namespace

StoredExperiment simulate_experiment(const workload::Experiment& experiment,
                                     const nlohmann::json& document, const SimulateOptions& options,
                                     const WorkControl& control) {
  const std::size_t points = experiment.points.size();
  StoredExperiment stored;
  const unsigned threads = std::clamp<unsigned>(
      options.threads, 1, static_cast<unsigned>(std::max<std::size_t>(points, 1)));
  PointPool pool(experiment.points, threads, control.cancel);
  for (std::size_t i = 0; i < points; ++i) {
    const workload::ExperimentPoint& point = experiment.points[i];
    const workload::PointResult result = pool.take(i);
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
