// What a what-if holds beside its stream: the "empty_cache before the big phase" candidate is the
// baseline stream with calls inserted, and neither making it nor running it copies the stream
// (a copy was the peak of `advise` on a large snapshot). Bytes are counted by operator new
// (tests/counted_new.cpp).
#include <gtest/gtest.h>

#include <vector>

#include "engine/analysis/what_if.h"
#include "tests/new_bytes_test_util.h"

namespace fragscope::analysis {
namespace {

using namespace fragscope::literals;

constexpr std::size_t kSteps = 200;
constexpr std::size_t kTensorsPerStep = 500;

// kSteps training steps of kTensorsPerStep tensors each allocated and freed: 200,200 requests.
template <typename Out>
void steady_steps(Out& out) {
  std::uint64_t tensor = 0;
  for (std::size_t step = 0; step < kSteps; ++step) {
    out.push_back(Request{RequestOp::step_begin, TensorId{}, step, StreamId{}, LabelId{}});
    for (std::size_t i = 0; i < kTensorsPerStep; ++i) {
      ++tensor;
      out.push_back(Request{RequestOp::malloc, TensorId{tensor}, 1_MiB + 512 * (i % 64), StreamId{},
                            LabelId{}});
      out.push_back(Request{RequestOp::free, TensorId{tensor}, 0, StreamId{}, LabelId{}});
    }
  }
}

PackedRequests packed_steps() {
  PackedRequests packed;
  steady_steps(packed);
  packed.shrink_to_fit();
  return packed;
}

const Mitigation& empty_cache_candidate(const std::vector<Mitigation>& candidates) {
  for (const Mitigation& m : candidates)
    if (m.name == "empty_cache before the big phase")
      return m;
  throw std::runtime_error("no empty_cache candidate");
}

// The candidate's calls are kSteps indices; the stream, 8 bytes a request packed and 40 unpacked.
TEST(WhatIfMemory, TheEmptyCacheCandidateIsNoCopyOfTheStream) {
  const PackedRequests packed = packed_steps();
  {
    const test::NewPeak peak;
    const std::vector<Mitigation> candidates = standard_mitigations(packed, {});
    EXPECT_LT(peak.grown(), packed.memory_bytes() / 8) << "of " << packed.memory_bytes();
    EXPECT_EQ(empty_cache_candidate(candidates).empty_cache_before.size(), kSteps);
  }
  RequestStream stream;
  stream.requests.reserve(packed.size());
  steady_steps(stream.requests);
  const test::NewPeak peak;
  const std::vector<Mitigation> candidates = standard_mitigations(stream, {});
  EXPECT_LT(peak.grown(), packed.memory_bytes() / 8) << "of " << packed.memory_bytes();
  EXPECT_EQ(empty_cache_candidate(candidates).requests, nullptr);
}

// Its run holds what the baseline's does (the allocator model, the table of tensors, a decoded
// block), not a stream with the calls in it.
TEST(WhatIfMemory, TheEmptyCacheRunHoldsWhatTheBaselineRunHolds) {
  const PackedRequests packed = packed_steps();
  const std::vector<Mitigation> candidates = standard_mitigations(packed, {});
  WhatIfOptions options;
  options.threads = 1;
  std::size_t baseline_grown = 0;
  {
    const test::NewPeak peak;
    const WhatIfTable table = run_what_if(packed, {candidates.front()}, options);
    baseline_grown = peak.grown();
    ASSERT_TRUE(table.rows.front().ok) << table.rows.front().error;
  }
  const test::NewPeak peak;
  const WhatIfTable table = run_what_if(packed, {empty_cache_candidate(candidates)}, options);
  ASSERT_TRUE(table.rows.front().ok) << table.rows.front().error;
  // Each step's two cached segments: the 1 MiB requests' small one, the others' large one.
  EXPECT_EQ(table.rows.front().segment_frees, 2 * (kSteps - 1));
  EXPECT_LT(peak.grown(), baseline_grown + packed.memory_bytes() / 8)
      << "baseline " << baseline_grown << ", stream " << packed.memory_bytes();
}

}  // namespace
}  // namespace fragscope::analysis
