// A cancelled import leaves nothing, whatever stage the cancel arrives in, up to the last poll
// before the commit; the store stays usable afterwards.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/core/cancel.h"
#include "storage/db/import_stages.h"
#include "storage/db/snapshot_import.h"
#include "storage_test_util.h"

namespace fragscope::storage {
namespace {

using test::fixture;

struct Report {
  std::string stage;
  std::uint64_t done = 0;
  std::uint64_t total = 0;
};

// Imports with a progress callback that cancels at report number `cancel_at` (none when
// negative); returns the reports seen.
std::vector<Report> import_with_cancel_at(RunStore& store, const snapshot::Snapshot& snapshot,
                                          long cancel_at, bool& cancelled) {
  std::vector<Report> reports;
  WorkControl control;
  control.cancel = CancelToken::make();
  control.progress = Progress(
      [&, token = control.cancel](std::string_view stage, std::uint64_t done, std::uint64_t total) {
        if (static_cast<long>(reports.size()) == cancel_at)
          token.cancel();
        reports.push_back({std::string(stage), done, total});
      });
  ImportOptions options;
  options.name = "cancel test";
  options.source_file = "gpt_oom_cap.pickle.gz";
  cancelled = false;
  try {
    import_snapshot(store, snapshot, options, control);
  } catch (const Cancelled&) {
    cancelled = true;
  }
  return reports;
}

TEST(ImportCancel, CancelAtEveryStageLeavesNoRun) {
  const auto snapshot = snapshot::read_snapshot(fixture("gpt_oom_cap", ".pickle.gz"));
  RunStore store(":memory:");
  bool cancelled = false;
  const auto reports = import_with_cancel_at(store, snapshot, -1, cancelled);
  ASSERT_FALSE(cancelled);
  ASSERT_EQ(store.run_count(), 1);
  std::vector<std::string> stages;
  for (const auto& report : reports)
    if (stages.empty() || stages.back() != report.stage)
      stages.push_back(report.stage);
  EXPECT_EQ(stages, (std::vector<std::string>{"layout", "stacks", "events", "ooms", "commit"}));

  // The last report says the run is committed: every report before it can still cancel.
  ASSERT_EQ(reports.back().stage, "commit");
  ASSERT_EQ(reports.back().done, 1u);
  for (long k = 0; k + 1 < static_cast<long>(reports.size()); ++k) {
    const auto seen = import_with_cancel_at(store, snapshot, k, cancelled);
    EXPECT_TRUE(cancelled) << "a cancel at " << reports[k].stage << " (report " << k
                           << ") was ignored";
    EXPECT_EQ(store.run_count(), 1) << "a cancel at " << reports[k].stage << " committed the run";
    EXPECT_FALSE(store.ingesting());
    EXPECT_EQ(store.database().query_int("SELECT count(*) FROM event_chunks WHERE run_id NOT IN "
                                         "(SELECT id FROM runs)"),
              0);
  }
  // The store takes the next import whole.
  import_with_cancel_at(store, snapshot, -1, cancelled);
  EXPECT_FALSE(cancelled);
  EXPECT_EQ(store.run_count(), 2);
}

// The stages, as one fraction for a progress bar, only grow and reach 1 once the run is stored.
TEST(ImportCancel, ProgressGrowsToOneAtTheCommit) {
  const auto snapshot = snapshot::read_snapshot(fixture("gpt_oom_cap", ".pickle.gz"));
  RunStore store(":memory:");
  std::vector<double> fractions;
  WorkControl control;
  control.progress = fraction_progress(kImportStages, [&](double f) {
    fractions.push_back(f);
    if (f == 1.0) {
      EXPECT_EQ(store.run_count(), 1) << "1 before the run was committed";
    }
  });
  ImportOptions options;
  options.name = "progress";
  import_snapshot(store, snapshot, options, control);
  ASSERT_GE(fractions.size(), 5u);
  for (std::size_t i = 1; i < fractions.size(); ++i)
    EXPECT_LT(fractions[i - 1], fractions[i]);
  EXPECT_EQ(fractions.back(), 1.0);
}

TEST(ImportCancel, FinishRunPollsTheCancelRightBeforeTheCommit) {
  // A cancel that arrives after every progress report, while the last chunks are written, is
  // still seen before the commit.
  RunStore store(":memory:");
  const RunId id = store.begin_run(RunRecord{});
  store.append_events(id, test::synthetic_trace(10'000, 2));
  const CancelToken late = CancelToken::make();
  late.cancel();
  EXPECT_THROW(store.finish_run(id, RunStatus::ok, {}, 0, late), Cancelled);
  EXPECT_EQ(store.run_count(), 0);
  EXPECT_FALSE(store.ingesting());
  EXPECT_EQ(store.database().query_int("SELECT count(*) FROM event_chunks"), 0);
}

}  // namespace
}  // namespace fragscope::storage
