#pragma once
// A data-only pickle machine for protocols 2-5. It understands the opcodes Python's pickler emits
// for dict, list, tuple, set, str, bytes, int, float, bool and None, and refuses every opcode that
// would import or call something (GLOBAL, REDUCE, BUILD, ...) with an error naming the opcode and
// its byte offset. Objects live in a flat arena (no recursion when freeing, so no stack overflow
// on hostile nesting); a ListSink sees the items of every APPEND/APPENDS first and may consume
// them into a compact structure, which is how a 1 GB trace never becomes a generic object tree
// (trace entries after a list's first batch reach it one by one as they are read, convert_entry).
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/snapshot/byte_source.h"
#include "engine/snapshot/frames_list_cache.h"
#include "engine/snapshot/snapshot.h"

namespace fragscope::snapshot::pickle {

enum class Kind : std::uint8_t {
  none,
  boolean,
  integer,      // fits int64: Value::i
  big_integer,  // does not fit int64: node data = little-endian two's complement bytes
  floating,     // Value::d
  string,       // Value::ref = string id
  bytes,        // node data
  list,
  tuple,
  dict,  // node items = k0, v0, k1, v1, ...
  set,
  frame,        // a frame dict already interned: Value::ref = frame index
  frame_stack,  // a frames list already interned: Value::ref = FrameStackId
  trace_event,  // a trace entry dict already converted: Value::ref = event list, Value::i = index
  trace_list,   // a list whose items were consumed as trace events: node aux = event list index
  unset,        // memo hole
};
std::string_view to_string(Kind kind);

struct Value {
  Kind kind = Kind::none;
  std::uint32_t ref = 0;  // string id, frame index, stack id or node index
  union {
    std::int64_t i = 0;
    double d;
    std::uint64_t generation;  // node values: generation of the node when referenced
  };
  // A container, a big integer or bytes: a node of the machine's arena.
  bool is_node() const {
    constexpr std::uint32_t nodes =
        1u << static_cast<unsigned>(Kind::big_integer) | 1u << static_cast<unsigned>(Kind::bytes) |
        1u << static_cast<unsigned>(Kind::list) | 1u << static_cast<unsigned>(Kind::tuple) |
        1u << static_cast<unsigned>(Kind::dict) | 1u << static_cast<unsigned>(Kind::set) |
        1u << static_cast<unsigned>(Kind::trace_list);
    return (nodes >> static_cast<unsigned>(kind) & 1u) != 0;
  }
};

// A value that is no node (an int, None, a bool, a memo hole), built whole.
inline Value scalar(Kind kind, std::int64_t i = 0) {
  Value v;
  v.kind = kind;
  v.i = i;
  return v;
}

struct Node {
  Kind kind = Kind::list;
  // References to the node besides its memo slot: 1 when made, one more for each GET, DUP and
  // further memo slot, one less for each holder converted and discarded. It may overcount (a
  // reference POPped or left in a container never converted is not counted down), never
  // undercount: a node is freed only at zero.
  std::uint32_t holders = 1;
  std::uint32_t memo_slot = kNoSlot;
  std::uint32_t aux = 0;
  std::uint64_t aux_index = 0;  // trace_event: the event's index in its list
  std::uint64_t generation = 0;
  std::uint64_t depth = 1;  // containers nested inside, including itself
  std::vector<Value> items;
  std::string data;  // bytes / big integer payload

