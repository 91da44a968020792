#pragma once
// Frames lists the pickle machine read in place, remembered by their bytes. A real trace writes
// each entry's stack as a fresh list of GETs of the frame dicts memoized long ago (a 1.2M-entry
// recording: 798k lists of ~40 GETs that spell 156 distinct byte strings). While no memo slot is
// written over, the same bytes GET the same frames and so name the same stack: a list seen before
// is a compare of its bytes instead of a memo read per frame and a lookup of the stack.
//
// Lists are found by their first kKeyBytes bytes (the bytes after them, for a shorter list), then
// compared whole: a list's end is not known until its GETs are read one by one, but a candidate's
// is, and the bytes up to it and an APPENDS right there say the list is that candidate.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "engine/allocator/flat_map.h"
#include "engine/snapshot/pickle_opcodes.h"

namespace fragscope::snapshot::pickle {

class FramesListCache {
 public:
  // Bytes of list bodies kept at most: the lists seen first are kept, the rest read as before.
  static constexpr std::size_t kMaxBytes = std::size_t{2} << 20;
  static constexpr std::size_t kKeyBytes = 32;
  static constexpr std::size_t kMaxCandidates = 64;

  struct Known {
    std::uint32_t stack = 0;
    std::size_t length = 0;  // the body's bytes; APPENDS follows them
  };

  // The list whose body (its GETs, after its MARK) starts `rest`, if one seen before is there:
  // its bytes, then APPENDS. The one found moves to the front of the lists sharing its key.
  std::optional<Known> find(std::span<const std::uint8_t> rest) {
    if (rest.size() < kKeyBytes)
      return std::nullopt;
    const std::uint32_t* bucket = by_key_.find(key_of(rest));
    if (bucket == nullptr)
      return std::nullopt;
    std::vector<std::uint32_t>& candidates = buckets_[*bucket];
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      const Entry& entry = entries_[candidates[i]];
      if (entry.length >= rest.size() || rest[entry.length] != opcodes::APPENDS ||
          std::memcmp(rest.data(), bytes_.data() + entry.offset, entry.length) != 0)
        continue;
      // The lists of a key recur in runs: the last one found is the likely next.
      std::rotate(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(i),
                  candidates.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      return Known{entry.stack, entry.length};
    }
    return std::nullopt;
  }

  // A list read frame by frame: its body is rest[0, length), and APPENDS follows.
  void insert(std::span<const std::uint8_t> rest, std::size_t length, std::uint32_t stack) {
    if (rest.size() < kKeyBytes || length >= rest.size() || bytes_.size() + length > kMaxBytes)
      return;
    const std::uint64_t key = key_of(rest);
    std::uint32_t* bucket = by_key_.find(key);
    if (bucket == nullptr) {
      by_key_.insert_or_assign(key, static_cast<std::uint32_t>(buckets_.size()));
      bucket = by_key_.find(key);
      buckets_.emplace_back();
    }
    std::vector<std::uint32_t>& candidates = buckets_[*bucket];
    // A bounded scan per lookup: lists sharing their first bytes past this many (a hostile
    // pickle's, or a trace of many stacks over the same innermost frames) drop the least found.
    if (candidates.size() == kMaxCandidates)
      candidates.pop_back();
    candidates.insert(candidates.begin(), static_cast<std::uint32_t>(entries_.size()));
    entries_.push_back(Entry{bytes_.size(), length, stack});
    bytes_.insert(bytes_.end(), rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(length));
  }

  // A memo slot was written over: a GET of it may name another frame now.
  void clear() {
    // A hostile pickle may PUT over a slot again and again: an empty cache costs nothing, and a
    // table grown for many lists is dropped rather than swept (FlatMap64::clear visits every slot).
    if (entries_.empty())
      return;
    by_key_ = alloc::FlatMap64<std::uint32_t>(kInitialKeySlots);
    buckets_.clear();
    entries_.clear();
    bytes_.clear();
  }

  // Lists kept, for tests.
  std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::size_t offset;
    std::size_t length;
    std::uint32_t stack;
  };

  // The first kKeyBytes bytes mixed a word at a time; never 0 (FlatMap64's empty key).
  static std::uint64_t key_of(std::span<const std::uint8_t> rest) {
    constexpr std::uint64_t kMultiplier = 0x9e3779b97f4a7c15ULL;
    std::uint64_t h = 0;
    for (std::size_t i = 0; i < kKeyBytes; i += 8) {
      std::uint64_t word;
      std::memcpy(&word, rest.data() + i, 8);
      h = (h ^ word) * kMultiplier;
      h ^= h >> 29;
    }
    return h | 1;
  }

  static constexpr std::size_t kInitialKeySlots = 256;
  alloc::FlatMap64<std::uint32_t> by_key_{kInitialKeySlots};
  std::vector<std::vector<std::uint32_t>> buckets_;  // entry indices, the last found first
  std::vector<Entry> entries_;
  std::vector<std::uint8_t> bytes_;
};

}  // namespace fragscope::snapshot::pickle
