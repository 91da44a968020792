// requests_from_trace and the divergence report on small hand-made traces.
#include <gtest/gtest.h>

#include "engine/core/packed_requests.h"
#include "engine/replay/replay.h"
#include "engine/snapshot/snapshot.h"

namespace fragscope::replay {
namespace {

using namespace fragscope::literals;

TraceEvent ev(TraceAction action, std::uint64_t addr, Bytes size, std::uint64_t stream = 0) {
  return TraceEvent{action, addr, size, StreamId{stream}, 0, FrameStackId{}};
}

nlohmann::json default_settings() {
  nlohmann::json table = nlohmann::json::object();
  for (int k = 1; k <= 32768; k *= 2)
    table[std::to_string(k)] = 0;
  return {{"PYTORCH_CUDA_ALLOC_CONF", ""},          {"max_split_size", -1},
          {"garbage_collection_threshold", 0.0},    {"expandable_segments", false},
          {"pinned_num_register_threads", 1},       {"release_lock_on_cudamalloc", false},
          {"pinned_use_cuda_host_register", false}, {"graph_capture_record_stream_reuse", false},
          {"roundup_power2_divisions", table}};
}

// What PyTorch records for: a = alloc(1000); b = alloc(3000) with b.record_stream(s);
// del a; del b; c = alloc(512) (b's event completes inside this malloc).
std::vector<TraceEvent> small_trace() {
  const std::uint64_t seg = 0x7f0000000000;
  return {ev(TraceAction::segment_alloc, seg, 2_MiB),
          ev(TraceAction::alloc, seg, 1000),
          ev(TraceAction::alloc, seg + 1024, 3000),
          ev(TraceAction::free_requested, seg, 1000),
          ev(TraceAction::free_completed, seg, 1000),
          ev(TraceAction::free_requested, seg + 1024, 3000),
          ev(TraceAction::free_completed, seg + 1024, 3000),
          ev(TraceAction::alloc, seg, 512)};
}

// b is freed first and waits for its event; a is freed at once; b's event completes inside the
// next malloc.
std::vector<TraceEvent> pending_free_trace() {
  const std::uint64_t seg = 0x7f0000000000;
  return {ev(TraceAction::segment_alloc, seg, 2_MiB),
          ev(TraceAction::alloc, seg, 1000),
          ev(TraceAction::alloc, seg + 1024, 3000),
          ev(TraceAction::free_requested, seg + 1024, 3000),
          ev(TraceAction::free_requested, seg, 1000),
          ev(TraceAction::free_completed, seg, 1000),
          ev(TraceAction::free_completed, seg + 1024, 3000),
          ev(TraceAction::alloc, seg, 512)};
}

TEST(TraceRequests, PendingFreesBecomeRecordStreamAndEventsReady) {
  const std::vector<TraceEvent> trace = pending_free_trace();
  const TraceRequests r = requests_from_trace(trace);
  EXPECT_EQ(r.entries, 8u);
  EXPECT_EQ(r.allocs, 3u);
  ASSERT_EQ(r.segments.size(), 1u);
  std::vector<RequestOp> ops;
  for (const Request& q : r.requests.requests)
    ops.push_back(q.op);
  EXPECT_EQ(ops, (std::vector<RequestOp>{RequestOp::malloc, RequestOp::malloc,
                                         RequestOp::record_stream, RequestOp::free, RequestOp::free,
                                         RequestOp::events_ready, RequestOp::malloc}));
  EXPECT_EQ(r.requests.requests[2].stream, StreamId{UINT64_MAX});  // one stream: synthetic
  const ReplayResult result = replay_trace(trace, default_settings());
  EXPECT_TRUE(result.compared);
  EXPECT_FALSE(result.first_divergence.has_value()) << describe(*result.first_divergence);
}

// A block freed with pending events was used by a stream the trace does not name: with exactly
// two streams in the trace it is the other one. A spooled trace gives the same requests as the
// vector, the stream included (the spool noted its streams as it was written).
TEST(TraceRequests, ASpooledTraceNamesTheOtherOfTwoStreams) {
  // The trace above with an allocation on a second stream before b's event completes.
  std::vector<TraceEvent> trace = pending_free_trace();
  trace.insert(trace.begin() + 6, ev(TraceAction::alloc, 0x7f0000000000 + 1536, 256, 7));
  const TraceRequests from_vector = requests_from_trace(trace);
  ASSERT_EQ(from_vector.requests.requests.at(2).op, RequestOp::record_stream);
  EXPECT_EQ(from_vector.requests.requests[2].stream, StreamId{7});

  snapshot::Snapshot spooled;
  snapshot::EventSpool& spool = spooled.device_spools.emplace_back();
  for (const TraceEvent& e : trace)
    spool.push_back(e);
  PackedRequests packed;
  const TraceRequests from_spool = requests_from_trace(spooled, 0, nullptr, packed);
  EXPECT_EQ(from_spool.allocs, from_vector.allocs);
  const std::vector<Request> requests = packed.to_vector();
  ASSERT_EQ(requests.size(), from_vector.requests.requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(requests[i].op, from_vector.requests.requests[i].op) << i;
    EXPECT_EQ(requests[i].tensor, from_vector.requests.requests[i].tensor) << i;
    EXPECT_EQ(requests[i].stream, from_vector.requests.requests[i].stream) << i;
  }
}

// The streams that decide a pending free's use stream are those of the whole trace: two streams
// interleaved entry by entry give the other one; a third anywhere, even after the last pending
// free, makes it synthetic.
TEST(TraceRequests, TheUseStreamCountsEveryStreamOfTheTrace) {
  const std::uint64_t seg = 0x7f0000000000;
  std::vector<TraceEvent> trace{ev(TraceAction::segment_alloc, seg, 2_MiB, 3)};
  for (std::uint64_t k = 0; k < 16; ++k) {
    const std::uint64_t stream = k % 2 == 0 ? 3 : 7;
    const std::uint64_t addr = seg + 1024 * k;
    trace.push_back(ev(TraceAction::alloc, addr, 1000, stream));
    trace.push_back(ev(TraceAction::free_requested, addr, 1000, stream));
    if (k == 5)
      continue;  // completes later: a pending free, on stream 7
    trace.push_back(ev(TraceAction::free_completed, addr, 1000, stream));
  }
  trace.push_back(ev(TraceAction::free_completed, seg + 1024 * 5, 1000, 7));
  auto use_stream = [](const std::vector<TraceEvent>& entries) {
    const TraceRequests r = requests_from_trace(entries);
    for (const Request& q : r.requests.requests)
      if (q.op == RequestOp::record_stream)
        return q.stream;
    return StreamId{0};
  };
  EXPECT_EQ(use_stream(trace), StreamId{3});
  trace.push_back(ev(TraceAction::alloc, seg + 1024 * 20, 1000, 5));
  EXPECT_EQ(use_stream(trace), StreamId{UINT64_MAX});
}

TEST(TraceRequests, ImmediateFreesReplayExactly) {
  const ReplayResult result = replay_trace(small_trace(), default_settings());
  EXPECT_FALSE(result.first_divergence.has_value()) << describe(*result.first_divergence);
  EXPECT_TRUE(result.segment_events_match);
  EXPECT_TRUE(result.ooms_match);
  EXPECT_EQ(result.allocs, 3u);
}

TEST(TraceRequests, FirstDivergenceNamesTheEntry) {
  auto trace = small_trace();
  trace[7].addr += 512;  // PyTorch would put c at the segment start, not 512 bytes in
  const ReplayResult result = replay_trace(trace, default_settings());
  ASSERT_TRUE(result.first_divergence.has_value());
  EXPECT_EQ(result.first_divergence->trace_entry, 7u);
  EXPECT_EQ(result.first_divergence->expected->addr, 0x7f0000000000u + 512);
  EXPECT_EQ(result.first_divergence->got->addr, 0x7f0000000000u);
  EXPECT_NE(describe(*result.first_divergence).find("trace entry 7"), std::string::npos);
  EXPECT_TRUE(result.segment_events_match);
}

// A recorded event the model never emits (a free of an address nothing allocated) after the
// last one it does: the divergence counts the emitted events, the trace's `snapshot` entries
// being no events, and names the entry it waited for.
TEST(TraceRequests, ARecordedEventTheModelNeverEmitsIsTheDivergence) {
  auto trace = small_trace();
  trace.insert(trace.begin() + 3, ev(TraceAction::snapshot, 0, 0));
  trace.push_back(ev(TraceAction::free_requested, 0x7e0000000000, 4096));
  const ReplayResult result = replay_trace(trace, default_settings());
  EXPECT_EQ(result.emitted_events, 8u);
  ASSERT_TRUE(result.first_divergence.has_value());
  EXPECT_EQ(result.first_divergence->event_index, 8u);
  EXPECT_EQ(result.first_divergence->trace_entry, 9u);
  ASSERT_TRUE(result.first_divergence->expected.has_value());
  EXPECT_EQ(result.first_divergence->expected->addr, 0x7e0000000000u);
  EXPECT_FALSE(result.first_divergence->got.has_value());
  EXPECT_TRUE(result.segment_events_match);
}

// A trace over several spool blocks, `snapshot` entries at a block's end and start: replayed
// spooled, its comparison reads the blocks in turn and finds what the vector's finds, a
// divergence past the first blocks or the recorded entry the model never emitted.
TEST(TraceRequests, ASpooledTraceDivergesWhereItsVectorDoes) {
  const std::uint64_t seg = 0x7f0000000000;
  std::vector<TraceEvent> trace{ev(TraceAction::segment_alloc, seg, 2_MiB)};
  constexpr std::size_t kBlock = snapshot::EventSpool::kBlockEvents;
  while (trace.size() < 3 * kBlock) {
    if (trace.size() % kBlock >= kBlock - 4 || trace.size() % kBlock < 2) {
      trace.push_back(ev(TraceAction::snapshot, 0, 0));
      continue;
    }
    trace.push_back(ev(TraceAction::alloc, seg, 512));
    trace.push_back(ev(TraceAction::free_requested, seg, 512));
    trace.push_back(ev(TraceAction::free_completed, seg, 512));
  }
  auto replay_both = [](const std::vector<TraceEvent>& events) {
    snapshot::Snapshot in_memory;
    in_memory.device_traces = {events};
    in_memory.allocator_settings = default_settings();
    in_memory.allocator_settings_recorded = true;
    snapshot::Snapshot spooled = in_memory;
    spooled.device_traces = {{}};
    spooled.device_spools.emplace_back(kBlock * 4);  // all to the file
    for (const TraceEvent& e : events)
      spooled.device_spools[0].push_back(e);
    return std::pair{replay_snapshot(in_memory), replay_snapshot(spooled)};
  };
  const auto [exact, exact_spooled] = replay_both(trace);
  EXPECT_FALSE(exact.first_divergence.has_value()) << describe(*exact.first_divergence);
  EXPECT_FALSE(exact_spooled.first_divergence.has_value())
      << describe(*exact_spooled.first_divergence);

  // One allocation past the second block's start, 512 bytes into the segment (the model puts it
  // at its start).
  std::size_t moved = 2 * kBlock + 10;
  while (trace[moved].action != TraceAction::alloc)
    ++moved;
  for (std::size_t k = moved; k < moved + 3; ++k)
    trace[k].addr += 512;
  const auto [moved_in_memory, moved_spooled] = replay_both(trace);
  ASSERT_TRUE(moved_in_memory.first_divergence.has_value());
  ASSERT_TRUE(moved_spooled.first_divergence.has_value());
  EXPECT_EQ(moved_in_memory.first_divergence->trace_entry, moved);
  EXPECT_EQ(moved_spooled.first_divergence->trace_entry, moved);
  EXPECT_EQ(moved_spooled.first_divergence->event_index,
            moved_in_memory.first_divergence->event_index);
  EXPECT_EQ(describe(*moved_spooled.first_divergence), describe(*moved_in_memory.first_divergence));
  for (std::size_t k = moved; k < moved + 3; ++k)
    trace[k].addr -= 512;

  // A recorded allocation the model never makes, after a block's trailing snapshot entries.
  trace.push_back(ev(TraceAction::segment_alloc, seg + 2_MiB, 2_MiB));
  const auto [short_in_memory, short_spooled] = replay_both(trace);
  ASSERT_TRUE(short_in_memory.first_divergence.has_value());
  ASSERT_TRUE(short_spooled.first_divergence.has_value());
  EXPECT_EQ(short_spooled.first_divergence->trace_entry, trace.size() - 1);
  EXPECT_FALSE(short_spooled.first_divergence->got.has_value());
  EXPECT_EQ(describe(*short_spooled.first_divergence), describe(*short_in_memory.first_divergence));
}

TEST(TraceRequests, AllocAtALiveAddressIsAnInputError) {
  auto trace = small_trace();
  trace[2].addr = trace[1].addr;
  EXPECT_THROW(requests_from_trace(trace), InputError);
}

TEST(TraceRequests, BadSettingsAreInputErrors) {
  auto settings = default_settings();
  settings["max_split_size"] = "big";
  EXPECT_THROW(config_from_settings(settings), InputError);
  EXPECT_THROW(config_from_settings(nlohmann::json::array()), InputError);
}

// Older releases record fewer keys: a missing key keeps PyTorch's default, and the replay says so.
TEST(TraceRequests, MissingSettingsKeysKeepTheDefaults) {
  auto settings = default_settings();
  settings.erase("graph_capture_record_stream_reuse");
  settings["max_split_size"] = 64 * kMiB;
  std::string note;
  const alloc::AllocatorConfig config = config_from_settings(settings, &note);
  EXPECT_EQ(config.max_split_size, 64 * kMiB);
  EXPECT_NE(note.find("graph_capture_record_stream_reuse"), std::string::npos) << note;
  note.clear();
  EXPECT_EQ(config_from_settings(nlohmann::json::object(), &note), alloc::AllocatorConfig{});
  EXPECT_NE(note.find("no allocator_settings"), std::string::npos) << note;
  const ReplayResult result = replay_trace(small_trace(), nlohmann::json::object());
  ASSERT_EQ(result.warnings.size(), 1u);
  EXPECT_TRUE(result.segment_events_match);
}

}  // namespace
}  // namespace fragscope::replay
