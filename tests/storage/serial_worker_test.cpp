#include "storage/db/serial_worker.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <thread>
#include <vector>

namespace fragscope::storage {
namespace {

// Ingest's parts share the segment map and the chunk encoder: they must run one after another,
// in the order given, and on one thread for the whole run (whose zstd contexts, thread_local for
// keyframes and categories, are then made once).
TEST(SerialWorker, RunsTasksInOrderOnOneThreadOfItsOwn) {
  SerialWorker worker;
  std::vector<int> order;  // written by the worker only, read once every task is done
  std::vector<std::future<std::thread::id>> threads;
  for (int i = 0; i < 64; ++i) {
    threads.push_back(worker.submit([&order, i] {
      order.push_back(i);
      return std::this_thread::get_id();
    }));
  }
  std::vector<std::thread::id> ids;
  for (auto& thread : threads)
    ids.push_back(thread.get());
  for (int i = 0; i < 64; ++i)
    EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
  for (const auto& id : ids) {
    EXPECT_EQ(id, ids.front()) << "every task on the same thread";
    EXPECT_NE(id, std::this_thread::get_id());
  }
}

TEST(SerialWorker, ATasksErrorReachesItsFutureAndTheNextTaskStillRuns) {
  SerialWorker worker;
  auto failing = worker.submit([]() -> int { throw std::runtime_error("disk full"); });
  auto next = worker.submit([] { return 7; });
  EXPECT_THROW(failing.get(), std::runtime_error);
  EXPECT_EQ(next.get(), 7);
}

}  // namespace
}  // namespace fragscope::storage
