#pragma once
// The best-fit index of one BlockPool: its free, mapped blocks in PyTorch's BlockComparatorSize
// order, (stream, size, address) ascending, compared as unsigned integers (spec §2.2).
//
// Strategy: a two-level sorted array (a B+-tree of height two). Entries carry their key inline
// beside the block pointer, so a search compares contiguous integers instead of following a
// pointer into a Block for every comparison (the red-black tree of Block* this replaces spent a
// quarter of a replay chasing nodes and blocks). The entries live in chunks of up to kChunk,
// each sorted, the chunks in order; `last_` holds every chunk's largest key, so a search is a
// binary search over `last_` and one inside a chunk. A full chunk splits in two, a chunk that
// falls under a quarter full merges with its successor when both fit in half a chunk, and an
// emptied chunk goes back to a spare list: steady-state inserts and erases allocate nothing.
//
// A block whose key changes while it stays free (a split's remainder, a free block that grows by
// a merge) moves to its new place with rekey(): one shift of the entries between the two places
// instead of an erase and an insert, each with its own search and shift.
//
// Differences from std::set a caller must know: inserting, erasing or rekeying invalidates every
// iterator (collect first, then erase), and erase/contains match the block pointer as well as
// its key. A block's key fields (stream, size, ptr) must not change while it is in the index
// except through rekey().
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <vector>

#include "engine/core/units.h"

namespace fragscope::alloc::detail {

struct Block;

// A position in (stream, size, address) order; a search for (stream, size, 0) finds the
// smallest block of at least `size` on `stream` first.
struct SizeKey {
  std::uint64_t stream;
  Bytes size;
  std::uint64_t ptr;

  friend bool operator<(const SizeKey& a, const SizeKey& b) {
    if (a.stream != b.stream)
      return a.stream < b.stream;
    if (a.size != b.size)
      return a.size < b.size;
    return a.ptr < b.ptr;
  }
  friend bool operator==(const SizeKey&, const SizeKey&) = default;
};

class BestFitIndex {
 public:
  struct Entry {
    SizeKey key;
    Block* block;
  };

  // Bidirectional, read-only; `*it` is the block, `it.key()` its key without touching it.
  class iterator {
   public:
    using iterator_category = std::bidirectional_iterator_tag;
    using value_type = Block*;
    using difference_type = std::ptrdiff_t;
    using pointer = Block* const*;
    using reference = Block* const&;

    iterator() = default;
    reference operator*() const { return entry().block; }
    const SizeKey& key() const { return entry().key; }
    iterator& operator++() {
      if (++pos_ == index_->chunks_[chunk_]->count) {
        ++chunk_;
        pos_ = 0;
      }
      return *this;
    }
    iterator operator++(int) {
      iterator before = *this;
      ++*this;
      return before;
    }
    iterator& operator--() {
      if (pos_ == 0) {
        --chunk_;
        pos_ = index_->chunks_[chunk_]->count;
      }
      --pos_;
      return *this;
    }
    iterator operator--(int) {
      iterator before = *this;
      --*this;
      return before;
    }
    friend bool operator==(const iterator& a, const iterator& b) {
      return a.chunk_ == b.chunk_ && a.pos_ == b.pos_;
    }

   private:
    friend class BestFitIndex;
    iterator(const BestFitIndex* index, std::size_t chunk, std::size_t pos)
        : index_(index), chunk_(chunk), pos_(pos) {}
    const Entry& entry() const { return index_->chunks_[chunk_]->entries[pos_]; }

    const BestFitIndex* index_ = nullptr;
    std::size_t chunk_ = 0;
    std::size_t pos_ = 0;
  };
  using const_iterator = iterator;

  BestFitIndex() = default;
  BestFitIndex(const BestFitIndex&) = delete;
  BestFitIndex& operator=(const BestFitIndex&) = delete;
  BestFitIndex(BestFitIndex&&) = default;
  BestFitIndex& operator=(BestFitIndex&&) = default;

  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  iterator begin() const { return iterator(this, 0, 0); }
  iterator end() const { return iterator(this, chunks_.size(), 0); }

  // The first entry whose key is not less than `key`.
  iterator lower_bound(const SizeKey& key) const {
    const std::size_t c = chunk_for(key);
    if (c == chunks_.size())
      return end();
    return iterator(this, c, position_in(*chunks_[c], key));
  }

  // Adds `block` under `key` (its current stream, size, ptr); false if the key is present.
  bool insert(const SizeKey& key, Block* block);

  void erase(iterator it) { erase_at(it.chunk_, it.pos_); }
  // Removes `block`, found by `key`; false if it is not in the index under that key.
  bool erase(const SizeKey& key, const Block* block) {
    const iterator it = find(key, block);
    if (it == end())
      return false;
    erase(it);
    return true;
  }
  bool contains(const SizeKey& key, const Block* block) const { return find(key, block) != end(); }
  // Where `block` is, found by `key`; end() if it is not in the index under that key.
  iterator find(const SizeKey& key, const Block* block) const {
    const iterator it = lower_bound(key);
    if (it == end() || !(it.key() == key) || *it != block)
      return end();
    return it;
  }

  // Gives the entry at `it` the key `key` (its block's new stream, size, ptr) and the block
  // `block`, and moves it to its place in key order: what erase(it) then insert(key, block)
  // does, with one shift of the entries in between when the new place is in the same chunk.
  // `key` must not be in the index (other than at `it`).
  void rekey(iterator it, const SizeKey& key, Block* block);

 private:
  static constexpr std::size_t kChunk = 64;
  struct Chunk {
    std::size_t count = 0;
    Entry entries[kChunk];
  };

