// fragscope-record's own GPU recordings (tests/fixtures/fragscope-record): `fragscope-cli replay`
// reproduces every set exactly under the cap the recorder wrote (allowed_bytes): segment events,
// OOMs, all of memory_stats() and the memory_summary() text. The multi-rank job's manifest lists
// both ranks, and each rank replays exactly too.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "cli/cli_process.h"

namespace fragscope::test {
namespace {

const std::string kRecorded = std::string(FRAGSCOPE_FIXTURES) + "/../fragscope-record";

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

nlohmann::json read_json(const std::string& path) {
  return nlohmann::json::parse(read_text(path));
}

// Replays BASE.pickle.gz under BASE.stats.json's allowed_bytes and checks it against the set.
void expect_exact_replay(const std::string& base, std::size_t expected_ooms) {
  SCOPED_TRACE(base);
  const nlohmann::json stats = read_json(base + ".stats.json");
  std::vector<std::string> args = {"replay", base + ".pickle.gz", "--json", "-"};
  if (stats.at("allowed_bytes").is_number())
    args.insert(args.end(),
                {"--capacity", std::to_string(stats.at("allowed_bytes").get<std::uint64_t>())});
  const CliResult result = run_cli(args);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const nlohmann::json out = nlohmann::json::parse(result.out);
  EXPECT_EQ(out.at("entries"), stats.at("history").at("trace_entries"));
  EXPECT_EQ(out.at("ooms").size(), expected_ooms);
  EXPECT_EQ(out.at("recorded").at("segment_events_match"), true);
  EXPECT_EQ(out.at("recorded").at("ooms_match"), true);
  EXPECT_TRUE(out.at("recorded").at("first_divergence").is_null());
  EXPECT_EQ(out.at("memory_stats").size(), 122u);
  EXPECT_EQ(out.at("memory_stats"), stats.at("memory_stats"));
  EXPECT_EQ(out.at("memory_summary"), read_text(base + ".summary.txt"));
}

TEST(RecordedSets, OomSetReplaysExactlyUnderTheRecordedCap) {
  const nlohmann::json stats = read_json(kRecorded + "/oom_fraction.oom.stats.json");
  EXPECT_EQ(stats.at("moment"), "oom");
  EXPECT_EQ(stats.at("allowed_bytes"), 2147483648u);
  EXPECT_EQ(stats.at("oom").at("device_limit"), 2147483648u);
  EXPECT_NE(stats.at("oom_message").get<std::string>().find("2.00 GiB allowed"), std::string::npos);
  expect_exact_replay(kRecorded + "/oom_fraction.oom", 1);
  // PyTorch's message and the model's agree on what was asked.
  const CliResult result = run_cli({"replay", kRecorded + "/oom_fraction.oom.pickle.gz",
                                    "--capacity", "2147483648", "--json", "-"});
  const auto oom = nlohmann::json::parse(result.out).at("ooms").at(0);
  EXPECT_NE(oom.at("message").get<std::string>().find("Tried to allocate 288.00 MiB"),
            std::string::npos);
}

TEST(RecordedSets, ExitSetAndExpandableSegmentsReplayExactly) {
  expect_exact_replay(kRecorded + "/oom_fraction", 1);
  expect_exact_replay(kRecorded + "/expandable/oom_fraction.oom", 1);
}

TEST(RecordedSets, WithoutTheCapTheOomIsNotReproduced) {
  const CliResult result =
      run_cli({"replay", kRecorded + "/oom_fraction.oom.pickle.gz", "--json", "-"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(nlohmann::json::parse(result.out).at("recorded").at("ooms_match"), false);
}

TEST(RecordedSets, JobManifestListsEveryRankAndEachReplaysExactly) {
  const std::string folder = kRecorded + "/ddp";
  const nlohmann::json job = read_json(folder + "/fragscope-job.json");
  EXPECT_EQ(job.at("format"), "fragscope-job/1");
  EXPECT_EQ(job.at("job"), "ddp_gloo");
  EXPECT_EQ(job.at("world_size"), 2);
  ASSERT_EQ(job.at("ranks").size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto& rank = job.at("ranks")[i];
    EXPECT_EQ(rank.at("rank"), i);
    EXPECT_EQ(rank.at("local_rank"), i);
    for (const char* role : {"snapshot", "stats", "summary", "env"})
      EXPECT_TRUE(std::filesystem::exists(folder + "/" + rank.at(role).get<std::string>())) << role;
    const nlohmann::json stats = read_json(folder + "/" + rank.at("stats").get<std::string>());
    EXPECT_EQ(stats.at("rank"), i);
    EXPECT_EQ(stats.at("world_size"), 2);
    EXPECT_EQ(stats.at("step"), 6);
    std::string base = rank.at("snapshot").get<std::string>();
    base = folder + "/" + base.substr(0, base.size() - std::string(".pickle.gz").size());
    expect_exact_replay(base, 0);
  }
  // The set every 3 optimizer steps (--every-steps 3).
  EXPECT_EQ(read_json(folder + "/ddp_gloo.rank0.step3.stats.json").at("step"), 3);
  expect_exact_replay(folder + "/ddp_gloo.rank0.step3", 0);
}

}  // namespace
}  // namespace fragscope::test