  static constexpr std::uint32_t kNoSlot = 0xffffffffu;
  static constexpr std::uint32_t kForever = 0xffffffffu;  // holders: too many to count
};

// Frees a converted node's items and payload. `items = {}` would not: it assigns an empty
// initializer list and keeps the capacity, which held ~500 bytes for every shared frames list of
// a real trace (372 MB importing a 195 MB snapshot recorded with C++ stacks).
inline void release_storage(Node& n) {
  std::vector<Value>().swap(n.items);
  std::string().swap(n.data);
}

// The pickle machine's memo, compacted behind a window. A snapshot memoizes every trace entry
// dict, its frames list and its compile_context string, so the memo has two or three slots per
// entry (16 bytes each: 51 MB for a real 1.2M-entry trace), and once an entry is converted its
// slots only say "entry i of list L", "frames list 5321", "string 12". Slots older than the
// window are therefore folded into chunks of 32-bit words that hold those compact values
// (anything else, such as an object still being built, stays a full Value beside the words),
// and a block of 64 consecutive converted entries of one list is its first word alone. Reads and
// writes of any slot stay exact, and a folded slot is read in constant time.
class Memo {
 public:
  // Slots [0, size()) exist; a new one reads Kind::unset until set.
  std::uint64_t size() const { return base_ + recent_.size(); }
  // Adds unset slots up to `size` slots.
  void grow(std::uint64_t size);
  // Inline, folded slots too: a frames list of a real trace is dozens of GETs of old slots.
  Value get(std::uint64_t slot) const {
    if (slot >= base_)
      return recent_[static_cast<std::size_t>(slot - base_)];
    const Chunk& chunk = chunks_[static_cast<std::size_t>(slot / kWindow)];
    return decode(folded_word(chunk, slot), chunk.wide);
  }
  // get() through a small cache of the slots read last, by slot: a real trace's frames lists GET
  // the same ~500 frame slots 40M times, and every trace entry GETs its ~8 key strings, all
  // folded long ago; a cached slot is one load instead of get()'s walk to its folded word.
  Value get_cached(std::uint64_t slot) const {
    CachedSlot& cached = cached_slots_[slot % kCachedSlots];
    if (cached.slot == slot)
      return cached.value;
    const Value v = get(slot);
    cached = CachedSlot{slot, v};
    return v;
  }
  // The frame index a slot holds when it is a frame converted earlier (Kind::frame), else
  // kNotAFrame, for a frames list read in place.
  static constexpr std::uint32_t kNotAFrame = ~std::uint32_t{0};
  std::uint32_t frame_at(std::uint64_t slot) const {
    const Value v = get_cached(slot);
    return v.kind == Kind::frame ? v.ref : kNotAFrame;
  }
  void set(std::uint64_t slot, const Value& value);
  // Adds slot size() holding `value` (MEMOIZE).
  void push_back(const Value& value) {
    recent_.push_back(value);
    if (recent_.size() >= 2 * kWindow) [[unlikely]]
      fold_oldest();
  }
  // Bytes held, for tests and measurements.
  std::size_t memory_bytes() const;

  // The newest kWindow..2*kWindow slots stay a plain array: entries are converted within a batch
  // of APPENDS (PyTorch's pickler: 1000 items) of being memoized. Folded a window at a time.
  static constexpr std::size_t kWindow = 1u << 14;
  static constexpr std::size_t kBlock = 64;

  // A folded slot's word: the top 3 bits say what the slot holds, the low 29 bits its payload.
  enum Tag : std::uint32_t {
    tag_unset,          // Kind::unset
    tag_string,         // payload: string id
    tag_frame,          // payload: frame index
    tag_frame_stack,    // payload: frame stack id
    tag_entry,          // a converted entry of event list 0; payload: its index
    tag_skipped_entry,  // an entry with an unknown action (ref ~0)
    tag_wide,           // payload: index into the chunk's wide values
  };
  static constexpr unsigned kPayloadBits = 29;
  static constexpr std::uint32_t kPayloadMask = (std::uint32_t{1} << kPayloadBits) - 1;
  // Without a switch: the tags of a frames list's GETs alternate unpredictably.
  static Value decode(std::uint32_t w, const std::vector<Value>& wide) {
    static constexpr Kind kinds[8] = {Kind::unset,       Kind::string,      Kind::frame,
                                      Kind::frame_stack, Kind::trace_event, Kind::trace_event,
                                      Kind::unset,       Kind::unset};
    const std::uint32_t tag = w >> kPayloadBits;
    const std::uint32_t payload = w & kPayloadMask;
    if (tag == tag_wide) [[unlikely]]
      return wide[payload];
    Value v;
    v.kind = kinds[tag];
    v.ref = tag - tag_string < 3 ? payload : (tag == tag_skipped_entry ? ~std::uint32_t{0} : 0);
    v.i = tag == tag_entry ? payload : 0;
    return v;
  }

