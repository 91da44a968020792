#include "usecases/simulate.h"

#include <gtest/gtest.h>

#include "storage/db/experiment_status.h"

namespace fragscope::usecases {
namespace {

nlohmann::json three_points() {
  return nlohmann::json::parse(R"({"name": "x", "device": {"preset": "L4"},
      "model": {"layers": 1, "hidden": 64, "heads": 2, "vocab": 100},
      "training": {"steps": 1, "seq_len": {"kind": "fixed", "value": 16}},
      "sweep": {"training.batch_size": [1, 2, 3]}})");
}

TEST(SimulateAndStore, StoresEveryPointAsARunOfOneCompleteExperiment) {
  storage::RunStore store(":memory:");
  const nlohmann::json document = three_points();
  const workload::Experiment experiment = workload::parse_experiment(document, "test");
  ASSERT_EQ(experiment.points.size(), 3u);
  std::vector<std::uint64_t> reported;
  WorkControl control;
  control.progress = Progress([&](std::string_view stage, std::uint64_t done, std::uint64_t total) {
    EXPECT_EQ(stage, "simulating");
    EXPECT_EQ(total, 3u);
    reported.push_back(done);
  });
  const StoredExperiment stored = simulate_and_store(store, experiment, document, control);
  ASSERT_EQ(stored.runs.size(), 3u);
  EXPECT_EQ(reported, (std::vector<std::uint64_t>{1, 2, 3}));
  for (std::size_t i = 0; i < 3; ++i) {
    const storage::RunRecord run = store.run(stored.runs[i]);
    EXPECT_EQ(run.name, experiment.points[i].name);
    EXPECT_EQ(run.experiment, stored.experiment);
    EXPECT_GT(run.event_count, 0u);
  }
  const auto progress = storage::experiment_progress(store).at(stored.experiment);
  EXPECT_EQ(storage::describe(progress), "complete");
}

// A cancel between points keeps the points stored so far and leaves the experiment visibly
// incomplete; the front-end sees fragscope::Cancelled, not a result.
TEST(SimulateAndStore, ACancelLeavesTheExperimentIncomplete) {
  storage::RunStore store(":memory:");
  const nlohmann::json document = three_points();
  const workload::Experiment experiment = workload::parse_experiment(document, "test");
  WorkControl control;
  control.cancel = CancelToken::make();
  control.progress = Progress([&](std::string_view, std::uint64_t done, std::uint64_t) {
    if (done == 1)
      control.cancel.cancel();
  });
  EXPECT_THROW(simulate_and_store(store, experiment, document, control), Cancelled);
  const auto all = storage::experiment_progress(store);
  ASSERT_EQ(all.size(), 1u);
  const storage::ExperimentProgress& progress = all.begin()->second;
  EXPECT_EQ(progress.stored_points, 1u);
  EXPECT_EQ(progress.expected_points, 3u);
  EXPECT_NE(storage::describe(progress).find("incomplete"), std::string::npos);
}

}  // namespace
}  // namespace fragscope::usecases
