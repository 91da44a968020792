// The post-mortem of a stored run reports one count that grows to 1 as it diagnoses, measures and
// runs the what-if rows; a cancel during the rows stops them (fragscope::Cancelled, no result). A
// mitigation run reports its replay, and a cancel during it stores nothing.
#include <gtest/gtest.h>

#include <string>

#include "engine/allocator/run.h"
#include "storage/db/snapshot_import.h"
#include "tests/progress_test_util.h"
#include "usecases/post_mortem.h"

namespace fragscope::usecases {
namespace {

const std::string kFixtures = FRAGSCOPE_FIXTURES;

storage::RunId import_fixture(storage::RunStore& store, const std::string& name) {
  storage::ImportOptions options;
  options.name = name;
  return storage::import_snapshot(
             store, snapshot::read_snapshot(kFixtures + "/" + name + ".pickle.gz"), options)
      .run;
}

TEST(PostMortemProgress, GrowsToOneAndACancelDuringTheRowsStops) {
  storage::RunStore store(":memory:");
  const storage::RunId run = import_fixture(store, "gpt_oom_cap");

  fragscope::test::ProgressRecorder whole;
  WorkControl control;
  control.progress = whole.progress();
  const StoredPostMortem reported = post_mortem_of(store, run, {}, control);
  ASSERT_TRUE(reported.what_if.has_value()) << reported.what_if_error;
  EXPECT_TRUE(fragscope::test::grows_to_one(whole, 3 + reported.what_if->rows.size()));
  EXPECT_EQ(analysis::to_json(*reported.what_if).dump(),
            analysis::to_json(*post_mortem_of(store, run).what_if).dump());

  // Halfway through the what-if, its third of the count.
  fragscope::test::ProgressRecorder rows;
  rows.cancel_at = (2 + 0.5) / kPostMortemSteps;
  control.progress = rows.progress();
  control.cancel = rows.token;
  EXPECT_THROW(post_mortem_of(store, run, {}, control), Cancelled);
  EXPECT_TRUE(fragscope::test::stopped_before(rows, 0.99));
  EXPECT_EQ(store.run_count(), 1);
}

TEST(MitigationRunProgress, GrowsToOneAndACancelHalfwayStoresNothing) {
  storage::RunStore store(":memory:");
  const storage::RunId run = import_fixture(store, "gpt_oom_cap");

  fragscope::test::ProgressRecorder halfway(alloc::kRunStages);
  halfway.cancel_at = 0.5;
  WorkControl control;
  control.progress = halfway.progress();
  control.cancel = halfway.token;
  EXPECT_THROW(run_mitigation(store, run, "expandable_segments", control), Cancelled);
  EXPECT_TRUE(fragscope::test::stopped_before(halfway, 0.75));
  EXPECT_EQ(store.run_count(), 1);
  EXPECT_FALSE(store.ingesting());

  fragscope::test::ProgressRecorder whole(alloc::kRunStages);
  control = WorkControl{};
  control.progress = whole.progress();
  const storage::RunId stored = run_mitigation(store, run, "expandable_segments", control);
  EXPECT_TRUE(fragscope::test::grows_to_one(whole, 3));
  EXPECT_EQ(store.run_count(), 2);
  EXPECT_EQ(store.run(stored).name, "gpt_oom_cap · expandable_segments");
}

}  // namespace
}  // namespace fragscope::usecases
