// Behaviour of the caching-allocator model beyond the golden vectors: record_stream events,
// invalid pointers, stats resets, devices, and randomized runs under several policies with the
// invariant checker after every call.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "engine/allocator/event_sink.h"
#include "engine/allocator/run.h"
#include "tests/engine/allocator/allocator_test_util.h"
#include "tests/progress_test_util.h"

namespace fragscope::alloc::test {
namespace {

using namespace fragscope::literals;

TEST(RecordStream, FreeWaitsForEventsThenCompletesAtNextMalloc) {
  CheckedAllocator a;
  const StreamId side{42};
  const auto p = a.alloc(4_MiB);
  a.allocator().record_stream(p, side);
  a.free(p);
  EXPECT_EQ(a.allocator().block_state(p), BlockState::active_pending_free);
  EXPECT_EQ(a.current(a.stats().allocated_bytes), 0);
  EXPECT_EQ(a.current(a.stats().active_bytes), static_cast<std::int64_t>(4_MiB));
  EXPECT_EQ(a.trace().back().action, TraceAction::free_requested);
  // Not ready: the next malloc cannot reuse the block.
  const auto q = a.alloc(4_MiB);
  EXPECT_NE(q, p);
  a.allocator().mark_events_ready(p);
  EXPECT_EQ(a.allocator().block_state(p), BlockState::active_pending_free);
  const auto r = a.alloc(4_MiB);  // process_events frees p first, then best fit reuses it
  EXPECT_EQ(r, p);
  bool completed_before_alloc = false;
  for (std::size_t i = 1; i < a.trace().size(); ++i)
    if (a.trace()[i - 1].action == TraceAction::free_completed && a.trace()[i - 1].addr == p &&
        a.trace()[i].action == TraceAction::alloc)
      completed_before_alloc = true;
  EXPECT_TRUE(completed_before_alloc);
}

TEST(RecordStream, EventsCompleteInFifoOrderPerStream) {
  CheckedAllocator a;
  const StreamId side{42};
  const auto p1 = a.alloc(2_MiB);
  const auto p2 = a.alloc(2_MiB);
  a.allocator().record_stream(p1, side);
  a.allocator().record_stream(p2, side);
  a.free(p1);
  a.free(p2);
  a.allocator().mark_events_ready(p2);  // p1's event, queued first, is not done
  a.alloc(512);
  EXPECT_EQ(a.allocator().block_state(p2), BlockState::active_pending_free);
  a.allocator().mark_events_ready(p1);
  a.alloc(512);
  EXPECT_FALSE(a.allocator().block_state(p1).has_value());
  EXPECT_FALSE(a.allocator().block_state(p2).has_value());
}

TEST(RecordStream, AllocationStreamIsIgnoredAndEmptyCacheSynchronizes) {
  CheckedAllocator a;
  const auto own = a.alloc(1_MiB);
  a.allocator().record_stream(own, StreamId{0});
  a.free(own);
  EXPECT_FALSE(a.allocator().block_state(own).has_value());  // freed at once

  const auto p = a.alloc(30_MiB);
  a.allocator().record_stream(p, StreamId{9});
  a.allocator().record_stream(p, StreamId{10});
  a.free(p);
  a.empty_cache();  // waits for both events, frees the block, then releases its segment
  EXPECT_EQ(a.stats().num_sync_all_streams, 1);
  EXPECT_FALSE(a.allocator().block_state(p).has_value());
  // Large pool first, then the small pool's 2 MiB segment of `own`.
  const auto events = a.segment_events();
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[events.size() - 2], std::make_pair(TraceAction::segment_free, 30_MiB));
  EXPECT_EQ(events.back(), std::make_pair(TraceAction::segment_free, 2_MiB));
}

TEST(InvalidPointers, AreInputErrorsNamingTheAddress) {
  CheckedAllocator a;
  EXPECT_THROW(a.allocator().free(0x1234), InvalidPointerError);
  const auto p = a.alloc(1000);
  a.allocator().free(p);
  try {
    a.allocator().free(p);
    FAIL() << "double free accepted";
  } catch (const InvalidPointerError& e) {
    EXPECT_NE(std::string(e.what()).find("invalid device pointer"), std::string::npos);
  }
  EXPECT_THROW(a.allocator().mark_events_ready(p), InvalidPointerError);
  EXPECT_NO_THROW(a.allocator().free(0));
  a.check();
}

TEST(Stats, ResetPeakAndAccumulated) {
  CheckedAllocator a;
  const auto p = a.alloc(100_MiB);
  a.free(p);
  a.alloc(1_MiB);
  a.allocator().reset_peak_stats();
  EXPECT_EQ(a.stats().allocated_bytes[StatType::aggregate].peak,
            a.stats().allocated_bytes[StatType::aggregate].current);
  a.allocator().reset_accumulated_stats();
  EXPECT_EQ(a.stats().allocated_bytes[StatType::aggregate].allocated, 0);
  EXPECT_EQ(a.stats().num_device_alloc, 0);
  a.check();
}

TEST(Devices, SimulatedDeviceReusesFreedRangesAndFailsAtCapacity) {
  SimulatedDevice device(100_MiB);
  const auto a = device.allocate_segment(20_MiB);
  const auto b = device.allocate_segment(20_MiB);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a, SimulatedDevice::kSegmentBase - 20_MiB);  // top down, as cudaMalloc
  EXPECT_EQ(*b, *a - 20_MiB);
  device.free_segment(*a, 20_MiB);
  const auto c = device.allocate_segment(10_MiB);  // the freed range, from its top
  EXPECT_EQ(*c, *a + 10_MiB);
  EXPECT_FALSE(device.allocate_segment(80_MiB).has_value());
  EXPECT_EQ(device.free_memory(), 70_MiB);
  EXPECT_EQ(device.calls().segment_alloc_failures, 1u);
}

