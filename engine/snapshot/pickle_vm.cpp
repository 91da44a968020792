#include "engine/snapshot/pickle_vm.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "engine/core/error.h"
#include "engine/snapshot/pickle_opcodes.h"

namespace fragscope::snapshot::pickle {

using namespace opcodes;

namespace {

// Opcodes that import, call or build arbitrary objects. A snapshot never needs them, and running
// them is how a pickle executes code, so they are refused by name.
const char* refused_name(std::uint8_t op) {
  switch (op) {
    case GLOBAL:
      return "GLOBAL";
    case STACK_GLOBAL:
      return "STACK_GLOBAL";
    case REDUCE:
      return "REDUCE";
    case BUILD:
      return "BUILD";
    case INST:
      return "INST";
    case OBJ:
      return "OBJ";
    case NEWOBJ:
      return "NEWOBJ";
    case NEWOBJ_EX:
      return "NEWOBJ_EX";
    case EXT1:
      return "EXT1";
    case EXT2:
      return "EXT2";
    case EXT4:
      return "EXT4";
    case PERSID:
      return "PERSID";
    case BINPERSID:
      return "BINPERSID";
    case NEXT_BUFFER:
      return "NEXT_BUFFER";
    case READONLY_BUFFER:
      return "READONLY_BUFFER";
    default:
      return nullptr;
  }
}

bool is_container(Kind k) {
  return k == Kind::list || k == Kind::tuple || k == Kind::dict || k == Kind::set ||
         k == Kind::trace_list;
}

std::string hex_byte(std::uint8_t b) {
  static const char* digits = "0123456789abcdef";
  return std::string("0x") + digits[b >> 4] + digits[b & 15];
}

}  // namespace

std::string_view to_string(Kind kind) {
  switch (kind) {
    case Kind::none:
      return "None";
    case Kind::boolean:
      return "bool";
    case Kind::integer:
    case Kind::big_integer:
      return "int";
    case Kind::floating:
      return "float";
    case Kind::string:
      return "str";
    case Kind::bytes:
      return "bytes";
    case Kind::list:
    case Kind::trace_list:
      return "list";
    case Kind::tuple:
      return "tuple";
    case Kind::dict:
      return "dict";
    case Kind::set:
      return "set";
    case Kind::frame:
      return "frame dict";
    case Kind::frame_stack:
      return "frames list";
    case Kind::trace_event:
      return "trace entry dict";
    case Kind::unset:
      return "unset";
  }
  return "?";
}

Machine::Machine(ByteSource& source, const ReadLimits& limits, ListSink* sink)
    : source_(source), limits_(limits), sink_(sink) {
  // Grown by doubling, the trace's event list was copied and faulted in again and again (a third
  // of a large import was page faults). Reserving from the input's size costs only address
  // space: pages are touched when used. The size assumes the densest pickles seen (a denser one
  // just grows as before) and is capped, so a forged gzip size cannot ask for more than
  // kMaxReservedBytes. (The memo needs no reservation: it stays a window, see Memo.)
  const std::uint64_t bytes = std::min<std::uint64_t>(source.size_hint(), limits.max_decompressed);
  event_list_reserve_ = static_cast<std::size_t>(
      std::min(bytes / kBytesPerTraceEntry, kMaxReservedBytes / sizeof(TraceEvent)));
}

void Machine::fail(const std::string& what) const {
  throw InputError(source_.name() + ": pickle byte offset " + std::to_string(op_offset_) + ": " +
                   what);
}

void Machine::fail_stale() const {
  fail("internal error: a stale reference to a converted object");
}

std::uint32_t Machine::intern(std::string_view s) {
  // A string of up to 8 bytes (the 'N/A' compile_context of every entry of a real trace) is
  // looked up in a small direct-mapped cache first, without hashing it as a std::string.
  ShortString* cached = nullptr;
  std::uint64_t key = 0;
  if (s.size() <= 8) {
    std::memcpy(&key, s.data(), s.size());
    if (short_strings_.empty())
      short_strings_.resize(kShortStrings);
    cached = &short_strings_[((key ^ s.size()) * 0x9e3779b97f4a7c15ull) >> (64 - kShortStringBits)];
    if (cached->length == s.size() && cached->key == key)
      return cached->id;
  }
  std::uint32_t id;
  if (auto it = string_ids_.find(s); it != string_ids_.end()) {
    id = it->second;
  } else {
    charge_text(s.size());
    id = static_cast<std::uint32_t>(strings_.size());
    strings_.emplace_back(s);
    string_ids_.emplace(strings_.back(), id);
  }
  if (cached != nullptr)
    *cached = ShortString{key, id, static_cast<std::uint32_t>(s.size())};
  return id;
}

void Machine::charge_text(std::uint64_t length) {
  text_bytes_ += length;
  if (text_bytes_ > limits_.max_text_bytes)
    fail("distinct str/bytes objects exceed the limit of " +
         std::to_string(limits_.max_text_bytes) + " bytes in all");
}

Value Machine::new_node(Kind kind) {
  std::uint32_t index;
  const std::size_t prefer = kind == Kind::list ? 1 : 0;
  if (auto& free = free_nodes_[prefer].empty() ? free_nodes_[1 - prefer] : free_nodes_[prefer];
      !free.empty()) {
    index = free.back();
    free.pop_back();
  } else {
    index = static_cast<std::uint32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  Node& n = nodes_[index];
  n.kind = kind;
  n.holders = 1;
  n.memo_slot = Node::kNoSlot;
  n.aux = 0;
  n.aux_index = 0;
  n.depth = 1;
  n.items.clear();
  n.data.clear();
  if (n.items.capacity() == 0 && !spare_items_.empty()) {
    n.items.swap(spare_items_.back());
    spare_items_.pop_back();
  }
  Value v;
  v.kind = kind;
  v.ref = index;
  v.generation = n.generation;
  return v;
}

void Machine::hold(const Value& v) {
  Node& n = node(v);
  if (n.holders != Node::kForever)
    ++n.holders;
}

void Machine::free_node(std::uint32_t index) {
  Node& n = nodes_[index];
  ++n.generation;
  n.items.clear();
  n.data.clear();
  free_nodes_[n.items.capacity() >= kLargeItems ? 1 : 0].push_back(index);
}

void Machine::retire(const Value& v, Value replacement) {
  Node& n = node(v);
  if (n.memo_slot != Node::kNoSlot && n.memo_slot < memo_.size())
    memo_.set(n.memo_slot, replacement);
  if (n.holders > 1) {
    // Someone else still holds this node: keep it, but as the compact replacement.
    if (n.holders != Node::kForever)
      --n.holders;
    n.kind = replacement.kind;
    n.aux = replacement.ref;
    n.aux_index = static_cast<std::uint64_t>(replacement.i);
    recycle_storage(n);
    return;
  }
  free_node(v.ref);
}

void Machine::recycle_storage(Node& n) {
  if (spare_items_.size() < kSpareItems && n.items.capacity() > 0 &&
      n.items.capacity() <= kMaxSpareCapacity) {
    n.items.clear();
    spare_items_.push_back(std::move(n.items));
    n.items = {};
  }
  release_storage(n);
}

void Machine::release(const Value& v) {
  Node& n = node(v);
  if (n.holders == Node::kForever)
    return;
  if (n.holders > 1) {
    --n.holders;
    return;
  }
  free_node(v.ref);
}

std::uint32_t Machine::new_event_list(bool reserve) {
  event_lists_.emplace_back();
  // The first trace list is usually the only long one (one device): size it for the input.
  if (reserve && event_lists_.size() == 1)
    event_lists_.back().reserve(event_list_reserve_);
  return static_cast<std::uint32_t>(event_lists_.size() - 1);
}

void Machine::fail_stack_full() const {
  fail("pickle stack exceeds the limit of " + std::to_string(limits_.max_stack) + " entries");
}

void Machine::fail_truncated(std::size_t n, const char* what) const {
  fail(std::string("input ends inside the argument of ") + what + " (truncated file? expected " +
       std::to_string(n) + " more bytes)");
}

Value Machine::pop() {
  if (stack_.empty() || (!marks_.empty() && marks_.back() == stack_.size()))
    fail("stack underflow (expected a value on the stack)");
  Value v = stack_.back();
  stack_.pop_back();
  return v;
}

Value& Machine::top() {
  if (stack_.empty() || (!marks_.empty() && marks_.back() == stack_.size()))
    fail("stack underflow (expected a value on the stack)");
  return stack_.back();
}

void Machine::fail_no_mark() const {
  fail("MARK expected before this opcode");
}

void Machine::fail_in_place_batch_unappended(const char* op) const {
  fail(std::string(op) +
       " ends a batch of trace entries that were converted as they were read: a trace list's "
       "batch must end in APPENDS");
}

void Machine::memo_put(std::uint64_t index) {
  Value v = top();
  if (index == memo_.size() && index <= op_offset_ + limits_.max_memo_gap) {
    // MEMOIZE, or a PUT of the next slot: a new slot, nothing to take it from.
    memo_.push_back(v);
    if (v.is_node()) {
      Node& n = node(v);
      if (n.memo_slot != Node::kNoSlot || n.kind != v.kind)
        hold(v);
      n.memo_slot = static_cast<std::uint32_t>(index);
    }
    return;
  }
  if (index > memo_.size()) {
    // Every memoized object takes at least one byte of input, so a memo larger than the bytes
    // read so far (plus a small gap) only serves to exhaust memory.
    if (index - memo_.size() > limits_.max_memo_gap || index > op_offset_ + limits_.max_memo_gap)
      fail("memo index " + std::to_string(index) + " is far beyond the memo size " +
           std::to_string(memo_.size()) + " (limit: the bytes read so far + " +
           std::to_string(limits_.max_memo_gap) + ")");
    memo_.grow(index + 1);
  } else {
    // A PUT reusing an index: GETs of it may name another frame from now on.
    frames_lists_.clear();
    if (const Value old = memo_.get(index); old.is_node()) {
      // The node stored there no longer has it as its slot.
      Node& n = nodes_[old.ref];
      if (n.generation == old.generation && n.memo_slot == index)
        n.memo_slot = Node::kNoSlot;
    }
  }
  memo_.set(index, v);
  if (v.is_node()) {
    Node& n = node(v);
    // Stored under a second index, or stored after its conversion (retire no longer clears
    // that slot): the memo is one more holder.
    if ((n.memo_slot != Node::kNoSlot && n.memo_slot != index) || n.kind != v.kind)
      hold(v);
    n.memo_slot = static_cast<std::uint32_t>(index);
  }
}

void Machine::fail_memo_unset(std::uint64_t index) const {
  fail("memo index " + std::to_string(index) + " was never stored");
}

void Machine::note_child(Node& parent, const Value& child) {
  if (!is_container(child.kind))
    return;
  std::uint64_t d = nodes_[child.ref].depth + 1;
  if (d > parent.depth) {
    parent.depth = d;
    if (d > limits_.max_nesting)
      fail("containers nested deeper than " + std::to_string(limits_.max_nesting) + " levels");
  }
}

void Machine::add_to_list(Value list, std::size_t first) {
  if (list.kind != Kind::list && list.kind != Kind::trace_list)
    fail("APPEND(S) expects a list below its items, found " + std::string(to_string(list.kind)));
  std::span<Value> items(stack_.data() + first, stack_.size() - first);
  if (sink_ == nullptr || !sink_->on_append(*this, list, items)) {
    Node& n = node(list);
    if (n.kind == Kind::trace_list)
      fail("a trace list holds something other than trace entry dicts");
    for (const Value& item : items)
      note_child(n, item);
    n.items.insert(n.items.end(), items.begin(), items.end());
  }
  stack_.resize(first);
}

void Machine::add_to_dict(Value dict, std::size_t first) {
  if (dict.kind != Kind::dict)
    fail("SETITEM(S) expects a dict below its items, found " + std::string(to_string(dict.kind)));
  if ((stack_.size() - first) % 2 != 0)
    fail("SETITEMS with an odd number of stack items (expected key/value pairs)");
  Node& n = node(dict);
  for (std::size_t i = first; i < stack_.size(); i += 2) {
    Kind key = stack_[i].kind;
    if (key == Kind::list || key == Kind::dict || key == Kind::set || key == Kind::trace_list)
      fail("unhashable dict key of type " + std::string(to_string(key)));
    note_child(n, stack_[i + 1]);
  }
  // Python keeps the last value of a repeated key; lookups here scan from the back to match.
  n.items.insert(n.items.end(), stack_.begin() + static_cast<std::ptrdiff_t>(first), stack_.end());
  stack_.resize(first);
}

void Machine::add_to_set(Value set, std::size_t first) {
  if (set.kind != Kind::set)
    fail("ADDITEMS expects a set below its items, found " + std::string(to_string(set.kind)));
  Node& n = node(set);
  for (std::size_t i = first; i < stack_.size(); ++i)
    note_child(n, stack_[i]);
  n.items.insert(n.items.end(), stack_.begin() + static_cast<std::ptrdiff_t>(first), stack_.end());
  stack_.resize(first);
}

Value Machine::make_tuple(std::size_t first) {
  Value t = new_node(Kind::tuple);
  Node& n = nodes_[t.ref];
  for (std::size_t i = first; i < stack_.size(); ++i)
    note_child(n, stack_[i]);
  n.items.assign(stack_.begin() + static_cast<std::ptrdiff_t>(first), stack_.end());
  stack_.resize(first);
  return t;
}

Value Machine::make_string(std::uint64_t length) {
  if (length > limits_.max_string)
    fail("string of " + std::to_string(length) + " bytes exceeds the limit of " +
         std::to_string(limits_.max_string));
  Value v;
  v.kind = Kind::string;
  if (length <= 64) {
    const std::uint8_t* p = source_.take(static_cast<std::size_t>(length));
    if (p == nullptr)
      fail("input ends inside a string of " + std::to_string(length) + " bytes");
    v.ref = intern(std::string_view(reinterpret_cast<const char*>(p), length));
    return v;
  }
  scratch_.clear();
  if (!source_.read_into(scratch_, length))
    fail("input ends inside a string of " + std::to_string(length) + " bytes");
  v.ref = intern(scratch_);
  return v;
}

Value Machine::make_bytes(std::uint64_t length) {
  if (length > limits_.max_string)
    fail("bytes object of " + std::to_string(length) + " bytes exceeds the limit of " +
         std::to_string(limits_.max_string));
  charge_text(length);
  Value v = new_node(Kind::bytes);
  if (!source_.read_into(nodes_[v.ref].data, length))
    fail("input ends inside a bytes object of " + std::to_string(length) + " bytes");
  return v;
}

Value Machine::make_long(std::uint64_t length) {
  if (length > 1u << 20)
    fail("integer of " + std::to_string(length) + " bytes is too large");
  if (length <= 8) {  // the common case: addresses and times
    const std::uint8_t* p = source_.take(static_cast<std::size_t>(length));
    if (p == nullptr)
      fail("input ends inside an integer of " + std::to_string(length) + " bytes");
    std::uint64_t u = 0;
    for (std::size_t i = 0; i < length; ++i)
      u |= static_cast<std::uint64_t>(p[i]) << (8 * i);
    if (length > 0 && length < 8 && (p[length - 1] & 0x80) != 0)
      u |= ~std::uint64_t{0} << (8 * length);  // sign-extend
    Value v;
    v.kind = Kind::integer;
    v.i = static_cast<std::int64_t>(u);
    return v;
  }
  scratch_.clear();
  if (!source_.read_into(scratch_, length))
    fail("input ends inside an integer of " + std::to_string(length) + " bytes");
  Value v;
  v.kind = Kind::integer;
  // Little-endian two's complement. Up to 8 bytes is an int64; longer is kept only if its extra
  // bytes are pure sign extension.
  std::size_t n = scratch_.size();
  while (n > 8) {
    auto b = static_cast<std::uint8_t>(scratch_[n - 1]);
    auto below = static_cast<std::uint8_t>(scratch_[n - 2]);
    bool sign_ext = (b == 0x00 && (below & 0x80) == 0) || (b == 0xff && (below & 0x80) != 0);
    if (!sign_ext)
      break;
    --n;
  }
  if (n > 8) {
    Value big = new_node(Kind::big_integer);
    nodes_[big.ref].data = scratch_;
    return big;
  }
  std::uint64_t u = 0;
  for (std::size_t i = 0; i < n; ++i)
    u |= static_cast<std::uint64_t>(static_cast<std::uint8_t>(scratch_[i])) << (8 * i);
  if (n > 0 && n < 8 && (static_cast<std::uint8_t>(scratch_[n - 1]) & 0x80) != 0)
    u |= ~std::uint64_t{0} << (8 * n);  // sign-extend
  v.i = static_cast<std::int64_t>(u);
  return v;
}

Value Machine::run() {
  auto need = [this](std::size_t n, const char* what) {
    const std::uint8_t* p = source_.take(n);
    if (p == nullptr) [[unlikely]]
      fail_truncated(n, what);
    return p;
  };
  auto push_int = [this](std::int64_t i) { push(scalar(Kind::integer, i)); };

  op_offset_ = source_.offset();
  const std::uint8_t* first = source_.take(1);
  if (first == nullptr)
    fail("empty input (expected a pickle)");
  if (*first != PROTO)
    fail("not a pickle of protocol 2 or later (expected the PROTO opcode 0x80 at byte 0, found " +
         hex_byte(*first) + ")");
  protocol_ = *need(1, "PROTO");
  if (protocol_ < 2 || protocol_ > 5)
    fail("unsupported pickle protocol " + std::to_string(protocol_) + " (expected 2 to 5)");

  for (;;) {
    op_offset_ = source_.offset();
    const std::uint8_t* opp = source_.take(1);
    if (opp == nullptr)
      fail("input ends before the STOP opcode (truncated file?)");
    std::uint8_t op = *opp;
    switch (op) {
      case PROTO:
        need(1, "PROTO");
        break;
      case FRAME:
        need(8, "FRAME");  // frame length is only a read-ahead hint
        break;
      case STOP: {
        if (!marks_.empty())
          fail("STOP with an open MARK");
        if (stack_.size() != 1)
          fail("STOP expects exactly one object on the stack, found " +
               std::to_string(stack_.size()));
        return stack_.back();
      }
      case MARK:
        if (marks_.size() >= limits_.max_stack)
          fail("too many open MARKs");
        marks_.push_back(stack_.size());
        break;
      case POP:
        if (!marks_.empty() && marks_.back() == stack_.size()) {
          if (marks_.size() == in_place_batch_) [[unlikely]]
            fail_in_place_batch_unappended("POP");
          marks_.pop_back();  // CPython: POP on an empty mark pops the mark
        } else
          pop();
        break;
      case POP_MARK:
        stack_.resize(pop_mark());
        break;
      case DUP: {
        Value v = top();
        if (v.is_node())
          hold(v);
        push(v);
        break;
      }
      case NONE:
        push(scalar(Kind::none));
        break;
      case NEWTRUE:
      case NEWFALSE:
        push(scalar(Kind::boolean, op == NEWTRUE ? 1 : 0));
        break;
      case BININT:
        push_int(load_le<std::int32_t>(need(4, "BININT")));
        break;
      case BININT1:
        push_int(*need(1, "BININT1"));
        break;
      case BININT2:
        push_int(load_le<std::uint16_t>(need(2, "BININT2")));
        break;
      case LONG1:
        push(make_long(*need(1, "LONG1")));
        break;
      case LONG4: {
        std::int32_t n = load_le<std::int32_t>(need(4, "LONG4"));
        if (n < 0)
          fail("LONG4 with a negative length");
        push(make_long(static_cast<std::uint64_t>(n)));
        break;
      }
      case BINFLOAT: {
        std::uint64_t bits = load_le<std::uint64_t>(need(8, "BINFLOAT"));
        bits = __builtin_bswap64(bits);  // big-endian on the wire
        Value v;
        v.kind = Kind::floating;
        v.d = std::bit_cast<double>(bits);
        push(v);
        break;
      }
      case SHORT_BINUNICODE:
        push(make_string(*need(1, "SHORT_BINUNICODE")));
        break;
      case BINUNICODE:
        push(make_string(load_le<std::uint32_t>(need(4, "BINUNICODE"))));
        break;
      case BINUNICODE8:
        push(make_string(load_le<std::uint64_t>(need(8, "BINUNICODE8"))));
        break;
      case SHORT_BINSTRING:  // Python 2 str: text as far as a snapshot is concerned
        push(make_string(*need(1, "SHORT_BINSTRING")));
        break;
      case BINSTRING: {
        std::int32_t n = load_le<std::int32_t>(need(4, "BINSTRING"));
        if (n < 0)
          fail("BINSTRING with a negative length");
        push(make_string(static_cast<std::uint64_t>(n)));
        break;
      }
      case SHORT_BINBYTES:
        push(make_bytes(*need(1, "SHORT_BINBYTES")));
        break;
      case BINBYTES:
        push(make_bytes(load_le<std::uint32_t>(need(4, "BINBYTES"))));
        break;
      case BINBYTES8:
      case BYTEARRAY8:
        push(make_bytes(load_le<std::uint64_t>(need(8, "BINBYTES8"))));
        break;
      case EMPTY_LIST:
        if (sink_ != nullptr && read_known_frames_list())
          break;
        push(new_node(Kind::list));
        break;
      case EMPTY_DICT:
        if (sink_ != nullptr && read_trace_entries())
          break;
        push(new_node(Kind::dict));
        break;
      case EMPTY_SET:
        push(new_node(Kind::set));
        break;
      case EMPTY_TUPLE:
        push(new_node(Kind::tuple));
        break;
      case APPEND: {
        if (stack_.size() < 2 || (!marks_.empty() && marks_.back() > stack_.size() - 2))
          fail("APPEND needs a list and an item on the stack");
        add_to_list(stack_[stack_.size() - 2], stack_.size() - 1);
        break;
      }
      case APPENDS: {
        if (marks_.size() == in_place_batch_)
          in_place_batch_ = 0;  // the batch whose entries were read in place ends as they did
        std::size_t m = pop_mark();
        if (m == 0 || (!marks_.empty() && marks_.back() > m - 1))
          fail("APPENDS needs a list below its MARK");
        add_to_list(stack_[m - 1], m);
        break;
      }
      case LIST: {
        std::size_t m = pop_mark();
        Value list = new_node(Kind::list);
        Node& n = nodes_[list.ref];
        for (std::size_t i = m; i < stack_.size(); ++i)
          note_child(n, stack_[i]);
        n.items.assign(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
        stack_.resize(m);
        push(list);
        break;
      }
      case SETITEM: {
        if (stack_.size() < 3 || (!marks_.empty() && marks_.back() > stack_.size() - 3))
          fail("SETITEM needs a dict, a key and a value on the stack");
        add_to_dict(stack_[stack_.size() - 3], stack_.size() - 2);
        break;
      }
      case SETITEMS: {
        std::size_t m = pop_mark();
        if (m == 0 || (!marks_.empty() && marks_.back() > m - 1))
          fail("SETITEMS needs a dict below its MARK");
        add_to_dict(stack_[m - 1], m);
        break;
      }
      case DICT: {
        std::size_t m = pop_mark();
        Value dict = new_node(Kind::dict);
        stack_.insert(stack_.begin() + static_cast<std::ptrdiff_t>(m), dict);
        add_to_dict(dict, m + 1);
        stack_.resize(m);
        push(dict);
        break;
      }
      case ADDITEMS: {
        std::size_t m = pop_mark();
        if (m == 0 || (!marks_.empty() && marks_.back() > m - 1))
          fail("ADDITEMS needs a set below its MARK");
        add_to_set(stack_[m - 1], m);
        break;
      }
      case FROZENSET: {
        std::size_t m = pop_mark();
        Value set = new_node(Kind::set);
        stack_.insert(stack_.begin() + static_cast<std::ptrdiff_t>(m), set);
        add_to_set(set, m + 1);
        stack_.resize(m);
        push(set);
        break;
      }
      case TUPLE:
        push(make_tuple(pop_mark()));
        break;
      case TUPLE1:
      case TUPLE2:
      case TUPLE3: {
        std::size_t count = static_cast<std::size_t>(op - TUPLE1) + 1;
        if (stack_.size() < count || (!marks_.empty() && marks_.back() > stack_.size() - count))
          fail("TUPLE" + std::to_string(count) + " needs " + std::to_string(count) +
               " items on the stack");
        push(make_tuple(stack_.size() - count));
        break;
      }
      case BINPUT:
        memo_put(*need(1, "BINPUT"));
        break;
      case LONG_BINPUT:
        memo_put(load_le<std::uint32_t>(need(4, "LONG_BINPUT")));
        break;
      case MEMOIZE:
        memo_put(memo_.size());
        break;
      case BINGET:
      case LONG_BINGET:
        // A frames list of a real trace is a run of dozens of GETs: they loop here, without a
        // return to the dispatch for each.
        for (;;) {
          push(memo_get(op == BINGET ? *need(1, "BINGET")
                                     : load_le<std::uint32_t>(need(4, "LONG_BINGET"))));
          const int next = source_.peek_buffered();
          if (next != BINGET && next != LONG_BINGET)
            break;
          op_offset_ = source_.offset();
          op = *source_.take(1);
        }
        break;
      case PUT:
      case GET: {
        // Text forms (protocol 0 style) still appear in hand-written pickles: "p12\n".
        std::string digits;
        for (;;) {
          const std::uint8_t* c = need(1, op == PUT ? "PUT" : "GET");
          if (*c == '\n')
            break;
          if (*c < '0' || *c > '9' || digits.size() > 18)
            fail(std::string(op == PUT ? "PUT" : "GET") + " expects a decimal memo index");
          digits.push_back(static_cast<char>(*c));
        }
        if (digits.empty())
          fail(std::string(op == PUT ? "PUT" : "GET") + " expects a decimal memo index");
        std::uint64_t index = std::stoull(digits);
        if (op == PUT)
          memo_put(index);
        else
          push(memo_get(index));
        break;
      }
      default: {
        if (const char* name = refused_name(op))
          fail(std::string("refusing opcode ") + name + " (" + hex_byte(op) +
               "): it imports or calls Python objects, which a memory snapshot never needs");
        fail("unsupported pickle opcode " + hex_byte(op));
      }
    }
  }
}

}  // namespace fragscope::snapshot::pickle
