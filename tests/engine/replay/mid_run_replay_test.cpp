// Traces that start mid-run: a real 2.11 recording with the head of its trace cut off (its final
// segments kept, as when recording starts late or the ring buffer dropped the oldest entries)
// has a known answer, the full recording. Replaying the cut trace from the state rebuilt at its
// first entry must give the same segment events and OOM as the recording from there on, and the
// recording's final memory_stats() .current values.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <ostream>
#include <set>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/allocator/stats.h"
#include "engine/replay/replay.h"
#include "engine/snapshot/snapshot.h"

namespace fragscope::replay {
namespace {

const std::string kFixtures = FRAGSCOPE_FIXTURES;

struct Cut {
  std::string fixture;
  int keep_percent;  // share of the trace kept (its tail)
  // Instead: cut right before the n-th burst of segment_free entries (0 = the first), so the
  // trace starts with an empty_cache() call, as when a script empties the cache and then
  // starts recording.
  int at_burst = -1;
  std::string folder = kFixtures;
};

void PrintTo(const Cut& cut, std::ostream* out) {
  *out << cut.fixture;
  if (cut.at_burst >= 0)
    *out << " from segment_free burst " << cut.at_burst;
  else
    *out << " keeping " << cut.keep_percent << "%";
}

std::string name_of(const ::testing::TestParamInfo<Cut>& info) {
  if (info.param.at_burst >= 0)
    return info.param.fixture + "_burst" + std::to_string(info.param.at_burst);
  return info.param.fixture + "_keep" + std::to_string(info.param.keep_percent);
}

std::size_t entries_to_drop(const Cut& cut, const std::vector<TraceEvent>& trace) {
  if (cut.at_burst < 0)
    return trace.size() - trace.size() * static_cast<std::size_t>(cut.keep_percent) / 100;
  int burst = -1;
  for (std::size_t i = 0; i < trace.size(); ++i) {
    if (trace[i].action == TraceAction::segment_free &&
        (i == 0 || trace[i - 1].action != TraceAction::segment_free) && ++burst == cut.at_burst)
      return i;
  }
  ADD_FAILURE() << cut.fixture << " has no segment_free burst " << cut.at_burst;
  return 0;
}

// The snapshot with its traces spooled, as read_snapshot_spooled keeps them, with a memory limit
// small enough that most blocks go to the spool's file.
snapshot::Snapshot spooled(snapshot::Snapshot snap) {
  snap.device_spools.clear();
  for (std::vector<TraceEvent>& trace : snap.device_traces) {
    snapshot::EventSpool& spool =
        snap.device_spools.emplace_back(snapshot::EventSpool::kBlockEvents * 4);
    for (const TraceEvent& e : trace)
      spool.push_back(e);
    trace = {};
  }
  snap.device_entry_texts.clear();
  return snap;
}

// replay_snapshot reads a spooled trace forward from its blocks (a replay of a real 1.2M-entry
// trace then holds no 48 MB of entries), or unpacks one that needs the pool inference: either
// way, the replay of the trace in memory.
void expect_same_replay(const ReplayResult& spooled, const ReplayResult& plain) {
  EXPECT_EQ(spooled.entries, plain.entries);
  EXPECT_EQ(spooled.allocs, plain.allocs);
  EXPECT_EQ(spooled.emitted_events, plain.emitted_events);
  EXPECT_EQ(spooled.segment_events, plain.segment_events);
  EXPECT_EQ(spooled.recorded_ooms, plain.recorded_ooms);
  EXPECT_EQ(spooled.segment_events_match, plain.segment_events_match);
  EXPECT_EQ(spooled.ooms_match, plain.ooms_match);
  ASSERT_EQ(spooled.first_divergence.has_value(), plain.first_divergence.has_value());
  if (plain.first_divergence) {
    EXPECT_EQ(describe(*spooled.first_divergence), describe(*plain.first_divergence));
  }
  EXPECT_EQ(alloc::to_memory_stats(spooled.run.stats), alloc::to_memory_stats(plain.run.stats));
  EXPECT_EQ(describe(spooled.seeded), describe(plain.seeded));
  EXPECT_EQ(spooled.pools.has_value(), plain.pools.has_value());
  EXPECT_EQ(spooled.warnings, plain.warnings);
}

// The blocks in use at the cut (allocated before it, their free not completed) that the kept
// trace frees: no entry of it gives their sizes, so replay_snapshot infers them.
std::size_t freed_from_before_the_cut(std::span<const TraceEvent> head,
                                      std::span<const TraceEvent> tail) {
  std::set<std::uint64_t> in_use;
  for (const TraceEvent& e : head) {
    if (e.action == TraceAction::alloc)
      in_use.insert(e.addr);
    else if (e.action == TraceAction::free_completed)
      in_use.erase(e.addr);
  }
  std::set<std::uint64_t> freed;
  for (const TraceEvent& e : tail)
    if ((e.action == TraceAction::free_requested || e.action == TraceAction::free_completed) &&
        in_use.contains(e.addr))
      freed.insert(e.addr);
  return freed.size();
}

class MidRunReplay : public ::testing::TestWithParam<Cut> {};

TEST_P(MidRunReplay, SeededReplayReproducesTheRestOfTheRecording) {
  const Cut cut = GetParam();
  snapshot::Snapshot snap = snapshot::read_snapshot(cut.folder + "/" + cut.fixture + ".pickle.gz");
  std::ifstream stats_file(cut.folder + "/" + cut.fixture + ".stats.json");
  const nlohmann::json recorded = nlohmann::json::parse(stats_file);

  auto& trace = snap.device_traces.at(0);
  const std::size_t drop = entries_to_drop(cut, trace);
  // The expected segment events and OOM are the full recording's after the cut.
  const std::vector<TraceEvent> tail(trace.begin() + static_cast<std::ptrdiff_t>(drop),
                                     trace.end());
  std::size_t expected_ooms = 0;
  for (const TraceEvent& e : tail)
    expected_ooms += e.action == TraceAction::oom ? 1 : 0;
  const std::size_t freed_from_before = freed_from_before_the_cut(
      std::span<const TraceEvent>(trace).first(drop), std::span<const TraceEvent>(tail));
  trace = tail;

  ReplayOptions options;
  if (recorded.at("params").contains("cap_gib"))
    options.allowed_memory = recorded.at("params").at("cap_gib").get<Bytes>() << 30;
  if (recorded.at("params").contains("capacity_bytes"))  // experiments/torch_runner's cap
    options.allowed_memory = recorded.at("params").at("capacity_bytes").get<Bytes>();
  options.total_memory = recorded.at("total_memory").get<Bytes>();
  options.check_invariants_every = 97;
  const ReplayResult result = replay_snapshot(snap, options);

  EXPECT_TRUE(result.warnings.empty()) << result.warnings.front();
  EXPECT_GT(result.seeded.segments, 0u) << "the cut trace starts with memory in use";
  EXPECT_GT(result.seeded.live_blocks, 0u);
  EXPECT_EQ(result.seeded.inferred_sizes, freed_from_before);
  EXPECT_TRUE(result.segment_events_match)
      << (result.first_divergence ? describe(*result.first_divergence) : "");
  EXPECT_TRUE(result.ooms_match);
  EXPECT_EQ(result.run.ooms.size(), expected_ooms);

  // Every .current value of the recording's final memory_stats(): the seeded state plus the
  // replayed tail must leave exactly the recording's memory in use.
  const auto got = alloc::to_memory_stats(result.run.stats);
  std::size_t compared = 0;
  for (const auto& [key, value] : recorded.at("memory_stats").items()) {
    if (!key.ends_with(".current"))
      continue;
    ++compared;
    auto it = got.find(key);
    ASSERT_NE(it, got.end()) << key;
    EXPECT_EQ(it->second, value.get<std::int64_t>()) << "memory_stats()[\"" << key << "\"]";
  }
  EXPECT_EQ(compared, 29u);  // every .current key of the 122

  options.check_invariants_every = 0;  // checks that change nothing: this run is quicker
  expect_same_replay(replay_snapshot(spooled(snap), options), result);
}

INSTANTIATE_TEST_SUITE_P(
    Torch211H200, MidRunReplay,
    ::testing::Values(Cut{"gpt_fixedlen_default", 50}, Cut{"gpt_varlen_default", 90},
                      Cut{"gpt_varlen_default", 37}, Cut{"gpt_varlen_expandable", 50},
                      Cut{"gpt_oom_cap", 50}, Cut{"gpt_oom_cap", 10}, Cut{"gpt_ckpt_accum", 63},
                      Cut{"random_default", 50}, Cut{"random_split64_round4", 20},
                      Cut{"streams_default", 50}, Cut{"streams_default", 80},
                      Cut{"gpt_oom_cap", 0, 1},
                      Cut{"cs_varlen_bs6_default", 0, 0, kFixtures + "/../torch-2.11-h200-turn2"}),
    name_of);

const std::string kGraphFixtures = kFixtures + "/../torch-2.11-h200-graphs";

// CUDA graphs and MemPools: the cut trace starts with segments of private pools alive, and
// begins right at an empty_cache() call (uncapped runs, so no OOM retry explains the frees).
INSTANTIATE_TEST_SUITE_P(
    Torch211H200Graphs, MidRunReplay,
    ::testing::Values(Cut{"gpt_compile_reduce_overhead", 40, -1, kGraphFixtures},
                      Cut{"gpt_compile_reduce_overhead", 0, 0, kGraphFixtures},
                      Cut{"gpt_compile_reduce_overhead", 0, 1, kGraphFixtures},
                      Cut{"gpt_l4_h768_t512_reduce_overhead", 0, 1, kGraphFixtures},
                      Cut{"mempool_basic", 0, 0, kGraphFixtures},
                      Cut{"encoder_infer_two_shapes_reduce_overhead", 0, 0, kGraphFixtures},
                      Cut{"graph_manual", 0, 0, kGraphFixtures}),
    name_of);

// A trace recorded from torch.cuda.init() seeds nothing.
TEST(MidRunReplay, CompleteTraceSeedsNothing) {
  const snapshot::Snapshot snap =
      snapshot::read_snapshot(kFixtures + "/gpt_fixedlen_default.pickle.gz");
  const ReplayResult result = replay_snapshot(snap);
  EXPECT_TRUE(result.seeded.empty());
  EXPECT_EQ(describe(result.seeded), "the trace starts with an empty allocator: nothing seeded");
  expect_same_replay(replay_snapshot(spooled(snap)), result);
}

// replay_snapshot skips initial_state for a trace it proves starts empty while extracting the
// requests. Each thing that predates a small hand-made trace must still reach initial_state:
// a free of a block the trace never allocated, a pending free's completion, an active block the
// trace never touches (these three contradict the trace's own segment_alloc, so the rebuild fails
// with a warning), and a segment the trace never allocated (seeded).
TEST(MidRunReplay, AnythingFromBeforeTheTraceIsSeededOrReported) {
  using namespace fragscope::literals;
  const std::uint64_t seg = 0x7f0000000000;
  auto ev = [](TraceAction action, std::uint64_t addr, Bytes size) {
    return TraceEvent{action, addr, size, StreamId{0}, 0, FrameStackId{}};
  };
  auto snapshot_of = [&](std::vector<TraceEvent> trace, std::vector<snapshot::Block> blocks) {
    snapshot::Snapshot snap;
    snapshot::Segment segment;
    segment.address = seg;
    segment.total_size = 2_MiB;
    segment.pool = PoolKind::small;
    segment.blocks = std::move(blocks);
    snap.segments.push_back(segment);
    snap.device_traces.push_back(std::move(trace));
    snap.allocator_settings = {{"expandable_segments", false}};
    return snap;
  };
  auto block = [](std::uint64_t address, Bytes size, BlockState state) {
    snapshot::Block b;
    b.address = address;
    b.size = size;
    b.requested_size = size;
    b.state = state;
    return b;
  };
  const snapshot::Block all_free = block(seg, 2_MiB, BlockState::inactive);
  auto rebuild_failed = [](const ReplayResult& result) {
    return std::any_of(result.warnings.begin(), result.warnings.end(), [](const std::string& w) {
      return w.find("could not be rebuilt") != std::string::npos;
    });
  };

  // Complete: nothing seeded, nothing reported.
  ReplayResult result = replay_snapshot(snapshot_of(
      {ev(TraceAction::segment_alloc, seg, 2_MiB), ev(TraceAction::alloc, seg, 512),
       ev(TraceAction::free_requested, seg, 512), ev(TraceAction::free_completed, seg, 512)},
      {all_free}));
  EXPECT_TRUE(result.seeded.empty());
  EXPECT_FALSE(rebuild_failed(result));
  EXPECT_TRUE(result.segment_events_match);

  // Each contradiction is reported as well when the trace returns a segment (empty_cache): the
  // replay then infers the pools, and the proof goes the inference's way (StartProof).
  struct Contradiction {
    const char* what;
    std::vector<TraceEvent> trace;
    std::vector<snapshot::Block> blocks;
  };
  const std::vector<Contradiction> contradictions = {
      {"a free of a block from before the trace",
       {ev(TraceAction::segment_alloc, seg, 2_MiB),
        ev(TraceAction::free_requested, seg + 4096, 512),
        ev(TraceAction::free_completed, seg + 4096, 512)},
       {all_free}},
      {"a pending free from before the trace",
       {ev(TraceAction::segment_alloc, seg, 2_MiB), ev(TraceAction::free_completed, seg, 512)},
       {all_free}},
      {"an active block the trace never touches",
       {ev(TraceAction::segment_alloc, seg, 2_MiB), ev(TraceAction::alloc, seg, 512)},
       {block(seg, 512, BlockState::active_allocated),
        block(seg + 512, 512, BlockState::active_allocated),
        block(seg + 1024, 2_MiB - 1024, BlockState::inactive)}},
  };
  const std::uint64_t cached = seg + 2_MiB;  // a second segment, allocated and returned
  for (const Contradiction& contradiction : contradictions) {
    result = replay_snapshot(snapshot_of(contradiction.trace, contradiction.blocks));
    EXPECT_FALSE(result.pools.has_value()) << contradiction.what;
    EXPECT_TRUE(rebuild_failed(result)) << contradiction.what;

    std::vector<TraceEvent> with_empty_cache = contradiction.trace;
    with_empty_cache.push_back(ev(TraceAction::segment_alloc, cached, 2_MiB));
    with_empty_cache.push_back(ev(TraceAction::segment_free, cached, 2_MiB));
    result = replay_snapshot(snapshot_of(with_empty_cache, contradiction.blocks));
    EXPECT_TRUE(result.pools.has_value()) << contradiction.what << ", pools inferred";
    EXPECT_TRUE(rebuild_failed(result)) << contradiction.what << ", pools inferred";
  }

  result = replay_snapshot(
      snapshot_of({ev(TraceAction::alloc, seg, 512), ev(TraceAction::free_requested, seg, 512),
                   ev(TraceAction::free_completed, seg, 512)},
                  {all_free}));
  EXPECT_FALSE(rebuild_failed(result));
  EXPECT_EQ(result.seeded.segments, 1u) << "a segment from before the trace";
  EXPECT_EQ(result.seeded.free_blocks, 1u);
  EXPECT_TRUE(result.segment_events_match);
}

}  // namespace
}  // namespace fragscope::replay
