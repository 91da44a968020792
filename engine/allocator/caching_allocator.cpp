#include "engine/allocator/caching_allocator.h"

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdio>
#include <deque>
#include <map>
#include <memory_resource>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "engine/allocator/flat_map.h"
#include "engine/allocator/summary.h"

namespace fragscope::alloc {
namespace {

struct Segment;

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
  bool allocated = false;
  bool mapped = true;         // expandable segments: false = address space without memory
  bool events_ready = false;  // mark_events_ready() was called for the pending free
  std::vector<std::uint64_t> stream_uses;

  bool is_split() const { return prev != nullptr || next != nullptr; }
};

// A cudaMalloc'd segment, or one expandable segment's whole virtual-address reservation.
struct Segment {
  std::uint64_t base = 0;
  Bytes size = 0;
  std::uint64_t stream = 0;
  PoolKind pool = PoolKind::large;
  bool expandable = false;
  Bytes page_size = 0;  // expandable only
  Block* head = nullptr;
};

// The best-fit index: (stream, size, address) ascending (spec §2.2).
struct SizeKey {
  std::uint64_t stream;
  Bytes size;
  std::uint64_t ptr;
};
struct BySize {
  using is_transparent = void;
  static SizeKey key(const Block* b) { return {b->stream, b->size, b->ptr}; }
  static bool less(const SizeKey& a, const SizeKey& b) {
    if (a.stream != b.stream)
      return a.stream < b.stream;
    if (a.size != b.size)
      return a.size < b.size;
    return a.ptr < b.ptr;
  }
  bool operator()(const Block* a, const Block* b) const { return less(key(a), key(b)); }
  bool operator()(const Block* a, const SizeKey& b) const { return less(key(a), b); }
  bool operator()(const SizeKey& a, const Block* b) const { return less(a, key(b)); }
};

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
  explicit BlockPool(std::pmr::memory_resource* nodes) : blocks(nodes), unmapped(nodes) {}
  std::pmr::set<Block*, BySize> blocks;          // free, mapped blocks
  std::pmr::set<Block*, ByAddress> unmapped;     // expandable segments' unmapped ranges
  std::uint64_t get_free_blocks_call_count = 0;  // the GC age clock

  void insert(Block* block) {
    block->gc_count_base = get_free_blocks_call_count;
    blocks.insert(block);
  }
};

StatType stat_type(PoolKind pool) {
  return pool == PoolKind::small ? StatType::small_pool : StatType::large_pool;
}

void increase(StatArray& stat, PoolKind pool, std::int64_t amount) {
  stat[StatType::aggregate].increase(amount);
  stat[stat_type(pool)].increase(amount);
}

void decrease(StatArray& stat, PoolKind pool, std::int64_t amount) {
  stat[StatType::aggregate].decrease(amount);
  stat[stat_type(pool)].decrease(amount);
}

std::int64_t to_signed(Bytes bytes) {
  return static_cast<std::int64_t>(bytes);
}

std::string hex_address(std::uint64_t address) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "0x%" PRIx64, address);
  return buffer;
}

}  // namespace

struct CachingAllocator::Impl {
  AllocatorConfig config;
  Device& device;
  EventSink* sink;
  DeviceStats stats;
  std::optional<Bytes> allowed;
  Bytes total_allocated = 0;
  // Set nodes come from a pool, so best-fit inserts and erases do not call malloc.
  std::pmr::unsynchronized_pool_resource node_memory;
  std::array<BlockPool, 2> pools{BlockPool{&node_memory}, BlockPool{&node_memory}};  // by PoolKind
  FlatMap64<Block*> active{4096};  // allocated or pending-free blocks, by address
  std::map<std::uint64_t, std::unique_ptr<Segment>> segments;  // by base address
  std::map<std::uint64_t, std::deque<Block*>> events;          // per recorded stream, FIFO

  // Block objects: allocated in chunks, recycled through a free list (no per-op heap churn).
  std::vector<std::unique_ptr<Block[]>> block_chunks;
  std::vector<Block*> spare_blocks;

  Impl(AllocatorConfig c, Device& d, EventSink* s) : config(std::move(c)), device(d), sink(s) {
    stats.max_split_size =
        config.max_split_size == kUnlimited ? -1 : static_cast<std::int64_t>(config.max_split_size);
    if (config.per_process_memory_fraction && *config.per_process_memory_fraction < 1.0)
      allowed = static_cast<Bytes>(*config.per_process_memory_fraction *
                                   static_cast<double>(device.total_memory()));
  }

  BlockPool& pool_of(PoolKind kind) { return pools[static_cast<std::size_t>(kind)]; }
  bool gc_enabled() const { return allowed && config.garbage_collection_threshold > 0.0; }
  Bytes max_split() const { return config.max_split_size; }

  void emit(TraceAction action, std::uint64_t addr, Bytes size, std::uint64_t stream) {
    if (sink)
      sink->on_event(TraceEvent{action, addr, size, StreamId{stream}, 0, FrameStackId{}});
  }

  Block* new_block() {
    if (spare_blocks.empty()) {
      constexpr std::size_t kChunk = 1024;
      block_chunks.push_back(std::make_unique<Block[]>(kChunk));
      Block* chunk = block_chunks.back().get();
      for (std::size_t i = kChunk; i > 0; --i)
        spare_blocks.push_back(&chunk[i - 1]);
    }
    Block* block = spare_blocks.back();
    spare_blocks.pop_back();
    return block;
  }

