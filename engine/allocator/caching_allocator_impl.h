#pragma once
// CachingAllocator::Impl: every decision of the model (spec §3-§7, §13), over the state in
// allocator_state.h. Internal to engine/allocator: caching_allocator.cpp holds the public shell,
// allocator_seed.cpp the mid-run seeding, allocator_invariants.cpp the checker.
#include <algorithm>
#include <array>
#include <deque>
#include <map>
#include <memory_resource>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "engine/allocator/allocator_state.h"
#include "engine/allocator/caching_allocator.h"
#include "engine/allocator/summary.h"
#include "engine/core/hex.h"

namespace fragscope::alloc {
namespace detail {

inline StatType stat_type(PoolKind pool) {
  return pool == PoolKind::small ? StatType::small_pool : StatType::large_pool;
}

// Inlined always: every malloc and free makes several of these updates.
[[gnu::always_inline]] inline void increase(StatArray& stat, PoolKind pool, std::int64_t amount) {
  stat[StatType::aggregate].increase(amount);
  stat[stat_type(pool)].increase(amount);
}

[[gnu::always_inline]] inline void decrease(StatArray& stat, PoolKind pool, std::int64_t amount) {
  stat[StatType::aggregate].decrease(amount);
  stat[stat_type(pool)].decrease(amount);
}

// stat.increase(amount) when it is positive, stat.decrease(-amount) when it is negative, nothing
// for 0: without a branch on the sign, for a net change whose sign the data decides.
[[gnu::always_inline]] inline void change(Stat& stat, std::int64_t amount) {
  stat.current += amount;
  const bool rises = (amount > 0) & (stat.current > stat.peak);
  stat.peak = rises ? stat.current : stat.peak;
  stat.allocated += amount > 0 ? amount : 0;
  stat.freed += amount < 0 ? -amount : 0;
}

[[gnu::always_inline]] inline void change(StatArray& stat, PoolKind pool, std::int64_t amount) {
  change(stat[StatType::aggregate], amount);
  change(stat[stat_type(pool)], amount);
}

inline std::int64_t to_signed(Bytes bytes) {
  return static_cast<std::int64_t>(bytes);
}

}  // namespace detail

using namespace detail;

struct CachingAllocator::Impl : AllocatorState {
  Impl(AllocatorConfig c, Device& d, EventSink* s) : AllocatorState(std::move(c), d, s) {
    stats.max_split_size =
        config.max_split_size == kUnlimited ? -1 : static_cast<std::int64_t>(config.max_split_size);
    if (config.per_process_memory_fraction && *config.per_process_memory_fraction < 1.0)
      allowed = static_cast<Bytes>(*config.per_process_memory_fraction *
                                   static_cast<double>(device.total_memory()));
  }

  void apply_profile(const AllocatorProfile& p) {
    profile = p;
    // <= 2.10: a fraction of 1.0 still sets a limit (the whole device), so GC stays active.
    if (config.per_process_memory_fraction && *config.per_process_memory_fraction >= 1.0)
      allowed = profile.fraction_one_keeps_limit ? std::optional<Bytes>(device.total_memory())
                                                 : std::nullopt;
  }

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
    insert_events_deferred_until_no_capture();
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

  // Waits for the outstanding events (of one private pool's blocks, or all) and frees blocks.
  void synchronize_and_free_events(const PrivatePool* only = nullptr) {
    ++stats.num_sync_all_streams;
    insert_events_deferred_until_no_capture();
    for (auto it = events.begin(); it != events.end();) {
      auto& queue = it->second;
      for (auto e = queue.begin(); e != queue.end();) {
        Block* block = *e;
        if (only && block->owner != only) {
          ++e;
          continue;
        }
        e = queue.erase(e);
        if (--block->event_count == 0)
          free_block(block);
      }
      it = queue.empty() ? events.erase(it) : std::next(it);
    }
  }

  // Frees deferred during a capture: the streams recorded during the capture are done once the
  // graph is; events are recorded for the others (none: freed now).
  void insert_events_deferred_until_no_capture() {
    if (!deferred_blocks.empty())
      insert_deferred_events();
  }
  [[gnu::noinline]] void insert_deferred_events() {
    auto deferred = std::move(deferred_blocks);
    deferred_blocks.clear();
    for (auto& [block, capture_uses] : deferred) {
      // A named reference, not the binding: clang 14 cannot capture a structured binding.
      const auto& uses = capture_uses;
      std::erase_if(block->stream_uses, [&uses](std::uint64_t s) {
        return std::find(uses.begin(), uses.end(), s) != uses.end();
      });
      insert_events(block);
      if (block->event_count == 0)
        free_block(block);
    }
  }