// A run's device calls are two readings of Device::calls() apart: every counter is the difference
// of its two readings, none taken from a neighbour.
TEST(Devices, CallCountsBetweenTwoReadingsAreEachCountersDifference) {
  const DeviceCallCounts before{1, 2, 3, 4, 5, 6, 7, 8};
  const DeviceCallCounts after{11, 22, 33, 44, 55, 66, 77, 88};
  EXPECT_EQ(after - before, (DeviceCallCounts{10, 20, 30, 40, 50, 60, 70, 80}));
  EXPECT_EQ(after - after, DeviceCallCounts{});
}

TEST(Devices, RecordedAddressDeviceFallsBackAfterAMismatch) {
  SimulatedDevice upstream(1_GiB);
  RecordedAddressDevice device({{0x7f0000000000, 20_MiB}, {0x7f0002000000, 2_MiB}}, upstream);
  EXPECT_EQ(device.allocate_segment(20_MiB), 0x7f0000000000u);
  EXPECT_FALSE(device.diverged());
  const auto other = device.allocate_segment(4_MiB);  // recording has 2 MiB next
  EXPECT_TRUE(device.diverged());
  ASSERT_TRUE(other.has_value());
  EXPECT_NE(*other, 0x7f0002000000u);
  device.free_segment(0x7f0000000000, 20_MiB);
  EXPECT_EQ(upstream.in_use(), 4_MiB);
}

// The stack every replay and what-if runs on: recorded addresses over a simulated GPU's capacity.
TEST(Devices, AReplayDeviceServesTheRecordingOverASimulatedGpu) {
  ReplayDevice gpu({{0x7f0000000000, 20_MiB}}, 100_MiB, 0, 2);
  Device& device = gpu.device();
  EXPECT_EQ(device.ordinal(), 2);
  EXPECT_EQ(device.total_memory(), 100_MiB);  // 0 = the capacity
  EXPECT_EQ(device.allocate_segment(20_MiB), 0x7f0000000000u);
  EXPECT_EQ(gpu.simulated().in_use(), 20_MiB);
  EXPECT_FALSE(device.allocate_segment(90_MiB).has_value());  // the simulated capacity holds
  EXPECT_EQ(device.free_memory(), 80_MiB);
  EXPECT_EQ(device.calls().segment_alloc_failures, 1u);
  EXPECT_EQ(ReplayDevice({}, kUnlimited, 80_GiB).device().total_memory(), 80_GiB);
}

TEST(Run, OomStopsTheRunLikeAnExceptionUnlessToldOtherwise) {
  RequestStream stream;
  auto add = [&](RequestOp op, std::uint64_t tensor, Bytes size) {
    stream.requests.push_back(Request{op, TensorId{tensor}, size, StreamId{0}, {}});
  };
  add(RequestOp::malloc, 1, 20_MiB);
  add(RequestOp::malloc, 2, 200_MiB);  // over the limit
  add(RequestOp::free, 2, 0);          // skipped: never allocated
  add(RequestOp::free, 1, 0);
  RunOptions options;
  options.allowed_memory = 100_MiB;
  options.check_invariants_every = 1;
  SimulatedDevice device(1_GiB);
  const RunResult stopped = run_requests(stream, AllocatorConfig{}, device, nullptr, options);
  EXPECT_TRUE(stopped.stopped_on_oom);
  EXPECT_EQ(stopped.requests_run, 2u);
  ASSERT_EQ(stopped.ooms.size(), 1u);
  EXPECT_EQ(stopped.ooms[0].request_index, 1u);
  EXPECT_EQ(stopped.ooms[0].allocs_before, 1u);

  options.stop_on_oom = false;
  SimulatedDevice device2(1_GiB);
  const RunResult full = run_requests(stream, AllocatorConfig{}, device2, nullptr, options);
  EXPECT_EQ(full.requests_run, 4u);
  EXPECT_EQ(full.skipped_requests, 1u);
  EXPECT_EQ(full.stats.allocated_bytes[StatType::aggregate].current, 0);
  EXPECT_EQ(full.device_calls.segment_allocs, 1u);

  RequestStream bad;
  bad.requests.push_back(Request{RequestOp::free, TensorId{7}, 0, StreamId{0}, {}});
  SimulatedDevice device3(1_GiB);
  EXPECT_THROW(run_requests(bad, AllocatorConfig{}, device3), InputError);
}