  void delete_block(Block* block) {
    std::vector<std::uint64_t> uses = std::move(block->stream_uses);
    uses.clear();
    *block = Block{};
    block->stream_uses = std::move(uses);  // keep the capacity for the next user
    spare_blocks.push_back(block);
  }

  // --- process_events / synchronize ---------------------------------------------------------

  void process_events() {
    for (auto it = events.begin(); it != events.end();) {
      auto& queue = it->second;
      while (!queue.empty() && queue.front()->events_ready) {
        Block* block = queue.front();
        queue.pop_front();
        if (--block->event_count == 0)
          free_block(block);
      }
      it = queue.empty() ? events.erase(it) : std::next(it);
    }
  }

  void synchronize_and_free_events() {
    ++stats.num_sync_all_streams;
    for (auto& [stream, queue] : events) {
      for (Block* block : queue) {
        if (--block->event_count == 0)
          free_block(block);
      }
    }
    events.clear();
  }

  // --- search ---------------------------------------------------------------------------------

  static Bytes expandable_size(const Block* b) {
    return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
  }

  Block* get_free_block(BlockPool& pool, std::uint64_t stream, Bytes size) {
    if (gc_enabled())
      ++pool.get_free_blocks_call_count;
    auto it = pool.blocks.lower_bound(SizeKey{stream, size, 0});
    if (it == pool.blocks.end() || (*it)->stream != stream)
      return nullptr;
    if ((*it)->segment->expandable) {
      // Best fit counts a block next to the unmapped tail as the size it can grow to.
      auto next = std::next(it);
      while ((*it)->segment->expandable && next != pool.blocks.end() && (*next)->stream == stream &&
             expandable_size(*next) < expandable_size(*it)) {
        it = next++;
      }
    }
    const Bytes candidate = (*it)->size;
    if (size < max_split() && candidate >= max_split())
      return nullptr;
    if (size >= max_split() && candidate >= size + config.max_non_split_rounding_size)
      return nullptr;
    Block* block = *it;
    pool.blocks.erase(it);
    return block;
  }

  bool should_split(const Block* block, Bytes size) const {
    return alloc::should_split(block->size, size, block->pool, config);
  }

  // --- new memory -----------------------------------------------------------------------------

  Block* alloc_block(PoolKind kind, std::uint64_t stream, Bytes size, Bytes alloc_size,
                     bool is_retry) {
    if (is_retry)
      ++stats.num_alloc_retries;
    if (allowed && total_allocated + alloc_size > *allowed)
      return nullptr;
    if (config.expandable_segments)
      return try_allocate_expandable_block(kind, stream, size);
    auto address = device.allocate_segment(alloc_size);
    if (!address)
      return nullptr;
    total_allocated += alloc_size;
    auto segment = std::make_unique<Segment>();
    segment->base = *address;
    segment->size = alloc_size;
    segment->stream = stream;
    segment->pool = kind;
    Block* block = new_block();
    block->ptr = *address;
    block->size = alloc_size;
    block->stream = stream;
    block->pool = kind;
    block->segment = segment.get();
    segment->head = block;
    segments.emplace(*address, std::move(segment));
    increase(stats.segment, kind, 1);
    increase(stats.reserved_bytes, kind, to_signed(alloc_size));
    if (alloc_size >= max_split())
      stats.oversize_segments.increase(1);
    ++stats.num_device_alloc;
    emit(TraceAction::segment_alloc, *address, alloc_size, stream);
    return block;
  }

  static bool allocatable(const Block* b) {
    return b != nullptr && !b->allocated && b->event_count == 0 && b->stream_uses.empty();
  }

  Block* find_expandable_block(PoolKind kind, std::uint64_t stream, Bytes size) {
    BlockPool& pool = pool_of(kind);
    auto has_room = [size](const Block* b) {
      Bytes bytes = 0;
      while (bytes < size && allocatable(b)) {
        bytes += b->size;
        b = b->next;
      }
      return bytes >= size;
    };
    for (auto it = pool.unmapped.lower_bound(AddressKey{stream, 0});
         it != pool.unmapped.end() && (*it)->stream == stream; ++it) {
      Block* candidate = *it;
      if (allocatable(candidate->prev))
        candidate = candidate->prev;
      if (has_room(candidate))
        return candidate;
    }
    // A new reservation of ~1.125 x the device, in pages of the pool's page size.
    const Bytes page = kind == PoolKind::small ? kSmallBuffer : config.large_segment_size;
    const Bytes total = device.total_memory();
    const Bytes pages = (total + total / 8 + page - 1) / page;
    const Bytes bytes = pages * page;
    auto address = device.reserve_address_space(bytes, page);
    if (!address)
      return nullptr;
    auto segment = std::make_unique<Segment>();
    segment->base = *address;
    segment->size = bytes;
    segment->stream = stream;
    segment->pool = kind;
    segment->expandable = true;
    segment->page_size = page;
    Block* block = new_block();
    block->ptr = *address;
    block->size = bytes;
    block->stream = stream;
    block->pool = kind;
    block->mapped = false;
    block->segment = segment.get();
    segment->head = block;
    segments.emplace(*address, std::move(segment));
    pool.unmapped.insert(block);
    return block;
  }