 private:
  // kWindow folded slots. blocks[b]: where block b's words start in `words`; with kSequence set,
  // the block is 64 converted entries in a row and keeps only its first word.
  struct Chunk {
    std::vector<std::uint32_t> words;
    std::vector<Value> wide;  // the values of the words tagged wide
    std::array<std::uint16_t, kWindow / kBlock> blocks{};
    static constexpr std::uint16_t kSequence = 0x8000;
  };
  static std::uint32_t folded_word(const Chunk& chunk, std::uint64_t slot) {
    const auto offset = static_cast<std::uint32_t>(slot % kWindow);
    const std::uint16_t block = chunk.blocks[offset / kBlock];
    const bool sequence = (block & Chunk::kSequence) != 0;
    const std::uint32_t in_block = offset % kBlock;
    return chunk.words[(block & ~Chunk::kSequence) + (sequence ? 0 : in_block)] +
           (sequence ? in_block : 0);
  }
  void fold_oldest();
  // Turns a sequence block back into a word per slot, so that one of its slots can change.
  static void unpack(Chunk& chunk, std::size_t block);
  // Keeps only the wide values some word still refers to.
  static void drop_unused_wide(Chunk& chunk);

  // get_cached's cache, by slot modulo its size; set() forgets the slot it writes.
  struct CachedSlot {
    std::uint64_t slot = ~std::uint64_t{0};
    Value value;
  };
  static constexpr std::size_t kCachedSlots = 1024;
  mutable std::vector<CachedSlot> cached_slots_ = std::vector<CachedSlot>(kCachedSlots);

  std::uint64_t base_ = 0;     // slots below are in chunks_
  std::vector<Value> recent_;  // slots [base_, size())
  std::vector<Chunk> chunks_;  // chunk c holds slots [c * kWindow, (c + 1) * kWindow)
  std::vector<std::uint32_t> scratch_;
};

class Machine;

// Sees every batch of items appended to a list; returns true when it consumed the batch (the items
// are then not stored in the list). Trace entries read in place come to convert_entry instead.
class ListSink {
 public:
  virtual ~ListSink() = default;
  virtual bool on_append(Machine& vm, Value list, std::span<Value> items) = 0;
  // The id of the frame stack made of these frames (indices of frames converted earlier) when the
  // sink has interned that stack already, else nullopt. Given an id, the machine reads such a
  // frames list as that stack's compact value without building the list (read_known_frames_list).
  virtual std::optional<std::uint32_t> known_frame_stack(std::span<const std::uint32_t> frames) = 0;
  // A trace entry dict appended to `list`, a list this sink consumed before, read in place
  // (Machine::read_trace_entries): its keys and values in order, all scalars. Converts it and
  // returns the compact value its memo slot holds from now on (what retire() would leave there),
  // or nullopt, with nothing changed, when converting it would fail or it is no plain entry: the
  // machine then builds the dict and hands it over at APPENDS. By default no entry is.
  virtual std::optional<Value> convert_entry(Machine& vm, Value list, std::span<const Value> pairs);
};

class Machine {
 public:
  Machine(ByteSource& source, const ReadLimits& limits, ListSink* sink);

  // Runs to STOP and returns the top of the stack.
  Value run();

  // Accessors for sinks and for the schema walk.
  Node& node(const Value& v) {
    Node& n = nodes_[v.ref];
    // Unreachable for any pickle: retire() frees only nodes with a single holder, and that
    // holder drops its reference. Kept as a check so a bug is an error, not a read of a reused
    // node.
    if (n.generation != v.generation) [[unlikely]]
      fail_stale();
    return n;
  }
  const Node& node(const Value& v) const { return const_cast<Machine*>(this)->node(v); }
  std::string_view str(const Value& v) const { return strings_[v.ref]; }
  std::uint32_t intern(std::string_view s);
  // Replaces a node a sink converted by its compact form `replacement` (a scalar Value), for a
  // caller whose reference goes away: its memo slot reads the replacement from now on. A node
  // nobody else holds is freed for reuse; a shared one stays, turned into the replacement, so
  // every other holder reads the same value, until the last of them lets go (release).
  void retire(const Value& v, Value replacement);
  // The caller's reference to a node converted earlier goes away (its holder is discarded): the
  // last one frees it. The 800k shared frames lists of a real 1.2M-entry trace stayed otherwise.
  void release(const Value& v);
  // `reserve`: size the first list for the input (a sink that keeps its events elsewhere does not).
  std::uint32_t new_event_list(bool reserve = true);
  std::vector<TraceEvent>& event_list(std::uint32_t index) { return event_lists_[index]; }
  int protocol() const { return protocol_; }
  // Nodes allocated, free ones included: for tests and measurements.
  std::size_t node_count() const { return nodes_.size(); }
  std::uint64_t offset() const { return source_.offset(); }
  // Offset of the opcode being executed, for error messages.
  std::uint64_t op_offset() const { return op_offset_; }
  [[noreturn]] void fail(const std::string& what) const;
  const std::string& name() const { return source_.name(); }

