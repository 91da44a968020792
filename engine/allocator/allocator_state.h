#pragma once
// The caching-allocator model's data (blocks, segments, best-fit sets, private pools) and the
// state that CachingAllocator::Impl's decisions work on. Internal to engine/allocator: shared by
// caching_allocator.cpp (the decisions), private_pools.cpp (CUDA-graph pools and MemPools) and
// allocator_invariants.cpp (the is_valid() checker).
#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <memory_resource>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/allocator/best_fit_index.h"
#include "engine/allocator/config.h"
#include "engine/allocator/device.h"
#include "engine/allocator/event_sink.h"
#include "engine/allocator/flat_map.h"
#include "engine/allocator/private_pools.h"
#include "engine/allocator/profile.h"
#include "engine/allocator/sizes.h"
#include "engine/allocator/stats.h"
#include "engine/core/mempool_id.h"

namespace fragscope::alloc::detail {

struct Segment;
struct PrivatePool;

// One block (spec §2.1). Objects are recycled through a free list, never handed to callers.
struct Block {
  std::uint64_t ptr = 0;
  Bytes size = 0;
  Bytes requested_size = 0;  // overwritten only when handed out: stale once free, like PyTorch
  std::uint64_t stream = 0;
  Block* prev = nullptr;
  Block* next = nullptr;
  Segment* segment = nullptr;
  std::uint64_t gc_count_base = 0;  // pool call counter when last inserted into the pool
  std::uint32_t event_count = 0;    // outstanding record_stream events
  PoolKind pool = PoolKind::large;
  PrivatePool* owner = nullptr;  // the private pool the block belongs to; null = default pools
  bool allocated = false;
  bool mapped = true;         // expandable segments: false = address space without memory
  bool events_ready = false;  // mark_events_ready() was called for the pending free
  std::vector<std::uint64_t> stream_uses;

  // Both compared, no short circuit: a caller that adds it up needs no branch.
  bool is_split() const { return (prev != nullptr) | (next != nullptr); }
};

// A cudaMalloc'd segment, or one expandable segment's whole virtual-address reservation.
struct Segment {
  std::uint64_t base = 0;
  Bytes size = 0;
  std::uint64_t stream = 0;
  PoolKind pool = PoolKind::large;
  PrivatePool* owner = nullptr;
  bool expandable = false;
  Bytes page_size = 0;  // expandable only
  Block* head = nullptr;
};

// A free block's place in its pool's best-fit index (spec §2.2).
inline SizeKey size_key(const Block* b) {
  return {b->stream, b->size, b->ptr};
}

// Unmapped blocks of expandable segments: (stream, address) ascending.
struct AddressKey {
  std::uint64_t stream;
  std::uint64_t ptr;
};
struct ByAddress {
  using is_transparent = void;
  static bool less(std::uint64_t sa, std::uint64_t pa, std::uint64_t sb, std::uint64_t pb) {
    return sa != sb ? sa < sb : pa < pb;
  }
  bool operator()(const Block* a, const Block* b) const {
    return less(a->stream, a->ptr, b->stream, b->ptr);
  }
  bool operator()(const Block* a, const AddressKey& b) const {
    return less(a->stream, a->ptr, b.stream, b.ptr);
  }
  bool operator()(const AddressKey& a, const Block* b) const {
    return less(a.stream, a.ptr, b->stream, b->ptr);
  }
};

struct BlockPool {
  BlockPool(std::pmr::memory_resource* nodes, PoolKind k, PrivatePool* o = nullptr)
      : unmapped(nodes), kind(k), owner(o) {}
  BestFitIndex blocks;                           // free, mapped blocks
  std::pmr::set<Block*, ByAddress> unmapped;     // expandable segments' unmapped ranges
  std::uint64_t get_free_blocks_call_count = 0;  // the GC age clock
  PoolKind kind;
  PrivatePool* owner;  // null for the default pools

  void insert(Block* block) {
    block->gc_count_base = get_free_blocks_call_count;
    blocks.insert(size_key(block), block);
  }
  // Takes a free block out of the best-fit index (no-op when it is not there).
  void erase(const Block* block) { blocks.erase(size_key(block), block); }
  bool holds(const Block* block) const { return blocks.contains(size_key(block), block); }
};

// A CUDA graph's or MemPool's own small and large block pools (PyTorch's PrivatePool).
struct PrivatePool {
  PrivatePool(std::pmr::memory_resource* nodes, MempoolId pool_id, PoolOptions pool_options)
      : id(pool_id),
        options(pool_options),
        pools{BlockPool{nodes, PoolKind::small, this}, BlockPool{nodes, PoolKind::large, this}} {}
  PrivatePool(const PrivatePool&) = delete;
  PrivatePool& operator=(const PrivatePool&) = delete;

