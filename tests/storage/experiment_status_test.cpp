// An experiment is complete or visibly incomplete: a run interrupted after some of its points
// leaves the experiment marked with how many points it holds.
#include <gtest/gtest.h>

#include "storage/db/experiment_status.h"
#include "storage/db/schema.h"
#include "storage_test_util.h"

namespace fragscope::storage {
namespace {

void store_point(RunStore& store, ExperimentId experiment, const std::string& name) {
  RunRecord record;
  record.name = name;
  record.experiment = experiment;
  const RunId id = store.begin_run(record);
  store.append_events(id, test::synthetic_trace(100, 3));
  store.finish_run(id, RunStatus::ok);
}

TEST(ExperimentStatus, InterruptedExperimentIsIncompleteWithItsCount) {
  RunStore store(":memory:");
  const ExperimentId id = begin_experiment(store, "sweep", nlohmann::json::object(), 5);
  store_point(store, id, "a");
  store_point(store, id, "b");
  // The process dies here: nothing else is written.
  const auto progress = experiment_progress(store).at(id);
  EXPECT_FALSE(progress.complete);
  EXPECT_EQ(progress.expected_points, 5U);
  EXPECT_EQ(progress.stored_points, 2U);
  EXPECT_EQ(describe(progress), "incomplete (2 of 5 runs)");
}

TEST(ExperimentStatus, FinishedExperimentIsComplete) {
  RunStore store(":memory:");
  const ExperimentId id = begin_experiment(store, "one", nlohmann::json::object(), 1);
  store_point(store, id, "only");
  finish_experiment(store, id);
  EXPECT_EQ(describe(experiment_progress(store).at(id)), "complete");
}

TEST(ExperimentStatus, ExperimentsFromBeforeTheMigrationCountAsComplete) {
  Database db(":memory:");
  migrate_to(db, 3);
  db.exec("INSERT INTO experiments(name, created_at) VALUES ('old', '2026-01-01T00:00:00Z')");
  migrate_to(db, latest_schema_version());
  EXPECT_EQ(db.query_int("SELECT count(*) FROM experiments WHERE status = 'complete'"), 1);
}

}  // namespace
}  // namespace fragscope::storage