// The OOM text names the device the allocator runs on, not always GPU 0.
TEST(Run, TheOomTextNamesTheDevice) {
  RequestStream stream;
  stream.requests.push_back(Request{RequestOp::malloc, TensorId{1}, 200_MiB, StreamId{0}, {}});
  RunOptions options;
  options.allowed_memory = 100_MiB;
  SimulatedDevice device(1_GiB);
  device.set_ordinal(3);
  const RunResult result = run_requests(stream, AllocatorConfig{}, device, nullptr, options);
  ASSERT_EQ(result.ooms.size(), 1u);
  EXPECT_NE(result.ooms[0].oom.message.find("GPU 3 has a total capacity"), std::string::npos)
      << result.ooms[0].oom.message;
}

// `tensors` 1 KiB allocations, each freed right after it is made: two requests per tensor, so a
// run over it polls its cancel token and reports progress 2 * tensors / kCancelPollRequests times.
RequestStream malloc_free_pairs(std::uint64_t tensors) {
  RequestStream stream;
  for (std::uint64_t t = 1; t <= tensors; ++t) {
    stream.requests.push_back(Request{RequestOp::malloc, TensorId{t}, 1_KiB, StreamId{0}, {}});
    stream.requests.push_back(Request{RequestOp::free, TensorId{t}, 0, StreamId{0}, {}});
  }
  return stream;
}

// A cancel is seen within kCancelPollRequests requests, as fragscope::Cancelled (not a result).
TEST(Run, ACancelledRunStopsAtTheNextPoll) {
  constexpr std::uint64_t kTensors = 5 * kCancelPollRequests;
  const RequestStream stream = malloc_free_pairs(kTensors);
  // Cancels once the run has made `after` allocations.
  struct CancellingSink final : EventSink {
    CancelToken token = CancelToken::make();
    std::size_t allocs = 0;
    std::size_t after = 0;
    void on_event(const TraceEvent& event) override {
      if (event.action == TraceAction::alloc && ++allocs == after)
        token.cancel();
    }
  } sink;
  sink.after = kCancelPollRequests;  // at request 2 * kCancelPollRequests - 2
  RunOptions options;
  options.cancel = sink.token;
  SimulatedDevice device(1_GiB);
  EXPECT_THROW(run_requests(stream, AllocatorConfig{}, device, &sink, options), Cancelled);
  EXPECT_EQ(sink.allocs, kCancelPollRequests);  // the poll at request 2 * kCancelPollRequests

  SimulatedDevice again(1_GiB);
  EXPECT_THROW(run_requests(stream, AllocatorConfig{}, again, nullptr, options), Cancelled);
  SimulatedDevice uncancelled(1_GiB);
  EXPECT_EQ(run_requests(stream, AllocatorConfig{}, uncancelled).allocs, kTensors);
}

// The run reports its requests as it goes and ends at 1; a cancel halfway stops it there.
TEST(Run, ProgressGrowsToOneAndACancelHalfwayStopsThere) {
  constexpr std::uint64_t kTensors = 8 * kCancelPollRequests;
  const RequestStream stream = malloc_free_pairs(kTensors);
  fragscope::test::ProgressRecorder whole(kRunStages);
  RunOptions options;
  options.progress = whole.progress();
  SimulatedDevice device(1_GiB);
  EXPECT_EQ(run_requests(stream, AllocatorConfig{}, device, nullptr, options).allocs, kTensors);
  EXPECT_TRUE(fragscope::test::grows_to_one(whole, 2 * kTensors / kCancelPollRequests));

  fragscope::test::ProgressRecorder halfway(kRunStages);
  halfway.cancel_at = 0.5;
  options.progress = halfway.progress();
  options.cancel = halfway.token;
  TraceRecorder events;
  SimulatedDevice again(1_GiB);
  EXPECT_THROW(run_requests(stream, AllocatorConfig{}, again, &events, options), Cancelled);
  EXPECT_TRUE(fragscope::test::stopped_before(halfway, 0.5));
  // Cancelled at the poll that reported one half: no request after it ran.
  const auto allocs =
      std::count_if(events.events().begin(), events.events().end(),
                    [](const TraceEvent& e) { return e.action == TraceAction::alloc; });
  EXPECT_EQ(static_cast<std::uint64_t>(allocs), kTensors / 2);
}