  // Merges `src` into `dst` if it is a free neighbour of the same mapped-ness (spec §4).
  Bytes try_merge_blocks(Block* dst, Block* src, BlockPool& pool) {
    if (!src || src->allocated || src->event_count > 0 || !src->stream_uses.empty() ||
        dst->mapped != src->mapped)
      return 0;
    if (dst->prev == src) {
      dst->ptr = src->ptr;
      dst->prev = src->prev;
      if (dst->prev)
        dst->prev->next = dst;
      else
        dst->segment->head = dst;
    } else {
      dst->next = src->next;
      if (dst->next)
        dst->next->prev = dst;
    }
    const Bytes subsumed = src->size;
    dst->size += subsumed;
    if (src->mapped)
      pool.blocks.erase(src);
    else
      pool.unmapped.erase(src);
    delete_block(src);
    return subsumed;
  }

  bool map_block(Block* to_map, Bytes size) {
    Segment& segment = *to_map->segment;
    const Bytes page = segment.page_size;
    const Bytes offset = to_map->ptr - segment.base;
    const Bytes first_page = offset / page;
    const Bytes end_page = (offset + size + page - 1) / page;
    const std::uint64_t mapped_ptr = segment.base + first_page * page;
    const Bytes mapped_size = (end_page - first_page) * page;
    if (!device.map_pages(mapped_ptr, mapped_size))
      return false;
    BlockPool& pool = pool_of(to_map->pool);
    pool.unmapped.erase(to_map);
    to_map->mapped = true;
    if (mapped_size < to_map->size) {
      Block* remaining = new_block();
      remaining->ptr = to_map->ptr + mapped_size;
      remaining->size = to_map->size - mapped_size;
      remaining->stream = to_map->stream;
      remaining->pool = to_map->pool;
      remaining->segment = to_map->segment;
      remaining->mapped = false;
      remaining->prev = to_map;
      remaining->next = to_map->next;
      if (remaining->next)
        remaining->next->prev = remaining;
      to_map->next = remaining;
      pool.unmapped.insert(remaining);
      to_map->size = mapped_size;
    }
    try_merge_blocks(to_map, to_map->prev, pool);
    try_merge_blocks(to_map, to_map->next, pool);
    pool.insert(to_map);
    total_allocated += mapped_size;
    increase(stats.reserved_bytes, to_map->pool, to_signed(mapped_size));
    ++stats.num_device_alloc;
    emit(TraceAction::segment_map, mapped_ptr, mapped_size, to_map->stream);
    return true;
  }

  Block* try_allocate_expandable_block(PoolKind kind, std::uint64_t stream, Bytes size) {
    Block* candidate = find_expandable_block(kind, stream, size);
    if (!candidate)
      return nullptr;
    if (!candidate->mapped && !map_block(candidate, std::min(candidate->size, size)))
      return nullptr;
    while (candidate->size < size) {
      Block* next = candidate->next;
      if (!map_block(next, std::min(size - candidate->size, next->size)))
        return nullptr;
      candidate = next;
    }
    pool_of(kind).blocks.erase(candidate);
    return candidate;
  }

  // --- releasing memory -----------------------------------------------------------------------

  void release_block(Block* block) {
    if (block->segment->expandable || block->is_split())
      throw std::logic_error("caching allocator: release_block of a split or expandable block");
    BlockPool& pool = pool_of(block->pool);
    pool.blocks.erase(block);
    ++stats.num_device_free;
    emit(TraceAction::segment_free, block->ptr, block->size, block->stream);
    device.free_segment(block->ptr, block->size);
    total_allocated -= block->size;
    decrease(stats.segment, block->pool, 1);
    decrease(stats.reserved_bytes, block->pool, to_signed(block->size));
    if (block->size >= max_split())
      stats.oversize_segments.decrease(1);
    segments.erase(block->ptr);
    delete_block(block);
  }

  void unmap_block(Block* block) {
    Segment& segment = *block->segment;
    const Bytes page = segment.page_size;
    const Bytes start = block->ptr - segment.base;
    const Bytes end = start + block->size;
    const Bytes first_page = (start + page - 1) / page;
    const Bytes end_page = end / page;
    if (first_page >= end_page)
      return;
    const std::uint64_t unmapped_ptr = segment.base + first_page * page;
    const Bytes unmapped_size = (end_page - first_page) * page;
    device.unmap_pages(unmapped_ptr, unmapped_size);
    BlockPool& pool = pool_of(block->pool);
    pool.blocks.erase(block);
    const Bytes before_size = unmapped_ptr - block->ptr;
    if (before_size > 0) {
      Block* before = new_block();
      before->ptr = block->ptr;
      before->size = before_size;
      before->stream = block->stream;
      before->pool = block->pool;
      before->segment = block->segment;
      before->prev = block->prev;
      before->next = block;
      if (before->prev)
        before->prev->next = before;
      else
        segment.head = before;
      block->prev = before;
      pool.insert(before);
    }
    const Bytes after_size = block->size - (before_size + unmapped_size);
    if (after_size > 0) {
      Block* after = new_block();
      after->ptr = unmapped_ptr + unmapped_size;
      after->size = after_size;
      after->stream = block->stream;
      after->pool = block->pool;
      after->segment = block->segment;
      after->prev = block;
      after->next = block->next;
      if (after->next)
        after->next->prev = after;
      block->next = after;
      pool.insert(after);
    }
    block->ptr = unmapped_ptr;
    block->size = unmapped_size;
    block->mapped = false;
    try_merge_blocks(block, block->prev, pool);
    try_merge_blocks(block, block->next, pool);
    pool.unmapped.insert(block);
    total_allocated -= unmapped_size;
    decrease(stats.reserved_bytes, block->pool, to_signed(unmapped_size));
    ++stats.num_device_free;
    emit(TraceAction::segment_unmap, unmapped_ptr, unmapped_size, block->stream);
  }

