#pragma once
// The best-fit index of one BlockPool: its free, mapped blocks in PyTorch's BlockComparatorSize
// order, (stream, size, address) ascending, compared as unsigned integers (spec §2.2).
//
// Strategy: segregated size classes, as in TLSF allocators. Each stream's blocks are split by
// size class (the octave of the size and its next three bits: 8 classes per power of two, a
// class never holds a larger size than a later one), each class a run of entries sorted by
// (size, address) with their key inline beside the block pointer, and a bitmap says which
// classes hold blocks. A search goes straight to its size's class, and when nothing there is
// large enough, to the first entry of the next occupied class (a count of trailing zeros), so
// it compares against the few entries of one class instead of binary-searching every free
// block; an insert or an erase shifts only its class's entries. On the recorded workloads a
// class holds one or two blocks when touched (the sorted two-level array this replaces spent
// about half of a replay searching and shifting ~100 entries).
//
// A class of at most kInline entries (nearly every class a replay touches) keeps them inline in
// its run, one cache line beside its count, so a search or an update of it reads no other
// memory. A class that fills up (many equal sizes: thousands of free 2 MiB small-pool segments)
// keeps its run in pieces of at most kPiece entries, in order, so no operation shifts more than
// one piece: a full piece splits in two, a piece that falls under a quarter full merges with
// the next when both fit in half a piece; once it shrinks to one piece of at most kInline / 2
// entries, they move back inline. A class keeps its pieces' memory: steady-state inserts and
// erases allocate nothing.
//
// Differences from std::set a caller must know: inserting, erasing or rekeying invalidates every
// iterator (collect first, then erase), and erase/contains match the block pointer as well as
// its key. A block's key fields (stream, size, ptr) must not change while it is in the index
// except through rekey().
#include <algorithm>
#include <array>
#include <bit>
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
  struct Entry {
    Bytes size;
    std::uint64_t ptr;
    Block* block;
    // (size, address) order within one stream.
    bool before(Bytes s, std::uint64_t p) const { return size != s ? size < s : ptr < p; }
  };
  using Piece = std::vector<Entry>;
  static constexpr std::size_t kInline = 4;
  // One class's entries, in order: `inline_count` of them in `small`, or (`big`) all of them in
  // `pieces`, none empty. Its piece p is `small` (p = 0) or pieces[p].
  struct alignas(64) Run {
    std::uint32_t inline_count = 0;
    bool big = false;
    Entry small[kInline];
    std::vector<Piece> pieces;  // kept when the entries move back inline, for reuse

    std::size_t piece_count() const { return big ? pieces.size() : 1; }
    std::size_t piece_size(std::size_t p) const { return big ? pieces[p].size() : inline_count; }
    const Entry* piece_data(std::size_t p) const { return big ? pieces[p].data() : small; }
  };
  static constexpr std::size_t kSubBits = 3;
  static constexpr std::size_t kClasses = (64 - kSubBits + 1) << kSubBits;  // 496
  static constexpr std::size_t kWords = (kClasses + 63) / 64;
  struct StreamRuns {
    std::uint64_t stream = 0;
    std::array<std::uint64_t, kWords> occupied{};  // bit c: class c holds blocks
    std::array<Run, kClasses> runs{};
  };

 public:
  // Bidirectional, read-only; `*it` is the block, `it.key()` its key without touching it.
  class iterator {
   public:
    using iterator_category = std::bidirectional_iterator_tag;
    using value_type = Block*;
    using difference_type = std::ptrdiff_t;
    using pointer = Block* const*;
    using reference = Block* const&;

    iterator() = default;
    reference operator*() const { return entry_->block; }
    SizeKey key() const { return SizeKey{stream_, entry_->size, entry_->ptr}; }
    iterator& operator++() {
      const Run& run = index_->streams_[slot_]->runs[class_];
      if (++pos_ < run.piece_size(piece_)) {
        ++entry_;
      } else if (piece_ + 1 < run.piece_count()) {
        ++piece_;
        pos_ = 0;
        entry_ = run.piece_data(piece_);
      } else {
        *this = index_->first_from(slot_, class_ + 1);
      }
      return *this;
    }
    iterator operator++(int) {
      iterator before = *this;
      ++*this;
      return before;
    }
    iterator& operator--() {
      if (slot_ < index_->streams_.size() && (pos_ > 0 || piece_ > 0)) {
        const Run& run = index_->streams_[slot_]->runs[class_];
        if (pos_ == 0)
          pos_ = run.piece_size(--piece_);
        entry_ = run.piece_data(piece_) + --pos_;
      } else {
        *this = index_->last_before(slot_, class_);
      }
      return *this;
    }
    iterator operator--(int) {
      iterator before = *this;
      --*this;
      return before;
    }
    friend bool operator==(const iterator& a, const iterator& b) {
      return a.slot_ == b.slot_ && a.class_ == b.class_ && a.piece_ == b.piece_ && a.pos_ == b.pos_;
    }

   private:
    friend class BestFitIndex;
    iterator(const BestFitIndex* index, std::size_t slot, std::size_t size_class, std::size_t piece,
             std::size_t pos)
        : index_(index), slot_(slot), class_(size_class), piece_(piece), pos_(pos) {
      if (slot < index->streams_.size()) {
        const StreamRuns& runs = *index->streams_[slot];
        stream_ = runs.stream;
        entry_ = runs.runs[size_class].piece_data(piece) + pos;
      }
    }

    const BestFitIndex* index_ = nullptr;
    std::size_t slot_ = 0;  // streams_.size() at the end
    std::size_t class_ = 0;
    std::size_t piece_ = 0;
    std::size_t pos_ = 0;
    std::uint64_t stream_ = 0;
    const Entry* entry_ = nullptr;
  };
  using const_iterator = iterator;

  BestFitIndex() = default;
  BestFitIndex(const BestFitIndex&) = delete;
  BestFitIndex& operator=(const BestFitIndex&) = delete;
  BestFitIndex(BestFitIndex&&) = default;
  BestFitIndex& operator=(BestFitIndex&&) = default;

  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  iterator begin() const { return first_from(0, 0); }
  iterator end() const { return iterator(this, streams_.size(), 0, 0, 0); }

  // The first entry whose key is not less than `key`.
  iterator lower_bound(const SizeKey& key) const {
    const std::size_t slot = slot_for(key.stream);
    if (slot == streams_.size() || streams_[slot]->stream != key.stream)
      return first_from(slot, 0);
    const StreamRuns& runs = *streams_[slot];
    const std::size_t c = size_class(key.size);
    if (holds(runs, c)) {
      const Where at = run_lower_bound(runs.runs[c], key.size, key.ptr);
      if (at.piece < runs.runs[c].piece_count())
        return iterator(this, slot, c, at.piece, at.pos);
    }
    return first_from(slot, c + 1);
  }

  // Adds `block` under `key` (its current stream, size, ptr); false if the key is present.
  bool insert(const SizeKey& key, Block* block);

  void erase(iterator it) { erase_at(it.slot_, it.class_, it.piece_, it.pos_); }
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
    const std::size_t slot = slot_for(key.stream);
    if (slot == streams_.size() || streams_[slot]->stream != key.stream)
      return end();
    const StreamRuns& runs = *streams_[slot];
    const std::size_t c = size_class(key.size);
    if (!holds(runs, c))
      return end();
    const Run& run = runs.runs[c];
    const Where at = run_lower_bound(run, key.size, key.ptr);
    if (at.piece == run.piece_count())
      return end();
    const Entry& e = run.piece_data(at.piece)[at.pos];
    if (e.size != key.size || e.ptr != key.ptr || e.block != block)
      return end();
    return iterator(this, slot, c, at.piece, at.pos);
  }

  // Gives the entry at `it` the key `key` (its block's new stream, size, ptr) and the block
  // `block`: what erase(it) then insert(key, block) does. `key` must not be in the index (other
  // than at `it`).
  void rekey(iterator it, const SizeKey& key, Block* block) {
    erase(it);
    insert(key, block);
  }

 private:
  static constexpr std::size_t kPiece = 64;
  struct Where {
    std::size_t piece;
    std::size_t pos;
  };

  // The class of a size: sizes below 8 are their own class, then 8 classes per power of two
  // (the top bit's position and the three bits below it). Never decreasing in the size.
  static std::size_t size_class(Bytes size) {
    if (size < (Bytes{1} << kSubBits))
      return static_cast<std::size_t>(size);
    const auto top = static_cast<std::size_t>(std::bit_width(size) - 1);
    const auto sub = static_cast<std::size_t>(size >> (top - kSubBits)) & ((1u << kSubBits) - 1);
    return ((top - kSubBits + 1) << kSubBits) | sub;
  }
  static bool holds(const StreamRuns& runs, std::size_t c) {
    return (runs.occupied[c / 64] >> (c % 64)) & 1;
  }
  // The first occupied class at or after `c`, kClasses if none.
  static std::size_t next_class(const StreamRuns& runs, std::size_t c) {
    for (std::size_t w = c / 64; w < kWords; ++w) {
      std::uint64_t word = runs.occupied[w];
      if (w == c / 64)
        word &= ~std::uint64_t{0} << (c % 64);
      if (word != 0)
        return w * 64 + static_cast<std::size_t>(std::countr_zero(word));
    }
    return kClasses;
  }
  // The last occupied class before `c`, kClasses if none.
  static std::size_t previous_class(const StreamRuns& runs, std::size_t c) {
    for (std::size_t w = std::min(c / 64 + 1, kWords); w-- > 0;) {
      std::uint64_t word = runs.occupied[w];
      if (w == c / 64)
        word &= (std::uint64_t{1} << (c % 64)) - 1;
      if (word != 0)
        return w * 64 + 63 - static_cast<std::size_t>(std::countl_zero(word));
    }
    return kClasses;
  }
  // The first stream slot whose stream is not less than `stream`: the count of smaller ones,
  // every slot compared without a branch on the outcome (a search that stops at the stream
  // mispredicted wherever requests of several streams interleave).
  std::size_t slot_for(std::uint64_t stream) const {
    std::size_t slot = 0;
    for (const std::uint64_t id : stream_ids_)
      slot += id < stream ? 1 : 0;
    return slot;
  }
  // The first entry of class `c` or later of slot `slot`, or of a later slot; end() if none.
  iterator first_from(std::size_t slot, std::size_t c) const {
    for (; slot < streams_.size(); ++slot, c = 0) {
      const std::size_t found = next_class(*streams_[slot], c);
      if (found < kClasses)
        return iterator(this, slot, found, 0, 0);
    }
    return end();
  }
  // The last entry of a class before `c` of slot `slot`, or of an earlier slot.
  iterator last_before(std::size_t slot, std::size_t c) const {
    if (slot == streams_.size()) {
      if (slot == 0)
        return end();
      --slot;
      c = kClasses;
    }
    for (;; --slot, c = kClasses) {
      const std::size_t found = previous_class(*streams_[slot], c);
      if (found < kClasses) {
        const Run& run = streams_[slot]->runs[found];
        const std::size_t last = run.piece_count() - 1;
        return iterator(this, slot, found, last, run.piece_size(last) - 1);
      }
      if (slot == 0)
        return end();
    }
  }
  // The first entry of an occupied run not before (size, ptr); piece == piece_count() if none.
  static Where run_lower_bound(const Run& run, Bytes size, std::uint64_t ptr) {
    if (!run.big) {
      std::size_t pos = 0;
      while (pos < run.inline_count && run.small[pos].before(size, ptr))
        ++pos;
      return pos == run.inline_count ? Where{1, 0} : Where{0, pos};
    }
    const std::vector<Piece>& pieces = run.pieces;
    std::size_t p = 0;
    if (pieces.size() > 1) {
      p = static_cast<std::size_t>(
          std::partition_point(pieces.begin(), pieces.end(),
                               [&](const Piece& piece) { return piece.back().before(size, ptr); }) -
          pieces.begin());
      if (p == pieces.size())
        return Where{p, 0};
    }
    const Piece& piece = pieces[p];
    const auto pos = static_cast<std::size_t>(
        std::partition_point(piece.begin(), piece.end(),
                             [&](const Entry& e) { return e.before(size, ptr); }) -
        piece.begin());
    if (pos == piece.size())
      return Where{pieces.size(), 0};
    return Where{p, pos};
  }
  // Inserts into a run held in pieces; false if the key is present.
  static bool insert_big(Run& run, const Entry& entry);
  void erase_at(std::size_t slot, std::size_t c, std::size_t p, std::size_t pos);

  // By stream, ascending; emptied ones stay. Each on the heap: a stream's runs are large.
  std::vector<std::unique_ptr<StreamRuns>> streams_;
  std::vector<std::uint64_t> stream_ids_;  // streams_[slot]->stream by slot, read by slot_for
  std::size_t size_ = 0;
};

