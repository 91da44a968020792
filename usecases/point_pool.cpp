#include "usecases/point_pool.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace fragscope::usecases {

PointPool::PointPool(std::size_t points, unsigned threads, std::size_t held, RunPoint run)
    : points_(points),
      held_(std::max<std::size_t>(held, 1)),
      run_(std::move(run)),
      results_(points),
      errors_(points) {
  for (unsigned t = 0; t < threads; ++t)
    workers_.emplace_back([this] { work(); });
}

PointPool::~PointPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  room_.notify_all();
  for (std::thread& t : workers_)
    t.join();
}

workload::PointResult PointPool::take_next() {
  std::unique_lock lock(mutex_);
  const std::size_t i = taken_;
  if (i >= results_.size())
    throw std::logic_error("PointPool::take_next: all " + std::to_string(i) +
                           " points were taken already");
  done_.wait(lock, [&] { return results_[i].has_value() || errors_[i] != nullptr; });
  if (errors_[i])
    std::rethrow_exception(errors_[i]);
  workload::PointResult result = std::move(*results_[i]);
  results_[i].reset();
  ++taken_;
  lock.unlock();
  room_.notify_all();
  return result;
}

std::size_t PointPool::idle_workers() const {
  std::lock_guard lock(mutex_);
  return idle_;
}

void PointPool::work() {
  std::unique_lock lock(mutex_);
  while (!stop_ && next_ < points_) {
    const std::size_t i = next_++;
    ++idle_;
    room_.wait(lock, [&] { return stop_ || i < taken_ + held_; });
    --idle_;
    if (stop_)
      break;
    lock.unlock();
    std::optional<workload::PointResult> result;
    std::exception_ptr error;
    try {
      result = run_(i);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    results_[i] = std::move(result);
    errors_[i] = error;
    done_.notify_all();
  }
  ++idle_;
}

}  // namespace fragscope::usecases
