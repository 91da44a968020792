// BestFitIndex against std::set: the same (stream, size, address) order, lower_bound and
// erase through random inserts and erases that split, merge and empty its pieces.
#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "engine/allocator/allocator_state.h"

namespace fragscope::alloc::detail {
namespace {

using Key = std::tuple<std::uint64_t, Bytes, std::uint64_t>;

Key tuple_of(const SizeKey& k) {
  return {k.stream, k.size, k.ptr};
}

void expect_same(const BestFitIndex& index, const std::set<Key>& reference) {
  ASSERT_EQ(index.size(), reference.size());
  auto want = reference.begin();
  for (auto it = index.begin(); it != index.end(); ++it, ++want) {
    ASSERT_EQ(tuple_of(it.key()), *want);
    ASSERT_EQ(tuple_of(size_key(*it)), *want);
  }
  // And backwards, as release_available_cached_blocks walks it.
  auto back = reference.rbegin();
  for (auto it = index.end(); it != index.begin(); ++back) {
    --it;
    ASSERT_EQ(tuple_of(it.key()), *back);
  }
}

TEST(BestFitIndex, KeepsStdSetOrderThroughRandomInsertsAndErases) {
  std::mt19937_64 random(19);
  std::vector<Block> blocks(4000);
  std::vector<bool> present(blocks.size(), false);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    blocks[i].stream = random() % 3 == 0 ? 0 : 0x7f00 + random() % 2;
    blocks[i].size = (1 + random() % 64) * 512;  // many equal sizes: address breaks the tie
    blocks[i].ptr = 0x1000000 + i * 0x10000;
  }
  BestFitIndex index;
  std::set<Key> reference;
  // Grow to thousands (pieces split), shrink to a few (pieces merge and empty), grow again.
  for (int phase = 0; phase < 3; ++phase) {
    const int insert_percent = phase == 1 ? 15 : 85;
    for (int step = 0; step < 20000; ++step) {
      const std::size_t i = random() % blocks.size();
      Block* b = &blocks[i];
      if (random() % 100 < static_cast<unsigned>(insert_percent)) {
        EXPECT_EQ(index.insert(size_key(b), b), !present[i]);
        reference.insert(tuple_of(size_key(b)));
        present[i] = true;
      } else {
        EXPECT_EQ(index.erase(size_key(b), b), present[i]);
        reference.erase(tuple_of(size_key(b)));
        present[i] = false;
      }
      EXPECT_EQ(index.contains(size_key(b), b), present[i]);
      if (step % 997 == 0) {
        expect_same(index, reference);
        // lower_bound finds the same entry for searches between and on keys.
        for (int probe = 0; probe < 50; ++probe) {
          const SizeKey key{probe % 3 == 0 ? 0 : 0x7f00 + random() % 3, (random() % 70) * 512,
                            probe % 2 ? 0 : blocks[i].ptr};
          auto got = index.lower_bound(key);
          auto want = reference.lower_bound(tuple_of(key));
          ASSERT_EQ(got == index.end(), want == reference.end());
          if (want != reference.end()) {
            ASSERT_EQ(tuple_of(got.key()), *want);
          }
        }
      }
    }
    expect_same(index, reference);
  }
}

// rekey moves an entry to its new key's place, within its size class or to another, as erase +
// insert would: a split's remainder (smaller size, higher address) and a merged block (larger).
TEST(BestFitIndex, RekeyKeepsStdSetOrder) {
  std::mt19937_64 random(23);
  std::vector<Block> blocks(3000);
  BestFitIndex index;
  std::set<Key> reference;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    blocks[i].stream = random() % 4 == 0 ? 0 : 0x7f00;
    blocks[i].size = (1 + random() % 512) * 512;
    blocks[i].ptr = (i + 1) << 32;  // far apart: keys stay distinct
    ASSERT_TRUE(index.insert(size_key(&blocks[i]), &blocks[i]));
    reference.insert(tuple_of(size_key(&blocks[i])));
  }
  for (int step = 0; step < 20000; ++step) {
    Block* b = &blocks[random() % blocks.size()];
    auto it = index.lower_bound(size_key(b));
    ASSERT_EQ(*it, b);
    reference.erase(tuple_of(size_key(b)));
    switch (random() % 3) {
      case 0:  // the remainder of a split: the low part handed out
        if (b->size > 512) {
          const Bytes taken = (1 + random() % (b->size / 512 - 1)) * 512;
          b->ptr += taken;
          b->size -= taken;
        }
        break;
      case 1:  // merged with a free neighbour
        b->size += (1 + random() % 64) * 512;
        break;
      default:  // a size far away: another size class
        b->size = (1 + random() % 512) * 512;
        break;
    }
    index.rekey(it, size_key(b), b);
    reference.insert(tuple_of(size_key(b)));
    EXPECT_TRUE(index.contains(size_key(b), b));
    if (step % 499 == 0)
      expect_same(index, reference);
  }
  expect_same(index, reference);
}