inline bool BestFitIndex::insert(const SizeKey& key, Block* block) {
  std::size_t slot = slot_for(key.stream);
  if (slot == streams_.size() || streams_[slot]->stream != key.stream) {
    streams_.insert(streams_.begin() + static_cast<std::ptrdiff_t>(slot),
                    std::make_unique<StreamRuns>());
    streams_[slot]->stream = key.stream;
    stream_ids_.insert(stream_ids_.begin() + static_cast<std::ptrdiff_t>(slot), key.stream);
  }
  StreamRuns& runs = *streams_[slot];
  const std::size_t c = size_class(key.size);
  Run& run = runs.runs[c];
  const Entry entry{key.size, key.ptr, block};
  if (!holds(runs, c)) {
    run.big = false;  // an emptied class's entries are inline again
    run.small[0] = entry;
    run.inline_count = 1;
    runs.occupied[c / 64] |= std::uint64_t{1} << (c % 64);
    ++size_;
    return true;
  }
  if (!run.big) {
    std::size_t pos = 0;
    while (pos < run.inline_count && run.small[pos].before(key.size, key.ptr))
      ++pos;
    if (pos < run.inline_count && run.small[pos].size == key.size && run.small[pos].ptr == key.ptr)
      return false;
    if (run.inline_count < kInline) {
      for (std::size_t i = run.inline_count; i > pos; --i)
        run.small[i] = run.small[i - 1];
      run.small[pos] = entry;
      ++run.inline_count;
      ++size_;
      return true;
    }
    // Full: the entries move to one piece.
    if (run.pieces.empty())
      run.pieces.emplace_back();
    run.pieces.resize(1);
    run.pieces[0].assign(run.small, run.small + run.inline_count);
    run.big = true;
  }
  if (!insert_big(run, entry))
    return false;
  ++size_;
  return true;
}