 private:
  // The error paths of the hot opcodes, out of line so that those stay small enough to inline.
  [[noreturn, gnu::cold, gnu::noinline]] void fail_stack_full() const;
  [[noreturn, gnu::cold, gnu::noinline]] void fail_truncated(std::size_t n, const char* what) const;
  Value new_node(Kind kind);
  void free_node(std::uint32_t index);
  // Frees a shared node's items and payload as it turns compact (release_storage), keeping a few
  // item buffers for the next nodes: a real trace's 800k shared frames lists otherwise cost a
  // malloc and a free of ~1 KB each.
  void recycle_storage(Node& n);
  // One more reference to the node of v.
  void hold(const Value& v);
  void charge_text(std::uint64_t length);
  [[noreturn, gnu::cold, gnu::noinline]] void fail_stale() const;
  [[noreturn, gnu::cold, gnu::noinline]] void fail_memo_unset(std::uint64_t index) const;
  void push(Value v) {
    if (stack_.size() >= limits_.max_stack) [[unlikely]]
      fail_stack_full();
    stack_.push_back(v);
  }
  Value pop();
  Value& top();
  // Inline: SETITEMS and APPENDS take one for every trace entry.
  std::size_t pop_mark() {
    if (marks_.empty()) [[unlikely]]
      fail_no_mark();
    if (marks_.size() == in_place_batch_) [[unlikely]]
      fail_in_place_batch_unappended("an opcode other than APPENDS");
    const std::size_t m = marks_.back();
    marks_.pop_back();
    return m;
  }
  [[noreturn, gnu::cold, gnu::noinline]] void fail_no_mark() const;
  [[noreturn, gnu::cold, gnu::noinline]] void fail_in_place_batch_unappended(const char* op) const;
  void memo_put(std::uint64_t index);
  Value memo_get(std::uint64_t index) {
    if (index >= memo_.size()) [[unlikely]]
      fail_memo_unset(index);
    const Value v = memo_.get(index);
    if (v.kind == Kind::unset) [[unlikely]]
      fail_memo_unset(index);
    if (v.is_node())
      hold(v);
    return v;
  }
  void add_to_list(Value list, std::size_t first);
  void add_to_dict(Value dict, std::size_t first);
  void add_to_set(Value set, std::size_t first);
  void note_child(Node& parent, const Value& child);
  Value make_string(std::uint64_t length);
  Value make_bytes(std::uint64_t length);
  Value make_long(std::uint64_t length);
  Value make_tuple(std::size_t first);
  // After EMPTY_LIST: a frames list whose items are all GETs of frames converted earlier and whose
  // stack the sink knows, read from the read-ahead buffer straight into the stack's compact value
  // (memoized and pushed as the list would have been, then turned compact). A real trace's 1.2M
  // frames lists are ~40M GETs naming ~100 distinct stacks: each list otherwise became a node of
  // 16-byte items, copied into the sink's indices, hashed and found again. False, with nothing
  // consumed, for anything else, which the general path then reads.
  bool read_known_frames_list();
  // The frames list after an EMPTY_LIST at b[pos - 1], memoized as `slot`: the position after its
  // APPEND(S) with `stack` set, or 0 when read_known_frames_list's conditions do not hold.
  // kFramed: whether FRAME opcodes between its opcodes are skipped (pickle_in_place.cpp).
  template <bool kFramed>
  std::size_t scan_known_frames_list(std::span<const std::uint8_t> b, std::size_t pos,
                                     std::uint64_t slot, std::uint32_t& stack);
  // After EMPTY_DICT, directly inside a batch of APPENDS to a list the sink consumed as a trace
  // list (nothing pushed since the MARK): trace entry dicts read from the read-ahead buffer and
  // handed to the sink as their key/value pairs, one after another while the next item is such a
  // dict, each memoized as its compact value. A trace entry otherwise costs ~15 pushes of 16-byte
  // values, a dict node, a copy of them into it and the sink's scan of it at APPENDS. Only a dict
  // of scalar values (ints, strs, None, known frames lists) that the sink converts without an
  // error is read this way; false, with nothing consumed, when the first is not, which the
  // general path then reads (and any error is said at APPENDS, where it always was).
  bool read_trace_entries();
  // The entry dict after an EMPTY_DICT at b[pos - 1] into entry_scan_: the position after its
  // SETITEMS, or 0 when it is not of that shape.
  template <bool kFramed>
  std::size_t scan_trace_entry(std::span<const std::uint8_t> b, std::size_t pos);
  // A failed scan returns stop_scan(the position it stopped at); stopped_at_frame says whether a
  // FRAME opcode stands there, which a scan with kFramed true would skip.
  std::size_t stop_scan(std::size_t at) {
    scan_stopped_at_ = at;
    return 0;
  }
  bool stopped_at_frame(std::span<const std::uint8_t> b) const;

