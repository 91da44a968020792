#pragma once
// Runs jobs on the thread pool and hands their results back on the GUI thread, newest first:
// starting a job supersedes the previous one (its `cancelled()` turns true and its result is
// dropped), so re-querying on every zoom step or edit never queues up stale work. The hotspot
// JobTracker pattern, on QtConcurrent.
#include <QObject>
#include <QPointer>
#include <QThreadPool>
#include <QtConcurrent/QtConcurrentRun>
#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <utility>

#include "engine/core/cancel.h"

namespace fragscope::gui {

// What a job sees: whether it should stop early, and a way to report progress (0..1).
// workControl() hands the same to engine, storage and use-case calls, which poll it and throw
// fragscope::Cancelled once a newer job superseded this one.
class JobContext {
 public:
  JobContext(std::shared_ptr<std::atomic<std::uint64_t>> generation, std::uint64_t mine,
             std::function<void(double)> progress, CancelToken token = {})
      : m_generation(std::move(generation)),
        m_mine(mine),
        m_progress(std::move(progress)),
        m_token(std::move(token)) {}
  bool cancelled() const {
    return m_generation->load(std::memory_order_relaxed) != m_mine || m_token.cancelled();
  }
  void progress(double fraction) const {
    if (m_progress)
      m_progress(fraction);
  }
  // Progress in units of a stage maps onto 0..1 when the total is known.
  WorkControl workControl() const {
    auto progress = m_progress;
    return {m_token,
            Progress([progress](std::string_view, std::uint64_t done, std::uint64_t total) {
              if (progress && total > 0)
                progress(static_cast<double>(done) / static_cast<double>(total));
            })};
  }

 private:
  std::shared_ptr<std::atomic<std::uint64_t>> m_generation;
  std::uint64_t m_mine;
  std::function<void(double)> m_progress;
  CancelToken m_token;
};

// The pool of what the user waits on to see anything (the timeline's overview and curves): its
// own threads, so these queries never queue behind a long job on the global pool (a summary
// replay, the post-mortem's request load).
inline QThreadPool* interactivePool() {
  static QThreadPool* pool = [] {
    auto* created = new QThreadPool;  // lives as long as the process, like the global pool
    created->setMaxThreadCount(2);
    return created;
  }();
  return pool;
}

class JobTracker {
 public:
  // Jobs run on `pool` (default: QThreadPool::globalInstance()).
  explicit JobTracker(QObject* context, QThreadPool* pool = nullptr)
      : m_context(context), m_pool(pool) {}
  ~JobTracker() { cancel(); }
  JobTracker(const JobTracker&) = delete;
  JobTracker& operator=(const JobTracker&) = delete;

  // `job(const JobContext&)` runs on the pool and returns a value; `onResult(value)` runs on the
  // context's thread if no newer job started meanwhile; `onError(message)` likewise when the job
  // threw. `onProgress(fraction)` is called on the context's thread, throttled by the caller.
  template <typename Job, typename OnResult>
  void start(Job job, OnResult onResult, std::function<void(const QString&)> onError = {},
             std::function<void(double)> onProgress = {}) {
    m_token.cancel();  // the superseded job stops at its next poll
    m_token = CancelToken::make();
    const std::uint64_t mine = ++*m_generation;
    m_running = mine;
    QPointer<QObject> context = m_context;
    auto generation = m_generation;
    auto* running = &m_running;
    std::function<void(double)> progress;
    if (onProgress) {
      progress = [context, generation, mine, onProgress](double fraction) {
        QMetaObject::invokeMethod(
            context.data(),
            [generation, mine, onProgress, fraction] {
              if (generation->load() == mine)
                onProgress(fraction);
            },
            Qt::QueuedConnection);
      };
    }
    auto task = [job = std::move(job), onResult = std::move(onResult), onError = std::move(onError),
                 context, generation, mine, running, progress, token = m_token]() mutable {
      const JobContext jobContext(generation, mine, progress, token);
      try {
        auto result = job(jobContext);
        if (jobContext.cancelled() || !context)
          return;
        QMetaObject::invokeMethod(
            context.data(),
            [result = std::move(result), onResult = std::move(onResult), generation, mine,
             running]() mutable {
              if (generation->load() != mine)
                return;
              *running = 0;
              onResult(std::move(result));
            },
            Qt::QueuedConnection);
      } catch (const std::exception& error) {
        if (jobContext.cancelled() || !context)
          return;
        const QString message = QString::fromUtf8(error.what());
        QMetaObject::invokeMethod(
            context.data(),
            [message, onError, generation, mine, running] {
              if (generation->load() != mine)
                return;
              *running = 0;
              if (onError)
                onError(message);
            },
            Qt::QueuedConnection);
      }
    };
    (void)QtConcurrent::run(m_pool ? m_pool : QThreadPool::globalInstance(), std::move(task));
  }

  // The running job (if any) is told to stop and its result will be dropped.
  void cancel() {
    m_token.cancel();
    ++*m_generation;
    m_running = 0;
  }
  bool busy() const { return m_running != 0; }

 private:
  QObject* m_context;
  QThreadPool* m_pool;
  std::shared_ptr<std::atomic<std::uint64_t>> m_generation =
      std::make_shared<std::atomic<std::uint64_t>>(0);
  // The generation whose result is still awaited (0 = idle); touched on the GUI thread only.
  std::uint64_t m_running = 0;
  CancelToken m_token;  // the running job's; cancelled when it is superseded
};

}  // namespace fragscope::gui
