#pragma once
// A data-only pickle machine for protocols 2-5. It understands the opcodes Python's pickler emits
// for dict, list, tuple, set, str, bytes, int, float, bool and None, and refuses every opcode that
// would import or call something (GLOBAL, REDUCE, BUILD, ...) with an error naming the opcode and
// its byte offset. Objects live in a flat arena (no recursion when freeing, so no stack overflow
// on hostile nesting); a ListSink sees the items of every APPEND/APPENDS first and may consume
// them into a compact structure, which is how a 1 GB trace never becomes a generic object tree.
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/snapshot/byte_source.h"
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
  bool is_node() const;
};

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
  // Inline for the window; a folded slot is looked up out of line.
  Value get(std::uint64_t slot) const {
    if (slot >= base_)
      return recent_[static_cast<std::size_t>(slot - base_)];
    return get_folded(slot);
  }
  void set(std::uint64_t slot, const Value& value);
  // Bytes held, for tests and measurements.
  std::size_t memory_bytes() const;

  // The newest kWindow..2*kWindow slots stay a plain array: entries are converted within a batch
  // of APPENDS (PyTorch's pickler: 1000 items) of being memoized. Folded a window at a time.
  static constexpr std::size_t kWindow = 1u << 14;
  static constexpr std::size_t kBlock = 64;

 private:
  // kWindow folded slots. blocks[b]: where block b's words start in `words`; with kSequence set,
  // the block is 64 converted entries in a row and keeps only its first word.
  struct Chunk {
    std::array<std::uint16_t, kWindow / kBlock> blocks{};
    std::vector<std::uint32_t> words;
    std::vector<Value> wide;  // the values of the words tagged wide
    static constexpr std::uint16_t kSequence = 0x8000;
  };
  void fold_oldest();
  Value get_folded(std::uint64_t slot) const;
  // Turns a sequence block back into a word per slot, so that one of its slots can change.
  static void unpack(Chunk& chunk, std::size_t block);
  // Keeps only the wide values some word still refers to.
  static void drop_unused_wide(Chunk& chunk);

  std::uint64_t base_ = 0;     // slots below are in chunks_
  std::vector<Value> recent_;  // slots [base_, size())
  std::vector<Chunk> chunks_;  // chunk c holds slots [c * kWindow, (c + 1) * kWindow)
  std::vector<std::uint32_t> scratch_;
};

class Machine;

// Sees every batch of items appended to a list; returns true when it consumed the batch (the items
// are then not stored in the list).
class ListSink {
 public:
  virtual ~ListSink() = default;
  virtual bool on_append(Machine& vm, Value list, std::span<Value> items) = 0;
};

class Machine {
 public:
  Machine(ByteSource& source, const ReadLimits& limits, ListSink* sink);

  // Runs to STOP and returns the top of the stack.
  Value run();

  // Accessors for sinks and for the schema walk.
  Node& node(const Value& v);
  const Node& node(const Value& v) const;
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
  // One more reference to the node of v.
  void hold(const Value& v);
  void charge_text(std::uint64_t length);
  void push(Value v);
  Value pop();
  Value& top();
  std::size_t pop_mark();
  void memo_put(std::uint64_t index);
  Value memo_get(std::uint64_t index);
  void add_to_list(Value list, std::size_t first);
  void add_to_dict(Value dict, std::size_t first);
  void add_to_set(Value set, std::size_t first);
  void note_child(Node& parent, const Value& child);
  Value make_string(std::uint64_t length);
  Value make_bytes(std::uint64_t length);
  Value make_long(std::uint64_t length);
  Value make_tuple(std::size_t first);

  ByteSource& source_;
  ReadLimits limits_;
  ListSink* sink_;
  int protocol_ = 0;
  std::uint64_t op_offset_ = 0;
  std::vector<Value> stack_;
  std::vector<std::size_t> marks_;
  Memo memo_;
  std::vector<Node> nodes_;
  std::vector<std::uint32_t> free_nodes_;
  std::vector<std::string> strings_;
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  std::unordered_map<std::string, std::uint32_t, StringHash, std::equal_to<>> string_ids_;
  std::vector<std::vector<TraceEvent>> event_lists_;
  std::string scratch_;
  std::uint64_t text_bytes_ = 0;
  // The reservation from the input's size (see the constructor): pickle bytes per trace entry in
  // the densest snapshots seen (PyTorch's own: ~70-230 bytes per entry).
  static constexpr std::uint64_t kBytesPerTraceEntry = 24;
  static constexpr std::uint64_t kMaxReservedBytes = std::uint64_t{1} << 30;
  std::size_t event_list_reserve_ = 0;
};

}  // namespace fragscope::snapshot::pickle
