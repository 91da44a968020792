// Trace entry dicts appended to a trace list after its first batch are read straight from the
// pickle machine's read-ahead buffer (Machine::read_trace_entries) instead of opcode by opcode into
// dict nodes. The pickles here are written as Python's pickler writes a snapshot, batch by batch,
// so that the first batch of a list, which the general path reads, can hold the same entries as
// the batches after it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "engine/core/error.h"
#include "engine/snapshot/byte_source.h"
#include "engine/snapshot/pickle_vm.h"
#include "engine/snapshot/snapshot.h"

namespace fragscope::snapshot::test {
namespace {

using pickle::Kind;
using pickle::Machine;
using pickle::Value;

// A str value written anew for every entry (as PyTorch's 'N/A' compile_context is) instead of a
// GET of its first copy.
struct Fresh {
  std::string text;
};
struct None {};
// A value: an int, a str (memoized once), a fresh str, None, or a frames list of these frame
// names (each a frame dict the first time, a GET after; a list seen before is a GET too).
using FieldValue = std::variant<std::int64_t, std::string, Fresh, None, std::vector<std::string>>;
using Entry = std::vector<std::pair<std::string, FieldValue>>;

// {'segments': [], 'device_traces': [[entries]]} in protocol 4, the trace list's items in the
// batches given (the pickler's are 1000), every new object memoized as Python's pickler does.
class SnapshotPickle {
 public:
  std::string write(const std::vector<std::vector<Entry>>& batches) {
    bytes_ = "\x80\x04";
    memoized('}');
    bytes_ += '(';
    str("segments");
    memoized(']');
    str("device_traces");
    memoized(']');
    memoized(']');  // the trace list
    for (const auto& batch : batches) {
      bytes_ += '(';
      for (const Entry& entry : batch)
        write_entry(entry);
      appends.push_back(bytes_.size());
      const std::size_t k = appends.size() - 1;
      bytes_ += k < batch_ends.size() ? batch_ends[k] : std::string("e");
    }
    bytes_ += "au.";  // the trace list into device_traces; the snapshot's SETITEMS
    return bytes_;
  }
  std::vector<std::size_t> appends;  // the byte offset of each batch's APPENDS
  // What ends batch k instead of APPENDS ('e'), when given: raw opcodes.
  std::vector<std::string> batch_ends;

 private:
  void write_entry(const Entry& entry) {
    memoized('}');
    bytes_ += '(';
    for (const auto& [key, value] : entry) {
      str(key);
      if (const auto* i = std::get_if<std::int64_t>(&value))
        integer(*i);
      else if (const auto* s = std::get_if<std::string>(&value))
        str(*s);
      else if (const auto* fresh = std::get_if<Fresh>(&value))
        new_str(fresh->text);
      else if (std::holds_alternative<None>(value))
        bytes_ += 'N';
      else
        frames(std::get<std::vector<std::string>>(value));
    }
    bytes_ += 'u';
  }
  void frames(const std::vector<std::string>& names) {
    if (auto it = lists_.find(names); it != lists_.end())
      return get(it->second);
    lists_.emplace(names, memoized(']'));
    if (names.empty())
      return;
    bytes_ += '(';
    for (const std::string& name : names) {
      if (auto it = frames_.find(name); it != frames_.end()) {
        get(it->second);
        continue;
      }
      frames_.emplace(name, memoized('}'));
      bytes_ += '(';
      str("filename");
      str(name + ".py");
      str("line");
      integer(static_cast<std::int64_t>(name.size()));
      str("name");
      str(name);
      bytes_ += 'u';
    }
    bytes_ += 'e';
  }
  void integer(std::int64_t i) {
    if (i >= 0 && i < 256) {
      bytes_ += 'K';
      bytes_ += static_cast<char>(i);
    } else if (i >= 0 && i < 65536) {
      bytes_ += 'M';
      little_endian(static_cast<std::uint64_t>(i), 2);
    } else if (i >= INT32_MIN && i <= INT32_MAX) {
      bytes_ += 'J';
      little_endian(static_cast<std::uint64_t>(i), 4);
    } else {
      // LONG1: the fewest bytes of two's complement that keep the sign.
      std::size_t n = 1;
      while (n < 8 && (i >> (8 * n - 1)) != 0 && (i >> (8 * n - 1)) != -1)
        ++n;
      bytes_ += '\x8a';
      bytes_ += static_cast<char>(n);
      little_endian(static_cast<std::uint64_t>(i), n);
    }
  }
  void str(const std::string& s) {
    if (auto it = strings_.find(s); it != strings_.end())
      return get(it->second);
    strings_.emplace(s, new_str(s));
  }
  std::uint32_t new_str(const std::string& s) {
    bytes_ += '\x8c';
    bytes_ += static_cast<char>(s.size());
    bytes_ += s;
    return memoize();
  }
  std::uint32_t memoized(char op) {
    bytes_ += op;
    return memoize();
  }
  std::uint32_t memoize() {
    bytes_ += '\x94';
    return slots_++;
  }
  void get(std::uint32_t slot) {
    if (slot < 256) {
      bytes_ += 'h';
      bytes_ += static_cast<char>(slot);
      return;
    }
    bytes_ += 'j';
    little_endian(slot, 4);
  }
  void little_endian(std::uint64_t v, std::size_t n) {
    for (std::size_t b = 0; b < n; ++b)
      bytes_ += static_cast<char>(v >> (8 * b));
  }