  static std::size_t position_in(const Chunk& chunk, const SizeKey& key) {
    return position_in(chunk, 0, chunk.count, key);
  }
  // Within entries [from, to) of a chunk.
  static std::size_t position_in(const Chunk& chunk, std::size_t from, std::size_t to,
                                 const SizeKey& key) {
    const Entry* first = chunk.entries;
    const Entry* found = std::lower_bound(
        first + from, first + to, key, [](const Entry& e, const SizeKey& k) { return e.key < k; });
    return static_cast<std::size_t>(found - first);
  }
  std::size_t chunk_for(const SizeKey& key) const {
    return static_cast<std::size_t>(std::lower_bound(last_.begin(), last_.end(), key) -
                                    last_.begin());
  }
  std::unique_ptr<Chunk> new_chunk();
  void erase_at(std::size_t c, std::size_t pos);

  std::vector<std::unique_ptr<Chunk>> chunks_;  // in key order, none empty
  std::vector<SizeKey> last_;                   // the largest key of each chunk
  std::vector<std::unique_ptr<Chunk>> spare_;   // emptied chunks, for reuse
  std::size_t size_ = 0;
};

inline std::unique_ptr<BestFitIndex::Chunk> BestFitIndex::new_chunk() {
  if (spare_.empty())
    return std::make_unique<Chunk>();
  std::unique_ptr<Chunk> chunk = std::move(spare_.back());
  spare_.pop_back();
  chunk->count = 0;
  return chunk;
}

inline bool BestFitIndex::insert(const SizeKey& key, Block* block) {
  if (chunks_.empty()) {
    chunks_.push_back(new_chunk());
    last_.push_back(key);
  }
  std::size_t c = chunk_for(key);
  if (c == chunks_.size())
    c = chunks_.size() - 1;  // past every key: appended to the last chunk
  std::size_t pos = position_in(*chunks_[c], key);
  if (pos < chunks_[c]->count && chunks_[c]->entries[pos].key == key)
    return false;
  if (chunks_[c]->count == kChunk) {
    // Split: the upper half moves to a new chunk after this one.
    std::unique_ptr<Chunk> upper = new_chunk();
    Chunk& lower = *chunks_[c];
    constexpr std::size_t kHalf = kChunk / 2;
    std::copy(lower.entries + kHalf, lower.entries + kChunk, upper->entries);
    upper->count = kChunk - kHalf;
    lower.count = kHalf;
    last_.insert(last_.begin() + static_cast<std::ptrdiff_t>(c) + 1, last_[c]);
    last_[c] = lower.entries[kHalf - 1].key;
    chunks_.insert(chunks_.begin() + static_cast<std::ptrdiff_t>(c) + 1, std::move(upper));
    if (pos >= kHalf) {
      ++c;
      pos -= kHalf;
    }
  }
  Chunk& chunk = *chunks_[c];
  std::copy_backward(chunk.entries + pos, chunk.entries + chunk.count,
                     chunk.entries + chunk.count + 1);
  chunk.entries[pos] = Entry{key, block};
  ++chunk.count;
  if (pos + 1 == chunk.count)
    last_[c] = key;
  ++size_;
  return true;
}

inline void BestFitIndex::rekey(iterator it, const SizeKey& key, Block* block) {
  const std::size_t c = it.chunk_;
  const std::size_t pos = it.pos_;
  Chunk& chunk = *chunks_[c];
  Entry* entries = chunk.entries;
  // The new place stays in this chunk when the key still falls between the previous chunk's
  // last key and the next chunk's first: entries between the two places shift by one.
  if (key < entries[pos].key) {
    if (c == 0 || last_[c - 1] < key) {
      const std::size_t to = position_in(chunk, 0, pos, key);
      std::copy_backward(entries + to, entries + pos, entries + pos + 1);
      entries[to] = Entry{key, block};
      last_[c] = entries[chunk.count - 1].key;
      return;
    }
  } else if (c + 1 == chunks_.size() || key < chunks_[c + 1]->entries[0].key) {
    const std::size_t to = position_in(chunk, pos + 1, chunk.count, key);
    std::copy(entries + pos + 1, entries + to, entries + pos);
    entries[to - 1] = Entry{key, block};
    last_[c] = entries[chunk.count - 1].key;
    return;
  }
  erase_at(c, pos);
  insert(key, block);
}

inline void BestFitIndex::erase_at(std::size_t c, std::size_t pos) {
  Chunk& chunk = *chunks_[c];
  std::copy(chunk.entries + pos + 1, chunk.entries + chunk.count, chunk.entries + pos);
  --chunk.count;
  --size_;
  if (chunk.count == 0) {
    spare_.push_back(std::move(chunks_[c]));
    chunks_.erase(chunks_.begin() + static_cast<std::ptrdiff_t>(c));
    last_.erase(last_.begin() + static_cast<std::ptrdiff_t>(c));
    return;
  }
  last_[c] = chunk.entries[chunk.count - 1].key;
  // Merge a sparse chunk with its successor while both fit in half a chunk.
  if (chunk.count <= kChunk / 4 && c + 1 < chunks_.size() &&
      chunk.count + chunks_[c + 1]->count <= kChunk / 2) {
    Chunk& next = *chunks_[c + 1];
    std::copy(next.entries, next.entries + next.count, chunk.entries + chunk.count);
    chunk.count += next.count;
    last_[c] = last_[c + 1];
    spare_.push_back(std::move(chunks_[c + 1]));
    chunks_.erase(chunks_.begin() + static_cast<std::ptrdiff_t>(c) + 1);
    last_.erase(last_.begin() + static_cast<std::ptrdiff_t>(c) + 1);
  }
}

}  // namespace fragscope::alloc::detail
