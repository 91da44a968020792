// The spooled form of a snapshot's traces (EventSpool, read_snapshot_spooled), the pickle
// machine's compacted memo, and the timeline handed out a slice at a time: each must give
// exactly what the plain forms give.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>

#include "engine/snapshot/event_spool.h"
#include "engine/snapshot/pickle_vm.h"
#include "engine/snapshot/snapshot_test_util.h"
#include "engine/snapshot/timeline.h"
#include "tests/heap_test_util.h"

namespace fragscope::snapshot::test {
namespace {

std::vector<TraceEvent> random_events(std::size_t count, std::uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<TraceEvent> events(count);
  for (std::size_t i = 0; i < count; ++i) {
    TraceEvent& e = events[i];
    e.action = static_cast<TraceAction>(rng() % kTraceActionCount);
    // Small steps, huge jumps both ways and the extremes, as a hostile file may hold.
    switch (rng() % 4) {
      case 0:
        e.addr = 0x7f0000000000 + (rng() % 4096) * 512;
        break;
      case 1:
        e.addr = rng();
        break;
      case 2:
        e.addr = std::numeric_limits<std::uint64_t>::max() - rng() % 3;
        break;
      default:
        e.addr = rng() % 3;
    }
    e.size = rng() % 2 == 0 ? rng() % (1u << 30) : rng();
    e.stream = StreamId{rng() % 3 == 0 ? rng() : rng() % 4};
    e.time_us = rng() % 5 == 0 ? static_cast<std::int64_t>(rng())
                               : 1'700'000'000'000'000 + static_cast<std::int64_t>(i * 7);
    e.frames = FrameStackId{static_cast<std::uint32_t>(rng() % 1000)};
  }
  return events;
}

TEST(EventSpool, GivesBackEveryEventInEitherDirectionAndByIndex) {
  for (const std::size_t count : {std::size_t{0}, std::size_t{1}, EventSpool::kBlockEvents,
                                  3 * EventSpool::kBlockEvents + 17}) {
    const std::vector<TraceEvent> events = random_events(count, 7);
    EventSpool spool;
    for (const TraceEvent& e : events)
      spool.push_back(e);
    ASSERT_EQ(spool.size(), count);
    EXPECT_EQ(spool.to_vector(), events);
    for (int a = 0; a < kTraceActionCount; ++a) {
      const auto action = static_cast<TraceAction>(a);
      EXPECT_EQ(spool.count(action), static_cast<std::size_t>(std::count_if(
                                         events.begin(), events.end(),
                                         [&](const TraceEvent& e) { return e.action == action; })))
          << to_string(action);
    }
    std::vector<TraceEvent> backward;
    TraceBlocks(spool).for_each_backward([&](const TraceEvent& e, std::size_t index) {
      ASSERT_EQ(index, count - 1 - backward.size());
      backward.push_back(e);
    });
    ASSERT_EQ(backward.size(), count);
    for (std::size_t i = 0; i < count; ++i)
      ASSERT_EQ(backward[i], events[count - 1 - i]) << i;
    for (std::size_t i = 0; i < count; i += 997)
      EXPECT_EQ(spool.at(i), events[i]) << i;
    if (count > 0) {
      EXPECT_EQ(spool.at(count - 1), events.back());
    }
    EXPECT_THROW((void)spool.at(count), std::out_of_range);
  }
}

TEST(EventSpool, HoldsARecordedTraceInAThirdOfItsEvents) {
  const auto& events = fixture("gpt_varlen_default").device_traces[0];
  EventSpool spool;
  for (const TraceEvent& e : events)
    spool.push_back(e);
  EXPECT_EQ(spool.to_vector(), events);
  EXPECT_LT(spool.memory_bytes(), events.size() * sizeof(TraceEvent) / 3);
}

// What a spool notes as events are appended, so that a replay need not decode it to know: where
// each run of segment_free entries begins, and the first three distinct streams.
TEST(EventSpool, NotesSegmentFreeBurstsAndTheFirstStreams) {
  auto expect_notes = [](const std::vector<TraceEvent>& events, const char* what) {
    std::vector<std::size_t> bursts;
    std::vector<StreamId> streams;
    for (std::size_t i = 0; i < events.size(); ++i) {
      if (events[i].action == TraceAction::segment_free &&
          (i == 0 || events[i - 1].action != TraceAction::segment_free))
        bursts.push_back(i);
      if (streams.size() < 3 &&
          std::find(streams.begin(), streams.end(), events[i].stream) == streams.end())
        streams.push_back(events[i].stream);
    }
    EventSpool spool(EventSpool::kBlockEvents * 4);  // most blocks in the file
    for (const TraceEvent& e : events)
      spool.push_back(e);
    if (bursts.size() <= EventSpool::kMaxNotedBursts) {
      const auto noted = spool.segment_free_bursts();
      EXPECT_TRUE(noted && std::ranges::equal(*noted, bursts)) << what;
    } else {
      EXPECT_FALSE(spool.segment_free_bursts().has_value()) << what;
    }
    EXPECT_TRUE(std::ranges::equal(spool.first_streams(), streams)) << what;
    return std::pair{bursts.size(), streams.size()};
  };
  // Random actions (runs of segment_free of every length) on four streams and many more.
  EXPECT_EQ(expect_notes(random_events(3 * EventSpool::kBlockEvents + 11, 5), "random").second, 3u);
  // Past kMaxNotedBursts runs none are kept: the reader walks.
  std::vector<TraceEvent> many(2 * EventSpool::kMaxNotedBursts + 2);
  for (std::size_t i = 0; i < many.size(); i += 2)
    many[i].action = TraceAction::segment_free;
  EXPECT_EQ(expect_notes(many, "many bursts").first, EventSpool::kMaxNotedBursts + 1);
  many.pop_back();
  many.pop_back();
  EXPECT_EQ(expect_notes(many, "as many as are noted").first, EventSpool::kMaxNotedBursts);
  // A capped recording frees segments in bursts on its OOM path; one stream.
  EXPECT_GT(expect_notes(fixture("gpt_oom_cap").device_traces[0], "gpt_oom_cap").first, 0u);
  // Two streams, no segment_free.
  EXPECT_EQ(expect_notes(fixture("streams_default").device_traces[0], "streams_default"),
            (std::pair<std::size_t, std::size_t>{0, 2}));
  std::vector<TraceEvent> two_streams(5);
  two_streams[3].stream = StreamId{7};
  two_streams[1].action = two_streams[2].action = TraceAction::segment_free;
  EXPECT_EQ(expect_notes(two_streams, "hand-made"), (std::pair<std::size_t, std::size_t>{1, 2}));
}

// Its segment entries, noted as they are appended (no block decoded to find them), so that
// whether a segment predates the trace is known without a walk; past kMaxNotedSegmentEvents none.
TEST(EventSpool, NotesItsSegmentEntries) {
  auto expect_noted = [](const std::vector<TraceEvent>& events, const char* what) {
    std::vector<TraceEvent> segment_events;
    for (const TraceEvent& e : events)
      if (is_segment_action(e.action))
        segment_events.push_back(e);
    EventSpool spool(EventSpool::kBlockEvents * 4);  // most blocks in the file
    for (const TraceEvent& e : events)
      spool.push_back(e);
    const auto noted = spool.segment_events();
    if (segment_events.size() <= EventSpool::kMaxNotedSegmentEvents)
      EXPECT_TRUE(noted && std::ranges::equal(*noted, segment_events)) << what;
    else
      EXPECT_FALSE(noted.has_value()) << what;
    return segment_events.size();
  };
  EXPECT_GT(expect_noted(random_events(3 * EventSpool::kBlockEvents + 11, 5), "random"), 0u);
  // Expandable segments: segment_map and segment_unmap entries.
  EXPECT_GT(expect_noted(fixture("gpt_varlen_expandable").device_traces[0], "expandable"), 0u);
  std::vector<TraceEvent> many(EventSpool::kMaxNotedSegmentEvents + 1,
                               TraceEvent{TraceAction::segment_alloc, 0});
  many.insert(many.begin() + 5, TraceEvent{TraceAction::alloc, 0});
  EXPECT_EQ(expect_noted(many, "one too many"), EventSpool::kMaxNotedSegmentEvents + 1);
  many.pop_back();
  EXPECT_EQ(expect_noted(many, "as many as are noted"), EventSpool::kMaxNotedSegmentEvents);
}

// Past its memory limit a spool writes its blocks to a temporary file and reads them back from
// there; a copy shares the file, and both go on growing on their own.
TEST(EventSpool, BlocksPastTheMemoryLimitGoToAFile) {
  const std::vector<TraceEvent> events = random_events(5 * EventSpool::kBlockEvents + 3, 11);
  EventSpool spool(EventSpool::kBlockEvents * 4);  // less than a packed block: all to the file
  for (std::size_t i = 0; i < 3 * EventSpool::kBlockEvents; ++i)
    spool.push_back(events[i]);
  EventSpool copy = spool;
  for (std::size_t i = 3 * EventSpool::kBlockEvents; i < events.size(); ++i)
    spool.push_back(events[i]);
  EXPECT_GT(spool.file_bytes(), 0u);
  EXPECT_EQ(spool.to_vector(), events);
  std::vector<TraceEvent> backward;
  TraceBlocks(spool).for_each_backward(
      [&](const TraceEvent& e, std::size_t) { backward.push_back(e); });
  EXPECT_TRUE(std::equal(backward.rbegin(), backward.rend(), events.begin(), events.end()));
  EXPECT_EQ(spool.at(EventSpool::kBlockEvents * 4 + 5), events[EventSpool::kBlockEvents * 4 + 5]);
  for (std::size_t i = 0; i < EventSpool::kBlockEvents; ++i)
    copy.push_back(events[i]);
  std::vector<TraceEvent> expected(events.begin(), events.begin() + 3 * EventSpool::kBlockEvents);
  expected.insert(expected.end(), events.begin(), events.begin() + EventSpool::kBlockEvents);
  EXPECT_EQ(copy.to_vector(), expected);
  EXPECT_EQ(spool.to_vector(), events);
  // What stays in memory is the limit's worth of blocks, the block being filled and the noted
  // segment entries (a vector's room: at most twice their size; 4 in 9 of these random events).
  const std::size_t noted = spool.segment_events() ? spool.segment_events()->size() : 0;
  EXPECT_LT(spool.memory_bytes(), EventSpool::kBlockEvents * (4 + sizeof(TraceEvent)) + 4096 +
                                      2 * noted * sizeof(TraceEvent));
}

// A TraceWindow reads a spool, its blocks in the file too, as the vector it holds: forward, looking
// one entry back and one ahead, as a replay reads it (what it returned stays valid meanwhile).
TEST(TraceWindow, ReadsASpoolForwardAsTheVector) {
  const std::vector<TraceEvent> events = random_events(3 * EventSpool::kBlockEvents + 5, 13);
  EventSpool spool(EventSpool::kBlockEvents * 4);  // less than a packed block: all to the file
  for (const TraceEvent& e : events)
    spool.push_back(e);
  ASSERT_GT(spool.file_bytes(), 0u);
  const TraceWindow window(spool);
  ASSERT_EQ(window.size(), events.size());
  for (std::size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = window[i];
    if (i + 1 < events.size()) {
      ASSERT_EQ(window[i + 1], events[i + 1]) << i + 1;
    }
    if (i > 0) {
      ASSERT_EQ(window[i - 1], events[i - 1]) << i - 1;
    }
    ASSERT_EQ(e, events[i]) << i;
  }
  const TraceWindow plain(events);
  EXPECT_EQ(plain.size(), events.size());
  EXPECT_EQ(&plain[5], &events[5]);
}

// A window hands out the entries from an index to the end of its block as one array (a vector's:
// to its end), the last block of a spool being the one still filling.
TEST(TraceWindow, ARunFromAnIndexIsTheRestOfItsBlock) {
  constexpr std::size_t kBlock = EventSpool::kBlockEvents;
  const std::vector<TraceEvent> events = random_events(2 * kBlock + 7, 17);
  EventSpool spool;
  for (const TraceEvent& e : events)
    spool.push_back(e);
  const TraceWindow window(spool);
  for (const std::size_t index :
       {std::size_t{0}, kBlock - 1, kBlock, kBlock + 3, 2 * kBlock, 2 * kBlock + 6}) {
    const std::span<const TraceEvent> run = window.run_from(index);
    const std::size_t end = std::min(events.size(), (index / kBlock + 1) * kBlock);
    ASSERT_EQ(run.size(), end - index) << index;
    EXPECT_TRUE(std::equal(run.begin(), run.end(), events.begin() + index)) << index;
    EXPECT_EQ(&run[0], &window[index]) << "the run is the window's own block, " << index;
  }
  const TraceWindow plain(events);
  EXPECT_EQ(plain.run_from(kBlock).data(), &events[kBlock]);
  EXPECT_EQ(plain.run_from(kBlock).size(), events.size() - kBlock);
}

// The compacted memo against a plain vector, under grows, writes to any slot and reads.
// Whether `memo`'s slot reads what the plain array `model` holds there.
::testing::AssertionResult memo_slot_holds(const pickle::Memo& memo,
                                           const std::vector<pickle::Value>& model,
                                           std::uint64_t slot) {
  const pickle::Value got = memo.get(slot);
  const pickle::Value& want = model[slot];
  if (got.kind == want.kind && got.ref == want.ref && got.i == want.i)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "slot " << slot << ": kind " << pickle::to_string(got.kind) << " ref " << got.ref
         << " i " << got.i << ", expected kind " << pickle::to_string(want.kind) << " ref "
         << want.ref << " i " << want.i;
}

TEST(PickleMemo, ReadsBackWhatAPlainArrayWouldHold) {
  using pickle::Kind;
  using pickle::Value;
  std::mt19937_64 rng(3);
  pickle::Memo memo;
  std::vector<Value> model;
  auto entry = [](std::uint32_t list, std::int64_t index) {
    Value v;
    v.kind = Kind::trace_event;
    v.ref = list;
    v.i = index;
    return v;
  };
  std::int64_t next_entry = 0;
  for (int step = 0; step < 200000; ++step) {
    const auto roll = rng() % 100;
    if (roll < 80 || model.empty()) {
      // Mostly converted entries in order, now and then another value between them; a new slot
      // set after growing, or appended (MEMOIZE).
      const bool append = rng() % 2 == 0;
      if (!append)
        memo.grow(model.size() + 1);
      Value v = roll < 75 ? entry(0, next_entry++) : entry(1, 5);
      if (roll % 7 == 0) {
        v.kind = Kind::integer;
        v.i = static_cast<std::int64_t>(rng() % 1000);
      } else if (roll % 11 == 0) {
        // The compact kinds of a folded slot, at the edges of what its word holds.
        const Kind kinds[] = {Kind::string, Kind::frame, Kind::frame_stack, Kind::unset};
        v = Value{};
        v.kind = kinds[rng() % 4];
        v.ref =
            rng() % 2 == 0 ? static_cast<std::uint32_t>(rng() % 64) : (1u << 29) - 1 + rng() % 2;
      } else if (roll % 13 == 0) {
        v = rng() % 2 == 0 ? entry(~0u, 0) : entry(0, (std::int64_t{1} << 29) - 1 + rng() % 2);
      }
      if (append)
        memo.push_back(v);
      else
        memo.set(model.size(), v);
      model.push_back(v);
    } else if (roll < 90) {
      const std::uint64_t slot = rng() % model.size();
      const Value v = entry(2, static_cast<std::int64_t>(rng() % 50));
      memo.set(slot, v);
      model[slot] = v;
    } else {
      const std::uint64_t slot = rng() % model.size();
      ASSERT_TRUE(memo_slot_holds(memo, model, slot));
    }
  }
  ASSERT_EQ(memo.size(), model.size());
  for (std::uint64_t slot = 0; slot < model.size(); ++slot) {
    ASSERT_TRUE(memo_slot_holds(memo, model, slot));
  }
}

// A trace of converted entries costs a few runs, not a slot each.
TEST(PickleMemo, ConvertedEntriesInARowCostNoSlotEach) {
  pickle::Memo memo;
  constexpr std::uint64_t kSlots = 1'000'000;
  for (std::uint64_t slot = 0; slot < kSlots; ++slot) {
    memo.grow(slot + 1);
    pickle::Value v;
    v.kind = pickle::Kind::trace_event;
    v.i = static_cast<std::int64_t>(slot);
    memo.set(slot, v);
  }
  EXPECT_LT(memo.memory_bytes(), kSlots * sizeof(pickle::Value) / 10);
  EXPECT_EQ(memo.get(12345).i, 12345);
}

// A real trace memoizes each entry, its compile_context string and (when not shared) its frames
// list: folded, each slot is a 32-bit word, where a plain slot took 16 bytes.
TEST(PickleMemo, EntriesBetweenOtherValuesCostAWordASlot) {
  using pickle::Kind;
  using pickle::Value;
  std::mt19937_64 rng(5);
  pickle::Memo memo;
  std::vector<Value> model;
  constexpr std::uint64_t kSlots = 300'000;
  while (model.size() < kSlots) {
    Value v;
    v.kind = Kind::trace_event;
    v.i = static_cast<std::int64_t>(model.size() / 3);
    model.push_back(v);
    v = Value{};
    v.kind = Kind::string;
    v.ref = 12;
    model.push_back(v);
    v.kind = Kind::frame_stack;
    v.ref = static_cast<std::uint32_t>(rng() % 800'000);
    model.push_back(v);
  }
  for (std::uint64_t slot = 0; slot < model.size(); ++slot) {
    memo.grow(slot + 1);
    memo.set(slot, model[slot]);
  }
  // The words, and the window of plain slots.
  EXPECT_LT(memo.memory_bytes(), kSlots * sizeof(std::uint32_t) +
                                     2 * pickle::Memo::kWindow * sizeof(Value) + (64u << 10));
  for (std::uint64_t slot = 0; slot < model.size(); ++slot) {
    ASSERT_TRUE(memo_slot_holds(memo, model, slot));
  }
}

// frame_at remembers the frames it found: a slot written over must not read its old frame, folded
// or not.
TEST(PickleMemo, AFrameSlotWrittenOverNoLongerReadsItsOldFrame) {
  using pickle::Kind;
  using pickle::Memo;
  using pickle::Value;
  Memo memo;
  memo.grow(3 * Memo::kWindow);  // slot 5 is folded once the window moves on
  Value frame;
  frame.kind = Kind::frame;
  Value text;
  text.kind = Kind::string;
  const std::uint64_t recent = memo.size() - 1;
  for (std::uint64_t slot : {std::uint64_t{5}, recent}) {
    frame.ref = 3;
    memo.set(slot, frame);
    EXPECT_EQ(memo.frame_at(slot), 3u);
    memo.set(slot, text);
    EXPECT_EQ(memo.frame_at(slot), Memo::kNotAFrame);
    frame.ref = 9;
    memo.set(slot, frame);
    EXPECT_EQ(memo.frame_at(slot), 9u);
    EXPECT_EQ(memo.frame_at(slot + 1), Memo::kNotAFrame);
  }
}

// One folded slot written over and over, a value its word holds and one it does not in turn.
TEST(PickleMemo, AFoldedSlotWrittenOverAndOverKeepsItsLastValue) {
  using pickle::Kind;
  using pickle::Value;
  pickle::Memo memo;
  memo.grow(3 * pickle::Memo::kWindow);
  Value wide;
  wide.kind = Kind::integer;
  Value compact;
  compact.kind = Kind::string;
  constexpr auto kRounds = 20 * static_cast<std::int64_t>(pickle::Memo::kWindow);
  for (std::int64_t round = 0; round < kRounds; ++round) {
    wide.i = round;
    memo.set(7, round % 2 == 0 ? wide : compact);
    memo.set(9, wide);
  }
  EXPECT_EQ(memo.get(7).kind, Kind::string);
  EXPECT_EQ(memo.get(9).i, kRounds - 1);
  EXPECT_EQ(memo.get(8).kind, Kind::unset);
  // The values no slot holds any more are let go.
  EXPECT_LT(memo.memory_bytes(), 6 * pickle::Memo::kWindow * sizeof(Value));
}

// A converted list another holder still references (one frames list shared by two trace
// entries, as PyTorch writes them) stays as its compact form and gives its items back: the
// 800k shared frames lists of a real 1.2M-entry trace held 252 MB while they kept them.
TEST(PickleMachine, ASharedListRetiredKeepsNoItems) {
  // [L, L] with L = [1, ..., 100]: the second L is a BINGET, so L has two holders.
  std::vector<std::uint8_t> bytes = {0x80, 4, ']', 0x94, '(', ']', 0x94, '('};
  for (std::uint8_t i = 1; i <= 100; ++i) {
    bytes.push_back('K');
    bytes.push_back(i);
  }
  for (std::uint8_t b : {std::uint8_t{'e'}, std::uint8_t{'h'}, std::uint8_t{1}, std::uint8_t{'e'},
                         std::uint8_t{'.'}})
    bytes.push_back(b);
  ByteSource source(bytes, "shared.pickle", std::uint64_t{1} << 20);
  pickle::Machine vm(source, ReadLimits{}, nullptr);
  const pickle::Value outer = vm.run();
  const pickle::Value shared = vm.node(outer).items.at(0);
  ASSERT_EQ(vm.node(shared).items.size(), 100u);
  pickle::Value replacement;
  replacement.kind = pickle::Kind::frame_stack;
  replacement.ref = 7;
  vm.retire(shared, replacement);
  const pickle::Node& after = vm.node(vm.node(outer).items.at(1));
  EXPECT_EQ(after.kind, pickle::Kind::frame_stack);
  EXPECT_EQ(after.aux, 7u);
  EXPECT_EQ(after.items.capacity(), 0u);
}

// Converts its list's items as the reader's trace sink does: each dict {'f': frames list} is an
// entry, whose frames list the first holder converts and later ones let go.
class FramesSink : public pickle::ListSink {
 public:
  bool on_append(pickle::Machine& vm, pickle::Value, std::span<pickle::Value> items) override {
    for (const pickle::Value& item : items) {
      const pickle::Value frames = vm.node(item).items.at(1);
      pickle::Value replacement;
      replacement.kind = pickle::Kind::frame_stack;
      if (vm.node(frames).kind == pickle::Kind::list)
        vm.retire(frames, replacement);
      else
        vm.release(frames);
      replacement.kind = pickle::Kind::trace_event;
      vm.retire(item, replacement);
    }
    return true;
  }
  // No frame table: every frames list is built and converted as above.
  std::optional<std::uint32_t> known_frame_stack(std::span<const std::uint32_t>) override {
    return std::nullopt;
  }
};

// ([entries...], GET 2): entries in pairs sharing one frames list, as PyTorch writes an alloc and
// its free (the second fetches the list from the memo before either is converted). The first
// pair's second entry also stores the list under memo slot 3 (over its own dict's slot), so the
// list's first slot, 2, read again at the end, is one more holder.
std::vector<std::uint8_t> shared_frames_pickle(std::uint32_t pairs) {
  std::vector<std::uint8_t> p = {0x80, 4, ']', 0x94, '('};  // the trace list, slot 0
  std::uint32_t slots = 1;
  auto u32 = [&p](std::uint32_t v) {
    for (int b = 0; b < 4; ++b)
      p.push_back(static_cast<std::uint8_t>(v >> (8 * b)));
  };
  auto entry_start = [&] {
    for (std::uint8_t b : {std::uint8_t{'}'}, std::uint8_t{0x94}, std::uint8_t{'('},
                           std::uint8_t{0x8c}, std::uint8_t{1}, std::uint8_t{'f'}})
      p.push_back(b);
    ++slots;
  };
  for (std::uint32_t i = 0; i < pairs; ++i) {
    entry_start();
    const std::uint32_t list_slot = slots++;
    for (std::uint8_t b : {std::uint8_t{']'}, std::uint8_t{0x94}, std::uint8_t{'u'}})
      p.push_back(b);
    entry_start();
    p.push_back('j');  // LONG_BINGET the first entry's list
    u32(list_slot);
    if (i == 0) {
      p.push_back('r');  // LONG_BINPUT 3
      u32(3);
    }
    p.push_back('u');
    if (i % 500 == 499) {
      p.push_back('e');
      p.push_back('(');
    }
  }
  for (std::uint8_t b : {std::uint8_t{'e'}, std::uint8_t{'h'}, std::uint8_t{2}, std::uint8_t{0x86},
                         std::uint8_t{'.'}})  // APPENDS, BINGET 2, TUPLE2, STOP
    p.push_back(b);
  return p;
}

// A frames list shared by two entries is freed once both are converted, so the machine holds
// about a batch of objects, not one per shared list (the 800k shared frames lists of a real
// 1.2M-entry trace took 77 MB); a list the memo still holds under another slot stays readable.
TEST(PickleMachine, ASharedListIsFreedWhenItsLastHolderIsConverted) {
  constexpr std::uint32_t kPairs = 20000;
  const std::vector<std::uint8_t> bytes = shared_frames_pickle(kPairs);
  ByteSource source(bytes, "shared-frames.pickle", std::uint64_t{1} << 30);
  FramesSink sink;
  pickle::Machine vm(source, ReadLimits{}, &sink);
  const pickle::Value root = vm.run();
  EXPECT_LT(vm.node_count(), 4000u);
  const pickle::Value kept = vm.node(root).items.at(1);
  EXPECT_EQ(vm.node(kept).kind, pickle::Kind::frame_stack);
}

// A pickle whose memo outgrows the window: every entry dict memoized, the action string stored
// at slot 0 and fetched by every entry, then slot 0 stored again, and an entry from the start
// appended a second time.
std::string long_memo_pickle(std::uint32_t entries) {
  std::string p = "\x80\x04";
  auto u32 = [&p](std::uint32_t v) {
    char b[4];
    std::memcpy(b, &v, 4);
    p.append(b, 4);
  };
  auto str = [&](std::string_view s) {
    p += 'X';
    u32(static_cast<std::uint32_t>(s.size()));
    p += s;
  };
  auto put = [&](std::uint32_t slot) {
    p += 'r';
    u32(slot);
  };
  auto get = [&](std::uint32_t slot) {
    p += 'j';
    u32(slot);
  };
  auto entry = [&](std::uint32_t action_slot, std::uint32_t addr, std::uint32_t size) {
    p += "}(";
    str("action");
    get(action_slot);
    str("addr");
    p += 'J';
    u32(addr);
    str("size");
    p += 'J';
    u32(size);
    p += 'u';
  };
  p += "}(";
  str("segments");
  p += ']';
  str("device_traces");
  p += "](]";  // the device list, MARK, device 0's trace
  str("alloc");
  put(0);
  p += '0';  // POP: the string only lives in the memo
  std::uint32_t slot = 1;
  p += '(';
  for (std::uint32_t i = 0; i < entries; ++i) {
    entry(0, 0x1000 + i * 512, 512 + i);
    put(slot++);
    if (i % 1000 == 999)
      p += "e(";  // APPENDS, a new MARK
  }
  p += 'e';
  str("free_completed");
  put(0);
  p += '0';
  entry(0, 0x1000, 512);  // action: the new slot 0
  p += 'a';
  get(6);  // entry 5 again
  p += 'a';
  p += "eu.";  // the device list's APPENDS, the top dict's SETITEMS, STOP
  return p;
}

TEST(PickleMemo, AnOldSlotReadsWhatWasStoredThereLast) {
  constexpr std::uint32_t kEntries = 3 * pickle::Memo::kWindow;
  const std::string bytes = long_memo_pickle(kEntries);
  const auto data = std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  for (const bool spooled : {false, true}) {
    const Snapshot s = spooled ? read_snapshot_spooled_from_memory(data, "long-memo")
                               : read_snapshot_from_memory(data, "long-memo");
    const std::vector<TraceEvent> trace =
        spooled ? s.device_spools.at(0).to_vector() : s.device_traces.at(0);
    ASSERT_EQ(trace.size(), kEntries + 2u) << spooled;
    EXPECT_EQ(trace[kEntries - 1].addr, 0x1000u + (kEntries - 1) * 512u);
    EXPECT_EQ(trace[kEntries].action, TraceAction::free_completed);
    EXPECT_EQ(trace[kEntries + 1], trace[5]);
    EXPECT_EQ(trace[5].size, 517u);
  }
}

// Every form of every fixture's trace, and a trace shared by two devices, read spooled.
TEST(SpooledRead, HoldsTheSameTracesAsThePlainRead) {
  std::vector<std::filesystem::path> files;
  for (const std::string& name : fixture_names())
    files.push_back(fixture_path(name));
  const auto variants = std::filesystem::path(FRAGSCOPE_FIXTURES) / ".." / "snapshot-variants";
  for (const auto& entry : std::filesystem::directory_iterator(variants))
    if (entry.path().extension() == ".pickle")
      files.push_back(entry.path());
  for (const auto& file : files) {
    SCOPED_TRACE(file.string());
    const Snapshot plain = read_snapshot(file);
    const Snapshot spooled = read_snapshot_spooled(file);
    ASSERT_EQ(spooled.device_traces.size(), plain.device_traces.size());
    EXPECT_EQ(spooled.device_count(), plain.device_count());
    EXPECT_EQ(spooled.busiest_device(), plain.busiest_device());
    EXPECT_EQ(spooled.trace_entry_count(), plain.trace_entry_count());
    EXPECT_EQ(spooled.features, plain.features);
    EXPECT_EQ(spooled.frames, plain.frames);
    EXPECT_EQ(spooled.segments, plain.segments);
    for (std::size_t d = 0; d < plain.device_traces.size(); ++d) {
      EXPECT_TRUE(spooled.device_traces[d].empty());
      EXPECT_EQ(spooled.device_spools[d].to_vector(), plain.device_traces[d]) << d;
      // spool(d): the packed trace where it has entries, never a plain snapshot's.
      EXPECT_EQ(spooled.spool(d),
                plain.device_traces[d].empty() ? nullptr : &spooled.device_spools[d])
          << d;
      EXPECT_EQ(plain.spool(d), nullptr) << d;
    }
    EXPECT_EQ(spooled.spool(plain.device_traces.size()), nullptr);
  }
}

// The timeline a slice at a time is the timeline, for a spooled snapshot as for a plain one.
TEST(SpooledTimeline, SlicesAddUpToTheWholeTimeline) {
  for (const std::string& name : {std::string("gpt_varlen_default"), std::string("gpt_oom_cap")}) {
    const Timeline whole = build_timeline(fixture(name), 0);
    const Snapshot spooled = read_snapshot_spooled(fixture_path(name));
    std::vector<MemorySample> samples;
    std::vector<TraceEvent> events;
    bool started = false;
    TimelineSinks sinks;
    sinks.on_start = [&](const Timeline& header) {
      EXPECT_TRUE(samples.empty());
      EXPECT_EQ(header.initial, whole.initial);
      started = true;
    };
    sinks.on_samples = [&](std::span<const TraceEvent> slice, std::span<const MemorySample> s,
                           std::size_t first) {
      ASSERT_EQ(first, samples.size());
      ASSERT_EQ(slice.size(), s.size());
      EXPECT_LE(s.size(), kTimelineSlice);
      events.insert(events.end(), slice.begin(), slice.end());
      samples.insert(samples.end(), s.begin(), s.end());
    };
    const Timeline sliced = build_timeline(spooled, 0, sinks);
    EXPECT_TRUE(started);
    EXPECT_TRUE(sliced.samples.empty());
    EXPECT_EQ(samples, whole.samples) << name;
    EXPECT_EQ(events, fixture(name).device_traces[0]) << name;
    EXPECT_EQ(sliced.peak, whole.peak);
    EXPECT_EQ(sliced.matches_final_segments, whole.matches_final_segments);
    EXPECT_EQ(sliced.exact_from, whole.exact_from);
  }
}

// What an import holds of the timeline beside the spooled snapshot: a slice of entries and samples
// at a time, whatever the trace's length. Slices of 2^16 entries held up to 6.3 MB (and an import
// a third copy as the store's series): 8.4 MB of the 47 MB an import of a 94 MB snapshot peaked
// at; this 22k-entry trace's slice alone was 2.1 MB.
TEST(SpooledTimeline, HoldsASliceOfTheTraceAtATime) {
  const Snapshot spooled = read_snapshot_spooled(fixture_path("gpt_oom_cap"));
  ASSERT_GT(spooled.trace_size(0), 20000u);
  fragscope::test::HeapPeak heap;
  if (!heap.measurable())
    GTEST_SKIP() << "mallinfo2 reports nothing under this allocator (a sanitizer's)";
  TimelineSinks sinks;
  sinks.on_samples = [&](std::span<const TraceEvent>, std::span<const MemorySample>, std::size_t) {
    heap.sample();
  };
  build_timeline(spooled, 0, sinks);
  EXPECT_LE(heap.grown(), std::size_t{1} << 20) << "bytes beside the spool";
}

}  // namespace
}  // namespace fragscope::snapshot::test