  void release_expandable_segment(Block* block) {
    Segment* segment = block->segment;
    pool_of(block->pool).unmapped.erase(block);
    device.release_address_space(segment->base, segment->size);
    segments.erase(segment->base);
    delete_block(block);
  }

  void release_blocks(BlockPool& pool) {
    std::vector<Block*> to_unmap;
    for (auto it = pool.blocks.begin(); it != pool.blocks.end();) {
      Block* block = *it;
      ++it;
      if (block->segment->expandable)
        to_unmap.push_back(block);
      else if (!block->is_split())
        release_block(block);
    }
    for (Block* block : to_unmap) {
      unmap_block(block);
      if (!block->mapped && !block->is_split())
        release_expandable_segment(block);
    }
  }

  void release_cached_blocks() {
    synchronize_and_free_events();
    release_blocks(pool_of(PoolKind::large));
    release_blocks(pool_of(PoolKind::small));
  }

  bool release_available_cached_blocks(BlockPool& pool, std::uint64_t stream, Bytes size) {
    if (max_split() == kUnlimited)
      return false;
    const Bytes key_size = std::max(size, max_split());
    auto it = pool.blocks.lower_bound(SizeKey{stream, key_size, 0});
    if (it == pool.blocks.end() || (*it)->stream != stream || (*it)->segment->expandable) {
      // No single block is large enough: release oversize blocks, largest first.
      if (it == pool.blocks.begin())
        return false;
      Bytes released = 0;
      --it;
      while (released < key_size && (*it)->size >= max_split() && (*it)->stream == stream) {
        auto current = it;
        const bool is_first = current == pool.blocks.begin();
        if (!is_first)
          --it;
        if (!(*current)->segment->expandable) {
          released += (*current)->size;
          release_block(*current);
        }
        if (is_first)
          break;
      }
      return released >= key_size;
    }
    release_block(*it);
    return true;
  }

  void garbage_collect_cached_blocks() {
    const auto gc_limit =
        static_cast<Bytes>(config.garbage_collection_threshold * static_cast<double>(*allowed));
    if (total_allocated <= gc_limit)
      return;
    const Bytes target = total_allocated - gc_limit;
    BlockPool& large = pool_of(PoolKind::large);
    Bytes reclaimed = 0;
    std::uint64_t total_age = 0;
    std::int64_t freeable = 0;
    for (const Block* block : large.blocks) {
      if (!block->is_split()) {
        total_age += large.get_free_blocks_call_count - block->gc_count_base;
        ++freeable;
      }
    }
    if (freeable == 0)
      return;
    bool freed = true;
    while (reclaimed < target && freed && freeable > 0) {
      const double age_threshold = static_cast<double>(total_age) / static_cast<double>(freeable);
      freed = false;
      for (auto it = large.blocks.begin(); it != large.blocks.end();) {
        Block* block = *it;
        ++it;
        const std::uint64_t age = large.get_free_blocks_call_count - block->gc_count_base;
        if (!block->is_split() && !block->segment->expandable &&
            static_cast<double>(age) >= age_threshold) {
          freed = true;
          reclaimed += block->size;
          total_age -= age;
          --freeable;
          release_block(block);
        }
      }
    }
  }

  // --- handing out and taking back ------------------------------------------------------------

  Block* alloc_found_block(Block* block, Bytes requested, Bytes size, bool split) {
    BlockPool& pool = pool_of(block->pool);
    const bool already_split = block->is_split();
    const bool expandable = block->segment->expandable;
    const PoolKind kind = block->pool;
    if (split) {
      Block* remaining = block;
      block = new_block();
      block->ptr = remaining->ptr;
      block->size = size;
      block->stream = remaining->stream;
      block->pool = kind;
      block->segment = remaining->segment;
      block->prev = remaining->prev;
      if (block->prev)
        block->prev->next = block;
      else
        block->segment->head = block;
      block->next = remaining;
      remaining->prev = block;
      remaining->ptr += size;
      remaining->size -= size;
      pool.insert(remaining);
      if (already_split && !expandable) {
        decrease(stats.inactive_split_bytes, kind, to_signed(block->size));
      } else if (!expandable) {
        increase(stats.inactive_split_bytes, kind, to_signed(remaining->size));
        increase(stats.inactive_split, kind, 1);
      }
    } else if (already_split && !expandable) {
      decrease(stats.inactive_split_bytes, kind, to_signed(block->size));
      decrease(stats.inactive_split, kind, 1);
    }
    block->allocated = true;
    block->requested_size = requested;
    active.insert_or_assign(block->ptr, block);
    emit(TraceAction::alloc, block->ptr, requested, block->stream);
    increase(stats.allocation, kind, 1);
    increase(stats.allocated_bytes, kind, to_signed(block->size));
    increase(stats.active, kind, 1);
    increase(stats.active_bytes, kind, to_signed(block->size));
    increase(stats.requested_bytes, kind, to_signed(requested));
    if (block->size >= max_split())
      stats.oversize_allocations.increase(1);
    return block;
  }

