#include "engine/allocator/caching_allocator_impl.h"

namespace fragscope::alloc {

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
      // A private pool's segment goes to that pool, made on first use with one user (the graph
      // or MemPool that owns it; a replay releases it when the trace shows the pool freed).
      BlockPool* home_pool = &pool_of(seed.pool);
      if (!seed.pool_id.is_default()) {
        auto existing = graph_pools.find(seed.pool_id);
        PrivatePool& owner = existing != graph_pools.end()
                                 ? *existing->second
                                 : create_or_incref_pool(*this, seed.pool_id, PoolOptions{});
        home_pool = &owner.pools[static_cast<std::size_t>(seed.pool)];
      }
      // A plain segment stays one under a config with expandable segments on (a what-if of a
      // mid-run trace starts from the segments the recording had).
      Block* block = seed.expandable
                         ? alloc_block(*home_pool, seed.stream.value, seed.size, seed.size,
                                       /*is_retry=*/false)
                         : (allowed && total_allocated + seed.size > *allowed
                                ? nullptr
                                : cuda_malloc_segment(*home_pool, seed.stream.value, seed.size));
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
          home_pool->erase(block);
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

}  // namespace fragscope::alloc
