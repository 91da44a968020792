// fragscope-cli advise and compare, run as real processes on the real PyTorch recordings.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/cli_process.h"
#include "storage/storage_test_util.h"

namespace fragscope::test {
namespace {

std::string fixture(const std::string& name) {
  return (std::filesystem::path(FRAGSCOPE_FIXTURES) / (name + ".pickle.gz")).string();
}

// A usage error: exit 2, the message (main adds the usage line after it).
void expect_usage_error(const CliResult& result, const std::string& needle) {
  EXPECT_EQ(result.exit_code, 2) << result.err;
  EXPECT_NE(result.err.find(needle), std::string::npos) << result.err;
}

// Bad input: exit 2 and exactly one line naming the problem.
void expect_one_line_error(const CliResult& result, const std::string& needle) {
  EXPECT_EQ(result.exit_code, 2) << result.err;
  EXPECT_NE(result.err.find(needle), std::string::npos) << result.err;
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
}

constexpr const char* kSixGiB = "6442450944";

TEST(AdviseCli, GptOomCapPostMortemAndTable) {
  const auto result =
      run_cli({"advise", fixture("gpt_oom_cap"), "--capacity", kSixGiB, "--json", "-"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto advice = nlohmann::json::parse(result.out);
  ASSERT_EQ(advice["post_mortems"].size(), 1u);
  const auto& pm = advice["post_mortems"][0];
  EXPECT_EQ(pm["cause"], "fragmentation");
  EXPECT_EQ(pm["segment_size"], 168u * 1024 * 1024);
  EXPECT_EQ(pm["pytorch_figures"],
            "Tried to allocate 168.00 MiB. 6.00 GiB allowed; Of the allocated memory 5.80 GiB is "
            "allocated by PyTorch, and 121.25 MiB is reserved by PyTorch but unallocated.");
  const auto& rows = advice["what_if"]["rows"];
  ASSERT_GE(rows.size(), 10u);
  bool has_baseline = false;
  for (const auto& row : rows) {
    if (row["name"] == "baseline") {
      has_baseline = true;
      EXPECT_EQ(row["first_oom_request"], advice["recorded_oom_requests"][0]);
    }
  }
  EXPECT_TRUE(has_baseline);
}

TEST(AdviseCli, OutputIsTheSameForAnyThreadCount) {
  const auto one = run_cli(
      {"advise", fixture("gpt_oom_cap"), "--capacity", kSixGiB, "--threads", "1", "--json", "-"});
  const auto four = run_cli(
      {"advise", fixture("gpt_oom_cap"), "--capacity", kSixGiB, "--threads", "4", "--json", "-"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(one.out, four.out);
  const auto text = run_cli({"advise", fixture("gpt_oom_cap"), "--capacity", kSixGiB});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("OOM at event 21262: fragmentation"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("best: "), std::string::npos);
}

TEST(AdviseCli, ExperimentFileIncludesProgramChanges) {
  storage::test::TempDir dir;
  const std::string path = dir.file("small.json");
  std::ofstream(path) << R"({
    "name": "small",
    "device": {"capacity_bytes": 2147483648},
    "allocator": {"alloc_conf": ""},
    "model": {"kind": "gpt", "layers": 2, "hidden": 256, "heads": 4, "ffn_mult": 4,
              "vocab": 1024, "tied_embeddings": false, "bias": true, "dropout": 0.1,
              "attention": "eager"},
    "training": {"batch_size": 8, "steps": 2, "grad_accum": 1, "precision": "bf16-autocast",
                 "seq_len": {"kind": "fixed", "value": 256}, "checkpointing": "none",
                 "compile": false, "optimizer": "adamw"},
    "parallel": {"fsdp_shards": 1}
  })";
  const auto result = run_cli({"advise", path, "--json", "-"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto advice = nlohmann::json::parse(result.out);
  EXPECT_EQ(advice["kind"], "experiment");
  std::set<std::string> names;
  for (const auto& row : advice["what_if"]["rows"])
    names.insert(row["name"].get<std::string>());
  EXPECT_TRUE(names.contains("micro-batch 4 x accumulation 2"));
  EXPECT_TRUE(names.contains("activation checkpointing"));
  EXPECT_TRUE(names.contains("expandable_segments"));
  EXPECT_EQ(advice["baseline"]["steps"].size(), 2u);
  expect_one_line_error(run_cli({"advise", path, "--variant", "nope"}), "no variant \"nope\"");
}

TEST(AdviseCli, BadInputIsOneLineAndExitTwo) {
  storage::test::TempDir dir;
  const std::string junk = dir.file("junk.pickle");
  std::ofstream(junk) << "not a pickle";
  const auto bad = run_cli({"advise", junk});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("junk.pickle"), std::string::npos) << bad.err;
  const auto missing = run_cli({"advise", dir.file("missing.pickle.gz")});
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  const auto usage = run_cli({"advise"});
  EXPECT_EQ(usage.exit_code, 2);
  expect_usage_error(run_cli({"advise", fixture("gpt_oom_cap"), "--capacity", "0"}), "--capacity");
}

// One database with the two recordings, imported once for the suite.
class CompareCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new storage::test::TempDir;
    for (const char* name : {"gpt_varlen_default", "gpt_varlen_expandable"}) {
      const auto imported = run_cli({"import", fixture(name), "--db", dir_->file("compare.db")});
      ASSERT_EQ(imported.exit_code, 0) << imported.err;
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static storage::test::TempDir* dir_;
  std::string db = dir_->file("compare.db");
};
storage::test::TempDir* CompareCli::dir_ = nullptr;

// The same requests recorded under two configs: aligned phases, the real peaks, and a warning
// that the allocator configs differ.
TEST_F(CompareCli, DefaultVersusExpandable) {
  const auto result = run_cli({"compare", "--db", db, "--runs", "1,2", "--json", "-"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto c = nlohmann::json::parse(result.out);
  ASSERT_EQ(c["runs"].size(), 2u);
  std::map<std::string, nlohmann::json> rows;
  for (const auto& row : c["metrics"])
    rows[row["name"].get<std::string>()] = row["values"];
  EXPECT_EQ(rows.at("peak reserved")[0].get<double>(), 26174554112.0);
  EXPECT_EQ(rows.at("peak reserved")[1].get<double>(), 21172846592.0);
  EXPECT_GT(rows.at("GMLake fragmentation (1 - peak active / peak reserved)")[0].get<double>(),
            rows.at("GMLake fragmentation (1 - peak active / peak reserved)")[1].get<double>());
  EXPECT_EQ(rows.at("cudaMalloc")[0].get<double>(), 144.0);
  EXPECT_EQ(rows.at("page maps + unmaps")[1].get<double>(), 136.0);
  ASSERT_EQ(c["phases"].size(), 10u);
  const auto& last = c["phases"][9];
  EXPECT_EQ(last["peak_reserved"][0], 26174554112u);
  EXPECT_EQ(last["peak_reserved"][1], 21172846592u);
  bool config_warning = false;
  for (const auto& w : c["warnings"])
    config_warning |= w.get<std::string>().find("allocator config differs") != std::string::npos;
  EXPECT_TRUE(config_warning) << c["warnings"].dump();

  const auto text = run_cli({"compare", "--db", db, "--runs", "1,2"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("warning: allocator config differs"), std::string::npos) << text.out;
}

TEST_F(CompareCli, SaveStoresTheComparison) {
  const auto result =
      run_cli({"compare", "--db", db, "--runs", "2,1", "--save", "ab", "--json", "-"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(nlohmann::json::parse(result.out)["comparison_id"], 1);
}

TEST_F(CompareCli, BadArguments) {
  expect_usage_error(run_cli({"compare", "--db", db, "--runs", "1"}), "at least two");
  expect_usage_error(run_cli({"compare", "--db", db, "--runs", "1,x"}), "--runs");
  const auto unknown = run_cli({"compare", "--db", db, "--runs", "1,99"});
  EXPECT_EQ(unknown.exit_code, 2) << unknown.err;
  EXPECT_NE(unknown.err.find("99"), std::string::npos) << unknown.err;
  const auto no_db = run_cli({"compare", "--db", dir_->file("none.db"), "--runs", "1,2"});
  EXPECT_EQ(no_db.exit_code, 2) << no_db.err;
}

}  // namespace
}  // namespace fragscope::test
