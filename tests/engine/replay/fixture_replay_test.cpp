// Every real PyTorch 2.11 recording, replayed under its recorded config, must reproduce the
// recording: every decision event, the OOM point and every memory_stats() value.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/allocator/stats.h"
#include "engine/allocator/summary.h"
#include "engine/replay/replay.h"
#include "engine/snapshot/snapshot.h"

namespace fragscope::replay {
namespace {

const std::string kFixtures = FRAGSCOPE_FIXTURES;

nlohmann::json load_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void expect_stats_equal(const alloc::DeviceStats& got_stats, const nlohmann::json& recorded) {
  const auto got = alloc::to_memory_stats(got_stats);
  std::map<std::string, std::int64_t> expected;
  for (const auto& [key, value] : recorded.at("memory_stats").items())
    expected[key] = value.get<std::int64_t>();
  ASSERT_EQ(expected.size(), 122u);
  ASSERT_EQ(got.size(), 122u);
  for (const auto& [key, value] : expected) {
    auto it = got.find(key);
    ASSERT_NE(it, got.end()) << key;
    EXPECT_EQ(it->second, value) << "memory_stats()[\"" << key << "\"]";
  }
}

struct Recorded {
  snapshot::Snapshot snapshot;
  nlohmann::json stats;
};

Recorded load(const std::string& name) {
  return Recorded{snapshot::read_snapshot(kFixtures + "/" + name + ".pickle.gz"),
                  load_json(kFixtures + "/" + name + ".stats.json")};
}

ReplayOptions recorded_options(const nlohmann::json& stats) {
  ReplayOptions options;
  const auto& params = stats.at("params");
  if (params.contains("cap_gib"))
    options.allowed_memory = params.at("cap_gib").get<Bytes>() << 30;
  options.total_memory = stats.at("total_memory").get<Bytes>();
  return options;
}

class FixtureReplay : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureReplay, ReproducesTheRecording) {
  const Recorded recorded = load(GetParam());
  ReplayOptions options = recorded_options(recorded.stats);
  // Every request would take minutes in a Debug build; every 97th still catches a broken
  // invariant close to where it broke (unit tests check after every call).
  options.check_invariants_every = 97;
  const ReplayResult result = replay_snapshot(recorded.snapshot, options);

  EXPECT_TRUE(result.compared);
  EXPECT_FALSE(result.first_divergence.has_value())
      << "first divergence: " << describe(*result.first_divergence);
  EXPECT_TRUE(result.segment_events_match);
  EXPECT_TRUE(result.ooms_match);

  expect_stats_equal(result.run.stats, recorded.stats);
  EXPECT_EQ(alloc::memory_summary(result.run.stats, 0, false),
            read_text(kFixtures + "/" + GetParam() + ".summary.txt"));

  const std::string outcome = recorded.stats.at("outcome").get<std::string>();
  if (outcome == "ok") {
    EXPECT_TRUE(result.run.ooms.empty());
  } else {
    ASSERT_EQ(result.run.ooms.size(), 1u);
    // NVML's per-process memory is not in the trace, so the model's message leaves out that
    // one sentence; everything else must be the recorded text.
    std::string expected_message = outcome.substr(outcome.find("CUDA out of memory"));
    const auto start = expected_message.find("Including non-PyTorch memory");
    if (start != std::string::npos) {
      const auto end = expected_message.find("memory in use. ", start);
      ASSERT_NE(end, std::string::npos);
      expected_message.erase(start, end + 15 - start);
    }
    EXPECT_EQ(result.run.ooms[0].oom.message, expected_message);
  }
}

INSTANTIATE_TEST_SUITE_P(Torch211H200, FixtureReplay,
                         ::testing::Values("gpt_ckpt_accum", "gpt_fixedlen_default", "gpt_oom_cap",
                                           "gpt_varlen_default", "gpt_varlen_expandable",
                                           "random_default", "random_split64_round4",
                                           "streams_default"));

// What-if: the request stream of gpt_varlen_default (default config) under
// expandable_segments:True must give what PyTorch gave for gpt_varlen_expandable, whose request
// stream is the same.
TEST(WhatIf, VarlenDefaultUnderExpandableSegmentsReproducesTheExpandableRun) {
  const Recorded base = load("gpt_varlen_default");
  const Recorded target = load("gpt_varlen_expandable");
  ReplayOptions options = recorded_options(base.stats);
  options.config = alloc::AllocatorConfig::parse("expandable_segments:True");
  options.check_invariants_every = 97;
  const ReplayResult result = replay_snapshot(base.snapshot, options);
  EXPECT_FALSE(result.compared);
  EXPECT_TRUE(result.run.ooms.empty());
  EXPECT_EQ(result.segment_events, segment_events(target.snapshot.device_traces[0]));
  expect_stats_equal(result.run.stats, target.stats);
  EXPECT_EQ(alloc::memory_summary(result.run.stats, 0, false),
            read_text(kFixtures + "/gpt_varlen_expandable.summary.txt"));
}

// The converse direction: the expandable recording replayed with PyTorch's defaults, given the
// driver addresses the default run got (best fit breaks size ties by address), gives the default
// run's segments and byte counts. Not every stat: the two recordings free 570 tensors in a
// slightly different order (same sizes, same allocations), which changes how often split blocks
// merged (inactive_split allocated/freed) but no decision.
TEST(WhatIf, VarlenExpandableUnderDefaultsReproducesTheDefaultRunsSegments) {
  const Recorded base = load("gpt_varlen_expandable");
  const Recorded target = load("gpt_varlen_default");
  ReplayOptions options = recorded_options(base.stats);
  options.config = alloc::AllocatorConfig::parse("");
  options.segment_addresses = recorded_segments(target.snapshot.device_traces[0]);
  const ReplayResult result = replay_snapshot(base.snapshot, options);
  EXPECT_EQ(result.segment_events, segment_events(target.snapshot.device_traces[0]));
  const alloc::DeviceStats expected =
      alloc::memory_stats_from_json(target.stats.at("memory_stats"));
  EXPECT_EQ(result.run.stats.allocated_bytes, expected.allocated_bytes);
  EXPECT_EQ(result.run.stats.reserved_bytes, expected.reserved_bytes);
  EXPECT_EQ(result.run.stats.requested_bytes, expected.requested_bytes);
  EXPECT_EQ(result.run.stats.segment, expected.segment);
  EXPECT_EQ(result.run.stats.inactive_split_bytes[alloc::StatType::aggregate].current,
            expected.inactive_split_bytes[alloc::StatType::aggregate].current);
}

}  // namespace
}  // namespace fragscope::replay