// Size classes: sizes at the edges of every class (below 8, powers of two and their neighbours,
// up to 2^64 - 1) keep (size, address) order, and a class of thousands of equal sizes (free
// 2 MiB segments) splits into pieces and merges back. Streams empty and refill in between.
TEST(BestFitIndex, KeepsStdSetOrderAtClassEdgesAndInCrowdedClasses) {
  std::mt19937_64 random(29);
  std::vector<Bytes> sizes;
  for (Bytes s = 0; s < 20; ++s)
    sizes.push_back(s);
  for (int bit = 3; bit < 64; ++bit) {
    const Bytes power = Bytes{1} << bit;
    for (Bytes near : {power - 1, power, power + 1, power + power / 8, power + power / 8 - 1})
      sizes.push_back(near);
  }
  sizes.push_back(~Bytes{0});
  std::vector<Block> blocks(3000);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    blocks[i].stream = i % 5 == 0 ? 3 : 9;
    blocks[i].size = i % 2 == 0 ? 2 * kMiB : sizes[random() % sizes.size()];
    blocks[i].ptr = 0x1000 + (random() % 100000) * 0x1000 + i;  // distinct, in no order
  }
  BestFitIndex index;
  std::set<Key> reference;
  auto probe = [&] {
    for (int n = 0; n < 40; ++n) {
      const Bytes size = n % 4 == 0 ? 2 * kMiB : sizes[random() % sizes.size()];
      const SizeKey key{n % 3 == 0 ? 3 : 9 + static_cast<std::uint64_t>(n % 2), size,
                        n % 2 ? 0 : random() % (100000 * 0x1000)};
      auto got = index.lower_bound(key);
      auto want = reference.lower_bound(tuple_of(key));
      ASSERT_EQ(got == index.end(), want == reference.end());
      if (want != reference.end()) {
        ASSERT_EQ(tuple_of(got.key()), *want);
      }
    }
  };
  // Fill, empty one stream and most of the other, refill: pieces split, merge and empty.
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    ASSERT_TRUE(index.insert(size_key(&blocks[i]), &blocks[i]));
    reference.insert(tuple_of(size_key(&blocks[i])));
  }
  expect_same(index, reference);
  probe();
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (blocks[i].stream == 3 || random() % 10 != 0) {
      ASSERT_TRUE(index.erase(size_key(&blocks[i]), &blocks[i]));
      reference.erase(tuple_of(size_key(&blocks[i])));
    }
    if (i % 500 == 0)
      expect_same(index, reference);
  }
  expect_same(index, reference);
  probe();
  for (std::size_t i = 0; i < blocks.size(); i += 3) {
    if (index.insert(size_key(&blocks[i]), &blocks[i]))
      reference.insert(tuple_of(size_key(&blocks[i])));
  }
  expect_same(index, reference);
  probe();
}

