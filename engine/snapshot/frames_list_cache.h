#pragma once
// Frames lists the pickle machine read in place, remembered by their bytes. A real trace writes
// each entry's stack as a fresh list of GETs of the frame dicts memoized long ago: 1.2M lists of
// ~30-65 GETs that spell a few thousand distinct byte strings. While no memo slot is written over,
// the same bytes GET the same frames and so name the same stack: a list seen before is a hash and
// a compare of its bytes instead of a memo read per frame and a lookup of the stack.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "engine/allocator/flat_map.h"

namespace fragscope::snapshot::pickle {

class FramesListCache {
 public:
  // Bytes of list bodies kept at most: the lists seen first are kept, the rest read as before.
  static constexpr std::size_t kMaxBytes = std::size_t{2} << 20;

  // The stack of the list whose GETs are `body` (its bytes between MARK and APPENDS), if seen.
  std::optional<std::uint32_t> find(std::span<const std::uint8_t> body) const {
    const std::uint32_t* at = by_hash_.find(hash(body));
    if (at == nullptr)
      return std::nullopt;
    const Entry& entry = entries_[*at];
    if (entry.length != body.size() ||
        !std::equal(body.begin(), body.end(), bytes_.begin() + entry.offset))
      return std::nullopt;  // another body with the same hash
    return entry.stack;
  }

  void insert(std::span<const std::uint8_t> body, std::uint32_t stack) {
    if (bytes_.size() + body.size() > kMaxBytes)
      return;
    const auto index = static_cast<std::uint32_t>(entries_.size());
    if (!by_hash_.insert_or_assign(hash(body), index))
      return;  // keeps the first body of a hash (find() compares the bytes)
    entries_.push_back(Entry{static_cast<std::uint32_t>(bytes_.size()),
                             static_cast<std::uint32_t>(body.size()), stack});
    bytes_.insert(bytes_.end(), body.begin(), body.end());
  }

  // A memo slot was written over: a GET of it may name another frame now.
  void clear() {
    by_hash_.clear();
    entries_.clear();
    bytes_.clear();
  }

  // Lists kept, for tests.
  std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::uint32_t offset;
    std::uint32_t length;
    std::uint32_t stack;
  };

  // Eight bytes at a time, each word mixed in by a multiply; never 0 (FlatMap64's empty key).
  static std::uint64_t hash(std::span<const std::uint8_t> body) {
    constexpr std::uint64_t kMultiplier = 0x9e3779b97f4a7c15ULL;
    std::uint64_t h = body.size() * kMultiplier;
    std::size_t i = 0;
    for (; i + 8 <= body.size(); i += 8) {
      std::uint64_t word;
      std::memcpy(&word, body.data() + i, 8);
      h = (h ^ word) * kMultiplier;
      h ^= h >> 29;
    }
    std::uint64_t rest = 0;
    std::memcpy(&rest, body.data() + i, body.size() - i);
    h = (h ^ rest) * kMultiplier;
    h ^= h >> 32;
    return h | 1;
  }

  alloc::FlatMap64<std::uint32_t> by_hash_{256};
  std::vector<Entry> entries_;
  std::vector<std::uint8_t> bytes_;
};

}  // namespace fragscope::snapshot::pickle
