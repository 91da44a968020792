#include "engine/analysis/what_if.h"

#include <gtest/gtest.h>

#include <array>

#include "engine/analysis/analysis_test_util.h"
#include "engine/analysis/trace_requests.h"
#include "engine/core/error.h"
#include "tests/progress_test_util.h"

namespace fragscope::analysis {
namespace {

using namespace fragscope::literals;

Request malloc_of(std::uint64_t tensor, Bytes size) {
  return Request{RequestOp::malloc, TensorId{tensor}, size, StreamId{}, LabelId{}};
}
Request free_of(std::uint64_t tensor) {
  return Request{RequestOp::free, TensorId{tensor}, 0, StreamId{}, LabelId{}};
}

WhatIfOptions options(std::optional<Bytes> capacity, unsigned threads) {
  WhatIfOptions o;
  o.capacity = capacity;
  o.threads = threads;
  return o;
}

const WhatIfRow& row_named(const WhatIfTable& table, const std::string& name) {
  for (const auto& row : table.rows)
    if (row.name == name)
      return row;
  throw std::runtime_error("no row " + name);
}

const Mitigation& candidate_named(const std::vector<Mitigation>& candidates,
                                  const std::string& name) {
  for (const auto& m : candidates)
    if (m.name == name)
      return m;
  throw std::runtime_error("no candidate " + name);
}

// Candidates are the baseline config with one option changed; each one's string parses back to
// exactly its config (the string is only what the table shows and a mitigation run stores).
TEST(StandardMitigations, ChangeOneOptionOfTheBaselineConfig) {
  const RequestStream s;
  const auto baseline = alloc::AllocatorConfig::parse(
      " max_split_size_mb : 64 ,roundup_power2_divisions:[256:1,>:4]");
  const auto candidates = standard_mitigations(s, baseline);
  EXPECT_EQ(candidates.front().name, "baseline");
  EXPECT_EQ(candidates.front().config, baseline);

  const alloc::AllocatorConfig& expandable =
      candidate_named(candidates, "expandable_segments").config;
  EXPECT_TRUE(expandable.expandable_segments);
  EXPECT_EQ(expandable.max_split_size, 64 * kMiB);
  EXPECT_EQ(expandable.roundup_power2_divisions, baseline.roundup_power2_divisions);
  EXPECT_NE(expandable.raw.find("max_split_size_mb:64"), std::string::npos) << expandable.raw;
  EXPECT_NE(expandable.raw.find("expandable_segments:True"), std::string::npos) << expandable.raw;

  const alloc::AllocatorConfig& split = candidate_named(candidates, "max_split_size_mb:128").config;
  EXPECT_EQ(split.max_split_size, 128 * kMiB);
  EXPECT_FALSE(split.expandable_segments);
  const alloc::AllocatorConfig& divisions =
      candidate_named(candidates, "roundup_power2_divisions:8").config;
  EXPECT_EQ(divisions.roundup_power2_divisions[0], 8u);
  EXPECT_EQ(divisions.roundup_power2_divisions[15], 8u);
  EXPECT_EQ(candidate_named(candidates, "garbage_collection_threshold:0.6")
                .config.garbage_collection_threshold,
            0.6);
  for (const Mitigation& m : candidates) {
    SCOPED_TRACE(m.name);
    alloc::AllocatorConfig reparsed = alloc::AllocatorConfig::parse(m.config.raw);
    reparsed.raw = m.config.raw;
    EXPECT_EQ(reparsed, m.config);
  }
}

// PyTorch refuses a max_split_size_mb below large_segment_size_mb: no such candidate is offered.
TEST(StandardMitigations, LeaveOutSplitLimitsPyTorchRefuses) {
  const RequestStream s;
  const auto candidates =
      standard_mitigations(s, alloc::AllocatorConfig::parse("large_segment_size_mb:128"));
  for (const Mitigation& m : candidates) {
    EXPECT_NE(m.name, "max_split_size_mb:64");
    EXPECT_FALSE(m.config.max_split_size < m.config.large_segment_size) << m.name;
  }
  EXPECT_NO_THROW(candidate_named(candidates, "max_split_size_mb:128"));
}

TEST(IdealPeak, IsThePeakOfLiveRequestedBytes) {
  RequestStream s;
  s.requests = {malloc_of(1, 100), malloc_of(2, 50), free_of(1), malloc_of(3, 120), free_of(2)};
  EXPECT_EQ(ideal_peak(s), 170u);
}

Request step_of(std::uint64_t step) {
  return Request{RequestOp::step_begin, TensorId{}, step, StreamId{}, LabelId{}};
}

TEST(EmptyCacheBeforeBigPhase, GoesBeforeTheLargestRequestWithoutSteps) {
  RequestStream s;
  s.requests = {malloc_of(1, 100), malloc_of(2, 500), malloc_of(3, 500)};
  EXPECT_EQ(empty_cache_before_big_phase(s), (std::vector<std::size_t>{1}));
  EXPECT_TRUE(empty_cache_before_big_phase(RequestStream{}).empty());
}

TEST(EmptyCacheBeforeBigPhase, GoesBeforeEveryStep) {
  RequestStream s;
  s.requests = {step_of(0), malloc_of(1, 100), free_of(1), step_of(1), malloc_of(2, 500)};
  EXPECT_EQ(empty_cache_before_big_phase(s), (std::vector<std::size_t>{0, 3}));
  PackedRequests packed;
  for (const Request& r : s.requests)
    packed.push_back(r);
  EXPECT_EQ(empty_cache_before_big_phase(packed), (std::vector<std::size_t>{0, 3}));
  const auto candidates = standard_mitigations(packed, alloc::AllocatorConfig{});
  const Mitigation& empty_cache = candidate_named(candidates, "empty_cache before the big phase");
  EXPECT_EQ(empty_cache.empty_cache_before, (std::vector<std::size_t>{0, 3}));
  EXPECT_EQ(empty_cache.requests, nullptr);
}

// The candidate runs its stream's private pools: a stream that captures into a pool gets a row,
// not "pool index 0 is not in the stream" (its copied stream once lost the pools).
TEST(EmptyCacheBeforeBigPhase, RunsThePoolsOfTheStream) {
  RequestStream s;
  s.pools.push_back(RequestPool{MempoolId{1, 1}});
  auto pool_op = [](RequestOp op) { return Request{op, TensorId{}, 1, StreamId{}, LabelId{}, 0}; };
  s.requests = {step_of(0),
                pool_op(RequestOp::pool_create),
                pool_op(RequestOp::pool_begin),
                malloc_of(1, 4_MiB),
                pool_op(RequestOp::pool_end),
                free_of(1),
                step_of(1),
                malloc_of(2, 4_MiB)};
  const WhatIfTable table = run_what_if(s, standard_mitigations(s, alloc::AllocatorConfig{}));
  const WhatIfRow& row = row_named(table, "empty_cache before the big phase");
  EXPECT_EQ(row.error, "");
  EXPECT_TRUE(row.ok);
  EXPECT_EQ(row.ideal_peak, table.ideal_peak);
}

// A classic fragmentation OOM under a 100 MiB limit: 4 x 20 MiB carved from a cached 80 MiB
// segment, the 1st and 3rd freed: 40 MiB is cached in two holes, a 40 MiB request needs a new
// segment the limit refuses. Expandable segments unmap the two free 20 MiB pages and map
// 40 MiB at the end instead.
RequestStream fragmenting_stream() {
  RequestStream s;
  s.requests.push_back(malloc_of(1, 80_MiB));
  s.requests.push_back(free_of(1));
  for (std::uint64_t t = 2; t <= 5; ++t)
    s.requests.push_back(malloc_of(t, 20_MiB));
  s.requests.push_back(free_of(2));
  s.requests.push_back(free_of(4));
  s.requests.push_back(malloc_of(6, 40_MiB));
  return s;
}

// A cancelled what-if is fragscope::Cancelled for the caller, never a table of failed rows.
TEST(WhatIf, ACancelIsNotARowError) {
  const RequestStream s = fragmenting_stream();
  const auto candidates = standard_mitigations(s, alloc::AllocatorConfig{});
  WhatIfOptions cancelled = options(100_MiB, 2);
  cancelled.cancel = CancelToken::make();
  EXPECT_NO_THROW(run_what_if(s, candidates, cancelled));
  cancelled.cancel.cancel();
  EXPECT_THROW(run_what_if(s, candidates, cancelled), Cancelled);
}

// Every row's run moves the progress as it goes (the workers report one at a time), which ends at 1
// once the last row is done; a cancel a third of the way stops the row running then and starts no
// other (no table: fragscope::Cancelled).
TEST(WhatIf, ProgressGrowsRowByRowAndACancelStopsTheRest) {
  RequestStream s;
  for (std::uint64_t t = 100; t < 100 + 2 * alloc::kCancelPollRequests; ++t) {
    s.requests.push_back(malloc_of(t, 1_KiB));
    s.requests.push_back(free_of(t));
  }
  for (const Request& r : fragmenting_stream().requests)
    s.requests.push_back(r);
  const auto candidates = standard_mitigations(s, alloc::AllocatorConfig{});
  ASSERT_GE(candidates.size(), 6u);

  fragscope::test::ProgressRecorder whole(kWhatIfStages);
  WhatIfOptions reported = options(100_MiB, 3);
  reported.progress = whole.progress();
  const WhatIfTable table = run_what_if(s, candidates, reported);
  EXPECT_EQ(to_json(table).dump(), to_json(run_what_if(s, candidates, options(100_MiB, 3))).dump());
  EXPECT_TRUE(fragscope::test::grows_to_one(whole, 2 * candidates.size()));

  fragscope::test::ProgressRecorder third(kWhatIfStages);
  third.cancel_at = 1.0 / 3;
  WhatIfOptions cancelled = options(100_MiB, 1);
  cancelled.progress = third.progress();
  cancelled.cancel = third.token;
  EXPECT_THROW(run_what_if(s, candidates, cancelled), Cancelled);
  EXPECT_TRUE(fragscope::test::stopped_before(
      third, 1.0 / 3 + 1.0 / static_cast<double>(candidates.size())));
}

TEST(WhatIf, RanksCandidatesThatAvoidTheOomFirst) {
  const RequestStream s = fragmenting_stream();
  const auto candidates = standard_mitigations(s, alloc::AllocatorConfig{});
  const WhatIfTable table = run_what_if(s, candidates, options(100_MiB, 2));
  ASSERT_EQ(table.rows.size(), candidates.size());
  const WhatIfRow* base = table.baseline();
  ASSERT_NE(base, nullptr);
  EXPECT_FALSE(base->ok) << base->peak_reserved;
  ASSERT_TRUE(base->first_oom_request.has_value());
  EXPECT_EQ(*base->first_oom_request, s.requests.size() - 1);
  EXPECT_NE(base->oom_message.find("CUDA out of memory"), std::string::npos);
  EXPECT_TRUE(row_named(table, "expandable_segments").ok);
  EXPECT_TRUE(table.best()->ok);
  EXPECT_EQ(table.ideal_peak, 80_MiB);
  for (std::size_t i = 1; i < table.rows.size(); ++i) {
    const auto& a = table.rows[i - 1];
    const auto& b = table.rows[i];
    EXPECT_EQ(a.rank + 1, b.rank);
    EXPECT_TRUE(a.ok >= b.ok) << a.name << " before " << b.name;
    if (a.ok == b.ok) {
      EXPECT_LE(a.peak_reserved, b.peak_reserved) << a.name << " before " << b.name;
    }
  }
}

TEST(WhatIf, SameTableForAnyThreadCount) {
  const RequestStream s = fragmenting_stream();
  const auto candidates = standard_mitigations(s, alloc::AllocatorConfig{});
  const auto one = to_json(run_what_if(s, candidates, options(100_MiB, 1)));
  const auto four = to_json(run_what_if(s, candidates, options(100_MiB, 4)));
  EXPECT_EQ(one.dump(), four.dump());
}

// A candidate that only adds a garbage_collection_threshold to another shares that one's run
// unless the collector would have released memory: under a 100 MiB limit a 40 MiB request finds
// no cached block while a freed 30 MiB segment is cached, so threshold 0.2 (20 MiB) collects it
// and 0.5 (50 MiB) does not. Every row is what its own run gives.
TEST(WhatIf, GarbageCollectionThresholdRowsAreTheirOwnRuns) {
  RequestStream s;
  s.requests = {malloc_of(1, 30_MiB), free_of(1), malloc_of(2, 40_MiB), free_of(2)};
  std::vector<Mitigation> candidates(3);
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    candidates[i].config.garbage_collection_threshold = std::array{0.0, 0.2, 0.5}[i];
    candidates[i].config.raw = alloc::to_alloc_conf_string(candidates[i].config);
    candidates[i].name = i == 0 ? "baseline" : candidates[i].config.raw;
  }
  for (const unsigned threads : {1u, 2u}) {
    const WhatIfOptions opts = options(100_MiB, threads);
    const WhatIfTable table = run_what_if(s, candidates, opts);
    for (const Mitigation& m : candidates) {
      const alloc::RunResult own = run_candidate(s, m, opts);
      const WhatIfRow& row = row_named(table, m.name);
      EXPECT_EQ(row.peak_reserved, own.peak_reserved) << m.name;
      EXPECT_EQ(row.segment_allocs, own.device_calls.segment_allocs) << m.name;
      EXPECT_EQ(row.segment_frees, own.device_calls.segment_frees) << m.name;
      EXPECT_EQ(row.alloc_conf, m.config.raw);
    }
    EXPECT_EQ(row_named(table, candidates[1].name).segment_frees, 1u);
    EXPECT_EQ(row_named(table, candidates[1].name).peak_reserved, 40_MiB);
    EXPECT_EQ(row_named(table, candidates[2].name).peak_reserved, 70_MiB);
  }
}

TEST(WhatIf, BadStreamIsAnErrorRowNotACrash) {
  RequestStream s;
  s.requests = {free_of(9)};
  Mitigation baseline;
  baseline.name = "baseline";
  const WhatIfTable table = run_what_if(s, {baseline});
  ASSERT_EQ(table.rows.size(), 1u);
  EXPECT_FALSE(table.rows[0].ok);
  EXPECT_NE(table.rows[0].error.find("tensor 9"), std::string::npos) << table.rows[0].error;
}

// The real recordings: the same request stream under the default config and under
// expandable_segments:True peaked at 26174554112 and 21172846592 reserved bytes.
TEST(WhatIfFixture, ExpandableSegmentsLowerGptVarlenPeak) {
  const auto& snap = test::fixture("gpt_varlen_default");
  const alloc::AllocatorConfig config = config_from_settings(snap.allocator_settings);
  const TraceRequests trace = requests_from_trace(snap.device_traces[0], snapshot::SegmentState{});
  std::vector<Mitigation> candidates = standard_mitigations(trace.requests, config);
  WhatIfOptions opts = options(std::nullopt, 2);
  opts.recorded_segments = trace.recorded_segments;
  const WhatIfTable table = run_what_if(trace.requests, candidates, opts);
  const WhatIfRow& base = *table.baseline();
  const WhatIfRow& expandable = row_named(table, "expandable_segments");
  EXPECT_TRUE(base.ok);
  EXPECT_EQ(base.peak_reserved, 26174554112u);
  EXPECT_EQ(expandable.peak_reserved, 21172846592u);
  EXPECT_LT(expandable.rank, base.rank);
  const auto stats = test::fixture_stats("gpt_varlen_default")["memory_stats"];
  EXPECT_EQ(base.peak_allocated, stats["allocated_bytes.all.peak"].get<Bytes>());
  EXPECT_EQ(table.ideal_peak, stats["requested_bytes.all.peak"].get<Bytes>());
  EXPECT_LE(table.ideal_peak, table.best()->peak_reserved);
}

// "Would upgrading PyTorch have avoided this?": one row per other release, the same config read
// by that release's parser and run under its rules; a release that refuses the recorded string
// gets a row that says so instead of a number.
TEST(WhatIfReleases, OneRowPerOtherReleaseUnderItsRules) {
  const alloc::AllocatorConfig config = alloc::AllocatorConfig::parse("expandable_segments:True");
  const std::vector<Mitigation> rows = release_mitigations(
      config, {TorchVersion{2, 0}, TorchVersion{2, 8}, kLatestTorch}, TorchVersion{2, 8});
  ASSERT_EQ(rows.size(), 2u);  // 2.8 is the run's own release
  EXPECT_EQ(rows[0].name, "PyTorch 2.0's allocator");
  EXPECT_EQ(rows[0].unavailable,
            "PyTorch 2.0 refuses PYTORCH_CUDA_ALLOC_CONF=\"expandable_segments:True\": "
            "Unrecognized CachingAllocator option: expandable_segments");
  EXPECT_EQ(rows[1].name, "PyTorch 2.11's allocator");
  EXPECT_TRUE(rows[1].unavailable.empty());
  ASSERT_TRUE(rows[1].profile.has_value());
  EXPECT_EQ(rows[1].profile->version, kLatestTorch);
  EXPECT_TRUE(rows[1].config.expandable_segments);

  // The roundup `>` of 2.1 .. 2.8 overwrote the last listed interval; 2.11's run gets its table.
  const alloc::AllocatorConfig listed = alloc::parse_alloc_conf(
      "roundup_power2_divisions:[256:1,512:2,>:4]", alloc::allocator_profile(TorchVersion{2, 5}));
  const auto newer = release_mitigations(listed, {kLatestTorch}, TorchVersion{2, 5});
  ASSERT_EQ(newer.size(), 1u);
  EXPECT_EQ(listed.roundup_power2_divisions[9], 4u);
  EXPECT_EQ(newer[0].config.roundup_power2_divisions[9], 2u);

  // The unavailable row is an error row of the table, never a crash.
  RequestStream stream;
  stream.requests.push_back(Request{RequestOp::malloc, TensorId{1}, 4_MiB, StreamId{0}, {}});
  std::vector<Mitigation> candidates{Mitigation{"baseline", config, nullptr, 1.0, {}, {}, {}}};
  candidates.push_back(rows[0]);
  const WhatIfTable table = run_what_if(stream, candidates);
  ASSERT_EQ(table.rows.size(), 2u);
  EXPECT_EQ(table.rows.back().name, "PyTorch 2.0's allocator");
  EXPECT_EQ(table.rows.back().error, rows[0].unavailable);
  EXPECT_EQ(table.rows.back().torch_version, (TorchVersion{2, 0}));
  EXPECT_EQ(table.rows.front().torch_version, kLatestTorch);
}

TEST(WhatIfReleases, ReleaseListOfTheCommandLine) {
  EXPECT_EQ(parse_release_list("newer", TorchVersion{2, 8}),
            (std::vector<TorchVersion>{{2, 9}, {2, 10}, {2, 11}}));
  EXPECT_EQ(parse_release_list("all", TorchVersion{2, 11}).size(), 11u);
  EXPECT_EQ(parse_release_list("2.9, 2.11,2.9", TorchVersion{2, 5}),
            (std::vector<TorchVersion>{{2, 9}, {2, 11}}));
  EXPECT_THROW(parse_release_list("2.12", TorchVersion{2, 5}), InputError);
  EXPECT_THROW(parse_release_list("", TorchVersion{2, 5}), InputError);
}

}  // namespace
}  // namespace fragscope::analysis
