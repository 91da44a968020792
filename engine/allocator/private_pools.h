#pragma once
// Private memory pools (torch-allocator-spec §13): the options a pool is made with, and the order
// in which PyTorch 2.11 visits freeable pools. Allocation into pools is part of CachingAllocator
// (caching_allocator.h); the pool-specific decisions live in private_pools.cpp.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/core/mempool_id.h"

namespace fragscope::alloc {

// torch.cuda.MemPool(allocator, use_on_oom, no_split). CUDA graph pools use the defaults.
struct PoolOptions {
  bool use_on_oom = false;  // searched (cached blocks only) when the default pool cannot grow
  bool no_split = false;    // blocks are handed out whole, never split
  // A custom allocator serves the pool's segments: expandable segments are off for it.
  bool custom_allocator = false;
  friend bool operator==(const PoolOptions&, const PoolOptions&) = default;
};

namespace detail {

struct PrivatePool;

// PyTorch keeps freeable pools in a ska::flat_hash_map keyed by MempoolId with MempoolIdHash
// (first if non-zero, else second) and Fibonacci hashing; empty_cache releases them in that
// table's slot order, which decides the order of their segment_free events. This reproduces the
// table: robin-hood insertion, growth to max(4, 2 x slots) at load factor 0.5 or when a probe
// exceeds max_lookups, backward-shift erase, iteration in slot order.
class FreeablePools {
 public:
  // False when the id is already there (PyTorch asserts it is not).
  bool insert(MempoolId id, PrivatePool* pool);
  bool erase(MempoolId id);
  bool contains(MempoolId id) const;
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // The pools in iteration order.
  std::vector<std::pair<MempoolId, PrivatePool*>> in_order() const;

 private:
  struct Slot {
    std::int8_t distance = -1;  // from the desired slot; -1 = empty
    MempoolId id;
    PrivatePool* pool = nullptr;
  };
  std::size_t desired_slot(MempoolId id) const;
  void grow();
  void rehash(std::size_t slots);
  bool place(MempoolId id, PrivatePool* pool);  // false: the table must grow first

  std::vector<Slot> slots_;  // slot count + max_lookups entries
  std::size_t slot_count_ = 0;
  std::int8_t max_lookups_ = 0;
  int shift_ = 63;
  std::size_t size_ = 0;
};

}  // namespace detail
}  // namespace fragscope::alloc
