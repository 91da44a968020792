// fragscope-cli env: a run's recorded environment, the diff of two, the environment.yml; and
// import picking up NAME.env.json beside the snapshot.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "cli/cli_process.h"

namespace fragscope::test {
namespace {

const std::string kRecorded = std::string(FRAGSCOPE_FIXTURES) + "/../fragscope-record";
const std::string kEnv = std::string(FRAGSCOPE_FIXTURES) + "/../env";
const std::string kPip = kEnv + "/torch-2.4.1-pip-cu121.env.json";
const std::string kConda = kEnv + "/torch-2.11.0-conda-cu130.env.json";

class CliEnv : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("fragscope-cli-env-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    db_ = (dir_ / "runs.db").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Imports the GPU recording's OOM set (its NAME.env.json is beside it); returns the run id.
  std::string import_recorded(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {
        "import", kRecorded + "/oom_fraction.oom.pickle.gz", "--db", db_, "--json", "-"};
    args.insert(args.end(), extra.begin(), extra.end());
    const CliResult result = run_cli(args);
    EXPECT_EQ(result.exit_code, 0) << result.err;
    const auto out = nlohmann::json::parse(result.out);
    return std::to_string(out.at("run_id").get<int>());
  }

  std::filesystem::path dir_;
  std::string db_;
};

TEST_F(CliEnv, ImportPicksUpTheFingerprintAndEnvShowsIt) {
  const CliResult imported =
      run_cli({"import", kRecorded + "/oom_fraction.oom.pickle.gz", "--db", db_, "--json", "-"});
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  const auto out = nlohmann::json::parse(imported.out);
  EXPECT_EQ(out.at("recorded_environment"), kRecorded + "/oom_fraction.oom.env.json");
  const std::string run = std::to_string(out.at("run_id").get<int>());
  const CliResult shown = run_cli({"env", run, "--db", db_});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_NE(shown.out.find("torch: 2.11.0+cu130 pip wheel (CUDA 13.0)"), std::string::npos)
      << shown.out;
  EXPECT_NE(shown.out.find("cuDNN: 9.19.0"), std::string::npos);
  EXPECT_NE(shown.out.find("GPU 0: NVIDIA H200 (139.80 GiB), sm 9.0"), std::string::npos);
  const CliResult json = run_cli({"env", run, "--db", db_, "--json", "-"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_EQ(nlohmann::json::parse(json.out).at("format"), "fragscope-env/1");
}

TEST_F(CliEnv, DiffOfTwoImportedRuns) {
  const std::string recorded = import_recorded();
  const std::string conda = import_recorded({"--env", kConda, "--name", "conda"});
  const CliResult diff = run_cli({"env", "--diff", recorded, conda, "--db", db_});
  ASSERT_EQ(diff.exit_code, 0) << diff.err;
  EXPECT_NE(diff.out.find("torch: 2.11.0+cu130 pip wheel (CUDA 13.0) vs 2.11.0 conda from "
                          "pytorch (CUDA 13.0)"),
            std::string::npos)
      << diff.out;
  const CliResult same = run_cli({"env", "--diff", recorded, recorded, "--db", db_});
  EXPECT_NE(same.out.find("same environment"), std::string::npos);
  // Files work too, without importing.
  const CliResult files = run_cli({"env", "--diff", kPip, kConda, "--json", "-"});
  ASSERT_EQ(files.exit_code, 0) << files.err;
  const auto list = nlohmann::json::parse(files.out).at("differences");
  ASSERT_FALSE(list.empty());
  EXPECT_EQ(list[0].at("point"), "torch");
  EXPECT_EQ(list[0].at("first"), "2.4.1+cu121 pip wheel (CUDA 12.1)");
  // Compare warns with the same points.
  const CliResult compare = run_cli({"compare", "--runs", recorded + "," + conda, "--db", db_});
  ASSERT_EQ(compare.exit_code, 0) << compare.err;
  EXPECT_NE(compare.out.find("environment differs (torch): #" + recorded +
                             " oom_fraction.oom 2.11.0+cu130 pip wheel (CUDA 13.0) vs #" + conda +
                             " conda 2.11.0 conda from pytorch (CUDA 13.0)"),
            std::string::npos)
      << compare.out;
}

TEST_F(CliEnv, CondaYmlIsWrittenAndNeverOverwrites) {
  const std::string run = import_recorded({"--env", kConda, "--name", "conda run"});
  const std::string target = (dir_ / "environment.yml").string();
  const CliResult written = run_cli({"env", run, "--db", db_, "--conda-yml", "--out", target});
  ASSERT_EQ(written.exit_code, 0) << written.err;
  std::ifstream in(target);
  const std::string yml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(yml.find("name: conda_run\n"), std::string::npos) << yml;
  EXPECT_NE(yml.find("  - pytorch=2.11.0=py3.12_cuda13.0_cudnn9.19.0_0\n"), std::string::npos);
  const CliResult again = run_cli({"env", run, "--db", db_, "--conda-yml", "--out", target});
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_NE(again.err.find("exists already"), std::string::npos) << again.err;
}

TEST_F(CliEnv, ClearErrors) {
  const CliResult no_db_run = run_cli({"env", "7", "--db", db_});
  EXPECT_EQ(no_db_run.exit_code, 2);
  const std::string bare = import_recorded({"--env", kPip});
  // A run imported with no fingerprint says so.
  const CliResult plain_import = run_cli({"import",
                                          kRecorded + "/../torch-2.11-h200/"
                                                      "streams_default.pickle.gz",
                                          "--db", db_, "--json", "-"});
  ASSERT_EQ(plain_import.exit_code, 0) << plain_import.err;
  const std::string plain =
      std::to_string(nlohmann::json::parse(plain_import.out).at("run_id").get<int>());
  const CliResult none = run_cli({"env", plain, "--db", db_});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("has no recorded environment"), std::string::npos) << none.err;
  // A bad --env file is refused before anything is stored.
  const std::string bad = (dir_ / "bad.env.json").string();
  std::ofstream(bad) << "{\"format\": \"fragscope-env/1\", \"torch\": {\"version\": 2}}";
  const CliResult refused =
      run_cli({"import", kRecorded + "/oom_fraction.oom.pickle.gz", "--db", db_, "--env", bad});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find(bad + ": torch.version: expected a string, got 2"), std::string::npos)
      << refused.err;
  const CliResult runs = run_cli({"runs", "--db", db_, "--json", "-"});
  EXPECT_EQ(nlohmann::json::parse(runs.out).size(), 2u) << "the refused import stored nothing";
  const CliResult usage = run_cli({"env", "--diff", bare, "--db", db_});
  EXPECT_EQ(usage.exit_code, 2);
}

}  // namespace
}  // namespace fragscope::test
