// The pickle machine reads a frames list of frames converted earlier, whose stack its sink knows,
// straight into the stack's compact value (read_known_frames_list), and every other list as a
// list: the pickles here are written opcode by opcode so that each case is exactly one shape.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "engine/snapshot/byte_source.h"
#include "engine/snapshot/pickle_vm.h"

namespace fragscope::snapshot::test {
namespace {

using pickle::Kind;
using pickle::Machine;
using pickle::Value;

// Plays the reader's trace sink in miniature. A batch of dicts defines frames: each becomes
// frame 0, 1, ... (retired, so its memo slot reads Kind::frame). A batch of frames is a frames
// list the sink learns the stack of and leaves stored. Anything else is stored as it is.
class StackSink : public pickle::ListSink {
 public:
  bool on_append(Machine& vm, Value, std::span<Value> items) override {
    if (std::all_of(items.begin(), items.end(),
                    [](const Value& v) { return v.kind == Kind::dict; })) {
      for (const Value& item : items) {
        Value frame;
        frame.kind = Kind::frame;
        frame.ref = next_frame_++;
        vm.retire(item, frame);
      }
      return true;
    }
    if (std::all_of(items.begin(), items.end(),
                    [](const Value& v) { return v.kind == Kind::frame; })) {
      std::vector<std::uint32_t> frames;
      for (const Value& item : items)
        frames.push_back(item.ref);
      stacks_.emplace(frames, 100 + static_cast<std::uint32_t>(stacks_.size()));
    }
    return false;
  }
  std::optional<std::uint32_t> known_frame_stack(std::span<const std::uint32_t> frames) override {
    ++asked;
    auto it = stacks_.find(std::vector<std::uint32_t>(frames.begin(), frames.end()));
    return it == stacks_.end() ? std::nullopt : std::optional<std::uint32_t>(it->second);
  }
  int asked = 0;

 private:
  std::uint32_t next_frame_ = 0;
  std::map<std::vector<std::uint32_t>, std::uint32_t> stacks_;
};

// A protocol-4 pickle of one outer list, written a list at a time; every list and dict is
// memoized in order, as Python's pickler does.
class PickleBuilder {
 public:
  PickleBuilder() { bytes_ = {0x80, 4, ']', 0x94, '('}; }  // the outer list, slot 0, MARK
  // A list of `count` new frame dicts; returns the first one's memo slot.
  std::uint32_t frame_definitions(std::uint32_t count) {
    list_start();
    bytes_.push_back('(');
    const std::uint32_t first = slots_;
    for (std::uint32_t i = 0; i < count; ++i)
      memoized('}');
    bytes_.push_back('e');
    return first;
  }
  // A list of GETs of these slots, with MARK/APPENDS, or APPEND for a single one when `append`.
  std::uint32_t frames_list(const std::vector<std::uint32_t>& slots, bool append = false) {
    const std::uint32_t list_slot = list_start();
    if (!append)
      bytes_.push_back('(');
    for (std::uint32_t slot : slots)
      get(slot);
    bytes_.push_back(append ? 'a' : 'e');
    return list_slot;
  }
  // A list of GETs of these slots between MARK and APPENDS, with a FRAME opcode (protocol 4's
  // framing, meaning nothing to what is built) before the GET at `frame_before`.
  std::uint32_t framed_frames_list(const std::vector<std::uint32_t>& slots,
                                   std::size_t frame_before) {
    const std::uint32_t list_slot = list_start();
    bytes_.push_back('(');
    for (std::size_t i = 0; i < slots.size(); ++i) {
      if (i == frame_before)
        bytes_.insert(bytes_.end(), {0x95, 0x40, 0, 0, 0, 0, 0, 0, 0});
      get(slots[i]);
    }
    bytes_.push_back('e');
    return list_slot;
  }
  // Writes over memo slot `slot` with what slot `from` holds (GET, BINPUT, POP): a PUT reusing
  // an index, which Python's pickler never writes.
  void put_over(std::uint32_t slot, std::uint32_t from) {
    get(from);
    bytes_.push_back('q');
    bytes_.push_back(static_cast<std::uint8_t>(slot));
    bytes_.push_back('0');
  }
  // APPENDS of the outer list, then (outer list, GET slot) as the top-level tuple, and STOP.
  std::vector<std::uint8_t> finish(std::uint32_t slot_read_again) {
    bytes_.push_back('e');
    get(slot_read_again);
    for (std::uint8_t b : {std::uint8_t{0x86}, std::uint8_t{'.'}})
      bytes_.push_back(b);
    return bytes_;
  }

