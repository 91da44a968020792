// fragscope-cli run: the contract of the command (JSON shape, storage, determinism, errors).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli/cli_process.h"
#include "storage/db/run_store.h"

namespace fragscope::test {
namespace {

namespace fs = std::filesystem;

class CliRun : public testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() /
        ("fragscope-run-test-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    const fs::path path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }

  // A small model on a 1 GiB device: batch 2 fits, batch 64 does not.
  std::string small_experiment() {
    return write("small.json", R"({
      "name": "small",
      "device": {"capacity_bytes": 1073741824},
      "allocator": {"alloc_conf": "max_split_size_mb:128"},
      "model": {"kind": "gpt", "layers": 2, "hidden": 256, "heads": 4, "vocab": 2048},
      "training": {"batch_size": 2, "steps": 3, "seq_len": {"kind": "fixed", "value": 256}},
      "variants": [{"name": "fits", "set": {}},
                   {"name": "too-big", "set": {"training.batch_size": 64}}],
      "sweep": {"training.grad_accum": [1, 2]}
    })");
  }

  fs::path dir_;
};

TEST_F(CliRun, RunsEveryPointAndStoresThem) {
  const std::string db = (dir_ / "runs.db").string();
  const CliResult r = run_cli({"run", small_experiment(), "--db", db, "--threads", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json out = nlohmann::json::parse(r.out);
  ASSERT_EQ(out["runs"].size(), 4U);
  EXPECT_EQ(out["runs"][0]["name"], "fits");
  EXPECT_EQ(out["runs"][0]["outcome"], "ok");
  EXPECT_TRUE(out["runs"][0]["oom"].is_null());
  EXPECT_EQ(out["runs"][0]["steps_completed"], 3);
  EXPECT_EQ(out["runs"][1]["name"], "too-big");
  EXPECT_EQ(out["runs"][1]["outcome"], "oom");
  EXPECT_GT(out["runs"][1]["oom"]["requested"].get<std::uint64_t>(), 0U);
  EXPECT_EQ(out["runs"][1]["steps_completed"], 0);
  EXPECT_EQ(out["runs"][2]["name"], "sweep:training.grad_accum=1");
  for (const auto& run : out["runs"]) {
    EXPECT_GE(run["peak_reserved"].get<std::uint64_t>(),
              run["peak_allocated"].get<std::uint64_t>());
    EXPECT_EQ(run["memory_stats"]["reserved_bytes.all.peak"], run["peak_reserved"]);
    EXPECT_GT(run["estimated_step_time_ratio"].get<double>(), 0.0);
  }
  EXPECT_NE(r.err.find("run: 4/4"), std::string::npos);

  storage::RunStore store(db);
  ASSERT_EQ(store.list_experiments().size(), 1U);
  const auto runs = store.runs_of(store.list_experiments()[0].id);
  ASSERT_EQ(runs.size(), 4U);
  EXPECT_EQ(runs[1].status, storage::RunStatus::oom);
  EXPECT_GT(runs[0].event_count, 0U);
  EXPECT_EQ(store.oom_reports(runs[1].id).size(), 1U);
}

TEST_F(CliRun, DeterministicAcrossThreadCounts) {
  const std::string file = small_experiment();
  const CliResult one = run_cli({"run", file, "--no-store", "--threads", "1"});
  const CliResult two = run_cli({"run", file, "--no-store", "--threads", "3"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(one.out, two.out);
  // ...and across bounds on the points held in memory.
  const CliResult held =
      run_cli({"run", file, "--no-store", "--threads", "3", "--max-points-held", "1"});
  EXPECT_EQ(one.out, held.out) << held.err;
}

TEST_F(CliRun, BadExperimentIsExitTwoNamingThePath) {
  const std::string file = write("bad.json", R"({"name": "x", "device": {"preset": "A100-40GB"},
      "model": {"layers": 2, "hidden": 256, "heads": 4, "vocab": 100, "hiden": 3}})");
  const CliResult r = run_cli({"run", file, "--no-store"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("$.model.hiden: unknown key (did you mean \"hidden\"?)"), std::string::npos)
      << r.err;
}

TEST_F(CliRun, BadAllocConfIsExitTwo) {
  const std::string file = write("conf.json", R"({"name": "x", "device": {"preset": "L4"},
      "allocator": {"alloc_conf": "max_split_size_mb:banana"},
      "model": {"layers": 1, "hidden": 64, "heads": 2, "vocab": 100},
      "training": {"steps": 1, "seq_len": {"kind": "fixed", "value": 16}}})");
  const CliResult r = run_cli({"run", file, "--no-store"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("alloc_conf"), std::string::npos) << r.err;
}

TEST_F(CliRun, MissingFileAndUsage) {
  EXPECT_EQ(run_cli({"run", (dir_ / "nope.json").string(), "--no-store"}).exit_code, 2);
  EXPECT_EQ(run_cli({"run"}).exit_code, 2);
  EXPECT_EQ(run_cli({"run", small_experiment(), "--threads", "0"}).exit_code, 2);
  const CliResult none = run_cli({"run", small_experiment(), "--max-points-held", "0"});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("--max-points-held: expected 1..65536"), std::string::npos) << none.err;
}

}  // namespace
}  // namespace fragscope::test
