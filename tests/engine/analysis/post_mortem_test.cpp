#include "engine/analysis/post_mortem.h"

#include <regex>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "engine/allocator/summary.h"
#include "engine/analysis/analysis_test_util.h"
#include "engine/analysis/trace_requests.h"

namespace fragscope::analysis {
namespace {

using namespace fragscope::literals;
using test::ev;
using test::free_now;

constexpr std::uint64_t kBase = 1ull << 40;

OomPostMortem only(const std::vector<OomPostMortem>& all) {
  EXPECT_EQ(all.size(), 1u);
  return all.empty() ? OomPostMortem{} : all.front();
}

// 100 MiB limit; 90 MiB live in one segment, a 20 MiB request cannot fit however packed.
TEST(PostMortem, CapacityWhenLiveBytesLeaveNoRoom) {
  std::vector<TraceEvent> t;
  t.push_back(ev(TraceAction::segment_alloc, kBase, 90_MiB));
  t.push_back(ev(TraceAction::alloc, kBase, 90_MiB));
  t.push_back(ev(TraceAction::oom, 10_MiB, 20_MiB));
  const auto pm = only(trace_post_mortems(t, snapshot::SegmentState{}, {}, 100_MiB));
  EXPECT_EQ(pm.cause, OomCause::capacity);
  EXPECT_EQ(pm.event_index, 2u);
  EXPECT_EQ(pm.allocated, 90_MiB);
  EXPECT_EQ(pm.headroom, 10_MiB);
  EXPECT_EQ(pm.segment_size, 20_MiB);
  ASSERT_FALSE(pm.evidence.empty());
  EXPECT_NE(pm.evidence[0].find("exceeds the capacity"), std::string::npos) << pm.evidence[0];
}

// Four 24 MiB blocks of one 96 MiB segment, every other one freed: 48 MiB cached but no
// block over 24 MiB, and the split segment cannot be returned.
TEST(PostMortem, FragmentationWhenFreeBytesAreScattered) {
  std::vector<TraceEvent> t;
  t.push_back(ev(TraceAction::segment_alloc, kBase, 96_MiB));
  for (int i = 0; i < 4; ++i)
    t.push_back(ev(TraceAction::alloc, kBase + static_cast<Bytes>(i) * 24_MiB, 24_MiB));
  free_now(t, kBase, 24_MiB);
  free_now(t, kBase + 48_MiB, 24_MiB);
  t.push_back(ev(TraceAction::oom, 4_MiB, 40_MiB));
  const auto pm = only(trace_post_mortems(t, snapshot::SegmentState{}, {}, 100_MiB));
  EXPECT_EQ(pm.cause, OomCause::fragmentation);
  EXPECT_EQ(pm.cached_free, 48_MiB);
  EXPECT_EQ(pm.largest_usable, 24_MiB);
  EXPECT_EQ(pm.stranded_in_split, 48_MiB);
  EXPECT_EQ(pm.reserved_unallocated, 48_MiB);
  ASSERT_EQ(pm.free_by_pool_stream.size(), 1u);
  EXPECT_EQ(pm.free_by_pool_stream[0].blocks, 2u);
}

// max_split_size 64 MiB: a cached 80 MiB oversize block is refused for a 30 MiB request, and
// the device has no room for a new segment.
TEST(PostMortem, CachePolicyWhenOversizeRulesRefuseABlock) {
  alloc::AllocatorConfig config;
  config.max_split_size = 64_MiB;
  std::vector<TraceEvent> t;
  t.push_back(ev(TraceAction::segment_alloc, kBase, 80_MiB));
  t.push_back(ev(TraceAction::alloc, kBase, 80_MiB));
  free_now(t, kBase, 80_MiB);
  t.push_back(ev(TraceAction::oom, 10_MiB, 30_MiB));
  snapshot::SegmentState initial(snapshot::LayoutRules::from_config(config));
  const auto pm = only(trace_post_mortems(t, initial, config, 90_MiB));
  EXPECT_EQ(pm.cause, OomCause::cache_policy);
  EXPECT_NE(pm.evidence.back().find("oversize rules"), std::string::npos) << pm.evidence.back();
}

// A 2 MiB request needs a 20 MiB large-pool segment; the device had 15 MiB left.
TEST(PostMortem, CachePolicyWhenSegmentRoundingOvershoots) {
  std::vector<TraceEvent> t;
  t.push_back(ev(TraceAction::segment_alloc, kBase, 85_MiB));
  t.push_back(ev(TraceAction::alloc, kBase, 85_MiB));
  t.push_back(ev(TraceAction::oom, 15_MiB, 2_MiB));
  const auto pm = only(trace_post_mortems(t, snapshot::SegmentState{}, {}, 100_MiB));
  EXPECT_EQ(pm.cause, OomCause::cache_policy);
  EXPECT_EQ(pm.segment_size, 20_MiB);
  EXPECT_EQ(pm.headroom, 15_MiB);
}

// Stream 7 caches a free 60 MiB block; stream 0 cannot use it.
TEST(PostMortem, OtherStreamWhenTheBytesBelongToAnotherStream) {
  std::vector<TraceEvent> t;
  t.push_back(ev(TraceAction::segment_alloc, kBase, 60_MiB, 7));
  t.push_back(ev(TraceAction::alloc, kBase, 60_MiB, 7));
  t.push_back(ev(TraceAction::segment_alloc, kBase + 128_MiB, 30_MiB));
  t.push_back(ev(TraceAction::alloc, kBase + 128_MiB, 30_MiB));
  free_now(t, kBase, 60_MiB, 7);
  t.push_back(ev(TraceAction::oom, 10_MiB, 40_MiB));
  const auto pm = only(trace_post_mortems(t, snapshot::SegmentState{}, {}, 100_MiB));
  EXPECT_EQ(pm.cause, OomCause::other_stream);
  EXPECT_EQ(pm.largest_free, 60_MiB);
  EXPECT_EQ(pm.largest_usable, 0u);
  ASSERT_EQ(pm.free_by_pool_stream.size(), 1u);
  EXPECT_EQ(pm.free_by_pool_stream[0].stream, StreamId{7});
}

// The real OOM of gpt_oom_cap (6 GiB per-process limit): the figures PyTorch printed, computed
// from the replayed trace state, and its cause.
TEST(PostMortemFixture, GptOomCapMatchesPyTorchsMessage) {
  const auto& snap = test::fixture("gpt_oom_cap");
  const auto stats = test::fixture_stats("gpt_oom_cap");
  const Bytes limit = stats["params"]["cap_gib"].get<Bytes>() * kGiB;
  const alloc::AllocatorConfig config = config_from_settings(snap.allocator_settings);
  const auto pms = trace_post_mortems(
      snap.device_traces[0], snapshot::SegmentState{snapshot::LayoutRules::from_config(config)},
      config, limit);
  const auto pm = only(pms);
  const std::string outcome = stats["outcome"].get<std::string>();
  // "Tried to allocate 168.00 MiB. ... 6.00 GiB allowed; Of the allocated memory 5.80 GiB is
  // allocated by PyTorch, and 121.25 MiB is reserved by PyTorch but unallocated."
  const std::regex figures(
      "Tried to allocate ([0-9.]+ [KMG]iB)\\..* ([0-9.]+ [KMG]iB) allowed; Of the allocated memory "
      "([0-9.]+ [KMG]iB) is allocated by PyTorch, and ([0-9.]+ [KMG]iB) is reserved by PyTorch "
      "but unallocated\\.");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(outcome, m, figures)) << outcome;
  EXPECT_EQ(alloc::format_size(pm.segment_size), m[1].str());
  EXPECT_EQ(alloc::format_size(pm.capacity), m[2].str());
  EXPECT_EQ(alloc::format_size(pm.allocated), m[3].str());
  EXPECT_EQ(alloc::format_size(pm.reserved_unallocated), m[4].str());
  EXPECT_NE(outcome.find(pm.pytorch_figures().substr(0, 30)), std::string::npos);
  EXPECT_EQ(pm.rounded, 175509504u);
  EXPECT_TRUE(pm.limited);
  // allocated + request fits in 6 GiB, the device's room under the limit does not hold the
  // request, the cache's free bytes would: fragmentation.
  EXPECT_LE(pm.allocated + pm.rounded, limit);
  EXPECT_LT(pm.headroom, pm.rounded);
  EXPECT_EQ(pm.cause, OomCause::fragmentation);
  EXPECT_GT(pm.stranded_in_split, 0u);
  EXPECT_LT(pm.largest_usable, pm.rounded);
}

}  // namespace
}  // namespace fragscope::analysis

