#include "usecases/simulate.h"

#include <gtest/gtest.h>

#include "engine/workload/runner.h"
#include "storage/db/experiment_status.h"

namespace fragscope::usecases {
namespace {

nlohmann::json three_points() {
  return nlohmann::json::parse(R"({"name": "x", "device": {"preset": "L4"},
      "model": {"layers": 1, "hidden": 64, "heads": 2, "vocab": 100},
      "training": {"steps": 1, "seq_len": {"kind": "fixed", "value": 16}},
      "sweep": {"training.batch_size": [1, 2, 3]}})");
}

// Three points whose peaks differ, so a point's figures cannot pass for another's.
nlohmann::json three_sizes() {
  return nlohmann::json::parse(R"({"name": "sizes", "device": {"preset": "L4"},
      "model": {"layers": 2, "hidden": 256, "heads": 4, "vocab": 1000},
      "training": {"steps": 1, "seq_len": {"kind": "fixed", "value": 512}},
      "sweep": {"training.batch_size": [1, 4, 16]}})");
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

// The GUI's designer stores an experiment one point at a time (simulate_and_store); `fragscope-cli
// run` runs the points on a thread pool, or stores nothing with --no-store. One use case: the
// same points give the same figures and the same stored runs whichever way they ran.
TEST(SimulateExperiment, TheCliPoolGivesTheDesignersNumbers) {
  const nlohmann::json document = three_sizes();
  const workload::Experiment experiment = workload::parse_experiment(document, "test");
  storage::RunStore gui_store(":memory:");
  const StoredExperiment gui = simulate_and_store(gui_store, experiment, document);

  storage::RunStore cli_store(":memory:");
  SimulateOptions options;
  options.store = &cli_store;
  options.threads = 3;
  std::vector<workload::PointResult> reported;
  std::vector<std::size_t> order;
  options.on_point = [&](std::size_t i, const workload::PointResult& result,
                         std::optional<storage::RunId> run) {
    order.push_back(i);
    EXPECT_EQ(run.has_value(), options.store != nullptr);
    reported.push_back(result);
  };
  const StoredExperiment cli = simulate_experiment(experiment, document, options);
  EXPECT_EQ(order, (std::vector<std::size_t>{0, 1, 2}));
  ASSERT_EQ(cli.runs.size(), gui.runs.size());
  for (std::size_t i = 0; i < gui.runs.size(); ++i) {
    const storage::RunRecord a = gui_store.run(gui.runs[i]);
    const storage::RunRecord b = cli_store.run(cli.runs[i]);
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.event_count, b.event_count);
    EXPECT_EQ(a.summary["peak_reserved"], b.summary["peak_reserved"]);
    EXPECT_EQ(a.summary["peak_allocated"], b.summary["peak_allocated"]);
    EXPECT_EQ(a.summary["peak_reserved"].get<Bytes>(), reported[i].peak_reserved);
    // ...and each is its own point's simulation, not a neighbour's.
    EXPECT_EQ(reported[i].peak_allocated,
              workload::run_point(experiment.points[i], false).peak_allocated);
  }
  EXPECT_EQ(storage::describe(storage::experiment_progress(cli_store).at(cli.experiment)),
            "complete");

  // --no-store: the same figures, nothing written.
  storage::RunStore untouched(":memory:");
  options.store = nullptr;
  reported.clear();
  const StoredExperiment none = simulate_experiment(experiment, document, options);
  EXPECT_TRUE(none.runs.empty());
  ASSERT_EQ(reported.size(), 3u);
  EXPECT_EQ(reported[2].peak_reserved,
            gui_store.run(gui.runs[2]).summary["peak_reserved"].get<Bytes>());
}

// The bound on points held at once (SimulateOptions::max_points_held) changes when a point may
// start, never what it gives.
TEST(SimulateExperiment, ThePointsHeldChangeNoResult) {
  const nlohmann::json document = three_sizes();
  const workload::Experiment experiment = workload::parse_experiment(document, "test");
  auto peaks_with = [&](std::size_t held) {
    SimulateOptions options;
    options.threads = 3;
    options.max_points_held = held;
    std::vector<Bytes> peaks;
    options.on_point = [&](std::size_t, const workload::PointResult& result,
                           std::optional<storage::RunId>) {
      peaks.push_back(result.peak_reserved);
      peaks.push_back(result.events.size());
    };
    simulate_experiment(experiment, document, options);
    return peaks;
  };
  const std::vector<Bytes> unbounded = peaks_with(3);
  ASSERT_EQ(unbounded.size(), 6u);
  EXPECT_EQ(peaks_with(1), unbounded);
  EXPECT_EQ(peaks_with(0), unbounded);  // default_points_held(3)
  EXPECT_EQ(default_points_held(3), 6u);
}

}  // namespace
}  // namespace fragscope::usecases