  void insert_events(Block* block) {
    for (std::uint64_t use : block->stream_uses) {
      ++block->event_count;
      events[use].push_back(block);
    }
    block->stream_uses.clear();
  }

  // --- search ---------------------------------------------------------------------------------

  static Bytes expandable_size(const Block* b) {
    return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
  }

  // get_free_block's search: the block a request takes, left in the index (end() if none), so
  // that a split can move its remainder in place (alloc_found_block).
  BestFitIndex::iterator find_free_block(BlockPool& pool, std::uint64_t stream, Bytes size) {
    if (gc_enabled())
      ++pool.get_free_blocks_call_count;
    auto it = pool.blocks.lower_bound(SizeKey{stream, size, 0});
    if (it == pool.blocks.end() || it.key().stream != stream)
      return pool.blocks.end();
    if ((*it)->segment->expandable) {
      // Best fit counts a block next to the unmapped tail as the size it can grow to.
      auto next = std::next(it);
      while ((*it)->segment->expandable && next != pool.blocks.end() &&
             next.key().stream == stream && expandable_size(*next) < expandable_size(*it)) {
        it = next++;
      }
    }
    const Bytes candidate = it.key().size;
    if (size < max_split() && candidate >= max_split())
      return pool.blocks.end();
    if (size >= max_split() && candidate >= size + config.max_non_split_rounding_size)
      return pool.blocks.end();
    return it;
  }

  // get_free_block: the block found, taken out of the pool.
  Block* get_free_block(BlockPool& pool, std::uint64_t stream, Bytes size) {
    const auto it = find_free_block(pool, stream, size);
    if (it == pool.blocks.end())
      return nullptr;
    Block* block = *it;
    pool.blocks.erase(it);
    return block;
  }

  bool should_split(const Block* block, Bytes size, bool expandable) const {
    if (block->owner && block->owner->options.no_split)
      return false;
    if (expandable == config.expandable_segments)
      return alloc::should_split(block->size, size, block->pool, config);
    // Expandable segments are off for this request's pool (custom allocator, use_on_oom).
    const Bytes remaining = block->size - size;
    if (block->pool == PoolKind::small)
      return remaining >= kMinBlockSize;
    return size < max_split() && remaining > kSmallSize;
  }

  // --- new memory -----------------------------------------------------------------------------

  bool expandable_active(const BlockPool& pool) const {
    return config.expandable_segments && !(pool.owner && pool.owner->options.custom_allocator);
  }

  Block* alloc_block(BlockPool& pool, std::uint64_t stream, Bytes size, Bytes alloc_size,
                     bool is_retry) {
    if (is_retry)
      ++stats.num_alloc_retries;
    if (allowed && total_allocated + alloc_size > *allowed)
      return nullptr;
    if (expandable_active(pool)) {
      Block* block = try_allocate_expandable_block(pool, stream, size);
      if (block && pool.owner)
        ++pool.owner->cuda_malloc_count;
      return block;
    }
    return cuda_malloc_segment(pool, stream, alloc_size);
  }

