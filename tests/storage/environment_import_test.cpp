// Importing fragscope-record's NAME.env.json with the snapshot: stored whole with the run in the
// import's transaction, the run's environment columns taken from it, and a bad fingerprint
// stores nothing.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "engine/analysis/recorded_environment.h"
#include "engine/core/error.h"
#include "storage/db/job_import.h"
#include "storage/db/snapshot_import.h"
#include "storage_test_util.h"

namespace fragscope::storage {
namespace {

const std::string kRecorded = std::string(FRAGSCOPE_FIXTURES) + "/../fragscope-record";
const std::string kEnv = std::string(FRAGSCOPE_FIXTURES) + "/../env";
const std::string kSnapshot = kRecorded + "/oom_fraction.oom.pickle.gz";

std::string error_of(const std::function<void()>& work) {
  try {
    work();
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

TEST(EnvironmentImport, CompanionFilesOfARecordedSet) {
  EXPECT_EQ(companion_environment_path(kSnapshot), kRecorded + "/oom_fraction.oom.env.json");
  EXPECT_EQ(companion_stats_path(kSnapshot), kRecorded + "/oom_fraction.oom.stats.json");
  EXPECT_EQ(run_name_for(kSnapshot), "oom_fraction.oom");
  EXPECT_FALSE(read_companion_environment(kEnv + "/no-such.pickle").has_value());
}

TEST(EnvironmentImport, StoredWithTheRunAndItsColumns) {
  const auto snapshot = snapshot::read_snapshot(kSnapshot);
  ImportOptions options;
  options.name = "oom_fraction.oom";
  options.source_file = kSnapshot;
  options.recorded_stats = read_companion_stats(kSnapshot);
  options.recorded_environment = read_companion_environment(kSnapshot);
  options.recorded_environment_file = companion_environment_path(kSnapshot);
  ASSERT_TRUE(options.recorded_environment);
  RunStore store(":memory:");
  const ImportResult result = import_snapshot(store, snapshot, options);
  const RunRecord run = store.run(result.run);
  EXPECT_EQ(run.environment.torch_version, "2.11.0+cu130");
  EXPECT_EQ(run.environment.cuda_version, "13.0");
  EXPECT_EQ(run.environment.driver_version, "580.159.04");
  EXPECT_EQ(run.environment.gpu_name, "NVIDIA H200");
  EXPECT_EQ(run.environment.gpu_memory, 150109880320u);
  // The recorder's cap (fraction x device total, as the allocator enforced it).
  EXPECT_EQ(run.summary["allowed_bytes"], 2147483648u);
  const auto stored = store.recorded_environment(result.run);
  ASSERT_TRUE(stored);
  EXPECT_EQ(*stored, *options.recorded_environment);
  const auto env = analysis::parse_recorded_environment(*stored, "stored");
  EXPECT_EQ(analysis::describe_torch(env), "2.11.0+cu130 pip wheel (CUDA 13.0)");
  EXPECT_EQ(env.torch_cudnn, "9.19.0");
  EXPECT_FALSE(env.packages.empty());
  EXPECT_EQ(store.database().query_int("SELECT count(*) FROM run_environments"), 1);
  store.delete_run(result.run);
  EXPECT_EQ(store.database().query_int("SELECT count(*) FROM run_environments"), 0);
}

TEST(EnvironmentImport, RunWithoutFingerprintHasNone) {
  const auto snapshot = snapshot::read_snapshot(kSnapshot);
  ImportOptions options;
  options.name = "plain";
  options.source_file = kSnapshot;
  RunStore store(":memory:");
  const ImportResult result = import_snapshot(store, snapshot, options);
  EXPECT_FALSE(store.recorded_environment(result.run).has_value());
}

TEST(EnvironmentImport, BadFingerprintStoresNothing) {
  const auto snapshot = snapshot::read_snapshot(kSnapshot);
  RunStore store(":memory:");
  ImportOptions options;
  options.name = "bad";
  options.source_file = kSnapshot;
  options.recorded_environment =
      nlohmann::json::parse(R"({"format": "fragscope-env/1", "gpus": [{"name": 42}]})");
  options.recorded_environment_file = "bad.env.json";
  EXPECT_EQ(error_of([&] { import_snapshot(store, snapshot, options); }),
            "bad.env.json: gpus[0].name: expected a string, got 42");
  EXPECT_EQ(store.run_count(), 0);
  EXPECT_EQ(store.database().query_int("SELECT count(*) FROM run_environments"), 0);
}

TEST(EnvironmentImport, BadFilesNameTheFile) {
  test::TempDir dir;
  const std::string broken = dir.file("broken.env.json");
  std::ofstream(broken) << "{\"format\": \"fragscope-env/1\", \"torch\": ";
  EXPECT_EQ(
      error_of([&] { read_recording_environment(broken); }).rfind(broken + ": not valid JSON", 0),
      0u);
  const std::string stats_file = dir.file("stats.env.json");
  std::ofstream(stats_file) << "{\"memory_stats\": {}}";
  EXPECT_EQ(error_of([&] { read_recording_environment(stats_file); }),
            stats_file +
                ": format: expected \"fragscope-env/1\" (an environment fingerprint written by "
                "fragscope-record), got none");
  EXPECT_EQ(error_of([&] { read_recording_environment(dir.file("absent.env.json")); }),
            dir.file("absent.env.json") + ": no such file (the environment file)");
  // A snapshot whose companion fingerprint is bad fails the import before anything is written.
  std::ofstream(dir.file("run.env.json")) << "[1, 2]";
  EXPECT_NE(error_of([&] {
              read_companion_environment(dir.file("run.pickle"));
            }).find("run.env.json: expected a JSON object"),
            std::string::npos);
}

TEST(EnvironmentImport, HandWrittenFingerprintsImport) {
  const auto snapshot = snapshot::read_snapshot(kSnapshot);
  RunStore store(":memory:");
  for (const std::string name :
       {"torch-2.4.1-pip-cu121.env.json", "torch-2.11.0-conda-cu130.env.json"}) {
    ImportOptions options;
    options.name = name;
    options.source_file = kSnapshot;
    options.recorded_environment = read_recording_environment(kEnv + "/" + name);
    options.recorded_environment_file = kEnv + "/" + name;
    const ImportResult result = import_snapshot(store, snapshot, options);
    EXPECT_TRUE(store.recorded_environment(result.run).has_value());
  }
  const auto runs = store.list_runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].environment.torch_version, "2.4.1+cu121");
  EXPECT_EQ(runs[0].environment.gpu_name, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(runs[1].environment.torch_version, "2.11.0");
  EXPECT_EQ(runs[1].environment.host, "h200-node-1");
}

TEST(EnvironmentImport, EveryRankOfARecordedJobKeepsItsFingerprint) {
  // The torchrun job fragscope-record wrote on the GPU machine: its manifest names each rank's
  // env file.
  RunStore store(":memory:");
  const JobImportResult result =
      import_job(store, read_job_manifest(kRecorded + "/ddp/fragscope-job.json"), {});
  ASSERT_EQ(result.ranks.size(), 2u);
  for (const auto& rank : result.ranks) {
    const auto stored = store.recorded_environment(rank.result.run);
    ASSERT_TRUE(stored) << rank.rank;
    EXPECT_EQ(analysis::parse_recorded_environment(*stored, "stored").torch_version,
              "2.11.0+cu130");
    EXPECT_EQ(store.run(rank.result.run).environment.driver_version, "580.159.04");
  }
}

}  // namespace
}  // namespace fragscope::storage
