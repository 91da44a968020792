#pragma once
// SerialWorker: one thread that runs the tasks handed to it, one at a time, in the order given.
// Ingest hands it a run's parts (packing, compression, keyframes): a thread of its own for each
// part was a thread created and joined 73 times a 1.2M-event run, and every new thread built its
// own zstd contexts (thread_local) for the keyframe and categories of the part's chunk.
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

namespace fragscope::storage {

class SerialWorker {
 public:
  SerialWorker();
  // Finishes the task running; tasks not started are dropped (their futures throw
  // std::future_error: broken_promise).
  ~SerialWorker();
  SerialWorker(const SerialWorker&) = delete;
  SerialWorker& operator=(const SerialWorker&) = delete;

  // Queues `task` after those already given; the future holds its result or its exception.
  template <typename Task>
  auto submit(Task task) -> std::future<decltype(task())> {
    // Shared: std::function holds only what it can copy.
    auto packaged = std::make_shared<std::packaged_task<decltype(task())()>>(std::move(task));
    auto result = packaged->get_future();
    {
      const std::lock_guard lock(mutex_);
      queue_.emplace_back([packaged] { (*packaged)(); });
    }
    ready_.notify_one();
    return result;
  }

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable ready_;  // a task was queued, or stop_
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;  // last: started once the members it uses exist
};

}  // namespace fragscope::storage
