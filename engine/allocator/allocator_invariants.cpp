// The allocator model's invariant checker (CachingAllocator::is_valid): blocks tile their
// segments, neighbours agree, every pool set (default and private) holds exactly the free mapped
// blocks, the address index holds exactly the active blocks, private pools' counters and the
// capture list are consistent, and every stat that can be recounted from the blocks agrees.
#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>

#include "engine/allocator/allocator_state.h"
#include "engine/core/hex.h"

namespace fragscope::alloc::detail {
namespace {

StatType stat_type(PoolKind pool) {
  return pool == PoolKind::small ? StatType::small_pool : StatType::large_pool;
}

std::int64_t to_signed(Bytes bytes) {
  return static_cast<std::int64_t>(bytes);
}

bool fail(std::string* why, std::string message) {
  if (why)
    *why = std::move(message);
  return false;
}

// use_count, cudaMalloc_count (segments or mapped ranges the pool holds), the freeable table and
// the captures underway agree with each other and with the segments.
bool check_private_pools(const AllocatorState& state, std::string* why) {
  std::map<const PrivatePool*, std::int64_t> device_ranges;
  for (const auto& [base, segment] : state.segments) {
    if (!segment->owner)
      continue;
    if (!segment->expandable) {
      ++device_ranges[segment->owner];
      continue;
    }
  }
  std::size_t freeable = 0;
  for (const auto& [id, pool] : state.graph_pools) {
    if (pool->id != id)
      return fail(why, "private pool " + to_string(id) + " is filed under another id");
    if (pool->use_count < 0)
      return fail(why, "private pool " + to_string(id) + ": negative use_count");
    const bool listed = state.graph_pools_freeable.contains(id);
    if (listed != (pool->use_count == 0))
      return fail(why, "private pool " + to_string(id) + ": use_count " +
                           std::to_string(pool->use_count) + " but " +
                           (listed ? "listed" : "not listed") + " as freeable");
    freeable += listed ? 1 : 0;
    // A named pointer, not the structured binding: clang 14 cannot capture a binding.
    const PrivatePool* const owner = pool.get();
    const bool expandable = std::any_of(
        state.segments.begin(), state.segments.end(),
        [owner](const auto& s) { return s.second->owner == owner && s.second->expandable; });
    if (!expandable && pool->cuda_malloc_count != device_ranges[pool.get()])
      return fail(why, "private pool " + to_string(id) + ": cudaMalloc_count " +
                           std::to_string(pool->cuda_malloc_count) + " but it holds " +
                           std::to_string(device_ranges[pool.get()]) + " segments");
  }
  if (freeable != state.graph_pools_freeable.size())
    return fail(why, "the freeable table lists a pool that does not exist");
  for (const CaptureUnderway& capture : state.captures_underway)
    if (!state.graph_pools.contains(capture.pool))
      return fail(why, "capture underway into missing pool " + to_string(capture.pool));
  return true;
}

}  // namespace

bool check_invariants(const AllocatorState& state, std::string* why) {
  const auto& [segments, events, active, stats, total_allocated] =
      std::tie(state.segments, state.events, state.active, state.stats, state.total_allocated);
  const Bytes max_split = state.config.max_split_size;
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
      // PyTorch <= 2.0 with roundup_power2_divisions:1 made blocks of any size (§14.1).
      if (b->size == 0 ||
          (b->size % kMinBlockSize != 0 && !state.profile.one_division_leaves_size_unrounded))
        return fail(why, where() + ": size " + std::to_string(b->size) + " not a multiple of 512");
      if (b->stream != segment.stream || b->pool != segment.pool || b->owner != segment.owner)
        return fail(why, where() + ": stream or pool differs from its segment");
      if (!segment.expandable && !b->mapped)
        return fail(why, where() + ": unmapped block in a cudaMalloc segment");
      expected += b->size;
      const bool is_free = !b->allocated && b->event_count == 0 && b->stream_uses.empty();
      const BlockPool& pool = state.home(b);
      const auto queued_it = queued.empty() ? queued.end() : queued.find(b);
      if (b->event_count != (queued_it != queued.end() ? queued_it->second : 0u))
        return fail(why, where() + ": event_count disagrees with the event queues");
      if (is_free && previous && !previous->allocated && previous->event_count == 0 &&
          previous->stream_uses.empty() && previous->mapped == b->mapped)
        return fail(why, where() + ": two adjacent free blocks were not merged");
      if (b->mapped && segment.expandable)
        device_bytes += b->size;
      if (is_free) {
        if (b->mapped) {
          ++free_mapped;
          if (!pool.holds(b))
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
        if (b->size >= max_split)
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
      if (segment.size >= max_split)
        ++oversize_segments;
    } else {
      for (const Block* b = head; b; b = b->next)
        if (b->mapped)
          add(counts.reserved_bytes, segment.pool, to_signed(b->size));
    }
  }
  std::size_t pooled = state.pools[0].blocks.size() + state.pools[1].blocks.size();
  std::size_t unmapped = state.pools[0].unmapped.size() + state.pools[1].unmapped.size();
  for (const auto& [id, pool] : state.graph_pools) {
    for (const BlockPool& blocks : pool->pools) {
      pooled += blocks.blocks.size();
      unmapped += blocks.unmapped.size();
    }
  }
  if (!check_private_pools(state, why))
    return false;
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

}  // namespace fragscope::alloc::detail
