// simulate_experiment's pool: results come in point order, and a slow point holds up no more than
// the pool's bound of later points in memory (each a whole trace) while they wait for their turn.
#include "usecases/point_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>

namespace fragscope::usecases {
namespace {

// Waits until `workers` of the pool's workers are idle: every one not running the slow point has
// started all the points it may, and waits for room or has none left to start.
void wait_until_idle(const PointPool& pool, std::size_t workers) {
  while (pool.idle_workers() < workers)
    std::this_thread::yield();
}

// A slow first point (it waits for a gate) and fast others: with room for `held` points, the
// others run ahead by held - 1 points, then wait; once the first is done, all come in order.
TEST(PointPool, ASlowPointHoldsUpAtMostTheBoundOfLaterPoints) {
  constexpr std::size_t kPoints = 12;
  constexpr unsigned kThreads = 4;
  for (const std::size_t held : {std::size_t{1}, std::size_t{2}, std::size_t{3}}) {
    SCOPED_TRACE(held);
    std::promise<void> gate;
    const std::shared_future<void> opened = gate.get_future().share();
    std::atomic<std::size_t> finished_ahead{0};  // fast points done while the first waits
    std::atomic<bool> first_done{false};
    PointPool pool(kPoints, kThreads, held, [&](std::size_t i) {
      workload::PointResult result;
      result.name = "point " + std::to_string(i);
      if (i == 0) {
        opened.wait();
        first_done = true;
      } else if (!first_done) {
        ++finished_ahead;
      }
      return result;
    });
    wait_until_idle(pool, kThreads - 1);
    EXPECT_EQ(finished_ahead.load(), held - 1);
    gate.set_value();
    for (std::size_t i = 0; i < kPoints; ++i)
      EXPECT_EQ(pool.take_next().name, "point " + std::to_string(i));
    EXPECT_EQ(finished_ahead.load(), held - 1);
  }
}

// A point's error reaches the caller when it takes that point, after the points before it.
TEST(PointPool, APointsErrorIsThrownInItsTurn) {
  PointPool pool(3, 2, 2, [](std::size_t i) {
    if (i == 1)
      throw std::runtime_error("point 1 failed");
    workload::PointResult result;
    result.name = std::to_string(i);
    return result;
  });
  EXPECT_EQ(pool.take_next().name, "0");
  EXPECT_THROW(pool.take_next(), std::runtime_error);
}

// A take past the last point is a caller's error, not a read past the pool's results.
TEST(PointPool, ATakePastTheLastPointIsALogicError) {
  PointPool pool(1, 1, 1, [](std::size_t) { return workload::PointResult{}; });
  pool.take_next();
  EXPECT_THROW(pool.take_next(), std::logic_error);
}

}  // namespace
}  // namespace fragscope::usecases
