// fragscope-cli replay: the contract scripts depend on (options, JSON keys, exit codes).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "cli/cli_process.h"

namespace fragscope::test {
namespace {

const std::string kFixtures = FRAGSCOPE_FIXTURES;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

nlohmann::json replay_json(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"replay"};
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {"--json", "-"});
  const CliResult result = run_cli(args);
  EXPECT_EQ(result.exit_code, 0) << result.err;
  return nlohmann::json::parse(result.out);
}

TEST(CliReplay, RecordedConfigReproducesTheRecording) {
  const auto out = replay_json({kFixtures + "/streams_default.pickle.gz"});
  EXPECT_EQ(out.at("entries"), 31348);
  EXPECT_EQ(out.at("allocs"), 10414);
  EXPECT_EQ(out.at("segment_events").size(), 108u);
  EXPECT_EQ(out.at("segment_events")[0], nlohmann::json::array({"segment_alloc", 20971520}));
  EXPECT_TRUE(out.at("ooms").empty());
  EXPECT_EQ(out.at("memory_stats").size(), 122u);
  const auto recorded_stats =
      nlohmann::json::parse(read_text(kFixtures + "/streams_default.stats.json"));
  EXPECT_EQ(out.at("memory_stats"), recorded_stats.at("memory_stats"));
  EXPECT_EQ(out.at("memory_summary"), read_text(kFixtures + "/streams_default.summary.txt"));
  const auto& recorded = out.at("recorded");
  EXPECT_EQ(recorded.at("segment_events_match"), true);
  EXPECT_EQ(recorded.at("ooms_match"), true);
  EXPECT_TRUE(recorded.at("first_divergence").is_null());
}

TEST(CliReplay, OomInsideTheTraceIsAResult) {
  const auto out =
      replay_json({kFixtures + "/gpt_oom_cap.pickle.gz", "--capacity", std::to_string(6ull << 30)});
  ASSERT_EQ(out.at("ooms").size(), 1u);
  const auto& oom = out.at("ooms")[0];
  EXPECT_EQ(oom.at("size"), 175509504);
  EXPECT_EQ(oom.at("allocs_before"), 7323);
  EXPECT_NE(oom.at("message").get<std::string>().find("Tried to allocate 168.00 MiB"),
            std::string::npos);
  EXPECT_EQ(out.at("recorded").at("ooms_match"), true);
  EXPECT_EQ(out.at("recorded").at("segment_events_match"), true);
}

TEST(CliReplay, MissingLimitShowsTheFirstDivergence) {
  // Without the recorded 6 GiB limit the model does not run out of memory where PyTorch did.
  const auto out = replay_json({kFixtures + "/gpt_oom_cap.pickle.gz"});
  const auto& recorded = out.at("recorded");
  EXPECT_EQ(recorded.at("ooms_match"), false);
  const auto& divergence = recorded.at("first_divergence");
  ASSERT_TRUE(divergence.is_object());
  // The recording fails the 168 MiB request where the unlimited model opens a new segment for it.
  EXPECT_EQ(divergence.at("expected").at("action"), "oom");
  EXPECT_EQ(divergence.at("expected").at("size"), 175509504);
  EXPECT_EQ(divergence.at("got").at("action"), "segment_alloc");
  EXPECT_GT(divergence.at("trace_entry").get<int>(), 0);
}

TEST(CliReplay, WhatIfConfigAndCapacity) {
  const auto defaults =
      replay_json({kFixtures + "/random_split64_round4.pickle.gz", "--alloc-conf", ""});
  EXPECT_TRUE(defaults.at("recorded").is_null());
  EXPECT_EQ(defaults.at("memory_stats").at("max_split_size"), -1);
  const auto small =
      replay_json({kFixtures + "/random_default.pickle.gz", "--capacity", "20000000000"});
  ASSERT_FALSE(small.at("ooms").empty());
  for (const auto& oom : small.at("ooms")) {
    EXPECT_NE(oom.at("message").get<std::string>().find("CUDA out of memory."), std::string::npos);
    EXPECT_NE(oom.at("message").get<std::string>().find("18.63 GiB allowed;"), std::string::npos);
  }
  EXPECT_LE(small.at("memory_stats").at("reserved_bytes.all.peak").get<std::int64_t>(),
            20000000000);
}

TEST(CliReplay, SummaryGoesToStdout) {
  const CliResult result =
      run_cli({"replay", kFixtures + "/gpt_fixedlen_default.pickle.gz", "--summary"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find(read_text(kFixtures + "/gpt_fixedlen_default.summary.txt")),
            std::string::npos);
  EXPECT_NE(result.out.find("segment events match, OOMs match"), std::string::npos);
}

TEST(CliReplay, BadInputExitsTwoNamingTheProblem) {
  const CliResult missing = run_cli({"replay", "/no/such/file.pickle"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("/no/such/file.pickle"), std::string::npos);

  const CliResult bad_conf =
      run_cli({"replay", kFixtures + "/random_default.pickle.gz", "--alloc-conf", "foo:1"});
  EXPECT_EQ(bad_conf.exit_code, 2);
  EXPECT_NE(bad_conf.err.find("Unrecognized key 'foo'"), std::string::npos);

  const CliResult bad_capacity =
      run_cli({"replay", kFixtures + "/random_default.pickle.gz", "--capacity", "lots"});
  EXPECT_EQ(bad_capacity.exit_code, 2);
  EXPECT_NE(bad_capacity.err.find("--capacity"), std::string::npos);

  const CliResult bad_device =
      run_cli({"replay", kFixtures + "/random_default.pickle.gz", "--device", "3"});
  EXPECT_EQ(bad_device.exit_code, 2);
  EXPECT_NE(bad_device.err.find("no device 3"), std::string::npos);

  const CliResult no_file = run_cli({"replay"});
  EXPECT_EQ(no_file.exit_code, 2);

  const std::string not_pickle = std::string(FRAGSCOPE_BINARY_DIR) + "/not_a_snapshot.pickle";
  std::ofstream(not_pickle) << "this is not a pickle";
  const CliResult garbage = run_cli({"replay", not_pickle});
  EXPECT_EQ(garbage.exit_code, 2);
  EXPECT_NE(garbage.err.find("not_a_snapshot.pickle"), std::string::npos);
}

TEST(CliReplay, JsonToAFile) {
  const std::string path = std::string(FRAGSCOPE_BINARY_DIR) + "/replay_out.json";
  std::filesystem::remove(path);
  const CliResult result =
      run_cli({"replay", kFixtures + "/gpt_varlen_expandable.pickle.gz", "--json", path});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  const auto out = nlohmann::json::parse(read_text(path));
  EXPECT_EQ(out.at("segment_events")[0][0], "segment_map");
  EXPECT_EQ(out.at("recorded").at("segment_events_match"), true);
}

}  // namespace
}  // namespace fragscope::test