inline bool BestFitIndex::insert_big(Run& run, const Entry& entry) {
  std::vector<Piece>& pieces = run.pieces;
  // The piece whose range takes the key: the first whose last entry is not before it, else the
  // last piece.
  std::size_t p = 0;
  if (pieces.size() > 1) {
    p = static_cast<std::size_t>(
        std::partition_point(
            pieces.begin(), pieces.end() - 1,
            [&](const Piece& piece) { return piece.back().before(entry.size, entry.ptr); }) -
        pieces.begin());
  }
  Piece& piece = pieces[p];
  const auto at = std::partition_point(
      piece.begin(), piece.end(), [&](const Entry& e) { return e.before(entry.size, entry.ptr); });
  if (at != piece.end() && at->size == entry.size && at->ptr == entry.ptr)
    return false;
  piece.insert(at, entry);
  if (piece.size() > kPiece) {
    // Split: the upper half moves to a new piece after this one.
    const auto half = static_cast<std::ptrdiff_t>(piece.size() / 2);
    Piece upper(piece.begin() + half, piece.end());
    piece.erase(piece.begin() + half, piece.end());
    pieces.insert(pieces.begin() + static_cast<std::ptrdiff_t>(p) + 1, std::move(upper));
  }
  return true;
}

inline void BestFitIndex::erase_at(std::size_t slot, std::size_t c, std::size_t p,
                                   std::size_t pos) {
  StreamRuns& runs = *streams_[slot];
  Run& run = runs.runs[c];
  --size_;
  if (!run.big) {
    for (std::size_t i = pos + 1; i < run.inline_count; ++i)
      run.small[i - 1] = run.small[i];
    if (--run.inline_count == 0)
      runs.occupied[c / 64] &= ~(std::uint64_t{1} << (c % 64));
    return;
  }
  std::vector<Piece>& pieces = run.pieces;
  Piece& piece = pieces[p];
  piece.erase(piece.begin() + static_cast<std::ptrdiff_t>(pos));
  if (piece.empty() && pieces.size() > 1) {
    pieces.erase(pieces.begin() + static_cast<std::ptrdiff_t>(p));
  } else if (piece.size() <= kPiece / 4 && p + 1 < pieces.size() &&
             piece.size() + pieces[p + 1].size() <= kPiece / 2) {
    // Merge a sparse piece with the next while both fit in half a piece.
    piece.insert(piece.end(), pieces[p + 1].begin(), pieces[p + 1].end());
    pieces.erase(pieces.begin() + static_cast<std::ptrdiff_t>(p) + 1);
  }
  if (pieces.size() == 1 && pieces[0].size() <= kInline / 2) {
    // Few enough to go back inline (the piece keeps its memory for the next time).
    std::copy(pieces[0].begin(), pieces[0].end(), run.small);
    run.inline_count = static_cast<std::uint32_t>(pieces[0].size());
    pieces[0].clear();
    run.big = false;
    if (run.inline_count == 0)
      runs.occupied[c / 64] &= ~(std::uint64_t{1} << (c % 64));
  }
}

}  // namespace fragscope::alloc::detail
