#pragma once
// The thread pool simulate_experiment runs an experiment's points on. Results are taken in point
// order, so a slow point makes every later one wait for its turn; each result holds its point's
// whole trace, so the pool bounds how many points it holds at once (running, or done and waiting
// to be taken): a worker waits to start point j until the points before j - held are taken.
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "engine/workload/runner.h"

namespace fragscope::usecases {

class PointPool {
 public:
  using RunPoint = std::function<workload::PointResult(std::size_t point)>;

  // Runs run(0) .. run(points - 1) on `threads` workers, at most `held` points (1 at least) held
  // at once: with `held` below `threads`, the extra workers wait.
  PointPool(std::size_t points, unsigned threads, std::size_t held, RunPoint run);
  // Waits for the points running; starts no other.
  ~PointPool();
  PointPool(const PointPool&) = delete;
  PointPool& operator=(const PointPool&) = delete;

  // The next point's result in point order, once it is done; rethrows the point's error.
  workload::PointResult take_next();

  // Workers waiting for room to start their point, or finished: once all but those running a
  // point are, the pool holds what it will until a point is taken (what a test waits for).
  std::size_t idle_workers() const;

 private:
  void work();

  const std::size_t points_;
  const std::size_t held_;
  const RunPoint run_;
  std::vector<std::optional<workload::PointResult>> results_;
  std::vector<std::exception_ptr> errors_;
  std::size_t next_ = 0;   // the next point a worker claims
  std::size_t taken_ = 0;  // points take_next returned
  std::size_t idle_ = 0;
  bool stop_ = false;
  mutable std::mutex mutex_;
  std::condition_variable done_;  // a point is done
  std::condition_variable room_;  // a point was taken, or stop_
  std::vector<std::thread> workers_;
};

}  // namespace fragscope::usecases
