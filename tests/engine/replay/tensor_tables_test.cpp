// run_requests keeps its per-tensor state in arrays indexed by tensor id when the ids are small
// (requests_from_trace numbers them 1, 2, ...) and in hash maps otherwise. Both must make the
// same run: every fixture's request stream is run as extracted and with its ids spread far
// apart (hashed), and the emitted events, OOMs, skipped requests and stats must agree.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/allocator/run.h"
#include "engine/allocator/summary.h"
#include "engine/replay/replay.h"
#include "engine/snapshot/snapshot.h"
#include "engine/snapshot/timeline.h"

namespace fragscope::replay {
namespace {

struct Recorder final : alloc::EventSink {
  void on_event(const TraceEvent& event) override { events.push_back(event); }
  std::vector<TraceEvent> events;
};

struct Outcome {
  alloc::RunResult result;
  std::vector<TraceEvent> events;
};

Outcome run(const TraceRequests& requests, const alloc::AllocatorConfig& config,
            std::optional<Bytes> allowed) {
  alloc::ReplayDevice gpu(requests.segments, alloc::kUnlimited, kH200TotalMemory);
  alloc::RunOptions options;
  options.stop_on_oom = false;
  options.allowed_memory = allowed;
  options.initial_segments = requests.initial_segments;
  Outcome out;
  Recorder recorder;
  out.result = alloc::run_requests(requests.requests, config, gpu.device(), &recorder, options);
  out.events = std::move(recorder.events);
  return out;
}

// Tensor ids far beyond the dense table's bound, still distinct: the hashed tables.
TraceRequests with_spread_ids(TraceRequests requests) {
  auto spread = [](TensorId id) {
    return TensorId{id.value * 1'000'003 + (std::uint64_t{1} << 40)};
  };
  for (Request& r : requests.requests.requests)
    r.tensor = spread(r.tensor);
  for (alloc::SeedSegment& segment : requests.initial_segments)
    for (alloc::SeedBlock& block : segment.blocks)
      block.tensor = spread(block.tensor);
  return requests;
}

class TensorTables : public ::testing::TestWithParam<const char*> {};

TEST_P(TensorTables, DenseAndHashedRunsAgree) {
  const std::string name = GetParam();
  const auto snapshot =
      snapshot::read_snapshot(std::string(FRAGSCOPE_FIXTURES) + "/" + name + ".pickle.gz");
  const auto& trace = snapshot.device_traces.at(0);
  const auto initial = snapshot::initial_state(snapshot, 0);
  const TraceRequests requests = requests_from_trace(trace, &initial);
  const auto config = config_from_settings(snapshot.allocator_settings);
  const std::optional<Bytes> allowed =
      name == "gpt_oom_cap" ? std::optional<Bytes>(Bytes{6} << 30) : std::nullopt;

  const Outcome dense = run(requests, config, allowed);
  const Outcome hashed = run(with_spread_ids(requests), config, allowed);
  ASSERT_GT(dense.result.allocs, 0u);
  EXPECT_EQ(dense.events, hashed.events);
  EXPECT_EQ(dense.result.allocs, hashed.result.allocs);
  EXPECT_EQ(dense.result.skipped_requests, hashed.result.skipped_requests);
  EXPECT_EQ(dense.result.requests_run, hashed.result.requests_run);
  ASSERT_EQ(dense.result.ooms.size(), hashed.result.ooms.size());
  for (std::size_t i = 0; i < dense.result.ooms.size(); ++i)
    EXPECT_EQ(dense.result.ooms[i].request_index, hashed.result.ooms[i].request_index);
  EXPECT_EQ(alloc::to_memory_stats(dense.result.stats),
            alloc::to_memory_stats(hashed.result.stats));
  // The fixtures replay exactly: the dense run is the recording.
  EXPECT_EQ(dense.events.size(), requests.expected_events);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TensorTables,
                         ::testing::Values("gpt_ckpt_accum", "gpt_oom_cap", "gpt_varlen_default",
                                           "random_default", "streams_default"));

}  // namespace
}  // namespace fragscope::replay
