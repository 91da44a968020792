// Real PyTorch 2.11 recordings with CUDA graphs (torch.compile reduce-overhead, torch.cuda.graph
// by hand) and MemPools, replayed under their recorded config with the pools inferred from the
// recording: every decision event, every memory_stats() value and memory_summary() must match.
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

const std::string kGraphFixtures = std::string(FRAGSCOPE_FIXTURES) + "/../torch-2.11-h200-graphs";

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

struct GraphRecording {
  snapshot::Snapshot snapshot;
  nlohmann::json stats;
  std::string summary;
};

GraphRecording load(const std::string& name) {
  const std::string base = kGraphFixtures + "/" + name;
  return GraphRecording{snapshot::read_snapshot(base + ".pickle.gz"),
                        load_json(base + ".stats.json"), read_text(base + ".summary.txt")};
}

ReplayOptions options_for(const nlohmann::json& stats) {
  ReplayOptions options;
  const auto& params = stats.at("params");
  if (params.contains("cap_gib"))
    options.allowed_memory = params.at("cap_gib").get<Bytes>() << 30;
  options.total_memory = stats.at("total_memory").get<Bytes>();
  options.recorded_sync_all_streams =
      stats.at("memory_stats").at("num_sync_all_streams").get<std::int64_t>();
  options.check_invariants_every = 1;
  return options;
}

class GraphReplay : public ::testing::TestWithParam<std::string> {};

TEST_P(GraphReplay, ReproducesTheRecording) {
  const GraphRecording recorded = load(GetParam());
  const ReplayResult result = replay_snapshot(recorded.snapshot, options_for(recorded.stats));
  ASSERT_TRUE(result.compared);
  ASSERT_TRUE(result.pools.has_value()) << "the recording has private pools";
  RecordProperty("trace_entries", static_cast<int>(result.entries));
  RecordProperty("events_compared", static_cast<int>(result.emitted_events));
  RecordProperty("pools", static_cast<int>(result.pools->pools.size()));
  RecordProperty("private_allocations", static_cast<int>(result.pools->private_allocations));
  RecordProperty("pool_requests", static_cast<int>(result.pools->pool_requests));
  RecordProperty("empty_cache_inferred", static_cast<int>(result.pools->empty_cache_requests));
  RecordProperty("silent_empty_caches", static_cast<int>(result.silent_empty_caches));
  RecordProperty("passes", static_cast<int>(result.pools->passes));
  EXPECT_FALSE(result.first_divergence.has_value())
      << "first divergence: " << describe(*result.first_divergence) << " (pools inferred in "
      << result.pools->passes << " passes: " << result.pools->pools.size() << " pools, "
      << result.pools->private_allocations << " private allocations, "
      << result.pools->empty_cache_requests << " empty_cache calls)";
  EXPECT_TRUE(result.segment_events_match);
  EXPECT_TRUE(result.ooms_match);

  const auto got = alloc::to_memory_stats(result.run.stats);
  std::size_t compared = 0;
  for (const auto& [key, value] : recorded.stats.at("memory_stats").items()) {
    auto it = got.find(key);
    ASSERT_NE(it, got.end()) << key;
    EXPECT_EQ(it->second, value.get<std::int64_t>()) << "memory_stats()[\"" << key << "\"]";
    ++compared;
  }
  EXPECT_EQ(compared, 122u);
  EXPECT_EQ(alloc::memory_summary(result.run.stats, 0, false), recorded.summary);

  // Read spooled, as the CLI reads it: the inference reads the packed trace through a window of
  // two decoded blocks (looking back and ahead across their edges), and makes the same replay.
  ReplayOptions quick = options_for(recorded.stats);
  quick.check_invariants_every = 0;
  const ReplayResult spooled = replay_snapshot(
      snapshot::read_snapshot_spooled(kGraphFixtures + "/" + GetParam() + ".pickle.gz"), quick);
  ASSERT_TRUE(spooled.pools.has_value());
  EXPECT_EQ(spooled.pools->passes, result.pools->passes);
  EXPECT_EQ(spooled.pools->pool_requests, result.pools->pool_requests);
  EXPECT_EQ(spooled.pools->empty_cache_requests, result.pools->empty_cache_requests);
  EXPECT_EQ(spooled.emitted_events, result.emitted_events);
  EXPECT_EQ(spooled.segment_events, result.segment_events);
  EXPECT_EQ(spooled.first_divergence.has_value(), result.first_divergence.has_value());
  EXPECT_EQ(alloc::to_memory_stats(spooled.run.stats), got);

  const std::string outcome = recorded.stats.at("outcome").get<std::string>();
  if (outcome == "ok") {
    EXPECT_TRUE(result.run.ooms.empty());
  } else {
    ASSERT_EQ(result.run.ooms.size(), 1u);
    std::string expected = outcome.substr(outcome.find("CUDA out of memory"));
    const auto start = expected.find("Including non-PyTorch memory");
    if (start != std::string::npos)
      expected.erase(start, expected.find("memory in use. ", start) + 15 - start);
    EXPECT_EQ(result.run.ooms[0].oom.message, expected);
  }
}

INSTANTIATE_TEST_SUITE_P(Torch211H200, GraphReplay,
                         ::testing::Values("gpt_compile_reduce_overhead",
                                           "gpt_l4_h768_t512_reduce_overhead",
                                           "encoder_infer_two_shapes_reduce_overhead",
                                           "graph_manual", "mempool_basic", "mempool_no_split",
                                           "mempool_use_on_oom", "mempool_oom"));

}  // namespace
}  // namespace fragscope::replay