  MempoolId id;
  PoolOptions options;
  int use_count = 1;                   // graphs/MemPools/contexts holding it; 0 = freeable
  std::int64_t cuda_malloc_count = 0;  // segments (and mapped ranges) it got from the device
  std::array<BlockPool, 2> pools;      // by PoolKind
};

// One beginAllocateToPool: allocations whose stream passes the filter go to `pool`.
struct CaptureUnderway {
  MempoolId pool;
  std::optional<std::uint64_t> stream;  // nullopt: every stream (use_mem_pool's thread filter)
  bool matches(std::uint64_t s) const { return !stream || *stream == s; }
};

struct AllocatorState {
  AllocatorState(AllocatorConfig c, Device& d, EventSink* s)
      : config(std::move(c)), device(d), sink(s) {}

  AllocatorConfig config;
  // The release whose rules apply (CachingAllocator::set_profile); 2.11's by default.
  AllocatorProfile profile;
  Device& device;
  EventSink* sink;
  DeviceStats stats;
  std::optional<Bytes> allowed;
  Bytes total_allocated = 0;
  // The largest total_allocated at a malloc that found no cached block: where the garbage
  // collector runs when enabled (CachingAllocator::gc_check_peak).
  Bytes gc_check_peak = 0;
  // Set nodes come from a pool, so best-fit inserts and erases do not call malloc.
  std::pmr::unsynchronized_pool_resource node_memory;
  std::array<BlockPool, 2> pools{BlockPool{&node_memory, PoolKind::small},
                                 BlockPool{&node_memory, PoolKind::large}};  // by PoolKind
  FlatMap64<Block*> active{4096};  // allocated or pending-free blocks, by address
  std::map<std::uint64_t, std::unique_ptr<Segment>> segments;  // by base address
  std::map<std::uint64_t, std::deque<Block*>> events;          // per recorded stream, FIFO

  // Block objects: allocated in chunks, recycled through a free list (no per-op heap churn).
  std::vector<std::unique_ptr<Block[]>> block_chunks;
  std::vector<Block*> spare_blocks;

  // Private pools (spec §13), by id; freeable ones (use_count 0) in PyTorch's hash-map order.
  std::map<MempoolId, std::unique_ptr<PrivatePool>> graph_pools;
  FreeablePools graph_pools_freeable;
  std::vector<CaptureUnderway> captures_underway;  // in beginAllocateToPool order
  std::set<MempoolId> use_on_oom_pools;
  // Frees of record_stream'ed blocks during a capture, waiting for the capture to end; with the
  // streams recorded during the capture (their uses are complete once the graph is).
  std::vector<std::pair<Block*, std::vector<std::uint64_t>>> deferred_blocks;
  // Streams record_stream'ed while a capture was underway, per live block.
  std::map<const Block*, std::vector<std::uint64_t>> capture_stream_uses;

  BlockPool& pool_of(PoolKind kind) { return pools[static_cast<std::size_t>(kind)]; }
  // The block pool a block lives in: its private pool's or the default one.
  BlockPool& home(const Block* b) {
    return b->owner ? b->owner->pools[static_cast<std::size_t>(b->pool)] : pool_of(b->pool);
  }
  const BlockPool& home(const Block* b) const {
    return b->owner ? b->owner->pools[static_cast<std::size_t>(b->pool)]
                    : pools[static_cast<std::size_t>(b->pool)];
  }
};

// The invariant checker behind CachingAllocator::is_valid (allocator_invariants.cpp).
bool check_invariants(const AllocatorState& state, std::string* why);

}  // namespace fragscope::alloc::detail

namespace fragscope::alloc::detail {

// Private-pool bookkeeping (private_pools.cpp); PoolError on misuse, with PyTorch's words.
PrivatePool& create_or_incref_pool(AllocatorState& state, MempoolId id, PoolOptions options);
void begin_allocate_to_pool(AllocatorState& state, MempoolId id,
                            std::optional<std::uint64_t> stream);
void end_allocate_to_pool(AllocatorState& state, MempoolId id);
void release_pool(AllocatorState& state, MempoolId id);
// get_pool: the block pool a request of `size` (rounded) on `stream` allocates from.
BlockPool& select_pool(AllocatorState& state, Bytes size, std::uint64_t stream);
// Cached (free) bytes in private pools, which the OOM message reports.
Bytes private_pool_free_bytes(const AllocatorState& state);

}  // namespace fragscope::alloc::detail
