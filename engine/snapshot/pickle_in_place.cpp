// The shapes a snapshot's trace repeats a million times, read straight from the machine's
// read-ahead buffer instead of opcode by opcode into nodes: a frames list of frames converted
// earlier (read_known_frames_list) and a trace entry dict appended to a trace list
// (read_trace_entries). Each reads a shape only when it can tell in advance that the general
// path would reach the same state without an error; for anything else it consumes nothing and
// the general path reads it.
#include <string>

#include "engine/snapshot/pickle_opcodes.h"
#include "engine/snapshot/pickle_vm.h"

namespace fragscope::snapshot::pickle {

using namespace opcodes;

namespace {

// Python's pickler writes a list's items and a dict's pairs in batches of 1000: a batch of fewer
// is the last one.
constexpr std::size_t kPicklerBatch = 1000;
// How far ahead an entry is looked for in the buffer: room for its pairs and a frames list of a
// full batch of LONG_BINGETs. An entry longer than that (FRAME opcodes between its GETs, several
// frames lists) is read the general way.
constexpr std::size_t kEntryReadAhead = 16 * 1024;
// Room for the longest fixed-size opcode the readers decode (LONG1 of 8 bytes: 10 bytes).
constexpr std::size_t kOpcodeRoom = 10;

// Protocol 4 cuts its output into frames: a FRAME opcode and its 8-byte length may stand between
// any two opcodes, and mean nothing to what is built. Called wherever the readers read an opcode.
// A shape is first scanned with kFramed false, as if no FRAME stood in it: each place an opcode
// is read accepts only the opcodes it names, so a FRAME there stops the scan at that byte
// (stop_scan), and the caller scans that shape again with kFramed true (FRAMEs come one in
// 64 KiB: most shapes hold none, and the check would otherwise run before every opcode). One whose
// length runs past the buffer stays, and the opcode check after it sends the shape the general way.
template <bool kFramed>
std::size_t skip_frames(std::span<const std::uint8_t> b, std::size_t pos) {
  if (!kFramed || pos >= b.size() || b[pos] != FRAME) [[likely]]
    return pos;
  while (pos + 9 <= b.size() && b[pos] == FRAME)
    pos += 9;
  return pos;
}

// A BINGET or LONG_BINGET at b[pos], its argument in `b` (the caller checked): its memo index,
// with pos moved past it; false, pos unchanged, for any other opcode.
bool read_get(std::span<const std::uint8_t> b, std::size_t& pos, std::uint64_t& index) {
  if (b[pos] == BINGET) {
    index = b[pos + 1];
    pos += 2;
    return true;
  }
  if (b[pos] == LONG_BINGET) {
    index = load_le<std::uint32_t>(&b[pos + 1]);
    pos += 5;
    return true;
  }
  return false;
}

// What the opcode at b[pos] does with the memo slot `next`, the one the object just built would
// take (room for a LONG_BINPUT checked by the caller): MEMOIZE, or a PUT of that slot, stores it
// there, pos moved past; a PUT of another slot is something the readers leave to the general
// path; any other opcode stores nothing.
enum class Memoized { stored, not_stored, elsewhere };
Memoized read_memoize(std::span<const std::uint8_t> b, std::size_t& pos, std::uint64_t next) {
  switch (b[pos]) {
    case MEMOIZE:
      pos += 1;
      return Memoized::stored;
    case BINPUT:
      if (b[pos + 1] != next)
        return Memoized::elsewhere;
      pos += 2;
      return Memoized::stored;
    case LONG_BINPUT:
      if (load_le<std::uint32_t>(&b[pos + 1]) != next)
        return Memoized::elsewhere;
      pos += 5;
      return Memoized::stored;
    case PUT:
      return Memoized::elsewhere;
    default:
      return Memoized::not_stored;
  }
}

}  // namespace

bool Machine::stopped_at_frame(std::span<const std::uint8_t> b) const {
  return scan_stopped_at_ < b.size() && b[scan_stopped_at_] == FRAME;
}

std::optional<Value> ListSink::convert_entry(Machine&, Value, std::span<const Value>) {
  return std::nullopt;
}

template <bool kFramed>
std::size_t Machine::scan_known_frames_list(std::span<const std::uint8_t> b, std::size_t pos,
                                            std::uint64_t slot, std::uint32_t& stack) {
  // The list is memoized (MEMOIZE, or a PUT of the next slot), then filled by GETs: one followed
  // by APPEND, or several between MARK and APPENDS. A list longer than one batch takes the
  // general path, which sees any batch after the first.
  const std::size_t size = b.size();
  pos = skip_frames<kFramed>(b, pos);
  if (pos + 8 > size)  // room for a LONG_BINPUT and the opcode after it
    return stop_scan(pos);
  if (read_memoize(b, pos, slot) != Memoized::stored)
    return stop_scan(pos);
  if (slot > source_.offset() + limits_.max_memo_gap)
    return stop_scan(pos);  // memo_put's check, said by the general path
  pos = skip_frames<kFramed>(b, pos);
  if (pos >= size)
    return stop_scan(pos);
  const bool marked = b[pos] == MARK;
  // An empty list (a trace entry's 'frames' of a recording without stacks), or anything else.
  if (!marked && b[pos] != BINGET && b[pos] != LONG_BINGET)
    return stop_scan(pos);
  pos += marked ? 1 : 0;
  const std::size_t body = pos;
  if (marked) {
    // A list seen before names its stack without a memo read (its bytes, then APPENDS).
    if (const std::optional<FramesListCache::Known> seen = frames_lists_.find(b.subspan(pos))) {
      stack = seen->stack;
      return pos + seen->length + 1;
    }
  }
  if (frames_scratch_.empty())
    frames_scratch_.resize(kPicklerBatch);
  std::uint32_t* const frames = frames_scratch_.data();
  std::size_t count = 0;
  const std::uint64_t stored = memo_.size();
  bool framed = false;  // FRAME opcodes among the GETs: bytes one in 64 KiB of lists repeats
  for (;;) {
    const std::size_t before = pos;
    pos = skip_frames<kFramed>(b, pos);
    framed |= pos != before;
    if (pos + 5 > size)
      break;
    std::uint64_t index;
    if (!read_get(b, pos, index))
      break;
    // Slots at or past the list's own are unset or the list itself, and so are the slots of the
    // entry the list is read in (stored is then below slot).
    if (index >= stored || index >= slot || count == kPicklerBatch)
      return stop_scan(pos);
    const std::uint32_t frame = memo_.frame_at(index);
    if (frame == Memo::kNotAFrame)
      return stop_scan(pos);
    frames[count++] = frame;
  }
  if (pos >= size || b[pos] != (marked ? APPENDS : APPEND) || count == 0 ||
      (!marked && count != 1) || count == kPicklerBatch)
    return stop_scan(pos);
  const std::optional<std::uint32_t> known =
      sink_->known_frame_stack(std::span<const std::uint32_t>(frames, count));
  if (!known)
    return stop_scan(pos);
  stack = *known;
  if (marked && !framed)
    frames_lists_.insert(b.subspan(body), pos - body, stack);
  return pos + 1;
}

bool Machine::read_known_frames_list() {
  const std::span<const std::uint8_t> b = source_.buffered();
  std::uint32_t stack = 0;
  std::size_t end = scan_known_frames_list<false>(b, 0, memo_.size(), stack);
  if (end == 0 && stopped_at_frame(b))
    end = scan_known_frames_list<true>(b, 0, memo_.size(), stack);
  if (end == 0)
    return false;
  op_offset_ = source_.offset() + end - 1;  // the APPEND(S), the last opcode read here
  source_.skip(end);
  Value v;
  v.kind = Kind::frame_stack;
  v.ref = stack;
  memo_.push_back(v);
  push(v);
  return true;
}

template <bool kFramed>
std::size_t Machine::scan_trace_entry(std::span<const std::uint8_t> b, std::size_t pos) {
  // The counts live in locals until the end: a Value holds a 64-bit word, so each store into
  // `pairs` would otherwise make the compiler reload a count kept in the scan.
  EntryScan& scan = entry_scan_;
  Value* const pairs = scan.pairs.data();
  std::size_t values = 0;
  std::size_t string_count = 0;
  std::size_t memoized_count = 0;
  const std::size_t size = b.size();
  const std::uint64_t first_slot = memo_.size();
  // An optional MEMOIZE, or a PUT of the next slot, after an object; false for a PUT elsewhere.
  auto memoize = [&](std::size_t& p, std::size_t what) {
    p = skip_frames<kFramed>(b, p);
    if (p + 5 > size)
      return false;
    const Memoized memoized = read_memoize(b, p, first_slot + memoized_count);
    if (memoized == Memoized::stored)
      scan.memoized[memoized_count++] = what;
    return memoized != Memoized::elsewhere;
  };
  // A GET of a slot stored before the entry; Kind::unset for anything else.
  auto get = [&](std::size_t& p) {
    std::uint64_t index;
    return read_get(b, p, index) && index < first_slot ? memo_.get_cached(index)
                                                       : scalar(Kind::unset);
  };

  if (!memoize(pos, EntryScan::kEntry))
    return stop_scan(pos);
  pos = skip_frames<kFramed>(b, pos);
  if (pos >= size || b[pos] != MARK)
    return stop_scan(pos);
  ++pos;
  for (;;) {
    pos = skip_frames<kFramed>(b, pos);
    if (pos >= size)
      return stop_scan(pos);
    if (b[pos] == SETITEMS)
      break;
    if (values == scan.pairs.size() || pos + 5 > size)  // room for the key's GET
      return stop_scan(pos);
    const Value key = get(pos);
    if (key.kind != Kind::string)
      return stop_scan(pos);
    pos = skip_frames<kFramed>(b, pos);
    if (pos + kOpcodeRoom > size)  // the value's opcode and arguments, at most
      return stop_scan(pos);
    const std::size_t value_at = values + 1;
    Value value;
    switch (b[pos]) {
      case BININT1:
        value = scalar(Kind::integer, b[pos + 1]);
        pos += 2;
        break;
      case BININT2:
        value = scalar(Kind::integer, load_le<std::uint16_t>(&b[pos + 1]));
        pos += 3;
        break;
      case BININT:
        value = scalar(Kind::integer, load_le<std::int32_t>(&b[pos + 1]));
        pos += 5;
        break;
      case LONG1: {
        // Little-endian two's complement, as make_long reads up to 8 bytes. kOpcodeRoom leaves
        // 8 bytes after the length to load at once; shifted up and back down arithmetically,
        // the `length` bytes wanted are sign-extended.
        const std::size_t length = b[pos + 1];
        if (length > 8)
          return stop_scan(pos);
        const unsigned unused_bits = 64 - 8 * static_cast<unsigned>(length);
        const std::uint64_t u = load_le<std::uint64_t>(&b[pos + 2]);
        value =
            scalar(Kind::integer,
                   length == 0 ? 0 : static_cast<std::int64_t>(u << unused_bits) >> unused_bits);
        pos += 2 + length;
        break;
      }
      case NONE:
        value = scalar(Kind::none);
        pos += 1;
        break;
      case SHORT_BINUNICODE: {
        const std::size_t length = b[pos + 1];
        if (pos + 2 + length > size || length > limits_.max_string)
          return stop_scan(pos);
        value.kind = Kind::string;
        scan.strings[string_count++] = {value_at, pos, length};
        pos += 2 + length;
        if (!memoize(pos, value_at))
          return stop_scan(pos);
        break;
      }
      case EMPTY_LIST: {
        std::uint32_t stack = 0;
        const std::size_t end =
            scan_known_frames_list<kFramed>(b, pos + 1, first_slot + memoized_count, stack);
        if (end == 0)
          return 0;
        value.kind = Kind::frame_stack;
        value.ref = stack;
        scan.memoized[memoized_count++] = value_at;
        pos = end;
        break;
      }
      default:
        value = get(pos);
        if (value.kind != Kind::string && value.kind != Kind::integer &&
            value.kind != Kind::frame_stack && value.kind != Kind::none)
          return stop_scan(pos);
        break;
    }
    pairs[values] = key;
    pairs[value_at] = value;
    values += 2;
  }
  scan.values = values;
  scan.string_count = string_count;
  scan.memoized_count = memoized_count;
  // memo_put's check on the last slot the entry adds, said by the general path.
  if (first_slot + memoized_count > source_.offset() + limits_.max_memo_gap)
    return stop_scan(pos);
  // The dict must be the batch's next item, to be appended with it: the next opcode starts
  // another item (an entry dict) or ends the batch. Anything else (DUP, POP, a SETITEM into the
  // dict, ...) does something to the dict first, which the general path does.
  const std::size_t next = skip_frames<kFramed>(b, pos + 1);
  if (next >= size || (b[next] != EMPTY_DICT && b[next] != APPENDS))
    return stop_scan(next);
  return pos + 1;
}

bool Machine::read_trace_entries() {
  if (marks_.empty() || marks_.back() != stack_.size() || stack_.empty())
    return false;
  const Value list = stack_.back();
  if (list.kind != Kind::list)
    return false;
  const Node& list_node = nodes_[list.ref];
  if (list_node.generation != list.generation || list_node.kind != Kind::trace_list)
    return false;
  static_assert(kPicklerBatch * 5 + 1024 < kEntryReadAhead);
  const std::uint64_t dict_offset = op_offset_;  // the EMPTY_DICT's, for the general path
  bool read_any = false;
  std::size_t start = 0;  // the entry's first byte after its EMPTY_DICT
  for (;;) {
    const std::span<const std::uint8_t> b = source_.buffered(kEntryReadAhead);
    std::size_t end = scan_trace_entry<false>(b, start);
    if (end == 0 && stopped_at_frame(b))
      end = scan_trace_entry<true>(b, start);
    if (end == 0)
      break;
    EntryScan& scan = entry_scan_;
    for (const EntryScan::NewString& s : std::span(scan.strings).first(scan.string_count)) {
      op_offset_ = source_.offset() + s.op;  // where make_string would report a limit
      scan.pairs[s.pair].ref =
          intern(std::string_view(reinterpret_cast<const char*>(b.data() + s.op + 2), s.length));
    }
    op_offset_ = source_.offset() + end - 1;  // the SETITEMS
    const std::optional<Value> replacement =
        sink_->convert_entry(*this, list, std::span(scan.pairs).first(scan.values));
    if (!replacement)
      break;
    for (const std::size_t what : std::span(scan.memoized).first(scan.memoized_count))
      memo_.push_back(what == EntryScan::kEntry ? *replacement : scan.pairs[what]);
    source_.skip(end);
    read_any = true;
    in_place_batch_ = marks_.size();
    // The next item, if it is an entry dict: its EMPTY_DICT is consumed only along with it.
    const std::span<const std::uint8_t> next = source_.buffered(kEntryReadAhead);
    const std::size_t at = skip_frames<true>(next, 0);
    if (at >= next.size() || next[at] != EMPTY_DICT)
      break;
    start = at + 1;
  }
  if (!read_any)
    op_offset_ = dict_offset;
  return read_any;
}

}  // namespace fragscope::snapshot::pickle