 private:
  std::uint32_t list_start() { return memoized(']'); }
  std::uint32_t memoized(std::uint8_t op) {
    bytes_.push_back(op);
    bytes_.push_back(0x94);  // MEMOIZE
    return slots_++;
  }
  void get(std::uint32_t slot) {
    if (slot < 256) {
      bytes_.push_back('h');
      bytes_.push_back(static_cast<std::uint8_t>(slot));
      return;
    }
    bytes_.push_back('j');
    for (int b = 0; b < 4; ++b)
      bytes_.push_back(static_cast<std::uint8_t>(slot >> (8 * b)));
  }
  std::vector<std::uint8_t> bytes_;
  std::uint32_t slots_ = 1;
};

struct Read {
  std::vector<Value> items;  // the outer list's
  Value read_again;
};

// The outer list's items as (kind, ref): a frame stack's ref is its id.
std::vector<std::pair<Kind, std::uint32_t>> shape(const Read& read) {
  std::vector<std::pair<Kind, std::uint32_t>> out;
  for (const Value& v : read.items)
    out.emplace_back(v.kind, v.kind == Kind::frame_stack ? v.ref : 0);
  return out;
}

Read run(const std::vector<std::uint8_t>& bytes, StackSink& sink) {
  ByteSource source(bytes, "frames.pickle", std::uint64_t{1} << 30);
  Machine vm(source, ReadLimits{}, &sink);
  const Value top = vm.run();
  const auto& pair = vm.node(top).items;
  return Read{vm.node(pair.at(0)).items, pair.at(1)};
}

// One frames list twice: the sink learns its stack (100) from the first, which is built as a
// list; the machine reads the second, and its memo slot, as that stack.
void expect_known_the_second_time(std::uint32_t frames_defined,
                                  const std::vector<std::uint32_t>& frames, bool append) {
  PickleBuilder p;
  const std::uint32_t first = p.frame_definitions(frames_defined);
  std::vector<std::uint32_t> slots;
  for (std::uint32_t frame : frames)
    slots.push_back(first + frame);
  p.frames_list(slots, append);
  const std::uint32_t known = p.frames_list(slots, append);
  StackSink sink;
  const Read read = run(p.finish(known), sink);
  using Items = decltype(shape(read));
  EXPECT_EQ(shape(read), (Items{{Kind::list, 0}, {Kind::list, 0}, {Kind::frame_stack, 100}}));
  EXPECT_EQ(read.read_again.kind, Kind::frame_stack);
  EXPECT_EQ(read.read_again.ref, 100u);
}

TEST(KnownFramesList, IsReadAsItsStackWithoutBuildingTheList) {
  expect_known_the_second_time(3, {0, 1, 2}, false);
}

TEST(KnownFramesList, ASingleFrameAppendedAloneIsReadAsItsStack) {
  expect_known_the_second_time(2, {1}, true);
}

TEST(KnownFramesList, AnyOtherListIsBuiltAsAList) {
  PickleBuilder p;
  const std::uint32_t f = p.frame_definitions(3);
  p.frames_list({f, f + 1});
  const std::uint32_t other_order = p.frames_list({f + 1, f});  // a stack the sink does not know
  p.frames_list({f, other_order});  // a GET of something that is not a frame
  const std::uint32_t lists_of_lists = p.frames_list({f, f + 1});
  StackSink sink;
  const Read read = run(p.finish(lists_of_lists), sink);
  using Items = decltype(shape(read));
  EXPECT_EQ(shape(read), (Items{{Kind::list, 0},
                                {Kind::list, 0},
                                {Kind::list, 0},
                                {Kind::list, 0},
                                {Kind::frame_stack, 100}}));
  // The sink was asked for the first two and the one it knows; the list holding a list never
  // came to asking.
  EXPECT_EQ(sink.asked, 3);
}

TEST(KnownFramesList, AFullBatchOfThePicklerIsBuiltAsAListForTheBatchesThatMayFollow) {
  // Python's pickler appends 1000 items at a time: after a batch of 1000, another may come.
  PickleBuilder p;
  const std::uint32_t f = p.frame_definitions(1000);
  std::vector<std::uint32_t> slots(1000);
  for (std::uint32_t i = 0; i < 1000; ++i)
    slots[i] = f + i;
  p.frames_list(slots);
  const std::uint32_t full = p.frames_list(slots);
  slots.pop_back();
  p.frames_list(slots);
  p.frames_list(slots);
  StackSink sink;
  const Read read = run(p.finish(full), sink);
  using Items = decltype(shape(read));
  EXPECT_EQ(shape(read), (Items{{Kind::list, 0},
                                {Kind::list, 0},
                                {Kind::list, 0},
                                {Kind::list, 0},
                                {Kind::frame_stack, 101}}));
  EXPECT_EQ(read.read_again.kind, Kind::list);
}

// The slots of `count` frames defined from `first` on: lists of 20 GETs (40 bytes) are long
// enough for the cache's key, as a real trace's stacks are.
std::vector<std::uint32_t> slots_from(std::uint32_t first, std::uint32_t count = 20) {
  std::vector<std::uint32_t> slots(count);
  for (std::uint32_t i = 0; i < count; ++i)
    slots[i] = first + i;
  return slots;
}

TEST(KnownFramesList, TheSameBytesAgainNameTheirStackWithoutAskingTheSink) {
  // The first list is built (the sink learns its stack), the second is read in place after
  // asking, and the third, the same bytes, is known from them.
  PickleBuilder p;
  const std::uint32_t f = p.frame_definitions(20);
  for (int i = 0; i < 2; ++i)
    p.frames_list(slots_from(f));
  const std::uint32_t third = p.frames_list(slots_from(f));
  StackSink sink;
  const Read read = run(p.finish(third), sink);
  using Items = decltype(shape(read));
  EXPECT_EQ(
      shape(read),
      (Items{
          {Kind::list, 0}, {Kind::list, 0}, {Kind::frame_stack, 100}, {Kind::frame_stack, 100}}));
  EXPECT_EQ(read.read_again.ref, 100u);
  EXPECT_EQ(sink.asked, 2);
}

TEST(KnownFramesList, AFrameOpcodeAmongItsGetsIsSkippedAndTheListReadAsItsStack) {
  // The list is scanned first as if no FRAME stood in it, stops at the FRAME, and is scanned
  // again skipping it (pickle_in_place.cpp): read in place as the stack the sink knows, not
  // built as a list the general way.
  PickleBuilder p;
  const std::uint32_t f = p.frame_definitions(3);
  p.frames_list({f, f + 1, f + 2});
  const std::uint32_t framed = p.framed_frames_list({f, f + 1, f + 2}, 1);
  StackSink sink;
  const Read read = run(p.finish(framed), sink);
  using Items = decltype(shape(read));
  EXPECT_EQ(shape(read), (Items{{Kind::list, 0}, {Kind::list, 0}, {Kind::frame_stack, 100}}));
  EXPECT_EQ(read.read_again.kind, Kind::frame_stack);
  EXPECT_EQ(read.read_again.ref, 100u);
}

TEST(KnownFramesList, AfterAPutOverAFramesSlotTheSameBytesAreReadAfresh) {
  // Slot f + 1 holds frame 20 after the PUT: the same GETs now spell the frames (0, 20, 2, ...),
  // a stack the sink does not know, so the list is built.
  PickleBuilder p;
  const std::uint32_t f = p.frame_definitions(21);
  p.frames_list(slots_from(f));
  p.frames_list(slots_from(f));
  p.put_over(f + 1, f + 20);
  const std::uint32_t after = p.frames_list(slots_from(f));
  StackSink sink;
  const Read read = run(p.finish(after), sink);
  using Items = decltype(shape(read));
  EXPECT_EQ(shape(read),
            (Items{{Kind::list, 0}, {Kind::list, 0}, {Kind::frame_stack, 100}, {Kind::list, 0}}));
  EXPECT_EQ(read.read_again.kind, Kind::list);
}

// A list's body, APPENDS, and the bytes that follow it in the buffer (here: a SETITEMS and the
// next entry's start), as the machine hands them to the cache.
std::vector<std::uint8_t> body_and_rest(std::vector<std::uint8_t> body) {
  body.push_back('e');
  const std::vector<std::uint8_t> next_entry = {'u', '}', 0x94, '(', 'h', 0x10, 'h', 0x11};
  body.insert(body.end(), next_entry.begin(), next_entry.end());
  body.resize(std::max<std::size_t>(body.size(), pickle::FramesListCache::kKeyBytes + 8), 'N');
  return body;
}

TEST(FramesListCache, FindsAListByItsBytesUpToAppends) {
  pickle::FramesListCache cache;
  const std::vector<std::uint8_t> body = {'h', 1, 'h', 2, 'j', 3, 0, 0, 0, 'h', 4};
  const std::vector<std::uint8_t> rest = body_and_rest(body);
  cache.insert(rest, body.size(), 7);
  const auto found = cache.find(rest);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->stack, 7u);
  EXPECT_EQ(found->length, body.size());
  // Another last GET; the same bytes without APPENDS after them (a longer list); another start.
  std::vector<std::uint8_t> other = rest;
  other[body.size() - 1] = 5;
  EXPECT_EQ(cache.find(other), std::nullopt);
  std::vector<std::uint8_t> longer = rest;
  longer[body.size()] = 'h';
  EXPECT_EQ(cache.find(longer), std::nullopt);
  std::vector<std::uint8_t> shifted(rest.begin() + 2, rest.end());
  EXPECT_EQ(cache.find(shifted), std::nullopt);
  cache.clear();
  EXPECT_EQ(cache.find(rest), std::nullopt);
}

TEST(FramesListCache, ListsSharingTheirFirstBytesAreToldApartByLength) {
  // Stacks share their innermost frames: several lists under one key, each found as itself.
  pickle::FramesListCache cache;
  std::vector<std::uint8_t> body;
  for (std::uint8_t frame = 1; frame <= 20; ++frame)
    body.insert(body.end(), {'h', frame});
  std::vector<std::vector<std::uint8_t>> bodies;
  for (std::size_t frames = 17; frames <= 20; ++frames)
    bodies.emplace_back(body.begin(), body.begin() + static_cast<std::ptrdiff_t>(2 * frames));
  for (std::size_t i = 0; i < bodies.size(); ++i)
    cache.insert(body_and_rest(bodies[i]), bodies[i].size(), static_cast<std::uint32_t>(i));
  for (int round = 0; round < 2; ++round) {
    for (std::size_t i : {std::size_t{2}, std::size_t{0}, std::size_t{3}, std::size_t{1}}) {
      const auto found = cache.find(body_and_rest(bodies[i]));
      ASSERT_TRUE(found.has_value()) << i;
      EXPECT_EQ(found->stack, i);
      EXPECT_EQ(found->length, bodies[i].size());
    }
  }
}

TEST(FramesListCache, KeepsABoundedNumberOfListsUnderOneKey) {
  // Each lookup looks at every list of its key: past kMaxCandidates (a hostile pickle's lists
  // sharing their first bytes), the list found least recently is dropped.
  pickle::FramesListCache cache;
  constexpr std::size_t kLists = pickle::FramesListCache::kMaxCandidates + 8;
  std::vector<std::uint8_t> body;
  for (std::size_t frame = 0; frame < 20 + kLists; ++frame)
    body.insert(body.end(), {'h', static_cast<std::uint8_t>(frame)});
  auto list = [&](std::size_t i) {
    return std::vector<std::uint8_t>(body.begin(),
                                     body.begin() + static_cast<std::ptrdiff_t>(2 * (20 + i)));
  };
  for (std::size_t i = 0; i < kLists; ++i)
    cache.insert(body_and_rest(list(i)), list(i).size(), static_cast<std::uint32_t>(i));
  for (std::size_t i = 0; i < kLists; ++i) {
    const auto found = cache.find(body_and_rest(list(i)));
    if (i < kLists - pickle::FramesListCache::kMaxCandidates) {
      EXPECT_EQ(found, std::nullopt) << i;
    } else {
      ASSERT_TRUE(found.has_value()) << i;
      EXPECT_EQ(found->stack, i);
    }
  }
}

TEST(FramesListCache, KeepsNoMoreThanItsBudgetOfBytes) {
  pickle::FramesListCache cache;
  std::vector<std::uint8_t> body(1000, 'h');
  const std::size_t fit = pickle::FramesListCache::kMaxBytes / body.size();
  std::vector<std::uint8_t> rest;
  for (std::size_t i = 0; i <= fit; ++i) {
    for (std::size_t b = 0; b < 4; ++b)
      body[2 * b + 1] = static_cast<std::uint8_t>(i >> (8 * b));
    rest = body_and_rest(body);
    cache.insert(rest, body.size(), static_cast<std::uint32_t>(i));
  }
  EXPECT_EQ(cache.size(), fit);
  EXPECT_EQ(cache.find(rest), std::nullopt);  // the one past the budget
}

}  // namespace
}  // namespace fragscope::snapshot::test
