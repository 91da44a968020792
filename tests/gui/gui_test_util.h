#pragma once
// Helpers for the GUI tests: a temporary database filled with synthetic runs whose shape is
// known (so a test can say what the plot and the segment map must show), and waiting helpers.
#include <QCoreApplication>
#include <QElapsedTimer>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>
#include <cmath>
#include <random>
#include <vector>

#include "engine/core/trace.h"
#include "storage/db/run_store.h"

namespace fragscope::gui::test {

// A trace that grows memory in waves inside 20 MiB segments, frees at random (requested, then
// completed), and, when `oomAtEnd`, ends with an OOM whose request is larger than any free gap.
// Deterministic for a seed.
inline std::vector<TraceEvent> wavyTrace(std::size_t count, std::uint32_t seed, bool oomAtEnd,
                                         StreamId secondStream = StreamId{0}) {
  constexpr Bytes kSegment = 20 * kMiB;
  std::mt19937_64 random(seed);
  std::vector<TraceEvent> events;
  events.reserve(count + 1);
  struct Live {
    std::uint64_t addr;
    Bytes size;
    StreamId stream;
  };
  std::vector<Live> live;
  std::uint64_t nextSegment = 0x7f0000000000;
  std::uint64_t cursor = 0;
  std::uint64_t segmentEnd = 0;
  std::int64_t time = 1'700'000'000'000'000;
  const std::size_t body = oomAtEnd ? count - 1 : count;
  while (events.size() < body) {
    time += 5;
    const double phase = std::sin(static_cast<double>(events.size()) / 5000.0);
    const bool allocate =
        live.empty() || (random() % 1000) < static_cast<unsigned>(520 + 80 * phase);
    if (!allocate) {
      const std::size_t pick = random() % live.size();
      const Live block = live[pick];
      live[pick] = live.back();
      live.pop_back();
      events.push_back(
          {TraceAction::free_requested, block.addr, block.size, block.stream, time, {}});
      if (events.size() < body)
        events.push_back(
            {TraceAction::free_completed, block.addr, block.size, block.stream, time, {}});
      continue;
    }
    const Bytes size = (1 + random() % 64) * 64 * kKiB;
    const StreamId stream = random() % 5 == 0 ? secondStream : StreamId{0};
    if (cursor + size > segmentEnd) {
      cursor = nextSegment;
      segmentEnd = nextSegment + kSegment;
      nextSegment += 32 * kMiB;
      events.push_back({TraceAction::segment_alloc, cursor, kSegment, StreamId{0}, time, {}});
      if (events.size() >= body)
        break;
    }
    events.push_back({TraceAction::alloc, cursor, size, stream, time, {}});
    live.push_back({cursor, size, stream});
    cursor += size;
  }
  if (oomAtEnd)
    events.push_back({TraceAction::oom, 512 * kMiB, 64 * kMiB, StreamId{0}, time + 5, {}});
  return events;
}

inline storage::RunId addRun(storage::RunStore& store, const std::string& name,
                             const std::vector<TraceEvent>& events, const std::string& config = {},
                             storage::RunStatus status = storage::RunStatus::ok) {
  storage::RunRecord record;
  record.name = name;
  record.source = storage::RunSource::simulated;
  record.alloc_conf = config;
  record.device_name = "NVIDIA H200";
  record.capacity = 140 * kGiB;
  const storage::RunId run = store.begin_run(record);
  constexpr std::size_t kBatch = 1 << 16;
  for (std::size_t first = 0; first < events.size(); first += kBatch)
    store.append_events(run, std::span<const TraceEvent>(events.data() + first,
                                                         std::min(kBatch, events.size() - first)));
  return store.finish_run(run, status).id;
}

// Spins the event loop until `done()` or the timeout; returns done().
template <typename Done>
bool waitFor(Done done, int timeoutMs = 20000) {
  QElapsedTimer timer;
  timer.start();
  while (!done() && timer.elapsed() < timeoutMs)
    QTest::qWait(10);
  return done();
}

}  // namespace fragscope::gui::test