  ByteSource& source_;
  ReadLimits limits_;
  ListSink* sink_;
  int protocol_ = 0;
  std::uint64_t op_offset_ = 0;
  std::vector<Value> stack_;
  std::vector<std::size_t> marks_;
  Memo memo_;
  std::vector<Node> nodes_;
  // Free nodes by the capacity of their items: a frames list of a real trace (~65 items) takes
  // one that held as many, an entry dict (~18) one that held few, so neither grows its buffer.
  std::vector<std::uint32_t> free_nodes_[2];
  static constexpr std::size_t kLargeItems = 32;
  std::vector<std::vector<Value>> spare_items_;  // at most kSpareItems, empty, kept by capacity
  static constexpr std::size_t kSpareItems = 64;
  static constexpr std::size_t kMaxSpareCapacity = 1024;
  std::vector<std::string> strings_;
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  std::unordered_map<std::string, std::uint32_t, StringHash, std::equal_to<>> string_ids_;
  struct ShortString {
    std::uint64_t key = 0;  // the bytes, zero-padded
    std::uint32_t id = 0;
    std::uint32_t length = ~std::uint32_t{0};  // none yet
  };
  static constexpr unsigned kShortStringBits = 10;
  static constexpr std::size_t kShortStrings = std::size_t{1} << kShortStringBits;
  std::vector<ShortString> short_strings_;  // kShortStrings once a short string is interned
  std::vector<std::vector<TraceEvent>> event_lists_;
  std::string scratch_;
  std::size_t scan_stopped_at_ = 0;            // where the last failed scan stopped
  std::vector<std::uint32_t> frames_scratch_;  // read_known_frames_list's frame indices
  // Frames lists read in place before, by their bytes; emptied when a PUT writes over a slot.
  FramesListCache frames_lists_;
  // A trace entry dict being read in place (scan_trace_entry), in arrays of fixed size: a dict
  // with more pairs is read the general way.
  struct EntryScan {
    static constexpr std::size_t kMaxPairs = 16;
    std::array<Value, 2 * kMaxPairs> pairs;  // keys and values in order, `values` of them
    std::size_t values = 0;
    // A str the entry holds for the first time (SHORT_BINUNICODE): pairs[pair] once interned.
    struct NewString {
      std::size_t pair = 0;
      std::size_t op = 0;  // the opcode's position in the buffer; its bytes follow it
      std::size_t length = 0;
    };
    std::array<NewString, kMaxPairs> strings;
    std::size_t string_count = 0;
    // What each memo slot the entry adds holds, in order: the entry itself (kEntry) or a pair.
    static constexpr std::size_t kEntry = ~std::size_t{0};
    std::array<std::size_t, kMaxPairs + 1> memoized;
    std::size_t memoized_count = 0;
  };
  EntryScan entry_scan_;
  // The depth of the MARK (marks_.size() with it on top) of the batch whose entries were read in
  // place, 0 when none: those entries are events already, so the batch must end in APPENDS, as
  // the general path's would have for them to become events. Any other opcode that takes the
  // MARK (POP_MARK, POP, TUPLE, ...) would have dropped them there: it is an error instead.
  std::size_t in_place_batch_ = 0;
  std::uint64_t text_bytes_ = 0;
  // The reservation from the input's size (see the constructor): pickle bytes per trace entry in
  // the densest snapshots seen (PyTorch's own: ~70-230 bytes per entry).
  static constexpr std::uint64_t kBytesPerTraceEntry = 24;
  static constexpr std::uint64_t kMaxReservedBytes = std::uint64_t{1} << 30;
  std::size_t event_list_reserve_ = 0;
};

}  // namespace fragscope::snapshot::pickle
