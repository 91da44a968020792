// The forms run_requests reads a stream in (engine/allocator/request_sources.h): a stream with
// empty_cache calls inserted (WithEmptyCaches) yields exactly the requests, at exactly the
// indices, of a copy of the stream with the calls in it, over a plain or a packed base, and a run
// of it is the run of that copy.
#include <gtest/gtest.h>

#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "engine/allocator/event_sink.h"
#include "engine/allocator/request_sources.h"
#include "engine/allocator/run.h"

namespace fragscope::alloc::detail {
namespace {

using namespace fragscope::literals;

auto fields(const Request& r) {
  return std::make_tuple(r.op, r.tensor.value, r.size, r.stream.value, r.label.value, r.pool);
}

std::string describe(const Request& r) {
  return "op " + std::to_string(static_cast<int>(r.op)) + " tensor " +
         std::to_string(r.tensor.value) + " size " + std::to_string(r.size);
}

// Three packed blocks and a part: tensors allocated on two streams and freed, a step marker and a
// label now and then (a label does not fit a packed word: the overflow list is read too).
RequestStream mixed_stream() {
  RequestStream stream;
  stream.labels.push_back(RequestLabel{});
  std::uint64_t tensor = 0;
  while (stream.requests.size() < 3 * PackedRequests::kBlockRequests + 17) {
    const std::size_t at = stream.requests.size();
    if (at % 1000 == 0)
      stream.requests.push_back(Request{RequestOp::step_begin, TensorId{}, at / 1000, {}, {}});
    ++tensor;
    const LabelId label{at % 777 == 0 ? 1u : 0u};
    stream.requests.push_back(
        Request{RequestOp::malloc, TensorId{tensor}, 512 * (at % 97 + 1), StreamId{at % 2}, label});
    stream.requests.push_back(Request{RequestOp::free, TensorId{tensor}, 0, StreamId{at % 2}, {}});
  }
  return stream;
}

PackedRequests packed(const RequestStream& stream) {
  PackedRequests out;
  for (const Request& r : stream.requests)
    out.push_back(r);
  out.pools = stream.pools;
  return out;
}

// The copy: `stream` with an empty_cache before each index of `before`.
std::vector<Request> with_calls(const RequestStream& stream,
                                const std::vector<std::size_t>& before) {
  std::vector<Request> out;
  std::size_t next = 0;
  for (std::size_t i = 0; i <= stream.requests.size(); ++i) {
    for (; next < before.size() && before[next] == i; ++next)
      out.push_back(kEmptyCacheRequest);
    if (i < stream.requests.size())
      out.push_back(stream.requests[i]);
  }
  return out;
}

// What `source` yields, checking each block starts where the previous one ended; stops (visit
// returns false) once `stop_after` requests were yielded.
template <typename Source>
std::vector<Request> yielded(const Source& source, std::size_t stop_after = SIZE_MAX) {
  std::vector<Request> out;
  source.for_each_block([&](std::span<const Request> block, std::size_t first) {
    EXPECT_EQ(first, out.size());
    EXPECT_FALSE(block.empty());
    out.insert(out.end(), block.begin(), block.end());
    return out.size() < stop_after;
  });
  return out;
}

void expect_same(const std::vector<Request>& got, std::span<const Request> want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(fields(got[i]), fields(want[i]))
        << "request " << i << ": " << describe(got[i]) << ", want " << describe(want[i]);
}

// Packed words keep each request's stream in one of eight slots, the ninth stream and every
// later one whole in the overflow list, and select a word's tensor and size by its op: requests
// of nine streams interleaved, every op with a tensor or a size, decode to themselves.
TEST(PackedRequests, InterleavedStreamsAndEveryOpDecodeToThemselves) {
  RequestStream stream;
  std::uint64_t tensor = 0;
  for (std::uint64_t k = 0; k < 2000; ++k) {
    const StreamId on{(k * 5) % 9 == 0 ? 0 : 0x5500 + (k * 5) % 9};
    ++tensor;
    stream.requests.push_back(Request{RequestOp::malloc, TensorId{tensor}, 512 * (k % 13 + 1), on});
    if (k % 3 == 0)
      stream.requests.push_back(Request{RequestOp::record_stream, TensorId{tensor}, 0, on});
    if (k >= 4) {
      const TensorId older{tensor - 3 - k % 2};  // behind the newest, out of order
      stream.requests.push_back(Request{RequestOp::free, older, 0, on});
      stream.requests.push_back(Request{RequestOp::events_ready, older, 0, on});
    }
    if (k % 250 == 0) {
      stream.requests.push_back(Request{RequestOp::step_begin, TensorId{}, k / 250, on});
      stream.requests.push_back(Request{RequestOp::empty_cache, TensorId{}, 0, on});
    }
  }
  const PackedRequests words = packed(stream);
  expect_same(words.to_vector(), stream.requests);
  expect_same(yielded(UnpackedBlocks(words)), stream.requests);
}

// Calls at the start, inside a block, on both sides of packed blocks' edges, twice at one index,
// and after the last request.
std::vector<std::vector<std::size_t>> insertion_cases(std::size_t size) {
  constexpr std::size_t kBlock = PackedRequests::kBlockRequests;
  return {{},
          {0},
          {0, 0, 5},
          {1000, 2001},
          {kBlock - 1, kBlock, kBlock + 1},
          {2 * kBlock, 2 * kBlock},
          {size},
          {3, size - 1, size, size}};
}

TEST(WithEmptyCaches, YieldsTheCopyWithTheCallsInIt) {
  const RequestStream stream = mixed_stream();
  const PackedRequests packed_stream = packed(stream);
  ASSERT_GT(packed_stream.size(), 3 * PackedRequests::kBlockRequests);
  for (const auto& before : insertion_cases(stream.requests.size())) {
    SCOPED_TRACE(::testing::PrintToString(before));
    const std::vector<Request> copy = with_calls(stream, before);
    const WithEmptyCaches plain(PlainRequests(stream), before);
    EXPECT_EQ(plain.size(), copy.size());
    expect_same(yielded(plain), copy);
    const WithEmptyCaches unpacked(UnpackedBlocks(packed_stream), before);
    EXPECT_EQ(unpacked.size(), copy.size());
    EXPECT_EQ(unpacked.largest_tensor(), packed_stream.largest_tensor());
    expect_same(yielded(unpacked), copy);
  }
}

// A visit that returns false ends the stream there, at a call or inside a block.
TEST(WithEmptyCaches, StopsWhereTheVisitSaysSo) {
  const RequestStream stream = mixed_stream();
  const PackedRequests packed_stream = packed(stream);
  const std::vector<std::size_t> before{0, 10, 10, PackedRequests::kBlockRequests};
  const std::vector<Request> copy = with_calls(stream, before);
  for (const std::size_t stop : {std::size_t{1}, std::size_t{2}, std::size_t{12}, std::size_t{13},
                                 PackedRequests::kBlockRequests + 3}) {
    SCOPED_TRACE(stop);
    const std::vector<Request> got =
        yielded(WithEmptyCaches(UnpackedBlocks(packed_stream), before), stop);
    EXPECT_EQ(got.size() >= stop && got.size() < stop + PackedRequests::kBlockRequests, true)
        << got.size();
    expect_same(got, std::span(copy).first(got.size()));
  }
  // A call right where the visit stopped is not yielded.
  EXPECT_EQ(
      yielded(WithEmptyCaches(PlainRequests(stream), std::vector<std::size_t>{0, 0}), 1).size(),
      1u);
}

// A stream with steps that runs out of memory under a limit, the run continuing after it.
RequestStream stepped_oom_stream() {
  RequestStream stream;
  std::uint64_t tensor = 0;
  for (std::uint64_t step = 0; step < 4; ++step) {
    stream.requests.push_back(Request{RequestOp::step_begin, TensorId{}, step, {}, {}});
    for (std::uint64_t i = 0; i < 3; ++i) {
      ++tensor;
      const Bytes size = (step == 2 && i == 2 ? 90_MiB : 10_MiB * (i + 1));
      stream.requests.push_back(Request{RequestOp::malloc, TensorId{tensor}, size, {}, {}});
      if (i != 1)
        stream.requests.push_back(Request{RequestOp::free, TensorId{tensor}, 0, {}, {}});
    }
  }
  return stream;
}

struct Recorded {
  RunResult result;
  std::vector<TraceEvent> events;
};

template <typename Stream>
Recorded run_of(const Stream& stream, std::span<const std::size_t> before) {
  RunOptions options;
  options.allowed_memory = 100_MiB;
  options.stop_on_oom = false;
  options.check_invariants_every = 1;
  options.empty_cache_before = before;
  SimulatedDevice device(1_GiB);
  TraceRecorder recorder;
  Recorded out;
  out.result = run_requests(stream, AllocatorConfig{}, device, &recorder, options);
  out.events = recorder.events();
  return out;
}

void expect_same_run(const Recorded& got, const Recorded& want) {
  EXPECT_EQ(got.events, want.events);
  EXPECT_EQ(got.result.stats, want.result.stats);
  EXPECT_EQ(got.result.requests_run, want.result.requests_run);
  EXPECT_EQ(got.result.allocs, want.result.allocs);
  EXPECT_EQ(got.result.skipped_requests, want.result.skipped_requests);
  EXPECT_EQ(got.result.device_calls.segment_frees, want.result.device_calls.segment_frees);
  ASSERT_EQ(got.result.ooms.size(), want.result.ooms.size());
  for (std::size_t i = 0; i < got.result.ooms.size(); ++i) {
    EXPECT_EQ(got.result.ooms[i].request_index, want.result.ooms[i].request_index);
    EXPECT_EQ(got.result.ooms[i].allocs_before, want.result.ooms[i].allocs_before);
    EXPECT_EQ(got.result.ooms[i].oom.message, want.result.ooms[i].oom.message);
  }
}

TEST(WithEmptyCaches, RunsAsTheCopyWithTheCallsInIt) {
  const RequestStream stream = stepped_oom_stream();
  std::vector<std::size_t> steps;
  for (std::size_t i = 0; i < stream.requests.size(); ++i)
    if (stream.requests[i].op == RequestOp::step_begin)
      steps.push_back(i);
  RequestStream copy = stream;
  copy.requests = with_calls(stream, steps);
  const Recorded want = run_of(copy, {});
  ASSERT_FALSE(want.result.ooms.empty());
  EXPECT_GT(want.result.device_calls.segment_frees, 0u);  // the calls released cached segments
  expect_same_run(run_of(stream, steps), want);
  expect_same_run(run_of(packed(stream), steps), want);
  RunOptions inserted;
  inserted.empty_cache_before = steps;
  EXPECT_EQ(run_state_bytes(stream, inserted), run_state_bytes(copy));
}

TEST(WithEmptyCaches, IndicesOutOfOrderOrPastTheEndAreRefused) {
  const RequestStream stream = stepped_oom_stream();
  const std::vector<std::size_t> descending{3, 1};
  const std::vector<std::size_t> past{stream.requests.size() + 1};
  EXPECT_THROW(run_of(stream, descending), std::invalid_argument);
  EXPECT_THROW(run_of(packed(stream), past), std::invalid_argument);
}

}  // namespace
}  // namespace fragscope::alloc::detail
