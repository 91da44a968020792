// fragscope-cli import --job and job: a real 2-rank DDP recording imported as a job, and the
// imbalance table's JSON contract.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli/cli_process.h"
#include "storage/storage_test_util.h"

namespace fragscope::test {
namespace {

namespace fs = std::filesystem;
const fs::path kImbalance =
    fs::path(FRAGSCOPE_FIXTURES).parent_path() / "ddp-gloo-2.11-h200" / "ddp_gloo_gpt_imbalance";

TEST(JobCli, ImportsSnapshotFilesAsAJobAndPrintsItsImbalance) {
  storage::test::TempDir dir;
  const std::string db = dir.file("jobs.db");
  const auto imported =
      run_cli({"import", (kImbalance / "ddp_gloo_gpt_imbalance_rank1.pickle.gz").string(),
               (kImbalance / "ddp_gloo_gpt_imbalance_rank0.pickle.gz").string(), "--job", "imb",
               "--db", db, "--json", "-"});
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  const auto summary = nlohmann::json::parse(imported.out);
  EXPECT_EQ(summary["job"], "imb");
  ASSERT_EQ(summary["ranks"].size(), 2u);
  EXPECT_EQ(summary["ranks"][0]["rank"], 0);

  const auto table = run_cli({"job", "--job", "imb", "--db", db});
  EXPECT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("worst rank"), std::string::npos) << table.out;

  const auto json = run_cli({"job", "--job", "imb", "--db", db, "--json", "-"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto balance = nlohmann::json::parse(json.out);
  EXPECT_EQ(balance.size(), 3u);
  EXPECT_EQ(balance["job"], "imb");
  std::ifstream stats_file(kImbalance / "ddp_gloo_gpt_imbalance_rank1.stats.json");
  const auto stats = nlohmann::json::parse(stats_file);
  for (const auto& rank : balance["ranks"]) {
    EXPECT_EQ(rank.size(), 6u);
    for (const char* key :
         {"rank", "run_id", "peak_allocated", "peak_reserved", "fragmentation", "oom"})
      EXPECT_TRUE(rank.contains(key)) << key;
  }
  EXPECT_EQ(balance["ranks"][1]["peak_reserved"], stats["memory_stats"]["reserved_bytes.all.peak"]);
  EXPECT_EQ(balance["ranks"][1]["oom"], true);
  EXPECT_EQ(balance["worst_rank"], 1);

  const auto again = run_cli({"import", kImbalance.string(), "--job", "imb", "--db", db});
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_NE(again.err.find("already exists"), std::string::npos) << again.err;
  const auto missing = run_cli({"job", "--job", "nope", "--db", db});
  EXPECT_EQ(missing.exit_code, 2);
  const auto listed = run_cli({"job", "--db", db, "--json", "-"});
  EXPECT_EQ(nlohmann::json::parse(listed.out).size(), 1u);
}

}  // namespace
}  // namespace fragscope::test