  void free_block(Block* block) {
    emit(TraceAction::free_completed, block->ptr, block->requested_size, block->stream);
    const Bytes original_size = block->size;
    const Bytes requested = block->requested_size;
    const PoolKind kind = block->pool;
    BlockPool& pool = pool_of(kind);
    active.erase(block->ptr);
    block->events_ready = false;
    std::int64_t net_blocks = 0;
    std::int64_t net_bytes = 0;
    const std::array<Block*, 2> neighbours = {block->prev, block->next};
    for (Block* neighbour : neighbours) {
      const Bytes subsumed = try_merge_blocks(block, neighbour, pool);
      if (subsumed > 0) {
        net_blocks -= 1;
        net_bytes -= to_signed(subsumed);
      }
    }
    pool.insert(block);
    if (block->is_split()) {
      net_blocks += 1;
      net_bytes += to_signed(block->size);
    }
    if (!block->segment->expandable) {
      if (net_blocks > 0)
        increase(stats.inactive_split, kind, net_blocks);
      else if (net_blocks < 0)
        decrease(stats.inactive_split, kind, -net_blocks);
      if (net_bytes > 0)
        increase(stats.inactive_split_bytes, kind, net_bytes);
      else if (net_bytes < 0)
        decrease(stats.inactive_split_bytes, kind, -net_bytes);
    }
    decrease(stats.active, kind, 1);
    decrease(stats.active_bytes, kind, to_signed(original_size));
    decrease(stats.requested_bytes, kind, to_signed(requested));
  }

  MallocResult malloc(Bytes requested, std::uint64_t stream) {
    MallocResult result;
    if (requested == 0)
      return result;
    if (requested >= kOneExbibyte) {
      OutOfMemory oom;
      oom.requested = requested;
      oom.stream = StreamId{stream};
      oom.message = std::string(kOomMoreThan1EB);
      result.oom = std::move(oom);
      return result;
    }
    process_events();
    const Bytes size = round_size(requested, config);
    const PoolKind kind = pool_for(size);
    BlockPool& pool = pool_of(kind);
    const Bytes alloc_size = allocation_size(size, config);

    Block* block = get_free_block(pool, stream, size);
    if (!block) {
      if (gc_enabled())
        garbage_collect_cached_blocks();
      block = alloc_block(kind, stream, size, alloc_size, false);
      if (!block && release_available_cached_blocks(pool, stream, size))
        block = alloc_block(kind, stream, size, alloc_size, false);
      if (!block) {
        release_cached_blocks();
        block = alloc_block(kind, stream, size, alloc_size, true);
      }
    }
    if (!block) {
      OutOfMemory oom;
      oom.requested = requested;
      oom.rounded_size = size;
      oom.segment_size = alloc_size;
      oom.allocated = static_cast<Bytes>(stats.allocated_bytes[StatType::aggregate].current);
      oom.reserved = static_cast<Bytes>(stats.reserved_bytes[StatType::aggregate].current);
      oom.allowed = allowed;
      oom.device_total = device.total_memory();
      oom.device_free = device.free_memory();
      oom.stream = StreamId{stream};
      emit(TraceAction::oom, oom.device_free, size, stream);
      ++stats.num_ooms;
      OomMessageInputs text;
      text.device = 0;
      text.tried_to_allocate = alloc_size;
      text.total_capacity = oom.device_total;
      text.device_free = oom.device_free;
      if (auto in_use = device.process_memory_in_use())
        text.processes.push_back(GpuProcessMemory{0, *in_use, true});
      text.allowed = allowed;
      text.allocated = oom.allocated;
      text.reserved = oom.reserved;
      oom.message = oom_message(text);
      result.oom = std::move(oom);
      return result;
    }
    const bool split = should_split(block, size);
    result.address = alloc_found_block(block, requested, size, split)->ptr;
    return result;
  }

  Block* find_active(std::uint64_t address, const char* what) {
    Block* const* found = address == 0 ? nullptr : active.find(address);
    if (!found)
      throw InvalidPointerError(std::string(what) +
                                ": invalid device pointer: " + hex_address(address));
    return *found;
  }

  void free(std::uint64_t address) {
    if (address == 0)
      return;
    Block* block = find_active(address, "free");
    if (!block->allocated)
      throw InvalidPointerError("free: invalid device pointer: " + hex_address(address) +
                                " (already freed, waiting for stream events)");
    block->allocated = false;
    decrease(stats.allocation, block->pool, 1);
    decrease(stats.allocated_bytes, block->pool, to_signed(block->size));
    emit(TraceAction::free_requested, block->ptr, block->requested_size, block->stream);
    if (block->size >= max_split())
      stats.oversize_allocations.decrease(1);
    if (!block->stream_uses.empty()) {
      for (std::uint64_t use : block->stream_uses) {
        ++block->event_count;
        events[use].push_back(block);
      }
      block->stream_uses.clear();
    } else {
      free_block(block);
    }
  }

