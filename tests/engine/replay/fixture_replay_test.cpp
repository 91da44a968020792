// Every real PyTorch 2.11 recording, replayed under its recorded config, must reproduce the
// recording: every decision event, the OOM point and every memory_stats() value.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

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

// memory_stats() keys of the model's stats, for comparison with *.stats.json.
std::map<std::string, std::int64_t> flatten(const alloc::DeviceStats& s) {
  std::map<std::string, std::int64_t> out;
  const char* types[] = {"all", "small_pool", "large_pool"};
  auto put_stat = [&](const std::string& name, const alloc::Stat& stat) {
    out[name + ".current"] = stat.current;
    out[name + ".peak"] = stat.peak;
    out[name + ".allocated"] = stat.allocated;
    out[name + ".freed"] = stat.freed;
  };
  auto put_array = [&](const std::string& name, const alloc::StatArray& array) {
    for (std::size_t i = 0; i < alloc::kStatTypes; ++i)
      put_stat(name + "." + types[i], array.by_type[i]);
  };
  put_array("active", s.active);
  put_array("active_bytes", s.active_bytes);
  put_array("allocated_bytes", s.allocated_bytes);
  put_array("allocation", s.allocation);
  put_array("inactive_split", s.inactive_split);
  put_array("inactive_split_bytes", s.inactive_split_bytes);
  put_array("requested_bytes", s.requested_bytes);
  put_array("reserved_bytes", s.reserved_bytes);
  put_array("segment", s.segment);
  put_stat("oversize_allocations", s.oversize_allocations);
  put_stat("oversize_segments", s.oversize_segments);
  out["max_split_size"] = s.max_split_size;
  out["num_alloc_retries"] = s.num_alloc_retries;
  out["num_device_alloc"] = s.num_device_alloc;
  out["num_device_free"] = s.num_device_free;
  out["num_ooms"] = s.num_ooms;
  out["num_sync_all_streams"] = s.num_sync_all_streams;
  return out;
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

  const auto got = flatten(result.run.stats);
  std::map<std::string, std::int64_t> expected;
  for (const auto& [key, value] : recorded.stats.at("memory_stats").items())
    expected[key] = value.get<std::int64_t>();
  ASSERT_EQ(expected.size(), 122u);
  for (const auto& [key, value] : expected) {
    auto it = got.find(key);
    ASSERT_NE(it, got.end()) << key;
    EXPECT_EQ(it->second, value) << "memory_stats()[\"" << key << "\"]";
  }

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

}  // namespace
}  // namespace fragscope::replay