// --- the same randomized workload under several policies --------------------------------------

struct DefaultPolicy {
  static AllocatorConfig config() { return {}; }
  static std::optional<Bytes> allowed() { return std::nullopt; }
};
struct SplitAndRoundPolicy {
  static AllocatorConfig config() {
    AllocatorConfig c;
    c.max_split_size = 64_MiB;
    c.roundup_power2_divisions.fill(4);
    return c;
  }
  static std::optional<Bytes> allowed() { return std::nullopt; }
};
struct ExpandablePolicy {
  static AllocatorConfig config() {
    AllocatorConfig c;
    c.expandable_segments = true;
    return c;
  }
  static std::optional<Bytes> allowed() { return std::nullopt; }
};
struct GcLimitPolicy {
  static AllocatorConfig config() {
    AllocatorConfig c;
    c.garbage_collection_threshold = 0.6;
    c.max_split_size = 40_MiB;
    return c;
  }
  static std::optional<Bytes> allowed() { return 1_GiB; }
};
struct LargeSegmentPolicy {
  static AllocatorConfig config() {
    AllocatorConfig c;
    c.large_segment_size = 32_MiB;
    c.max_non_split_rounding_size = 32_MiB;
    return c;
  }
  static std::optional<Bytes> allowed() { return 2_GiB; }
};

template <typename Policy>
class RandomizedRun : public ::testing::Test {};
using Policies = ::testing::Types<DefaultPolicy, SplitAndRoundPolicy, ExpandablePolicy,
                                  GcLimitPolicy, LargeSegmentPolicy>;
TYPED_TEST_SUITE(RandomizedRun, Policies);

TYPED_TEST(RandomizedRun, InvariantsHoldAfterEveryCallAndEverythingCanBeReleased) {
  CheckedAllocator a(TypeParam::config());
  a.allocator().set_allowed_memory(TypeParam::allowed());
  std::mt19937_64 rng(12345);
  std::vector<std::uint64_t> live;
  std::vector<std::uint64_t> pending;
  const StreamId streams[] = {StreamId{0}, StreamId{0x5000}};
  for (int step = 0; step < 1500; ++step) {
    const auto dice = rng() % 100;
    if (dice < 50 || live.empty()) {
      Bytes size = 0;
      switch (rng() % 4) {
        case 0:
          size = 1 + rng() % (1_MiB);
          break;
        case 1:
          size = 1_MiB + rng() % (9_MiB);
          break;
        case 2:
          size = 10_MiB + rng() % (90_MiB);
          break;
        default:
          size = 100_MiB + rng() % (200_MiB);
          break;
      }
      const MallocResult r = a.allocator().malloc(size, streams[rng() % 2]);
      a.check();
      if (r.ok())
        live.push_back(r.address);
      else
        EXPECT_NE(r.oom->message.find("CUDA out of memory"), std::string::npos);
    } else if (dice < 88) {
      const std::size_t i = rng() % live.size();
      if (rng() % 8 == 0) {
        a.allocator().record_stream(live[i], StreamId{0x9000});
        a.check();
        a.free(live[i]);
        if (a.allocator().block_state(live[i]) == BlockState::active_pending_free)
          pending.push_back(live[i]);
      } else {
        a.free(live[i]);
      }
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    } else if (dice < 96 && !pending.empty()) {
      // The OOM path synchronizes all streams, which may have freed it already.
      if (a.allocator().block_state(pending.front()) == BlockState::active_pending_free)
        a.allocator().mark_events_ready(pending.front());
      pending.erase(pending.begin());
      a.check();
    } else if (dice < 98) {
      a.empty_cache();
      pending.clear();
    }
  }
  for (auto p : live)
    a.free(p);
  a.empty_cache();
  EXPECT_EQ(a.current(a.stats().reserved_bytes), 0);
  EXPECT_EQ(a.current(a.stats().active_bytes), 0);
  EXPECT_EQ(a.current(a.stats().inactive_split), 0);
  EXPECT_EQ(a.allocator().total_allocated_memory(), 0u);
  EXPECT_EQ(a.device().in_use(), 0u);
}

}  // namespace
}  // namespace fragscope::alloc::test