  void record_stream(std::uint64_t address, std::uint64_t stream) {
    Block* block = find_active(address, "record_stream");
    if (!block->allocated)
      throw InvalidPointerError("record_stream: invalid device pointer: " + hex_address(address) +
                                " (already freed)");
    if (stream == block->stream)
      return;
    if (std::find(block->stream_uses.begin(), block->stream_uses.end(), stream) ==
        block->stream_uses.end())
      block->stream_uses.push_back(stream);
  }

  void mark_events_ready(std::uint64_t address) {
    Block* block = find_active(address, "mark_events_ready");
    if (block->allocated || block->event_count == 0)
      throw InvalidPointerError("mark_events_ready: " + hex_address(address) +
                                " is not a block waiting for stream events");
    block->events_ready = true;
  }

  // --- inspection -----------------------------------------------------------------------------

  static BlockState state_of(const Block* b) {
    if (b->allocated)
      return BlockState::active_allocated;
    if (b->event_count > 0)
      return BlockState::active_pending_free;
    return BlockState::inactive;
  }

  std::vector<SegmentInfo> snapshot() const {
    std::vector<SegmentInfo> out;
    for (const auto& [base, segment] : segments) {
      SegmentInfo* current = nullptr;
      for (const Block* b = segment->head; b; b = b->next) {
        if (!b->mapped) {
          current = nullptr;
          continue;
        }
        if (!current) {
          out.emplace_back();
          current = &out.back();
          current->address = b->ptr;
          current->stream = StreamId{segment->stream};
          current->pool = segment->pool;
          current->is_expandable = segment->expandable;
        }
        const BlockState state = state_of(b);
        current->blocks.push_back(BlockInfo{b->ptr, b->size, b->requested_size, state});
        current->total_size += b->size;
        if (state == BlockState::active_allocated)
          current->allocated_size += b->size;
        if (state != BlockState::inactive) {
          current->active_size += b->size;
          current->requested_size += b->requested_size;
        }
      }
    }
    return out;
  }

  bool fail(std::string* why, std::string message) const {
    if (why)
      *why = std::move(message);
    return false;
  }

  bool is_valid(std::string* why) const;
  std::vector<std::uint64_t> seed(const std::vector<SeedSegment>& seeds);  // mid-run traces
};