namespace fragscope::analysis {
namespace {

using namespace fragscope::literals;
using test::ev;
using test::free_now;

// A CUDA graph's pool (1,0) caches 60 MiB in a 64 MiB segment; the default pool is full and the
// limit leaves 8 MiB: a 40 MiB request fails although 60 MiB sit free in the graph's pool.
TEST(PostMortem, PrivatePoolWhenTheRoomIsCachedInAGraphPool) {
  constexpr std::uint64_t kGraph = 1ull << 41;
  constexpr std::uint64_t kDefault = 1ull << 42;
  std::vector<TraceEvent> t;
  t.push_back(ev(TraceAction::segment_alloc, kGraph, 64_MiB));
  t.push_back(ev(TraceAction::alloc, kGraph, 4_MiB));
  t.push_back(ev(TraceAction::alloc, kGraph + 4_MiB, 60_MiB));
  free_now(t, kGraph + 4_MiB, 60_MiB);
  t.push_back(ev(TraceAction::segment_alloc, kDefault, 28_MiB));
  t.push_back(ev(TraceAction::alloc, kDefault, 28_MiB));
  t.push_back(ev(TraceAction::oom, 8_MiB, 40_MiB));
  const PrivateSegments pools{{kGraph, PrivateSegment{64_MiB, MempoolId{1, 0}}}};

  const auto pm = only(trace_post_mortems(t, snapshot::SegmentState{}, {}, 100_MiB, &pools));
  EXPECT_EQ(pm.cause, OomCause::private_pool);
  EXPECT_EQ(pm.stranded_in_private_pools, 60_MiB);
  ASSERT_EQ(pm.free_by_private_pool.size(), 1u);
  EXPECT_EQ(pm.free_by_private_pool[0].first, (MempoolId{1, 0}));
  EXPECT_EQ(pm.largest_usable, 0u);  // the graph's block is not the default pool's
  bool said = false;
  for (const std::string& sentence : pm.evidence)
    said = said || sentence.find(
                       "60.00 MiB is cached free in private pools (CUDA graphs, "
                       "MemPool: (1, 0) 60.00 MiB): stranded there") == 0;
  EXPECT_TRUE(said) << testing::PrintToString(pm.evidence);

  // Without the pools the same bytes look reachable: fragmentation.
  const auto blind = only(trace_post_mortems(t, snapshot::SegmentState{}, {}, 100_MiB));
  EXPECT_EQ(blind.cause, OomCause::fragmentation);
  EXPECT_EQ(blind.stranded_in_private_pools, 0u);
}

TEST(PostMortem, PrivateSegmentsFromTheImportedSummary) {
  const auto pools = private_segments_from_json(
      nlohmann::json::parse("[[4096, 2097152, 1, 0], [8192, 20971520, 0, 3], [\"x\", 1, 2, 3]]"));
  ASSERT_EQ(pools.size(), 2u);
  EXPECT_EQ(pools.at(4096).pool, (MempoolId{1, 0}));
  EXPECT_EQ(pools.at(8192).size, 20_MiB);
  EXPECT_TRUE(private_segments_from_json(nlohmann::json::object()).empty());
}

}  // namespace
}  // namespace fragscope::analysis
