#include "usecases/twin.h"

#include <gtest/gtest.h>

#include "engine/workload/runner.h"

namespace fragscope::usecases {
namespace {

workload::ExperimentPoint small_point(const char* device) {
  const auto document =
      nlohmann::json::parse(std::string(R"({"name": "t", "device": {"preset": ")") + device + R"("},
      "model": {"layers": 2, "hidden": 128, "heads": 2, "vocab": 1000},
      "training": {"steps": 2, "batch_size": 2, "seq_len": {"kind": "fixed", "value": 64}}})");
  return workload::parse_experiment(document, "test").points.front();
}

storage::RunId recorded_run(storage::RunStore& store) {
  storage::RunRecord record;
  record.name = "t [PyTorch]";
  record.source = storage::RunSource::torch;
  const storage::RunId id = store.begin_run(record);
  store.finish_run(id, storage::RunStatus::ok, nlohmann::json::object());
  return id;
}

// The twin is the simulated point on the real GPU: with the device the point itself describes,
// its peaks are those of the designer's and `fragscope-cli run`'s simulation of the point.
TEST(StoreTwin, IsTheSimulatedPointOnTheRealGpuAndIsLinked) {
  storage::RunStore store(":memory:");
  const storage::RunId recording = recorded_run(store);
  const workload::ExperimentPoint point = small_point("H200-141GB");
  const Bytes limit = point.device.allowed != 0 ? point.device.allowed : point.device.capacity;
  const TwinRun twin =
      store_twin(store, recording, std::nullopt, point, point.device.total_memory, limit, "H200");
  const workload::PointResult simulated = workload::run_point(point, false);
  ASSERT_FALSE(simulated.oom);
  EXPECT_EQ(twin.result.peak_reserved, simulated.peak_reserved);
  EXPECT_EQ(twin.result.peak_allocated, simulated.peak_allocated);

  const storage::RunRecord stored = store.run(twin.run);
  EXPECT_EQ(stored.name, point.name + " [model twin]");
  EXPECT_EQ(stored.device_name, "simulated H200");
  EXPECT_EQ(stored.capacity, limit);
  EXPECT_EQ(stored.status, storage::RunStatus::ok);
  EXPECT_EQ(stored.summary["twin_of"].get<std::int64_t>(), recording.value);
  EXPECT_EQ(stored.summary["peak_reserved"].get<Bytes>(), simulated.peak_reserved);
  EXPECT_GT(stored.event_count, 0u);
  EXPECT_EQ(store.run(recording).twin_run, twin.run);
}

// A limit below the point's peak: the twin runs out of memory, as the GPU would have.
TEST(StoreTwin, ALimitBelowThePeakIsAnOom) {
  storage::RunStore store(":memory:");
  const storage::RunId recording = recorded_run(store);
  const workload::ExperimentPoint point = small_point("H200-141GB");
  const Bytes peak = workload::run_point(point, false).peak_reserved;
  const TwinRun twin = store_twin(store, recording, std::nullopt, point, point.device.total_memory,
                                  peak / 2, "H200");
  EXPECT_FALSE(twin.result.ooms.empty());
  EXPECT_EQ(store.run(twin.run).status, storage::RunStatus::oom);
}

TEST(StoreTwin, ACancelStoresNothing) {
  storage::RunStore store(":memory:");
  const storage::RunId recording = recorded_run(store);
  WorkControl control;
  control.cancel = CancelToken::make();
  control.cancel.cancel();
  const workload::ExperimentPoint point = small_point("H200-141GB");
  EXPECT_THROW(store_twin(store, recording, std::nullopt, point, point.device.total_memory,
                          point.device.capacity, "H200", control),
               Cancelled);
  EXPECT_EQ(store.list_runs().size(), 1u);
  EXPECT_FALSE(store.run(recording).twin_run.has_value());
}

}  // namespace
}  // namespace fragscope::usecases