bool CachingAllocator::Impl::is_valid(std::string* why) const {
  // Recount every current stat from the blocks and compare.
  struct Counts {
    std::array<std::int64_t, kStatTypes> allocation{}, allocated_bytes{}, active{}, active_bytes{},
        requested_bytes{}, segment{}, reserved_bytes{}, inactive_split{}, inactive_split_bytes{};
  } counts;
  auto add = [](std::array<std::int64_t, kStatTypes>& a, PoolKind kind, std::int64_t v) {
    a[0] += v;
    a[static_cast<std::size_t>(stat_type(kind))] += v;
  };
  std::int64_t oversize_allocations = 0;
  std::int64_t oversize_segments = 0;
  std::size_t free_mapped = 0;
  std::size_t free_unmapped = 0;
  std::size_t active_blocks = 0;
  Bytes device_bytes = 0;
  std::unordered_map<const Block*, std::uint32_t> queued;
  for (const auto& [stream, queue] : events)
    for (const Block* b : queue)
      ++queued[b];

  for (const auto& entry : segments) {
    // A named copy, not a structured binding: clang 14 cannot capture bindings in the lambda below.
    const std::uint64_t base = entry.first;
    const Segment& segment = *entry.second;
    const Block* head = segment.head;
    if (!head || head->prev || head->ptr != base)
      return fail(why, "segment " + hex_address(base) + ": head block does not start it");
    std::uint64_t expected = base;
    const Block* previous = nullptr;
    for (const Block* b = head; b; previous = b, b = b->next) {
      auto where = [&] {
        return "block " + hex_address(b->ptr) + " of segment " + hex_address(base);
      };
      if (b->segment != &segment || b->prev != previous)
        return fail(why, where() + ": broken prev/segment link");
      if (b->ptr != expected)
        return fail(why, where() + ": expected to start at " + hex_address(expected));
      if (b->size == 0 || b->size % kMinBlockSize != 0)
        return fail(why, where() + ": size " + std::to_string(b->size) + " not a multiple of 512");
      if (b->stream != segment.stream || b->pool != segment.pool)
        return fail(why, where() + ": stream or pool differs from its segment");
      if (!segment.expandable && !b->mapped)
        return fail(why, where() + ": unmapped block in a cudaMalloc segment");
      expected += b->size;
      const bool is_free = !b->allocated && b->event_count == 0;
      const BlockPool& pool = pools[static_cast<std::size_t>(b->pool)];
      const auto queued_it = queued.empty() ? queued.end() : queued.find(b);
      if (b->event_count != (queued_it != queued.end() ? queued_it->second : 0u))
        return fail(why, where() + ": event_count disagrees with the event queues");
      if (is_free && previous && !previous->allocated && previous->event_count == 0 &&
          previous->mapped == b->mapped)
        return fail(why, where() + ": two adjacent free blocks were not merged");
      if (b->mapped && segment.expandable)
        device_bytes += b->size;
      if (is_free) {
        if (b->mapped) {
          ++free_mapped;
          if (!pool.blocks.contains(b))
            return fail(why, where() + ": free block missing from its pool");
        } else {
          ++free_unmapped;
          if (!pool.unmapped.contains(b))
            return fail(why, where() + ": unmapped block missing from the unmapped set");
        }
        if (!segment.expandable && b->is_split()) {
          add(counts.inactive_split, b->pool, 1);
          add(counts.inactive_split_bytes, b->pool, to_signed(b->size));
        }
        continue;
      }
      ++active_blocks;
      Block* const* indexed = active.find(b->ptr);
      if (!indexed || *indexed != b)
        return fail(why, where() + ": active block missing from the address index");
      add(counts.active, b->pool, 1);
      add(counts.active_bytes, b->pool, to_signed(b->size));
      add(counts.requested_bytes, b->pool, to_signed(b->requested_size));
      if (b->allocated) {
        add(counts.allocation, b->pool, 1);
        add(counts.allocated_bytes, b->pool, to_signed(b->size));
        if (b->size >= max_split())
          ++oversize_allocations;
      }
    }
    if (expected != base + segment.size)
      return fail(why, "segment " + hex_address(base) + ": blocks cover " +
                           std::to_string(expected - base) + " of " + std::to_string(segment.size) +
                           " bytes");
    if (!segment.expandable) {
      device_bytes += segment.size;
      add(counts.segment, segment.pool, 1);
      add(counts.reserved_bytes, segment.pool, to_signed(segment.size));
      if (segment.size >= max_split())
        ++oversize_segments;
    } else {
      for (const Block* b = head; b; b = b->next)
        if (b->mapped)
          add(counts.reserved_bytes, segment.pool, to_signed(b->size));
    }
  }
  const std::size_t pooled = pools[0].blocks.size() + pools[1].blocks.size();
  const std::size_t unmapped = pools[0].unmapped.size() + pools[1].unmapped.size();
  if (pooled != free_mapped)
    return fail(why, "pools hold " + std::to_string(pooled) + " blocks, segments have " +
                         std::to_string(free_mapped) + " free blocks");
  if (unmapped != free_unmapped)
    return fail(why, "unmapped sets hold " + std::to_string(unmapped) + " blocks, segments have " +
                         std::to_string(free_unmapped));
  if (active.size() != active_blocks)
    return fail(why, "address index holds " + std::to_string(active.size()) +
                         " blocks, segments have " + std::to_string(active_blocks) +
                         " active blocks");
  if (device_bytes != total_allocated)
    return fail(why, "total_allocated_memory " + std::to_string(total_allocated) +
                         " but segments hold " + std::to_string(device_bytes));
  auto check = [&](const StatArray& stat, const std::array<std::int64_t, kStatTypes>& expect,
                   const char* name) {
    for (std::size_t i = 0; i < kStatTypes; ++i) {
      if (stat.by_type[i].current != expect[i])
        return fail(why, std::string("stat ") + name + "[" + std::to_string(i) +
                             "].current = " + std::to_string(stat.by_type[i].current) +
                             ", recount gives " + std::to_string(expect[i]));
      if (stat.by_type[i].peak < stat.by_type[i].current)
        return fail(why, std::string("stat ") + name + " peak below current");
    }
    return true;
  };
  return check(stats.allocation, counts.allocation, "allocation") &&
         check(stats.allocated_bytes, counts.allocated_bytes, "allocated_bytes") &&
         check(stats.active, counts.active, "active") &&
         check(stats.active_bytes, counts.active_bytes, "active_bytes") &&
         check(stats.requested_bytes, counts.requested_bytes, "requested_bytes") &&
         check(stats.segment, counts.segment, "segment") &&
         check(stats.reserved_bytes, counts.reserved_bytes, "reserved_bytes") &&
         check(stats.inactive_split, counts.inactive_split, "inactive_split") &&
         check(stats.inactive_split_bytes, counts.inactive_split_bytes, "inactive_split_bytes") &&
         (stats.oversize_allocations.current == oversize_allocations ||
          fail(why, "oversize_allocations.current disagrees with a recount")) &&
         (stats.oversize_segments.current == oversize_segments ||
          fail(why, "oversize_segments.current disagrees with a recount"));
}

// --- seeding the state before a mid-run trace ---------------------------------------------------
// Kept apart from the decision code: it only drives the allocator's own paths (alloc_block,
// alloc_found_block, free) so a seeded state obeys the same invariants as a grown one.

namespace {
// Pending-free seeds wait for an event on this stream; no request stream uses it.
constexpr std::uint64_t kSeedEventStream = UINT64_MAX - 1;

void check_seed(const SeedSegment& seed) {
  const std::string where = "seeded segment " + hex_address(seed.address);
  if (seed.size == 0 || seed.size % kMinBlockSize != 0 || seed.blocks.empty())
    throw InputError(where + ": size " + std::to_string(seed.size) +
                     " is not a positive multiple of 512 with blocks");
  std::uint64_t at = seed.address;
  for (const SeedBlock& b : seed.blocks) {
    if (b.address != at || b.size == 0 || b.size % kMinBlockSize != 0 ||
        b.size > seed.address + seed.size - at)
      throw InputError(where + ": block " + hex_address(b.address) + " of " +
                       std::to_string(b.size) + " bytes does not continue the blocks at " +
                       hex_address(at));
    at += b.size;
  }
  if (at != seed.address + seed.size)
    throw InputError(where + ": blocks cover " + std::to_string(at - seed.address) + " of " +
                     std::to_string(seed.size) + " bytes");
}
}  // namespace