// A class's entries live inline while there are few and in pieces past that: one class (and
// its neighbours) filled entry by entry to past the inline capacity and emptied again, in
// random orders, keeps std::set order, lower_bound, and refuses a present key at every count.
TEST(BestFitIndex, KeepsStdSetOrderAsAClassFillsAndEmpties) {
  std::mt19937_64 random(31);
  std::vector<Block> blocks(12);
  BestFitIndex index;
  std::set<Key> reference;
  for (int round = 0; round < 40; ++round) {
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      blocks[i].stream = 5;
      // [1024, 1152) is one size class; every fourth block sits in the class before or after.
      blocks[i].size = i % 4 == 3 ? (round % 2 ? 1000 : 1200) : 1024 + (random() % 4) * 32;
      blocks[i].ptr = 0x10000 + (random() % 64) * 0x100 + i;  // distinct, ties on size common
    }
    std::vector<std::size_t> order(blocks.size());
    for (std::size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    std::shuffle(order.begin(), order.end(), random);
    const std::size_t fill = 1 + random() % blocks.size();
    for (std::size_t n = 0; n < fill; ++n) {
      Block* b = &blocks[order[n]];
      ASSERT_TRUE(index.insert(size_key(b), b));
      reference.insert(tuple_of(size_key(b)));
      Block* again = &blocks[order[random() % (n + 1)]];
      EXPECT_FALSE(index.insert(size_key(again), again));
      expect_same(index, reference);
      for (Bytes size : {Bytes{1000}, Bytes{1024}, Bytes{1088}, Bytes{1150}, Bytes{1200}}) {
        const SizeKey key{5, size, 0x10000 + (random() % 64) * 0x100};
        auto got = index.lower_bound(key);
        auto want = reference.lower_bound(tuple_of(key));
        ASSERT_EQ(got == index.end(), want == reference.end());
        if (want != reference.end()) {
          ASSERT_EQ(tuple_of(got.key()), *want);
        }
      }
    }
    std::shuffle(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(fill), random);
    for (std::size_t n = 0; n < fill; ++n) {
      Block* b = &blocks[order[n]];
      ASSERT_TRUE(index.erase(size_key(b), b));
      reference.erase(tuple_of(size_key(b)));
      EXPECT_FALSE(index.contains(size_key(b), b));
      expect_same(index, reference);
    }
    EXPECT_TRUE(index.empty());
  }
}

// Streams first seen in descending order, each before the ones known (a new stream's slot goes in
// front of theirs), then searched interleaved: every search finds its own stream's blocks, and a
// search for a stream between or past the known ones finds the next stream's first block.
TEST(BestFitIndex, StreamsFirstSeenInAnyOrderAreSearchedInStreamOrder) {
  const std::vector<std::uint64_t> streams{0x9000, 0x7000, 0x5000, 0x3000, 0x8000, 0};
  std::vector<Block> blocks(streams.size() * 2);
  BestFitIndex index;
  std::set<Key> reference;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    Block& b = blocks[i];
    b.stream = streams[i % streams.size()];
    b.size = (i < streams.size() ? 1 : 3) * 4096;
    b.ptr = 0x100000 + i * 0x10000;
    ASSERT_TRUE(index.insert(size_key(&b), &b));
    reference.insert(tuple_of(size_key(&b)));
  }
  expect_same(index, reference);
  for (int round = 0; round < 3; ++round) {
    for (std::uint64_t stream = 0; stream <= 0xa000; stream += 0x800) {
      for (const Bytes size : {Bytes{0}, Bytes{4096}, Bytes{8192}, Bytes{1} << 20}) {
        const SizeKey key{stream, size, 0};
        const auto got = index.lower_bound(key);
        const auto want = reference.lower_bound(tuple_of(key));
        ASSERT_EQ(got == index.end(), want == reference.end()) << std::hex << stream;
        if (want != reference.end()) {
          ASSERT_EQ(tuple_of(got.key()), *want) << std::hex << stream << " " << size;
        }
      }
    }
  }
  for (Block& b : blocks)
    EXPECT_TRUE(index.erase(size_key(&b), &b));
  EXPECT_TRUE(index.empty());
}

TEST(BestFitIndex, EraseNeedsTheSameBlockUnderItsKey) {
  Block a;
  a.stream = 0;
  a.size = 1024;
  a.ptr = 0x2000;
  Block same_key = a;
  BestFitIndex index;
  EXPECT_TRUE(index.insert(size_key(&a), &a));
  EXPECT_FALSE(index.insert(size_key(&a), &a));
  EXPECT_FALSE(index.contains(size_key(&same_key), &same_key));
  EXPECT_FALSE(index.erase(size_key(&same_key), &same_key));
  EXPECT_TRUE(index.erase(size_key(&a), &a));
  EXPECT_TRUE(index.empty());
  EXPECT_EQ(index.begin(), index.end());
}

}  // namespace
}  // namespace fragscope::alloc::detail
