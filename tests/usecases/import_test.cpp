#include "usecases/import.h"

#include <gtest/gtest.h>

#include <string>

#include "engine/core/error.h"

namespace fragscope::usecases {
namespace {

const std::string kFixtures = FRAGSCOPE_FIXTURES;

// The companions fragscope-record writes beside a snapshot come with it, and go in with the run.
TEST(ImportRecording, ReadsTheCompanionStatsAndStoresThemWithTheRun) {
  const Recording recording = read_recording(kFixtures + "/gpt_oom_cap.pickle.gz");
  ASSERT_TRUE(recording.stats.has_value());
  EXPECT_EQ(recording.stats_file, kFixtures + "/gpt_oom_cap.stats.json");
  EXPECT_FALSE(recording.environment.has_value());
  EXPECT_TRUE(recording.environment_file.empty());

  storage::RunStore store(":memory:");
  const storage::ImportResult result = import_recording(store, recording, {});
  const storage::RunRecord run = store.run(result.run);
  EXPECT_EQ(run.name, "gpt_oom_cap");
  EXPECT_EQ(run.status, storage::RunStatus::oom);
  EXPECT_TRUE(run.summary.contains("memory_stats"));
  EXPECT_TRUE(run.summary.contains("allowed_bytes"));
}

TEST(ImportRecording, ACancelledImportLeavesNoRun) {
  const Recording recording = read_recording(kFixtures + "/gpt_oom_cap.pickle.gz");
  storage::RunStore store(":memory:");
  WorkControl control;
  control.cancel = CancelToken::make();
  control.cancel.cancel();
  EXPECT_THROW(import_recording(store, recording, {}, control), Cancelled);
  EXPECT_EQ(store.run_count(), 0);
}

TEST(ImportRecording, AMissingFileIsAnInputErrorNamingIt) {
  try {
    (void)read_recording(kFixtures + "/no_such.pickle");
    FAIL() << "expected an InputError";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("no_such.pickle"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace fragscope::usecases
