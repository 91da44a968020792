// The pickle machine's memo (pickle_vm.h): a window of plain slots, older ones folded into chunks
// of 32-bit words.
#include "engine/snapshot/pickle_vm.h"

namespace fragscope::snapshot::pickle {
namespace {

constexpr Memo::Tag tag_unset = Memo::tag_unset;
constexpr Memo::Tag tag_string = Memo::tag_string;
constexpr Memo::Tag tag_frame = Memo::tag_frame;
constexpr Memo::Tag tag_frame_stack = Memo::tag_frame_stack;
constexpr Memo::Tag tag_entry = Memo::tag_entry;
constexpr Memo::Tag tag_skipped_entry = Memo::tag_skipped_entry;
constexpr Memo::Tag tag_wide = Memo::tag_wide;
constexpr unsigned kPayloadBits = Memo::kPayloadBits;
constexpr std::uint32_t kPayloadMask = Memo::kPayloadMask;

constexpr std::uint32_t word(Memo::Tag tag, std::uint32_t payload) {
  return static_cast<std::uint32_t>(tag) << kPayloadBits | payload;
}

// The word that holds `v`, or tag_wide when no word can (v is then kept whole).
std::uint32_t encode(const Value& v) {
  const bool fits = v.ref <= kPayloadMask && v.i == 0;
  switch (v.kind) {
    case Kind::unset:
      return v.ref == 0 && v.i == 0 ? word(tag_unset, 0) : word(tag_wide, 0);
    case Kind::string:
      return fits ? word(tag_string, v.ref) : word(tag_wide, 0);
    case Kind::frame:
      return fits ? word(tag_frame, v.ref) : word(tag_wide, 0);
    case Kind::frame_stack:
      return fits ? word(tag_frame_stack, v.ref) : word(tag_wide, 0);
    case Kind::trace_event:
      if (v.ref == 0 && v.i >= 0 && v.i <= kPayloadMask)
        return word(tag_entry, static_cast<std::uint32_t>(v.i));
      if (v.ref == ~std::uint32_t{0} && v.i == 0)
        return word(tag_skipped_entry, 0);
      return word(tag_wide, 0);
    default:
      return word(tag_wide, 0);
  }
}

bool is_wide(std::uint32_t w) {
  return w >> kPayloadBits == tag_wide;
}

// Block `words[0, kBlock)` is entries n, n + 1, ... of event list 0.
bool is_sequence(const std::uint32_t* words) {
  if (words[0] >> kPayloadBits != tag_entry)
    return false;
  for (std::size_t k = 1; k < Memo::kBlock; ++k)
    if (words[k] != words[0] + k)
      return false;
  return true;
}

}  // namespace

void Memo::grow(std::uint64_t size) {
  if (size <= this->size())
    return;
  Value unset;
  unset.kind = Kind::unset;
  recent_.resize(static_cast<std::size_t>(size - base_), unset);
  while (recent_.size() >= 2 * kWindow)
    fold_oldest();
}

void Memo::fold_oldest() {
  Chunk& chunk = chunks_.emplace_back();
  scratch_.resize(kWindow);
  std::size_t wide = 0;
  for (std::size_t i = 0; i < kWindow; ++i) {
    scratch_[i] = encode(recent_[i]);
    wide += is_wide(scratch_[i]) ? 1 : 0;
  }
  // Sized exactly, so a chunk never holds the spare half of a doubled vector.
  std::size_t words = 0;
  for (std::size_t b = 0; b < kWindow / kBlock; ++b)
    words += is_sequence(&scratch_[b * kBlock]) ? 1 : kBlock;
  chunk.words.reserve(words);
  chunk.wide.reserve(wide);
  for (std::size_t b = 0; b < kWindow / kBlock; ++b) {
    const std::uint32_t* block = &scratch_[b * kBlock];
    chunk.blocks[b] = static_cast<std::uint16_t>(chunk.words.size());
    if (is_sequence(block)) {
      chunk.blocks[b] |= Chunk::kSequence;
      chunk.words.push_back(block[0]);
      continue;
    }
    for (std::size_t k = 0; k < kBlock; ++k) {
      std::uint32_t w = block[k];
      if (is_wide(w)) {
        w = word(tag_wide, static_cast<std::uint32_t>(chunk.wide.size()));
        chunk.wide.push_back(recent_[b * kBlock + k]);
      }
      chunk.words.push_back(w);
    }
  }
  recent_.erase(recent_.begin(), recent_.begin() + static_cast<std::ptrdiff_t>(kWindow));
  base_ += kWindow;
}

void Memo::unpack(Chunk& chunk, std::size_t block) {
  const std::uint32_t first = chunk.words[chunk.blocks[block] & ~Chunk::kSequence];
  // At most kWindow + kWindow / kBlock words in all: offsets stay below kSequence.
  chunk.blocks[block] = static_cast<std::uint16_t>(chunk.words.size());
  for (std::uint32_t k = 0; k < kBlock; ++k)
    chunk.words.push_back(first + k);
}

void Memo::drop_unused_wide(Chunk& chunk) {
  std::vector<Value> kept;
  for (std::size_t b = 0; b < kWindow / kBlock; ++b) {
    if ((chunk.blocks[b] & Chunk::kSequence) != 0)
      continue;
    for (std::size_t k = 0; k < kBlock; ++k) {
      std::uint32_t& w = chunk.words[chunk.blocks[b] + k];
      if (is_wide(w)) {
        kept.push_back(chunk.wide[w & kPayloadMask]);
        w = word(tag_wide, static_cast<std::uint32_t>(kept.size() - 1));
      }
    }
  }
  chunk.wide = std::move(kept);
}

void Memo::set(std::uint64_t slot, const Value& value) {
  if (CachedSlot& cached = cached_slots_[slot % kCachedSlots]; cached.slot == slot)
    cached = CachedSlot{};
  if (slot >= base_) {
    recent_[static_cast<std::size_t>(slot - base_)] = value;
    return;
  }
  Chunk& chunk = chunks_[static_cast<std::size_t>(slot / kWindow)];
  const auto offset = static_cast<std::size_t>(slot % kWindow);
  if ((chunk.blocks[offset / kBlock] & Chunk::kSequence) != 0)
    unpack(chunk, offset / kBlock);
  std::uint32_t& w = chunk.words[chunk.blocks[offset / kBlock] + offset % kBlock];
  const std::uint32_t encoded = encode(value);
  if (!is_wide(encoded)) {
    w = encoded;  // a wide value it replaces stays unused in `wide`
  } else if (is_wide(w)) {
    chunk.wide[w & kPayloadMask] = value;
  } else {
    if (chunk.wide.size() >= 2 * kWindow)
      drop_unused_wide(chunk);  // a slot written over and over, compact and wide in turn
    w = word(tag_wide, static_cast<std::uint32_t>(chunk.wide.size()));
    chunk.wide.push_back(value);
  }
}

std::size_t Memo::memory_bytes() const {
  std::size_t bytes = recent_.capacity() * sizeof(Value) + chunks_.capacity() * sizeof(Chunk) +
                      scratch_.capacity() * sizeof(std::uint32_t) +
                      cached_slots_.capacity() * sizeof(CachedSlot);
  for (const Chunk& chunk : chunks_)
    bytes += chunk.words.capacity() * sizeof(std::uint32_t) + chunk.wide.capacity() * sizeof(Value);
  return bytes;
}

}  // namespace fragscope::snapshot::pickle
