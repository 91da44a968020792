// run_requests keeps its per-tensor state in arrays indexed by tensor id when the ids are small
// (requests_from_trace numbers them 1, 2, ...) and in hash maps otherwise, and reads its requests
// from a RequestStream or packed (PackedRequests, as a replay holds them). Every combination must
// make the same run: every fixture's request stream is run as extracted and with its ids spread
// far apart (hashed), plain and packed, and the emitted events, OOMs, skipped requests and stats
// must agree.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/allocator/run.h"
#include "engine/allocator/summary.h"
#include "engine/core/packed_requests.h"
#include "engine/core/progress.h"
#include "engine/replay/replay.h"
#include "engine/snapshot/snapshot.h"
#include "engine/snapshot/timeline.h"
#include "tests/heap_test_util.h"

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

// The requests as extracted, or packed.
Outcome run(const TraceRequests& requests, const alloc::AllocatorConfig& config,
            std::optional<Bytes> allowed, bool packed = false) {
  alloc::ReplayDevice gpu(requests.segments, alloc::kUnlimited, kH200TotalMemory);
  alloc::RunOptions options;
  options.stop_on_oom = false;
  options.allowed_memory = allowed;
  options.initial_segments = requests.initial_segments;
  Outcome out;
  Recorder recorder;
  if (packed) {
    PackedRequests list;
    for (const Request& r : requests.requests.requests)
      list.push_back(r);
    out.result = alloc::run_requests(list, config, gpu.device(), &recorder, options);
  } else {
    out.result = alloc::run_requests(requests.requests, config, gpu.device(), &recorder, options);
  }
  out.events = std::move(recorder.events);
  return out;
}

void expect_same_run(const Outcome& a, const Outcome& b) {
  EXPECT_EQ(a.events, b.events);
  EXPECT_EQ(a.result.allocs, b.result.allocs);
  EXPECT_EQ(a.result.skipped_requests, b.result.skipped_requests);
  EXPECT_EQ(a.result.requests_run, b.result.requests_run);
  ASSERT_EQ(a.result.ooms.size(), b.result.ooms.size());
  for (std::size_t i = 0; i < a.result.ooms.size(); ++i)
    EXPECT_EQ(a.result.ooms[i].request_index, b.result.ooms[i].request_index);
  EXPECT_EQ(alloc::to_memory_stats(a.result.stats), alloc::to_memory_stats(b.result.stats));
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
  const TraceRequests spread = with_spread_ids(requests);
  const Outcome hashed = run(spread, config, allowed);
  ASSERT_GT(dense.result.allocs, 0u);
  expect_same_run(dense, hashed);
  expect_same_run(dense, run(requests, config, allowed, true));
  expect_same_run(dense, run(spread, config, allowed, true));
  // The fixtures replay exactly: the dense run is the recording.
  EXPECT_EQ(dense.events.size(), requests.expected_events);
}

// Packing keeps every field of every request, in a fraction of the bytes for a recorded trace's
// (8 bytes a request).
TEST(PackedRequests, GiveBackEveryRequestInAFractionOfTheBytes) {
  const auto snapshot =
      snapshot::read_snapshot(std::string(FRAGSCOPE_FIXTURES) + "/streams_default.pickle.gz");
  const TraceRequests extracted = requests_from_trace(snapshot.device_traces.at(0));
  std::vector<Request> requests = extracted.requests.requests;
  ASSERT_GT(requests.size(), 2 * PackedRequests::kBlockRequests);
  PackedRequests packed;
  for (const Request& r : requests)
    packed.push_back(r);
  packed.shrink_to_fit();  // push_back doubled the capacity: up to twice the words
  EXPECT_LE(packed.memory_bytes(), requests.size() * sizeof(Request) / 4);
  // And whatever a request holds: every op, far ids either way, labels, pools, wide values.
  for (std::uint64_t k = 0; k < 3 * PackedRequests::kBlockRequests; ++k) {
    Request r{};
    r.op =
        static_cast<RequestOp>(k % (static_cast<std::uint64_t>(RequestOp::pool_empty_cache) + 1));
    r.tensor = TensorId{k % 7 == 0 ? UINT64_MAX - k : k * 0x9E3779B97F4A7C15ull >> (k % 64)};
    r.size = k % 3 == 0 ? 0 : UINT64_MAX >> (k % 64);
    r.stream = StreamId{k % 5 == 0 ? k : UINT64_MAX - k % 3};
    r.label = LabelId{static_cast<std::uint32_t>(k % 11 == 0 ? UINT32_MAX - k : 0)};
    r.pool = static_cast<std::uint32_t>(k % 13 == 0 ? k : 0);
    requests.push_back(r);
    packed.push_back(r);
  }
  const std::vector<Request> unpacked = packed.to_vector();
  ASSERT_EQ(unpacked.size(), requests.size());
  ASSERT_EQ(packed.size(), requests.size());
  std::uint64_t largest = 0;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const Request& a = requests[i];
    const Request& b = unpacked[i];
    ASSERT_TRUE(a.op == b.op && a.tensor == b.tensor && a.size == b.size && a.stream == b.stream &&
                a.label == b.label && a.pool == b.pool)
        << "request " << i;
    largest = std::max(largest, a.tensor.value);
  }
  EXPECT_EQ(packed.largest_tensor(), largest);
}

// A replay of a spooled trace holds its requests packed: beside the spool, its heap is about
// 1 MiB whatever the trace's length (the trace window's two decoded blocks, the model) and a few
// bytes an entry (the packed requests, the per-tensor table), where the Requests alone were 40
// bytes a request, reserved for every entry (2.5 MB here).
TEST(PackedRequests, AReplayOfASpooledTraceHoldsAFewBytesAnEntry) {
  const auto spooled = snapshot::read_snapshot_spooled(std::string(FRAGSCOPE_FIXTURES) +
                                                       "/streams_default.pickle.gz");
  test::HeapPeak heap;
  if (!heap.measurable())
    GTEST_SKIP() << "mallinfo2 reports nothing under this allocator (a sanitizer's)";
  ReplayOptions options;
  options.progress =
      Progress([&](std::string_view, std::uint64_t, std::uint64_t) { heap.sample(); });
  const ReplayResult result = replay_snapshot(spooled, options);
  ASSERT_FALSE(result.first_divergence.has_value());
  EXPECT_LE(heap.grown(), (std::size_t{1} << 20) + spooled.trace_size(0) * 24)
      << "bytes beside the spool";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TensorTables,
                         ::testing::Values("gpt_ckpt_accum", "gpt_oom_cap", "gpt_varlen_default",
                                           "random_default", "streams_default"));

}  // namespace
}  // namespace fragscope::replay