  // A new cudaMalloc segment of `alloc_size` bytes (alloc_block without expandable segments;
  // a seeded state's plain segments also come from here when expandable segments are on).
  Block* cuda_malloc_segment(BlockPool& pool, std::uint64_t stream, Bytes alloc_size) {
    const PoolKind kind = pool.kind;
    auto address = device.allocate_segment(alloc_size);
    if (!address)
      return nullptr;
    if (pool.owner)
      ++pool.owner->cuda_malloc_count;
    total_allocated += alloc_size;
    auto segment = std::make_unique<Segment>();
    segment->base = *address;
    segment->size = alloc_size;
    segment->stream = stream;
    segment->pool = kind;
    segment->owner = pool.owner;
    Block* block = new_block();
    block->ptr = *address;
    block->size = alloc_size;
    block->stream = stream;
    block->pool = kind;
    block->owner = pool.owner;
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

  Block* find_expandable_block(BlockPool& pool, std::uint64_t stream, Bytes size) {
    const PoolKind kind = pool.kind;
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
    segment->owner = pool.owner;
    segment->expandable = true;
    segment->page_size = page;
    Block* block = new_block();
    block->ptr = *address;
    block->size = bytes;
    block->stream = stream;
    block->pool = kind;
    block->owner = pool.owner;
    block->mapped = false;
    block->segment = segment.get();
    segment->head = block;
    segments.emplace(*address, std::move(segment));
    pool.unmapped.insert(block);
    return block;
  }

  static bool can_merge(const Block* dst, const Block* src) {
    return src && !src->allocated && src->event_count == 0 && src->stream_uses.empty() &&
           dst->mapped == src->mapped;
  }

  // Merges `src` into `dst` if it is a free neighbour of the same mapped-ness (spec §4).
  // `keep_entry`: a mapped src's best-fit entry is left in the index and returned there, for
  // dst to take over (BestFitIndex::rekey), instead of being erased.
  Bytes try_merge_blocks(Block* dst, Block* src, BlockPool& pool,
                         BestFitIndex::iterator* keep_entry = nullptr) {
    if (!can_merge(dst, src))
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
    if (src->mapped && keep_entry)
      *keep_entry = pool.blocks.find(size_key(src), src);
    else if (src->mapped)
      pool.erase(src);
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
    BlockPool& pool = home(to_map);
    pool.unmapped.erase(to_map);
    to_map->mapped = true;
    if (mapped_size < to_map->size) {
      Block* remaining = new_block();
      remaining->ptr = to_map->ptr + mapped_size;
      remaining->size = to_map->size - mapped_size;
      remaining->stream = to_map->stream;
      remaining->pool = to_map->pool;
      remaining->owner = to_map->owner;
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

  Block* try_allocate_expandable_block(BlockPool& pool, std::uint64_t stream, Bytes size) {
    Block* candidate = find_expandable_block(pool, stream, size);
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
    pool.erase(candidate);
    return candidate;
  }

  // --- releasing memory -----------------------------------------------------------------------

  void release_block(Block* block) {
    if (block->segment->expandable || block->is_split())
      throw std::logic_error("caching allocator: release_block of a split or expandable block");
    BlockPool& pool = home(block);
    pool.erase(block);
    if (block->owner)
      --block->owner->cuda_malloc_count;
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
    BlockPool& pool = home(block);
    pool.erase(block);
    const Bytes before_size = unmapped_ptr - block->ptr;
    if (before_size > 0) {
      Block* before = new_block();
      before->ptr = block->ptr;
      before->size = before_size;
      before->stream = block->stream;
      before->pool = block->pool;
      before->owner = block->owner;
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
      after->owner = block->owner;
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
    if (block->owner)
      --block->owner->cuda_malloc_count;
    ++stats.num_device_free;
    emit(TraceAction::segment_unmap, unmapped_ptr, unmapped_size, block->stream);
  }

  void release_expandable_segment(Block* block) {
    Segment* segment = block->segment;
    home(block).unmapped.erase(block);
    device.release_address_space(segment->base, segment->size);
    segments.erase(segment->base);
    delete_block(block);
  }

  void release_blocks(BlockPool& pool) {
    // Releasing erases from the index, which invalidates its iterators: walk a copy.
    const std::vector<Block*> blocks(pool.blocks.begin(), pool.blocks.end());
    std::vector<Block*> to_unmap;
    for (Block* block : blocks) {
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

  // release_cached_blocks(mempool_id): for the default id, and no capture underway, every
  // event is waited for and the default pools' unsplit segments are returned; then the freeable
  // private pools (or only the given one) return theirs, small pool first, and a pool left with
  // no device memory is deleted.
  void release_cached_blocks(MempoolId only = {}) {
    if (only.is_default() && captures_underway.empty()) {
      synchronize_and_free_events();
      release_blocks(pool_of(PoolKind::large));
      release_blocks(pool_of(PoolKind::small));
    }
    for (const auto& [id, pool] : graph_pools_freeable.in_order()) {
      if (!only.is_default()) {
        if (id != only)
          continue;
        synchronize_and_free_events(pool);
      }
      release_blocks(pool->pools[static_cast<std::size_t>(PoolKind::small)]);
      release_blocks(pool->pools[static_cast<std::size_t>(PoolKind::large)]);
      if (pool->cuda_malloc_count == 0) {
        graph_pools_freeable.erase(id);
        use_on_oom_pools.erase(id);
        graph_pools.erase(id);
      }
    }
  }

  bool release_available_cached_blocks(BlockPool& pool, std::uint64_t stream, Bytes size) {
    if (max_split() == kUnlimited)
      return false;
    const Bytes key_size = std::max(size, max_split());
    auto it = pool.blocks.lower_bound(SizeKey{stream, key_size, 0});
    if (it == pool.blocks.end() || it.key().stream != stream || (*it)->segment->expandable) {
      // No single block is large enough: release oversize blocks, largest first.
      if (it == pool.blocks.begin())
        return false;
      Bytes released = 0;
      std::vector<Block*> to_release;  // released after the walk: erasing moves the index
      --it;
      while (released < key_size && it.key().size >= max_split() && it.key().stream == stream) {
        Block* current = *it;
        // A split oversize block exists only in a state seeded under another config's split
        // rule (a what-if from a mid-run trace's start): it cannot be returned on its own.
        if (!current->segment->expandable && !current->is_split()) {
          released += current->size;
          to_release.push_back(current);
        }
        if (it == pool.blocks.begin())
          break;
        --it;
      }
      for (Block* block : to_release)
        release_block(block);
      return released >= key_size;
    }
    if ((*it)->is_split())
      return false;  // as above: only a seeded state splits an oversize block
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
      // Releasing erases from the index, which invalidates its iterators: walk a copy.
      const std::vector<Block*> blocks(large.blocks.begin(), large.blocks.end());
      for (Block* block : blocks) {
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

  // `in_index`: where the block still sits in its pool's index (find_free_block), or null when
  // it was taken out already. A split's remainder keeps that place, rekeyed; an unsplit block
  // leaves the index.
  Block* alloc_found_block(Block* block, Bytes requested, Bytes size, bool split,
                           const BestFitIndex::iterator* in_index = nullptr) {
    BlockPool& pool = home(block);
    if (in_index && !split)
      pool.blocks.erase(*in_index);
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
      block->owner = remaining->owner;
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
      if (in_index) {
        remaining->gc_count_base = pool.get_free_blocks_call_count;
        pool.blocks.rekey(*in_index, size_key(remaining), remaining);
      } else {
        pool.insert(remaining);
      }
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
    BlockPool& pool = home(block);
    active.erase(block->ptr);
    block->events_ready = false;
    std::int64_t net_blocks = 0;
    std::int64_t net_bytes = 0;
    // The block takes over a merged neighbour's best-fit entry (rekey) instead of that entry's
    // erase and its own insert. Only the last neighbour merged may keep its entry: erasing the
    // other would move it.
    Block* const prev = block->prev;
    Block* const next = block->next;
    BestFitIndex::iterator entry = pool.blocks.end();
    const bool next_merges = can_merge(block, next);
    for (const auto& [neighbour, keep] : {std::pair{prev, !next_merges}, std::pair{next, true}}) {
      const Bytes subsumed = try_merge_blocks(block, neighbour, pool, keep ? &entry : nullptr);
      if (subsumed > 0) {
        net_blocks -= 1;
        net_bytes -= to_signed(subsumed);
      }
    }
    if (entry != pool.blocks.end()) {
      block->gc_count_base = pool.get_free_blocks_call_count;
      pool.blocks.rekey(entry, size_key(block), block);
    } else {
      pool.insert(block);
    }
    // A block left split is a free block inside a split segment (added without a branch: the
    // neighbours decide it).
    const std::int64_t split = block->is_split() ? 1 : 0;
    net_blocks += split;
    net_bytes += split * to_signed(block->size);
    if (!block->segment->expandable) {
      change(stats.inactive_split, kind, net_blocks);
      change(stats.inactive_split_bytes, kind, net_bytes);
    }
    decrease(stats.active, kind, 1);
    decrease(stats.active_bytes, kind, to_signed(original_size));
    decrease(stats.requested_bytes, kind, to_signed(requested));
  }

  // malloc's refusal of a request of 1 EiB or more (PyTorch's TORCH_CHECK_WITH).
  [[gnu::cold, gnu::noinline]] static std::uint64_t refuse_oversize(
      Bytes requested, std::uint64_t stream, std::optional<OutOfMemory>& failure) {
    OutOfMemory oom;
    oom.requested = requested;
    oom.stream = StreamId{stream};
    oom.message = std::string(kOomMoreThan1EB);
    failure = std::move(oom);
    return 0;
  }

  // malloc's failure: the oom event, the counter and the OutOfMemory with PyTorch's message.
  // Out of line, so the frame of a malloc that succeeds stays small.
  [[gnu::cold, gnu::noinline]] std::uint64_t out_of_memory(Bytes requested, Bytes size,
                                                           Bytes alloc_size, std::uint64_t stream,
                                                           std::optional<OutOfMemory>& failure) {
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
    text.device = device.ordinal();
    text.tried_to_allocate = alloc_size;
    text.total_capacity = oom.device_total;
    text.device_free = oom.device_free;
    if (auto in_use = device.process_memory_in_use())
      text.processes.push_back(GpuProcessMemory{0, *in_use, true});
    text.allowed = allowed;
    text.allocated = oom.allocated;
    text.reserved = oom.reserved;
    text.private_pool_free = private_pool_free_bytes(*this);
    oom.message = oom_message(text, profile);
    failure = std::move(oom);
    return 0;
  }

  // CachingAllocator::malloc: the block's address (0 for 0 bytes), or 0 with `failure` set.
  // `failure` is the caller's and empty: a MallocResult built per request would zero its
  // OutOfMemory's storage whole (GCC's std::optional), a tenth of a malloc's own time.
  std::uint64_t malloc(Bytes requested, std::uint64_t stream, std::optional<OutOfMemory>& failure) {
    if (requested == 0)
      return 0;
    if (requested >= kOneExbibyte) [[unlikely]]
      return refuse_oversize(requested, stream, failure);
    // During a capture event queries are illegal: pending frees wait until it ends.
    if (captures_underway.empty())
      process_events();
    const Bytes size = round_size(requested, config, profile.one_division_leaves_size_unrounded);
    BlockPool& pool = select_pool(*this, size, stream);
    bool expandable = expandable_active(pool);

    const auto found = find_free_block(pool, stream, size);
    if (found != pool.blocks.end()) {
      Block* const cached = *found;
      return alloc_found_block(cached, requested, size, should_split(cached, size, expandable),
                               &found)
          ->ptr;
    }
    // No cached block: new memory (the segment size is needed only here).
    const Bytes alloc_size = allocation_size(size, config);
    // What any garbage_collection_threshold is measured against here (gc_check_peak).
    gc_check_peak = std::max(gc_check_peak, total_allocated);
    if (gc_enabled())
      garbage_collect_cached_blocks();
    Block* block = alloc_block(pool, stream, size, alloc_size, false);
    if (!block && !pool.owner) {
      block = try_mempool_fallback(stream, size);
      expandable = expandable && !block;
    }
    if (!block && release_available_cached_blocks(pool, stream, size))
      block = alloc_block(pool, stream, size, alloc_size, false);
    if (!block && captures_underway.empty()) {
      release_cached_blocks();
      block = alloc_block(pool, stream, size, alloc_size, true);
    }
    if (!block)
      return out_of_memory(requested, size, alloc_size, stream, failure);
    const bool split = should_split(block, size, expandable);
    return alloc_found_block(block, requested, size, split)->ptr;
  }

  // use_on_oom MemPools, in id order: their cached blocks (no new segments) serve a request the
  // default pool could not.
  Block* try_mempool_fallback(std::uint64_t stream, Bytes size) {
    for (const MempoolId& id : use_on_oom_pools) {
      PrivatePool& pool = *graph_pools.at(id);
      if (pool.use_count <= 0)
        continue;  // PyTorch would assert: a freeable pool cannot be re-entered
      const auto kind = static_cast<std::size_t>(pool_for(size));
      if (Block* block = get_free_block(pool.pools[kind], stream, size))
        return block;
    }
    return nullptr;
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
    auto capture_uses = capture_stream_uses.extract(block);
    if (!block->stream_uses.empty()) {
      if (!captures_underway.empty()) {
        deferred_blocks.emplace_back(
            block, capture_uses ? std::move(capture_uses.mapped()) : std::vector<std::uint64_t>{});
      } else {
        insert_events(block);
      }
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
    if (!captures_underway.empty()) {
      auto& uses = capture_stream_uses[block];
      if (std::find(uses.begin(), uses.end(), stream) == uses.end())
        uses.push_back(stream);
    }
  }

  void mark_events_ready(std::uint64_t address) {
    Block* block = find_active(address, "mark_events_ready");
    // A block whose free waits for a capture to end has no events yet; they inherit the flag.
    if (block->allocated || (block->event_count == 0 && block->stream_uses.empty()))
      throw InvalidPointerError("mark_events_ready: " + hex_address(address) +
                                " is not a block waiting for stream events");
    block->events_ready = true;
  }

  // --- inspection -----------------------------------------------------------------------------

  static BlockState state_of(const Block* b) {
    if (b->allocated)
      return BlockState::active_allocated;
    if (b->event_count > 0 || !b->stream_uses.empty())  // or deferred until a capture ends
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
          current->pool_id = segment->owner ? segment->owner->id : MempoolId{};
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

  std::vector<std::uint64_t> seed(const std::vector<SeedSegment>& seeds);  // mid-run traces
};

}  // namespace fragscope::alloc