  std::string bytes_;
  std::uint32_t slots_ = 0;
  std::map<std::string, std::uint32_t> strings_;
  std::map<std::string, std::uint32_t> frames_;
  std::map<std::vector<std::string>, std::uint32_t> lists_;
};

Snapshot read(const std::string& bytes) {
  return read_snapshot_from_memory(
      std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()),
      "entries.pickle");
}

std::string error_of(const std::string& bytes) {
  try {
    read(bytes);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

// Every shape an entry's values take: ints of each opcode (BININT1, BININT2, BININT, LONG1 of 1
// to 8 bytes, negative), strs memoized and fresh, None, frames lists new and shared, an oom's
// device_free, an unknown action (skipped), an unknown key, a repeated key (the last counts).
std::vector<Entry> every_shape() {
  const std::vector<std::string> stack = {"main", "forward", "linear"};
  return {
      {{"action", std::string("segment_alloc")},
       {"addr", std::int64_t{0x7f0000000000}},
       {"size", std::int64_t{20} << 20},
       {"stream", std::int64_t{0}},
       {"time_us", std::int64_t{1700000000000000}},
       {"frames", stack}},
      {{"action", std::string("alloc")},
       {"addr", std::int64_t{0x7f0000000000}},
       {"size", std::int64_t{512}},
       {"stream", std::int64_t{7}},
       {"time_us", std::int64_t{-5}},
       {"frames", stack},
       {"compile_context", Fresh{"N/A"}},
       {"user_metadata", std::string("")}},
      {{"action", std::string("alloc")},
       {"addr", std::int64_t{0x7f0000000200}},
       {"size", std::int64_t{70000}},
       {"stream", std::int64_t{140000000000}},
       {"time_us", std::int64_t{200}},
       {"frames", std::vector<std::string>{"main", "backward"}},
       {"compile_context", Fresh{"0/1"}}},
      {{"action", std::string("free_requested")},
       {"addr", std::int64_t{0x800000000000}},  // LONG1 of 7 bytes: the 6th has its top bit set
       {"size", std::int64_t{512}},
       {"stream", std::int64_t{7}},
       {"time_us", -(std::int64_t{1} << 40)},  // LONG1 of 6 bytes, negative
       {"frames", None{}}},
      {{"action", std::string("free_completed")},
       {"addr", std::int64_t{0x7f0000000000}},
       {"size", std::int64_t{512}},
       {"stream", std::int64_t{7}},
       {"time_us", std::int64_t{INT64_MIN}},
       {"note", std::string("an unknown key")}},
      {{"action", std::string("oom")},
       {"device_free", std::int64_t{3} << 30},
       {"size", std::int64_t{INT64_MAX}},
       {"stream", std::int64_t{0}},
       {"time_us", std::int64_t{INT64_MAX}},
       {"frames", stack}},
      {{"action", std::string("alloc")},
       {"addr", std::int64_t{16}},
       {"size", std::int64_t{1}},
       {"size", std::int64_t{255}},
       {"time_us", std::int64_t{-70000}},
       {"frames", stack}},
      {{"action", std::string("annotate")}, {"addr", std::int64_t{1}}, {"size", std::int64_t{0}}},
      // Last: an empty frames list is read the general way, and the rest of its batch with it.
      {{"action", std::string("free_completed")},
       {"addr", std::int64_t{16}},
       {"size", std::int64_t{255}},
       {"frames", std::vector<std::string>{}}},
  };
}

TEST(TraceEntries, EntriesReadInPlaceAreTheEntriesTheGeneralPathReads) {
  // The first batch is read the general way; each later batch repeats it in place, except where
  // an entry needs a new frames list (written in the first batch, a GET after it).
  const std::vector<Entry> shapes = every_shape();
  std::vector<std::vector<Entry>> batches(4, shapes);
  const Snapshot snapshot = read(SnapshotPickle().write(batches));

  ASSERT_EQ(snapshot.device_traces.size(), 1u);
  const std::vector<TraceEvent>& events = snapshot.device_traces[0];
  const std::size_t per_batch = shapes.size() - 1;  // the unknown action is skipped
  EXPECT_EQ(events[per_batch - 1].frames, FrameStackId{});
  ASSERT_EQ(events.size(), 4 * per_batch);
  for (std::size_t i = per_batch; i < events.size(); ++i)
    EXPECT_EQ(events[i], events[i % per_batch]) << "event " << i;
  // user_metadata '' is a text of its own, as the general path has always kept it.
  EXPECT_EQ(snapshot.entry_texts, (std::vector<std::string>{"", "N/A", "", "0/1"}));
  ASSERT_EQ(snapshot.device_entry_texts.size(), 1u);
  const std::vector<TraceEntryText>& texts = snapshot.device_entry_texts[0];
  ASSERT_EQ(texts.size(), events.size());
  for (std::size_t i = per_batch; i < events.size(); ++i) {
    EXPECT_EQ(texts[i].compile_context, texts[i % per_batch].compile_context) << "event " << i;
    EXPECT_EQ(texts[i].user_metadata, texts[i % per_batch].user_metadata) << "event " << i;
  }
  EXPECT_EQ(texts[1].compile_context, 1u);
  EXPECT_EQ(texts[1].user_metadata, 2u);
  EXPECT_EQ(texts[2].compile_context, 3u);
  EXPECT_EQ(snapshot.features.trace_entries, 4 * shapes.size());
  EXPECT_EQ(snapshot.features.entries_with_compile_context, 4u * 2);

  // What the first batch says the general way, pinned.
  EXPECT_EQ(events[0].action, TraceAction::segment_alloc);
  EXPECT_EQ(events[1].time_us, -5);
  EXPECT_EQ(events[1].stream, StreamId{7});
  EXPECT_EQ(events[2].stream, StreamId{140000000000});
  EXPECT_EQ(events[2].size, 70000u);
  EXPECT_EQ(events[3].time_us, -(std::int64_t{1} << 40));
  EXPECT_EQ(events[3].addr, 0x800000000000u);
  EXPECT_EQ(events[3].frames, FrameStackId{});
  EXPECT_EQ(events[4].time_us, INT64_MIN);
  EXPECT_EQ(events[5].action, TraceAction::oom);
  EXPECT_EQ(events[5].addr, std::uint64_t{3} << 30);
  EXPECT_EQ(events[5].time_us, INT64_MAX);
  EXPECT_EQ(events[6].size, 255u);
  EXPECT_EQ(events[6].time_us, -70000);
  EXPECT_EQ(events[0].frames, events[5].frames);
  EXPECT_THAT(snapshot.warnings, ::testing::Contains(::testing::HasSubstr("'annotate'")));
  EXPECT_NE(events[0].frames, events[2].frames);
}

TEST(TraceEntries, AnEntryThatFailsToConvertIsReportedAtItsBatchsAppends) {
  std::vector<Entry> later = every_shape();
  later[2].erase(later[2].begin() + 2);  // 'size'
  SnapshotPickle pickle;
  const std::string bytes = pickle.write({every_shape(), every_shape(), later});
  const std::string error = error_of(bytes);
  EXPECT_THAT(error, ::testing::HasSubstr("missing key 'size'"));
  EXPECT_THAT(error,
              ::testing::HasSubstr("pickle byte offset " + std::to_string(pickle.appends[2])));
}

// The same dict appended twice (DUP) is two events; the entry DUP follows is read the general way.
TEST(TraceEntries, AnEntryTheBatchDoesMoreWithIsReadTheGeneralWay) {
  const Entry a = {
      {"action", std::string("alloc")}, {"addr", std::int64_t{64}}, {"size", std::int64_t{512}}};
  const Entry b = {{"action", std::string("alloc")},
                   {"addr", std::int64_t{1024}},
                   {"size", std::int64_t{70000}}};
  SnapshotPickle pickle;
  pickle.batch_ends = {"e", "2e"};  // DUP, APPENDS
  const Snapshot snapshot = read(pickle.write({{a, b}, {a, b}}));
  const std::vector<TraceEvent>& events = snapshot.device_traces.at(0);
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[2], events[0]);
  EXPECT_EQ(events[3], events[1]);
  EXPECT_EQ(events[4], events[1]);
}

// Entries read in place are events already: a batch that would have dropped them (POP_MARK, or
// POP at its MARK, where only APPENDS makes its dicts events) is refused, not half-kept.
TEST(TraceEntries, ABatchOfEntriesReadInPlaceMustEndInAppends) {
  const Entry a = {
      {"action", std::string("alloc")}, {"addr", std::int64_t{64}}, {"size", std::int64_t{512}}};
  // The second entry of the batch, followed by neither an entry nor APPENDS, is read the general
  // way; the first was read in place. POP_MARK, or POP of the second entry and then of the MARK.
  for (const std::string& end : {std::string("1"), std::string("00")}) {
    SnapshotPickle pickle;
    pickle.batch_ends = {"e", end};
    const std::string error = error_of(pickle.write({{a, a}, {a, a}}));
    EXPECT_THAT(error, ::testing::HasSubstr("must end in APPENDS")) << end;
    const std::size_t at = pickle.appends[1] + end.size() - 1;
    EXPECT_THAT(error, ::testing::HasSubstr("byte offset " + std::to_string(at))) << end;
  }
}

// Reading ahead for entries reaches past the pickle's STOP: junk after a gzip member there is no
// error, as it was not before (Python's gzip reader stops there too).
TEST(TraceEntries, ReadingAheadPastTheEndOfAGzipMemberIsNoError) {
  const Entry a = {
      {"action", std::string("alloc")}, {"addr", std::int64_t{64}}, {"size", std::int64_t{512}}};
  const std::string plain = SnapshotPickle().write({{a, a}, {a, a, a}});
  z_stream zs{};
  ASSERT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string gz(plain.size() + 1024, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(plain.data()));
  zs.avail_in = static_cast<uInt>(plain.size());
  zs.next_out = reinterpret_cast<Bytef*>(gz.data());
  zs.avail_out = static_cast<uInt>(gz.size());
  ASSERT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  gz.resize(zs.total_out);
  deflateEnd(&zs);
  const Snapshot snapshot = read(gz + "this is no gzip member");
  EXPECT_EQ(snapshot.device_traces.at(0).size(), 5u);
}

// Plays the reader's trace sink in miniature: the first batch of dicts makes the list a trace
// list, and each entry read in place is recorded as its pairs (strings as their text) and
// answered with Kind::trace_event, numbered; an entry whose 'action' is "refuse" is not taken.
class EntrySink : public pickle::ListSink {
 public:
  bool on_append(Machine& vm, Value list, std::span<Value> items) override {
    if (!std::all_of(items.begin(), items.end(),
                     [](const Value& v) { return v.kind == Kind::dict; }))
      return false;  // the trace list appended to device_traces
    pickle::Node& n = vm.node(list);
    if (n.kind == Kind::list) {
      n.kind = Kind::trace_list;
      n.aux = vm.new_event_list(false);
    }
    for (const Value& item : items) {
      appended.push_back(item.kind);
      vm.retire(item, next_event());
    }
    return true;
  }
  std::optional<std::uint32_t> known_frame_stack(std::span<const std::uint32_t>) override {
    return std::nullopt;
  }
  std::optional<Value> convert_entry(Machine& vm, Value list,
                                     std::span<const Value> pairs) override {
    EXPECT_EQ(vm.node(list).kind, Kind::trace_list);
    std::vector<std::string> read;
    for (const Value& v : pairs)
      read.push_back(v.kind == Kind::string ? std::string(vm.str(v)) : std::to_string(v.i));
    if (read.size() >= 2 && read[1] == "refuse")
      return std::nullopt;
    in_place.push_back(read);
    return next_event();
  }
  std::vector<Kind> appended;                      // items handed over at APPENDS
  std::vector<std::vector<std::string>> in_place;  // entries read in place, as their pairs

 private:
  Value next_event() {
    Value v;
    v.kind = Kind::trace_event;
    v.i = events_++;
    return v;
  }
  std::int64_t events_ = 0;
};

// The pickle with a protocol-4 FRAME opcode (and its 8-byte length, which only hints) before
// every opcode that starts in [from, to): a pickler may cut its frames before any opcode.
std::string with_frames(const std::string& bytes, std::size_t from, std::size_t to) {
  std::string out = bytes.substr(0, 2);  // PROTO 4
  std::size_t pos = 2;
  while (pos < bytes.size()) {
    const auto op = static_cast<std::uint8_t>(bytes[pos]);
    std::size_t length = 1;
    if (op == 'h' || op == 'K')
      length = 2;
    else if (op == 'M')
      length = 3;
    else if (op == 'J' || op == 'j')
      length = 5;
    else if (op == 0x8a || op == 0x8c)  // LONG1, SHORT_BINUNICODE
      length = 2 + static_cast<std::uint8_t>(bytes[pos + 1]);
    if (pos >= from && pos < to)
      out += std::string("\x95\x40\0\0\0\0\0\0\0", 9);
    out += bytes.substr(pos, length);
    pos += length;
  }
  return out;
}

TEST(TraceEntries, AFrameOpcodeBeforeAnyOpcodeOfAnEntryIsSkippedInPlace) {
  const Entry plain = {{"action", std::string("alloc")},
                       {"addr", std::int64_t{0x7f0000000000}},
                       {"size", std::int64_t{70000}}};
  const Entry fresh = {{"action", std::string("free")}, {"ctx", Fresh{"N/A"}}, {"n", None{}}};
  SnapshotPickle pickle;
  const std::string plain_pickle = pickle.write({{plain, fresh}, {plain, fresh, plain}, {plain}});
  const std::string framed = with_frames(plain_pickle, pickle.appends[0] + 1, pickle.appends[1]);
  ASSERT_GT(framed.size(), plain_pickle.size() + 9 * 20);
  EntrySink sink;
  ByteSource source(std::span(reinterpret_cast<const std::uint8_t*>(framed.data()), framed.size()),
                    "framed.pickle", std::uint64_t{1} << 30);
  Machine vm(source, ReadLimits{}, &sink);
  vm.run();
  using Pairs = std::vector<std::vector<std::string>>;
  const std::vector<std::string> plain_pairs = {
      "action", "alloc", "addr", std::to_string(0x7f0000000000), "size", "70000"};
  const std::vector<std::string> fresh_pairs = {"action", "free", "ctx", "N/A", "n", "0"};
  EXPECT_EQ(sink.in_place, (Pairs{plain_pairs, fresh_pairs, plain_pairs, plain_pairs}));
  EXPECT_EQ(sink.appended, (std::vector<Kind>(2, Kind::dict)));
}

TEST(TraceEntries, FrameOpcodesChangeNoEvent) {
  // Every shape, frames lists included (new, known and shared), with a FRAME before each opcode
  // of the batches after the first.
  SnapshotPickle pickle;
  const std::string plain_pickle = pickle.write(std::vector<std::vector<Entry>>(3, every_shape()));
  const Snapshot plain = read(plain_pickle);
  const Snapshot framed = read(with_frames(plain_pickle, pickle.appends[0] + 1, pickle.appends[2]));
  EXPECT_EQ(framed.device_traces, plain.device_traces);
  EXPECT_EQ(framed.entry_texts, plain.entry_texts);
  EXPECT_EQ(framed.device_entry_texts, plain.device_entry_texts);
  EXPECT_EQ(framed.features.trace_entries, plain.features.trace_entries);
}

TEST(TraceEntries, EntriesAfterTheFirstBatchReachTheSinkAsTheirPairs) {
  const Entry plain = {{"action", std::string("alloc")}, {"size", std::int64_t{70000}}};
  const Entry fresh = {{"action", std::string("free")}, {"ctx", Fresh{"N/A"}}};
  const Entry refused = {{"action", std::string("refuse")}};
  const std::string bytes = SnapshotPickle().write(
      {{plain, fresh}, {plain, fresh, fresh}, {fresh, refused, plain}, {plain}});
  EntrySink sink;
  ByteSource source(std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()),
                    "entries.pickle", std::uint64_t{1} << 30);
  Machine vm(source, ReadLimits{}, &sink);
  vm.run();
  using Pairs = std::vector<std::vector<std::string>>;
  const std::vector<std::string> plain_pairs = {"action", "alloc", "size", "70000"};
  const std::vector<std::string> fresh_pairs = {"action", "free", "ctx", "N/A"};
  // The first batch, and from the refused entry on the rest of its batch, go the general way. The
  // last entry ends four bytes before the pickle does.
  EXPECT_EQ(sink.in_place,
            (Pairs{plain_pairs, fresh_pairs, fresh_pairs, fresh_pairs, plain_pairs}));
  EXPECT_EQ(sink.appended, (std::vector<Kind>(4, Kind::dict)));
}

// A FRAME opcode within the last 5 to 8 bytes of a truncated pickle, where a key of
// an entry read in place would stand, cannot be skipped (its length runs past the end): the
// reader must give the general path's truncation error, not loop.
TEST(TraceEntries, AFrameCutShortWhereAKeyStandsIsATruncationError) {
  const Entry a = {
      {"action", std::string("alloc")}, {"addr", std::int64_t{64}}, {"size", std::int64_t{512}}};
  SnapshotPickle pickle;
  const std::string whole = pickle.write({{a, a}, {a, a}});
  // The second batch: its MARK, then the first entry's EMPTY_DICT, MEMOIZE and MARK.
  const std::string cut =
      whole.substr(0, pickle.appends[0] + 1 + 4) + std::string("\x95\x01\x02\x03\x04", 5);
  EXPECT_THAT(error_of(cut), ::testing::HasSubstr("FRAME"));
}

}  // namespace
}  // namespace fragscope::snapshot::test