std::vector<std::uint64_t> CachingAllocator::Impl::seed(const std::vector<SeedSegment>& seeds) {
  EventSink* const saved_sink = sink;
  sink = nullptr;
  std::vector<std::uint64_t> addresses;
  try {
    for (const SeedSegment& seed : seeds) {
      check_seed(seed);
      if (seed.expandable && !config.expandable_segments)
        throw InputError("seeded segment " + hex_address(seed.address) +
                         " is expandable but the config has expandable_segments off");
      Block* block =
          alloc_block(seed.pool, seed.stream.value, seed.size, seed.size, /*is_retry=*/false);
      if (!block || block->size != seed.size)
        throw InputError("seeded segment " + hex_address(seed.address) + " of " +
                         std::to_string(seed.size) + " bytes does not fit the device");
      // Hand out every block (splitting off the rest each time), then free the free ones: no
      // merge can happen before the layout stands.
      for (std::size_t i = 0; i < seed.blocks.size(); ++i) {
        const SeedBlock& b = seed.blocks[i];
        const bool last = i + 1 == seed.blocks.size();
        const Bytes requested = b.state == BlockState::inactive ? b.size : b.requested_size;
        Block* taken = alloc_found_block(block, requested, b.size, /*split=*/!last);
        addresses.push_back(taken->ptr);
        if (!last) {
          block = taken->next;
          pool_of(seed.pool).blocks.erase(block);
        }
      }
    }
    std::size_t index = 0;
    for (const SeedSegment& seed : seeds) {
      for (const SeedBlock& b : seed.blocks) {
        const std::uint64_t address = addresses[index++];
        if (b.state == BlockState::active_pending_free)
          record_stream(address, kSeedEventStream);
        if (b.state != BlockState::active_allocated)
          free(address);
      }
    }
  } catch (...) {
    sink = saved_sink;
    throw;
  }
  sink = saved_sink;
  stats.reset_peak();
  stats.reset_accumulated();
  return addresses;
}

// --- public shell ------------------------------------------------------------------------------

CachingAllocator::CachingAllocator(AllocatorConfig config, Device& device, EventSink* sink)
    : impl_(std::make_unique<Impl>(std::move(config), device, sink)) {}
CachingAllocator::~CachingAllocator() = default;

MallocResult CachingAllocator::malloc(Bytes bytes, StreamId stream) {
  return impl_->malloc(bytes, stream.value);
}
void CachingAllocator::free(std::uint64_t address) {
  impl_->free(address);
}
void CachingAllocator::record_stream(std::uint64_t address, StreamId stream) {
  impl_->record_stream(address, stream.value);
}
void CachingAllocator::mark_events_ready(std::uint64_t address) {
  impl_->mark_events_ready(address);
}
std::vector<std::uint64_t> CachingAllocator::seed(const std::vector<SeedSegment>& segments) {
  return impl_->seed(segments);
}
void CachingAllocator::empty_cache() {
  impl_->release_cached_blocks();
}
void CachingAllocator::set_allowed_memory(std::optional<Bytes> bytes) {
  impl_->allowed = bytes;
}
std::optional<Bytes> CachingAllocator::allowed_memory() const {
  return impl_->allowed;
}
void CachingAllocator::reset_peak_stats() {
  impl_->stats.reset_peak();
}
void CachingAllocator::reset_accumulated_stats() {
  impl_->stats.reset_accumulated();
}
const DeviceStats& CachingAllocator::stats() const {
  return impl_->stats;
}
const AllocatorConfig& CachingAllocator::config() const {
  return impl_->config;
}
Bytes CachingAllocator::total_allocated_memory() const {
  return impl_->total_allocated;
}
std::vector<SegmentInfo> CachingAllocator::snapshot() const {
  return impl_->snapshot();
}
std::optional<BlockState> CachingAllocator::block_state(std::uint64_t address) const {
  Block* const* found = address == 0 ? nullptr : impl_->active.find(address);
  if (!found)
    return std::nullopt;
  return Impl::state_of(*found);
}
Bytes CachingAllocator::largest_free_block() const {
  Bytes largest = 0;
  for (const auto& pool : impl_->pools)
    for (const Block* b : pool.blocks)
      largest = std::max(largest, b->size);
  return largest;
}
Bytes CachingAllocator::largest_free_block(StreamId stream) const {
  Bytes largest = 0;
  for (const auto& pool : impl_->pools) {
    // The last block of this stream in (stream, size, address) order is its largest.
    auto it = stream.value == UINT64_MAX ? pool.blocks.end()
                                         : pool.blocks.lower_bound(SizeKey{stream.value + 1, 0, 0});
    if (it != pool.blocks.begin() && (*std::prev(it))->stream == stream.value)
      largest = std::max(largest, (*std::prev(it))->size);
  }
  return largest;
}
std::vector<BlockInfo> CachingAllocator::free_blocks(PoolKind pool) const {
  std::vector<BlockInfo> out;
  for (const Block* b : impl_->pools[static_cast<std::size_t>(pool)].blocks)
    out.push_back(BlockInfo{b->ptr, b->size, b->requested_size, BlockState::inactive});
  return out;
}
bool CachingAllocator::is_valid(std::string* why) const {
  return impl_->is_valid(why);
}

}  // namespace fragscope::alloc
